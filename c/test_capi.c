/* Tests of the C API, compiled against the installed header and library
 * (scripts/test-c.sh builds them with -Wall -Wextra -Werror and runs them
 * under AddressSanitizer). Each test runs in its own process group under
 * a watchdog (c/harness.h); the last line says "N passed, M failed".
 *
 *   ./test_capi [NAME]    run every test, or those whose name contains NAME
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shmpipe.h>

#include "harness.h"

static const char *self_path;

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + (i >> 8)); }

/* ------------------------------------------------------------ the tests */

static int test_pipe_write_read(void) {
    shmpipe_reader *r = NULL;
    shmpipe_writer *w = NULL;
    CHECK_EQ(shmpipe_pipe(&r, &w), 0);
    CHECK(r != NULL && w != NULL);
    CHECK_EQ(shmpipe_write(w, "hello", 5), 5);
    CHECK_EQ(shmpipe_write(w, "", 0), 0);
    char buf[16] = {0};
    CHECK_EQ(shmpipe_read(r, buf, 2), 2);
    CHECK(memcmp(buf, "he", 2) == 0);
    CHECK_EQ(shmpipe_read(r, buf, sizeof buf), 3);
    CHECK(memcmp(buf, "llo", 3) == 0);
    CHECK_EQ(shmpipe_read(r, buf, 0), 0);
    CHECK_EQ(shmpipe_write_some(w, "abc", 3), 3);
    CHECK_EQ(shmpipe_read(r, buf, sizeof buf), 3);
    shmpipe_writer_close(w);
    CHECK_EQ(shmpipe_read(r, buf, sizeof buf), 0);
    shmpipe_reader_close(r);
    return 0;
}

/* Create, fork; the child closes the reader and writes; the parent
 * closes the writer and reads to end of file. */
static int test_fork_idiom(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(4096, -1, &r, &w), 0);
    const size_t total = 1 << 20;
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmpipe_reader_close(r);
        unsigned char chunk[777];
        for (size_t done = 0; done < total;) {
            size_t n = total - done < sizeof chunk ? total - done : sizeof chunk;
            for (size_t i = 0; i < n; i++)
                chunk[i] = pattern(done + i);
            if (shmpipe_write(w, chunk, n) != (ssize_t)n)
                _exit(3);
            done += n;
        }
        shmpipe_writer_close(w);
        _exit(0);
    }
    shmpipe_writer_close(w);
    size_t got = 0;
    unsigned char buf[1000];
    for (;;) {
        ssize_t n = shmpipe_read(r, buf, sizeof buf);
        CHECK(n >= 0);
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            CHECK(buf[i] == pattern(got + (size_t)i));
        got += (size_t)n;
    }
    CHECK_EQ(got, total);
    CHECK_EQ(reap(pid), 0);
    shmpipe_reader_close(r);
    return 0;
}

static int test_epipe_when_reader_closed(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(1024, -1, &r, &w), 0);
    shmpipe_reader_close(r);
    char buf[100] = {0};
    ssize_t rc = 0;
    /* At the latest once the ring is full, the write fails: no SIGPIPE. */
    for (int i = 0; i < 100 && rc >= 0; i++)
        rc = shmpipe_write(w, buf, sizeof buf);
    CHECK_EQ(rc, -EPIPE);
    CHECK_EQ(shmpipe_write(w, buf, sizeof buf), -EPIPE);
    shmpipe_writer_close(w);
    return 0;
}

/* A reader SIGKILLed while the writer waits for room: -EPIPE, no hang. */
static int test_reader_killed_while_writer_blocks(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(4096, 0, &r, &w), 0);
    pid_t reader = fork();
    CHECK(reader >= 0);
    if (reader == 0) {
        shmpipe_writer_close(w);
        pause(); /* holds the reader, reads nothing */
        _exit(0);
    }
    shmpipe_reader_close(r);
    /* The killer strikes while the writer (most likely) already sleeps;
     * either way the write below must end with -EPIPE. */
    pid_t killer = fork();
    CHECK(killer >= 0);
    if (killer == 0) {
        struct timespec t = {0, 100 * 1000 * 1000};
        nanosleep(&t, NULL);
        kill(reader, SIGKILL);
        _exit(0);
    }
    static char big[1 << 16];
    ssize_t rc = shmpipe_write(w, big, sizeof big);
    CHECK_EQ(rc, -EPIPE);
    CHECK_EQ(reap(killer), 0);
    CHECK_EQ(reap(reader), 128 + SIGKILL);
    shmpipe_writer_close(w);
    return 0;
}

static int test_nonblocking_and_timeouts(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(64, 0, &r, &w), 0);
    char buf[64] = {0};
    CHECK_EQ(shmpipe_reader_set_nonblocking(r, 1), 0);
    CHECK_EQ(shmpipe_read(r, buf, 8), -EAGAIN);
    CHECK_EQ(shmpipe_writer_set_nonblocking(w, 1), 0);
    CHECK_EQ(shmpipe_write(w, buf, 64), 64);
    CHECK_EQ(shmpipe_write(w, buf, 1), -EAGAIN);
    CHECK_EQ(shmpipe_write_some(w, buf, 1), -EAGAIN);
    CHECK_EQ(shmpipe_writer_set_nonblocking(w, 0), 0);
    CHECK_EQ(shmpipe_writer_set_timeout(w, 0), -EINVAL);
    CHECK_EQ(shmpipe_writer_set_timeout(w, 20), 0);
    CHECK_EQ(shmpipe_write(w, buf, 1), -ETIMEDOUT);
    CHECK_EQ(shmpipe_read(r, buf, 64), 64);
    CHECK_EQ(shmpipe_read(r, buf, 8), -EAGAIN);
    CHECK_EQ(shmpipe_reader_set_nonblocking(r, 0), 0);
    CHECK_EQ(shmpipe_reader_set_timeout(r, 20), 0);
    CHECK_EQ(shmpipe_read(r, buf, 8), -ETIMEDOUT);
    CHECK_EQ(shmpipe_reader_set_timeout(r, -1), 0);
    CHECK_EQ(shmpipe_write(w, "x", 1), 1);
    CHECK_EQ(shmpipe_read(r, buf, 8), 1);
    shmpipe_reader_close(r);
    shmpipe_writer_close(w);

    shmpipe_receiver *rx;
    shmpipe_sender *tx;
    CHECK_EQ(shmpipe_message_pipe_with(64, 0, &rx, &tx), 0);
    CHECK_EQ(shmpipe_receiver_set_nonblocking(rx, 1), 0);
    CHECK_EQ(shmpipe_recv(rx, buf, sizeof buf), -EAGAIN);
    CHECK_EQ(shmpipe_receiver_set_nonblocking(rx, 0), 0);
    CHECK_EQ(shmpipe_receiver_set_timeout(rx, 20), 0);
    CHECK_EQ(shmpipe_recv(rx, buf, sizeof buf), -ETIMEDOUT);
    CHECK_EQ(shmpipe_send(tx, buf, 56), 0);
    CHECK_EQ(shmpipe_sender_set_nonblocking(tx, 1), 0);
    CHECK_EQ(shmpipe_send(tx, buf, 1), -EAGAIN);
    CHECK_EQ(shmpipe_sender_set_nonblocking(tx, 0), 0);
    CHECK_EQ(shmpipe_sender_set_timeout(tx, 20), 0);
    CHECK_EQ(shmpipe_send(tx, buf, 1), -ETIMEDOUT);
    CHECK_EQ(shmpipe_recv(rx, buf, sizeof buf), 56);
    shmpipe_receiver_close(rx);
    shmpipe_sender_close(tx);
    return 0;
}

static int test_message_sizes(void) {
    shmpipe_receiver *rx;
    shmpipe_sender *tx;
    CHECK_EQ(shmpipe_message_pipe_with(4096, -1, &rx, &tx), 0);
    ssize_t max = shmpipe_sender_max_message(tx);
    CHECK_EQ(max, 4096 - 8);
    static unsigned char out[4096], in[4096];
    for (ssize_t len = 0; len <= max; len += (len < 64 ? 1 : 61)) {
        for (ssize_t i = 0; i < len; i++)
            out[i] = pattern((size_t)(i + len));
        CHECK_EQ(shmpipe_send(tx, out, (size_t)len), 0);
        memset(in, 0, sizeof in);
        CHECK_EQ(shmpipe_recv(rx, in, sizeof in), len);
        CHECK(memcmp(in, out, (size_t)len) == 0);
    }
    CHECK_EQ(shmpipe_send(tx, out, (size_t)max), 0);
    CHECK_EQ(shmpipe_recv(rx, in, sizeof in), max);
    CHECK_EQ(shmpipe_send(tx, out, (size_t)max + 1), -EMSGSIZE);
    /* A buffer too small leaves the message in the pipe. */
    CHECK_EQ(shmpipe_send(tx, "twelve bytes", 12), 0);
    CHECK_EQ(shmpipe_recv(rx, in, 4), -EMSGSIZE);
    CHECK_EQ(shmpipe_recv(rx, in, 12), 12);
    CHECK(memcmp(in, "twelve bytes", 12) == 0);
    /* Boundaries are kept: two sends, two receives. */
    CHECK_EQ(shmpipe_send(tx, "ab", 2), 0);
    CHECK_EQ(shmpipe_send(tx, "", 0), 0);
    CHECK_EQ(shmpipe_send(tx, "cde", 3), 0);
    shmpipe_sender_close(tx);
    CHECK_EQ(shmpipe_recv(rx, in, sizeof in), 2);
    CHECK_EQ(shmpipe_recv(rx, in, sizeof in), 0);
    CHECK_EQ(shmpipe_recv(rx, in, sizeof in), 3);
    CHECK_EQ(shmpipe_recv(rx, in, sizeof in), -EPIPE);
    shmpipe_receiver_close(rx);
    return 0;
}

/* Whether `fd` polls readable within `ms` milliseconds. */
static int readable(int fd, int ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* The readiness descriptor: readable after -EAGAIN once the call can
 * progress (edge style), and level-triggered with the arm calls. */
static int test_readiness_fd(void) {
    /* A reader: -EAGAIN, then readable when another process writes. */
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(64, 0, &r, &w), 0);
    int rfd = shmpipe_reader_fd(r), wfd = shmpipe_writer_fd(w);
    CHECK(rfd >= 0 && wfd >= 0 && rfd != wfd);
    CHECK_EQ(shmpipe_reader_set_nonblocking(r, 1), 0);
    CHECK_EQ(shmpipe_writer_set_nonblocking(w, 1), 0);
    char buf[64] = {0};
    CHECK_EQ(shmpipe_read(r, buf, 8), -EAGAIN);
    CHECK(!readable(rfd, 0));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmpipe_reader_close(r);
        if (shmpipe_write(w, "ready", 5) != 5)
            _exit(1);
        pause(); /* keeps the writer open: readiness comes from the data */
        _exit(0);
    }
    CHECK(readable(rfd, 10 * 1000));
    CHECK_EQ(shmpipe_read(r, buf, sizeof buf), 5);
    /* A writer (of another pipe: the child uses this one's writer): a
     * full ring gives -EAGAIN; readable once a reader made room. */
    shmpipe_reader *r2;
    shmpipe_writer *w2;
    CHECK_EQ(shmpipe_pipe_with(64, 0, &r2, &w2), 0);
    int w2fd = shmpipe_writer_fd(w2);
    CHECK(w2fd >= 0);
    CHECK_EQ(shmpipe_writer_set_nonblocking(w2, 1), 0);
    CHECK_EQ(shmpipe_write(w2, buf, 64), 64);
    CHECK_EQ(shmpipe_write(w2, buf, 1), -EAGAIN);
    CHECK(!readable(w2fd, 0));
    pid_t drainer = fork();
    CHECK(drainer >= 0);
    if (drainer == 0) {
        char sink[64];
        shmpipe_writer_close(w2);
        ssize_t got = shmpipe_read(r2, sink, sizeof sink);
        pause(); /* keeps the reader open: readiness comes from the room */
        _exit(got > 0 ? 0 : 1);
    }
    shmpipe_reader_close(r2);
    CHECK(readable(w2fd, 10 * 1000));
    CHECK_EQ(shmpipe_write(w2, buf, 1), 1);
    kill(drainer, SIGKILL);
    CHECK_EQ(reap(drainer), 128 + SIGKILL);
    shmpipe_writer_close(w2);
    /* The writer in the first child is killed: end of file, readable. */
    kill(pid, SIGKILL);
    CHECK_EQ(reap(pid), 128 + SIGKILL);
    shmpipe_writer_close(w);
    ssize_t n;
    while ((n = shmpipe_read(r, buf, sizeof buf)) > 0) {
    }
    CHECK_EQ(n, 0);
    CHECK_EQ(shmpipe_reader_arm(r), 1);
    CHECK(readable(rfd, 0));
    shmpipe_reader_close(r);

    /* Level-triggered: arm before each poll, without trying first. */
    shmpipe_receiver *rx;
    shmpipe_sender *tx;
    CHECK_EQ(shmpipe_message_pipe(&rx, &tx), 0);
    int rxfd = shmpipe_receiver_fd(rx);
    CHECK(rxfd >= 0 && shmpipe_sender_fd(tx) >= 0);
    CHECK_EQ(shmpipe_receiver_arm(rx), 0);
    CHECK(!readable(rxfd, 0));
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmpipe_receiver_close(rx);
        if (shmpipe_send(tx, "hi", 2) != 0)
            _exit(1);
        pause();
        _exit(0);
    }
    CHECK(readable(rxfd, 10 * 1000));
    CHECK_EQ(shmpipe_receiver_arm(rx), 1);
    CHECK(readable(rxfd, 0)); /* level: until the message is taken */
    CHECK_EQ(shmpipe_recv(rx, buf, sizeof buf), 2);
    CHECK_EQ(shmpipe_receiver_arm(rx), 0);
    CHECK(!readable(rxfd, 0));
    kill(pid, SIGKILL);
    CHECK_EQ(reap(pid), 128 + SIGKILL);
    shmpipe_sender_close(tx);
    CHECK(readable(rxfd, 10 * 1000)); /* every sender gone */
    CHECK_EQ(shmpipe_receiver_arm(rx), 1);
    CHECK_EQ(shmpipe_recv(rx, buf, sizeof buf), -EPIPE);
    shmpipe_receiver_close(rx);

    /* A sender whose receiver is gone is ready: its next call fails. */
    CHECK_EQ(shmpipe_message_pipe(&rx, &tx), 0);
    shmpipe_receiver_close(rx);
    CHECK_EQ(shmpipe_sender_arm(tx), 1);
    CHECK(readable(shmpipe_sender_fd(tx), 10 * 1000));
    shmpipe_sender_close(tx);
    return 0;
}

static int test_reserve_commit_peek_consume(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(64, -1, &r, &w), 0);
    size_t sent = 0, got = 0;
    int wrapped = 0;
    for (int round = 0; round < 20; round++) {
        shmpipe_iovec parts[2];
        CHECK_EQ(shmpipe_writer_reserve(w, 24, parts), 0);
        CHECK_EQ(parts[0].len + parts[1].len, 24);
        wrapped |= parts[1].len != 0;
        for (size_t i = 0; i < 20; i++) {
            shmpipe_iovec *p = i < parts[0].len ? &parts[0] : &parts[1];
            size_t at = i < parts[0].len ? i : i - parts[0].len;
            ((unsigned char *)p->base)[at] = pattern(sent + i);
        }
        CHECK_EQ(shmpipe_writer_commit(w, 25), -EINVAL);
        CHECK_EQ(shmpipe_writer_commit(w, 20), 0);
        CHECK_EQ(shmpipe_writer_commit(w, 1), -EINVAL); /* the grant is used */
        sent += 20;
        shmpipe_const_iovec in[2];
        ssize_t n = shmpipe_reader_peek(r, in);
        CHECK_EQ(n, 20);
        CHECK_EQ(in[0].len + in[1].len, 20);
        for (size_t i = 0; i < 20; i++) {
            const shmpipe_const_iovec *p = i < in[0].len ? &in[0] : &in[1];
            size_t at = i < in[0].len ? i : i - in[0].len;
            CHECK(((const unsigned char *)p->base)[at] == pattern(got + i));
        }
        CHECK_EQ(shmpipe_reader_consume(r, 21), -EINVAL);
        CHECK_EQ(shmpipe_reader_consume(r, 5), 0);
        CHECK_EQ(shmpipe_reader_consume(r, 15), 0);
        got += 20;
    }
    CHECK(wrapped);
    CHECK_EQ(shmpipe_writer_reserve(w, 65, (shmpipe_iovec[2]){{0}}), -EINVAL);
    shmpipe_writer_close(w);
    shmpipe_const_iovec in[2];
    CHECK_EQ(shmpipe_reader_peek(r, in), 0);
    shmpipe_reader_close(r);

    shmpipe_receiver *rx;
    shmpipe_sender *tx;
    CHECK_EQ(shmpipe_message_pipe_with(128, -1, &rx, &tx), 0);
    for (int round = 0; round < 20; round++) {
        shmpipe_iovec parts[2];
        size_t len = (size_t)(round * 3);
        CHECK_EQ(shmpipe_sender_reserve(tx, len, parts), 0);
        CHECK_EQ(parts[0].len + parts[1].len, len);
        for (size_t i = 0; i < len; i++) {
            shmpipe_iovec *p = i < parts[0].len ? &parts[0] : &parts[1];
            ((unsigned char *)p->base)[i < parts[0].len ? i : i - parts[0].len] = pattern(i);
        }
        CHECK_EQ(shmpipe_sender_commit(tx), 0);
        CHECK_EQ(shmpipe_sender_commit(tx), -EINVAL);
        shmpipe_const_iovec m[2];
        CHECK_EQ(shmpipe_receiver_peek(rx, m), (ssize_t)len);
        for (size_t i = 0; i < len; i++) {
            const shmpipe_const_iovec *p = i < m[0].len ? &m[0] : &m[1];
            CHECK(((const unsigned char *)p->base)[i < m[0].len ? i : i - m[0].len] == pattern(i));
        }
        CHECK_EQ(shmpipe_receiver_consume(rx), 0);
        CHECK_EQ(shmpipe_receiver_consume(rx), -EINVAL);
    }
    CHECK_EQ(shmpipe_sender_reserve(tx, 121, (shmpipe_iovec[2]){{0}}), -EMSGSIZE);
    shmpipe_sender_close(tx);
    shmpipe_const_iovec m[2];
    CHECK_EQ(shmpipe_receiver_peek(rx, m), -EPIPE);
    shmpipe_receiver_close(rx);
    return 0;
}

static int test_bad_arguments(void) {
    char buf[8];
    shmpipe_reader *r;
    shmpipe_writer *w;
    shmpipe_receiver *rx;
    shmpipe_sender *tx;
    shmpipe_iovec iov[2];
    shmpipe_const_iovec civ[2];
    /* NULL handles and out-pointers: -EINVAL. */
    CHECK_EQ(shmpipe_pipe(NULL, &w), -EINVAL);
    CHECK_EQ(shmpipe_pipe(&r, NULL), -EINVAL);
    CHECK_EQ(shmpipe_message_pipe(NULL, NULL), -EINVAL);
    CHECK_EQ(shmpipe_write(NULL, buf, 1), -EINVAL);
    CHECK_EQ(shmpipe_write_some(NULL, buf, 1), -EINVAL);
    CHECK_EQ(shmpipe_read(NULL, buf, 1), -EINVAL);
    CHECK_EQ(shmpipe_send(NULL, buf, 1), -EINVAL);
    CHECK_EQ(shmpipe_recv(NULL, buf, 1), -EINVAL);
    CHECK_EQ(shmpipe_sender_max_message(NULL), -EINVAL);
    CHECK_EQ(shmpipe_writer_reserve(NULL, 1, iov), -EINVAL);
    CHECK_EQ(shmpipe_writer_commit(NULL, 0), -EINVAL);
    CHECK_EQ(shmpipe_reader_peek(NULL, civ), -EINVAL);
    CHECK_EQ(shmpipe_reader_consume(NULL, 0), -EINVAL);
    CHECK_EQ(shmpipe_sender_reserve(NULL, 1, iov), -EINVAL);
    CHECK_EQ(shmpipe_sender_commit(NULL), -EINVAL);
    CHECK_EQ(shmpipe_receiver_peek(NULL, civ), -EINVAL);
    CHECK_EQ(shmpipe_receiver_consume(NULL), -EINVAL);
    CHECK_EQ(shmpipe_reader_fd(NULL), -EINVAL);
    CHECK_EQ(shmpipe_reader_arm(NULL), -EINVAL);
    CHECK_EQ(shmpipe_writer_arm(NULL), -EINVAL);
    CHECK_EQ(shmpipe_receiver_arm(NULL), -EINVAL);
    CHECK_EQ(shmpipe_sender_arm(NULL), -EINVAL);
    CHECK_EQ(shmpipe_writer_set_nonblocking(NULL, 1), -EINVAL);
    CHECK_EQ(shmpipe_receiver_set_timeout(NULL, 5), -EINVAL);
    CHECK_EQ(shmpipe_sender_fd(NULL), -EINVAL);
    CHECK_EQ(shmpipe_listen(NULL, NULL), -EINVAL);
    CHECK_EQ(shmpipe_accept(NULL, &r, &w, NULL), -EINVAL);
    CHECK_EQ(shmpipe_connect(NULL, &r, &w, NULL), -EINVAL);
    CHECK_EQ(shmpipe_reader_from_env(NULL, &r), -EINVAL);
    CHECK_EQ(shmpipe_spawn(NULL, NULL, NULL, 0, NULL), -EINVAL);
    shmpipe_reader_close(NULL);
    shmpipe_writer_close(NULL);
    shmpipe_receiver_close(NULL);
    shmpipe_sender_close(NULL);
    shmpipe_listener_close(NULL);

    /* Bad sizes and buffers on live ends. */
    CHECK_EQ(shmpipe_pipe_with(100, -1, &r, &w), -EINVAL); /* not a power of two */
    CHECK_EQ(shmpipe_pipe(&r, &w), 0);
    CHECK_EQ(shmpipe_write(w, NULL, 1), -EINVAL);
    CHECK_EQ(shmpipe_read(r, NULL, 1), -EINVAL);
    CHECK_EQ(shmpipe_write(w, NULL, 0), 0);
    CHECK_EQ(shmpipe_writer_reserve(w, 1, NULL), -EINVAL);
    CHECK_EQ(shmpipe_reader_peek(r, NULL), -EINVAL);
    CHECK_EQ(shmpipe_reader_consume(r, 1), -EINVAL); /* nothing peeked */
    CHECK_EQ(shmpipe_writer_commit(w, 1), -EINVAL);  /* nothing reserved */
    CHECK_EQ(shmpipe_reader_from_env("NO_SUCH_END", &r), -ENOENT);

    /* Closed ends: -EBADF, and closing again does nothing. */
    shmpipe_reader_close(r);
    shmpipe_writer_close(w);
    shmpipe_reader_close(r);
    shmpipe_writer_close(w);
    CHECK_EQ(shmpipe_write(w, buf, 1), -EBADF);
    CHECK_EQ(shmpipe_read(r, buf, 1), -EBADF);
    CHECK_EQ(shmpipe_writer_reserve(w, 1, iov), -EBADF);
    CHECK_EQ(shmpipe_reader_peek(r, civ), -EBADF);
    CHECK_EQ(shmpipe_reader_fd(r), -EBADF);
    CHECK_EQ(shmpipe_reader_arm(r), -EBADF);
    CHECK_EQ(shmpipe_writer_set_timeout(w, 5), -EBADF);
    CHECK_EQ(shmpipe_message_pipe(&rx, &tx), 0);
    shmpipe_receiver_close(rx);
    shmpipe_sender_close(tx);
    CHECK_EQ(shmpipe_send(tx, buf, 1), -EBADF);
    CHECK_EQ(shmpipe_recv(rx, buf, 1), -EBADF);
    CHECK_EQ(shmpipe_sender_max_message(tx), -EBADF);
    CHECK_EQ(shmpipe_sender_commit(tx), -EBADF);
    CHECK_EQ(shmpipe_receiver_consume(rx), -EBADF);
    /* A closed handle's memory is reused by the next handle of its type. */
    shmpipe_reader *r2;
    shmpipe_writer *w2;
    CHECK_EQ(shmpipe_pipe(&r2, &w2), 0);
    CHECK_EQ(shmpipe_write(w2, "ok", 2), 2);
    CHECK_EQ(shmpipe_read(r2, buf, 2), 2);
    shmpipe_reader_close(r2);
    shmpipe_writer_close(w2);
    return 0;
}

static int test_listener_connect(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/shmpipe-capi-%d.sock", (int)getpid());
    unlink(path);
    shmpipe_listener *l;
    CHECK_EQ(shmpipe_listen(path, &l), 0);
    CHECK_EQ(shmpipe_listen(path, &l), -EADDRINUSE);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmpipe_reader *r;
        shmpipe_writer *w;
        shmpipe_peer peer;
        if (shmpipe_connect(path, &r, &w, &peer) != 0)
            _exit(2);
        if (peer.pid != getppid() || peer.uid != getuid())
            _exit(3);
        char buf[4];
        if (shmpipe_write(w, "ping", 4) != 4 || shmpipe_read(r, buf, 4) != 4 ||
            memcmp(buf, "pong", 4) != 0)
            _exit(4);
        shmpipe_reader_close(r);
        shmpipe_writer_close(w);
        _exit(0);
    }
    shmpipe_reader *r;
    shmpipe_writer *w;
    shmpipe_peer peer;
    CHECK_EQ(shmpipe_accept(l, &r, &w, &peer), 0);
    CHECK_EQ(peer.pid, pid);
    CHECK_EQ(peer.uid, getuid());
    CHECK_EQ(peer.gid, getgid());
    char buf[4];
    CHECK_EQ(shmpipe_read(r, buf, 4), 4);
    CHECK(memcmp(buf, "ping", 4) == 0);
    CHECK_EQ(shmpipe_write(w, "pong", 4), 4);
    CHECK_EQ(reap(pid), 0);
    CHECK_EQ(shmpipe_read(r, buf, 4), 0);
    shmpipe_reader_close(r);
    shmpipe_writer_close(w);
    /* The same with messages both ways. */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmpipe_receiver *rx;
        shmpipe_sender *tx;
        char m[8];
        if (shmpipe_connect_messages(path, &rx, &tx, NULL) != 0)
            _exit(2);
        if (shmpipe_send(tx, "one", 3) != 0 || shmpipe_recv(rx, m, sizeof m) != 0)
            _exit(3);
        shmpipe_receiver_close(rx);
        shmpipe_sender_close(tx);
        _exit(0);
    }
    shmpipe_receiver *rx;
    shmpipe_sender *tx;
    CHECK_EQ(shmpipe_accept_messages(l, &rx, &tx, &peer), 0);
    CHECK_EQ(peer.pid, pid);
    char m[8];
    CHECK_EQ(shmpipe_recv(rx, m, sizeof m), 3);
    CHECK_EQ(shmpipe_send(tx, "", 0), 0);
    CHECK_EQ(reap(pid), 0);
    CHECK_EQ(shmpipe_recv(rx, m, sizeof m), -EPIPE);
    shmpipe_receiver_close(rx);
    shmpipe_sender_close(tx);
    shmpipe_listener_close(l);
    CHECK(access(path, F_OK) != 0);
    CHECK_EQ(shmpipe_connect(path, &r, &w, NULL), -ENOENT);
    return 0;
}

/* The spawned side of test_spawn: takes its ends and answers. */
static int spawned_child(void) {
    shmpipe_writer *w;
    shmpipe_receiver *rx;
    shmpipe_reader *wrong;
    /* An end of another kind is refused (and stays there to be taken). */
    if (shmpipe_reader_from_env("IN", &wrong) != -EPROTO)
        return 5;
    if (shmpipe_writer_from_env("OUT", &w) != 0 || shmpipe_receiver_from_env("IN", &rx) != 0)
        return 2;
    if (shmpipe_writer_from_env("OUT", &w) != -ENOENT) /* taken already */
        return 3;
    char msg[32];
    ssize_t n = shmpipe_recv(rx, msg, sizeof msg);
    if (n < 0 || shmpipe_write(w, msg, (size_t)n) != n)
        return 4;
    shmpipe_writer_close(w);
    shmpipe_receiver_close(rx);
    return 0;
}

static int test_spawn(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    shmpipe_receiver *rx;
    shmpipe_sender *tx;
    CHECK_EQ(shmpipe_pipe(&r, &w), 0);
    CHECK_EQ(shmpipe_message_pipe(&rx, &tx), 0);
    shmpipe_pass ends[2] = {
        {.name = "OUT", .writer = w},
        {.name = "IN", .receiver = rx},
    };
    const char *argv[] = {"test_capi", "--spawned", NULL};
    shmpipe_pass bad = {.name = "X", .reader = r, .writer = w};
    CHECK_EQ(shmpipe_spawn(self_path, argv, &bad, 1, NULL), -EINVAL);
    pid_t pid = -1;
    CHECK_EQ(shmpipe_spawn(self_path, argv, ends, 2, &pid), 0);
    CHECK(pid > 0);
    shmpipe_writer_close(w);
    shmpipe_receiver_close(rx);
    CHECK_EQ(shmpipe_send(tx, "echo me", 7), 0);
    char buf[16];
    size_t got = 0;
    for (ssize_t n; (n = shmpipe_read(r, buf + got, sizeof buf - got)) > 0;)
        got += (size_t)n;
    CHECK_EQ(got, 7);
    CHECK(memcmp(buf, "echo me", 7) == 0);
    CHECK_EQ(reap(pid), 0);
    shmpipe_reader_close(r);
    shmpipe_sender_close(tx);
    return 0;
}

/* ------------------------------------------------------------ the runner */

/* The inline fast path of the header against the library's own calls
 * (the Rust end), on the same ends. (shmpipe_write) in parentheses is the
 * library's function; shmpipe_write without them, the header's inline
 * one. */

/* A small pseudo-random sequence, the same in every process. */
static uint32_t next_rand(uint32_t *s) {
    *s = *s * 1103515245u + 12345u;
    return *s >> 16;
}

/* The inline path's first call goes to the library, which lends it the
 * end's state; an inline call of a small item that fits then moves it on
 * without the library, and any library call takes the state back. */
static int test_inline_state_is_lent(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(64, -1, &r, &w), 0);
    const struct shmpipe_fast *fw = (const struct shmpipe_fast *)(const void *)w;
    const struct shmpipe_fast *fr = (const struct shmpipe_fast *)(const void *)r;
    CHECK_EQ(fw->kind, SHMPIPE_FAST_WRITER);
    CHECK_EQ(fr->kind, SHMPIPE_FAST_READER);
    uint64_t v = 1, got = 0;
    CHECK_EQ(fw->step, 0);
    CHECK_EQ(shmpipe_write(w, &v, 8), 8); /* through the library, which lends */
    CHECK_EQ(fw->step, SHMPIPE_FAST_STEP);
    CHECK_EQ(fw->noted, 1);
    CHECK_EQ(fw->pos, 8);
    v = 2;
    CHECK_EQ(shmpipe_write(w, &v, 8), 8);
    CHECK_EQ(fw->pos, 16); /* inline: the library was not called */
    v = 3;
    CHECK_EQ((shmpipe_write)(w, &v, 8), 8); /* the library's: takes it back */
    CHECK_EQ(fw->step, 0);
    CHECK_EQ((shmpipe_read)(r, &got, 8), 8);
    CHECK_EQ(got, 1);
    CHECK_EQ(fr->step, 0);
    CHECK_EQ(shmpipe_read(r, &got, 8), 8);
    CHECK_EQ(got, 2);
    CHECK_EQ(fr->step, SHMPIPE_FAST_STEP);
    CHECK_EQ(fr->limit - fr->pos, 8);
    CHECK_EQ(shmpipe_read(r, &got, 8), 8);
    CHECK_EQ(got, 3);
    CHECK_EQ(fr->pos, 24);
    /* Any other call takes the state back; closing leaves it taken. */
    CHECK_EQ(shmpipe_writer_set_nonblocking(w, 0), 0);
    CHECK_EQ(fw->step, 0);
    shmpipe_writer_close(w);
    CHECK_EQ(shmpipe_write(w, &v, 8), -EBADF);
    CHECK_EQ(shmpipe_read(r, &got, 8), 0);
    shmpipe_reader_close(r);
    CHECK_EQ(shmpipe_read(r, &got, 8), -EBADF);
    /* NULL, a NULL buffer, and a handle of the other type still fail. */
    CHECK_EQ(shmpipe_write(NULL, &v, 8), -EINVAL);
    CHECK_EQ(shmpipe_read(NULL, &got, 8), -EINVAL);
    CHECK_EQ(shmpipe_pipe_with(64, -1, &r, &w), 0);
    CHECK_EQ((shmpipe_write)(w, &v, 8), 8);
    CHECK_EQ(shmpipe_write(w, NULL, 8), -EINVAL);
    CHECK_EQ(shmpipe_write((shmpipe_writer *)(void *)r, &v, 8), -EINVAL);
    CHECK_EQ(shmpipe_read((shmpipe_reader *)(void *)w, &got, 8), -EINVAL);
    shmpipe_writer_close(w);
    shmpipe_reader_close(r);
    return 0;
}

/* How one side moves its bytes: 0 inline only, 1 the library only, 2 a
 * mix of inline, library, write_some/reserve-commit (read: peek-consume),
 * and sizes; each value of the stream is checked. */
static ssize_t conf_write(shmpipe_writer *w, int mode, uint32_t *s, const unsigned char *p, size_t n) {
    int how = mode == 2 ? (int)(next_rand(s) % 4) : mode;
    if (how == 0)
        return shmpipe_write(w, p, n);
    if (how == 1)
        return (shmpipe_write)(w, p, n);
    if (how == 2) {
        size_t done = 0;
        while (done < n) {
            ssize_t k = shmpipe_write_some(w, p + done, n - done);
            if (k <= 0)
                return k;
            done += (size_t)k;
        }
        return (ssize_t)n;
    }
    shmpipe_iovec parts[2];
    int rc = shmpipe_writer_reserve(w, n, parts);
    if (rc < 0)
        return rc;
    memcpy(parts[0].base, p, parts[0].len);
    memcpy(parts[1].base, p + parts[0].len, parts[1].len);
    rc = shmpipe_writer_commit(w, n);
    return rc < 0 ? rc : (ssize_t)n;
}

static ssize_t conf_read(shmpipe_reader *r, int mode, uint32_t *s, unsigned char *p, size_t n) {
    int how = mode == 2 ? (int)(next_rand(s) % 3) : mode;
    if (how == 0)
        return shmpipe_read(r, p, n);
    if (how == 1)
        return (shmpipe_read)(r, p, n);
    shmpipe_const_iovec parts[2];
    ssize_t k = shmpipe_reader_peek(r, parts);
    if (k <= 0)
        return k;
    size_t take = (size_t)k < n ? (size_t)k : n;
    size_t a = take < parts[0].len ? take : parts[0].len;
    memcpy(p, parts[0].base, a);
    memcpy(p + a, parts[1].base, take - a);
    int rc = shmpipe_reader_consume(r, take);
    return rc < 0 ? rc : (ssize_t)take;
}

/* Streams `total` bytes in items of 1 to 24 bytes (mostly 8) from a
 * writer in mode wmode to a reader in mode rmode, across processes. */
static int conf_stream(int wmode, int rmode, size_t capacity, size_t total) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(capacity, -1, &r, &w), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmpipe_reader_close(r);
        uint32_t s = 1;
        unsigned char item[24];
        for (size_t done = 0; done < total;) {
            size_t n = next_rand(&s) % 2 ? 8 : 1 + next_rand(&s) % 24;
            if (n > total - done)
                n = total - done;
            for (size_t i = 0; i < n; i++)
                item[i] = pattern(done + i);
            if (conf_write(w, wmode, &s, item, n) != (ssize_t)n)
                _exit(3);
            done += n;
        }
        shmpipe_writer_close(w);
        _exit(0);
    }
    shmpipe_writer_close(w);
    uint32_t s = 2;
    size_t got = 0;
    unsigned char buf[24];
    for (;;) {
        size_t want = next_rand(&s) % 2 ? 8 : 1 + next_rand(&s) % 24;
        ssize_t n = conf_read(r, rmode, &s, buf, want);
        CHECK(n >= 0);
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            CHECK_EQ(buf[i], pattern(got + (size_t)i));
        got += (size_t)n;
    }
    CHECK_EQ(got, total);
    CHECK_EQ(reap(pid), 0);
    shmpipe_reader_close(r);
    return 0;
}

/* Inline writer to library reader and back, and mixes, across processes,
 * through a small ring (wrapping, full and empty often: both sides sleep
 * and wake) and the default one. */
static int test_inline_conformance_streams(void) {
    for (int wm = 0; wm < 3; wm++)
        for (int rm = 0; rm < 3; rm++) {
            if (conf_stream(wm, rm, 64, 200000) != 0 || conf_stream(wm, rm, 0, 200000) != 0) {
                fprintf(stderr, "  writer mode %d, reader mode %d\n", wm, rm);
                return 1;
            }
        }
    return 0;
}

/* A writer whose state was lent before fork: the child goes on writing
 * inline, and the parent's copy, closed after, must not move the ring's
 * index back to where the parent left it. */
static int test_inline_state_across_fork(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe(&r, &w), 0);
    uint64_t v;
    for (v = 0; v < 3; v++)
        CHECK_EQ(shmpipe_write(w, &v, 8), 8); /* lent, then inline */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmpipe_reader_close(r);
        for (v = 3; v < 1000; v++)
            if (shmpipe_write(w, &v, 8) != 8)
                _exit(3);
        shmpipe_writer_close(w);
        _exit(0);
    }
    CHECK_EQ(reap(pid), 0);
    shmpipe_writer_close(w); /* the stale copy */
    uint64_t got;
    for (v = 0; v < 1000; v++) {
        CHECK_EQ(shmpipe_read(r, &got, 8), 8);
        CHECK_EQ(got, v);
    }
    CHECK_EQ(shmpipe_read(r, &got, 8), 0);
    shmpipe_reader_close(r);
    return 0;
}

/* One thread interleaving inline and library calls on both ends of one
 * pipe, every value checked. */
static int test_inline_conformance_one_thread(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(128, -1, &r, &w), 0);
    uint32_t s = 3;
    size_t written = 0, got = 0;
    unsigned char item[24];
    for (int round = 0; round < 20000; round++) {
        /* Fill up to a random level (never past the capacity: one thread
         * would wait forever), then drain part of it. */
        size_t level = next_rand(&s) % 128;
        while (written - got + 24 <= level + 24 && written - got + 24 <= 128) {
            size_t n = next_rand(&s) % 2 ? 8 : 1 + next_rand(&s) % 24;
            for (size_t i = 0; i < n; i++)
                item[i] = pattern(written + i);
            CHECK_EQ(conf_write(w, 2, &s, item, n), (ssize_t)n);
            written += n;
            if (written - got > level)
                break;
        }
        size_t drain = next_rand(&s) % (written - got + 1);
        while (drain > 0) {
            size_t want = drain < 24 ? drain : 1 + next_rand(&s) % 24;
            if (want > drain)
                want = drain;
            ssize_t n = conf_read(r, 2, &s, item, want);
            CHECK(n > 0);
            for (ssize_t i = 0; i < n; i++)
                CHECK_EQ(item[i], pattern(got + (size_t)i));
            got += (size_t)n;
            drain -= (size_t)n;
        }
    }
    shmpipe_writer_close(w);
    for (;;) {
        ssize_t n = conf_read(r, 2, &s, item, sizeof item);
        CHECK(n >= 0);
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            CHECK_EQ(item[i], pattern(got + (size_t)i));
        got += (size_t)n;
    }
    CHECK_EQ(got, written);
    shmpipe_reader_close(r);
    return 0;
}

static const struct test tests[] = {
    {"pipe_write_read", test_pipe_write_read},
    {"fork_idiom", test_fork_idiom},
    {"epipe_when_reader_closed", test_epipe_when_reader_closed},
    {"reader_killed_while_writer_blocks", test_reader_killed_while_writer_blocks},
    {"nonblocking_and_timeouts", test_nonblocking_and_timeouts},
    {"message_sizes", test_message_sizes},
    {"readiness_fd", test_readiness_fd},
    {"reserve_commit_peek_consume", test_reserve_commit_peek_consume},
    {"bad_arguments", test_bad_arguments},
    {"listener_connect", test_listener_connect},
    {"spawn", test_spawn},
    {"inline_state_is_lent", test_inline_state_is_lent},
    {"inline_conformance_streams", test_inline_conformance_streams},
    {"inline_conformance_one_thread", test_inline_conformance_one_thread},
    {"inline_state_across_fork", test_inline_state_across_fork},
};

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc > 1 && strcmp(argv[1], "--spawned") == 0)
        return spawned_child();
    const char *filter = argc > 1 ? argv[1] : NULL;
    return run_tests(tests, sizeof tests / sizeof tests[0], "", filter);
}
