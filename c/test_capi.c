/* Tests of the C API, compiled against the installed header and library
 * (scripts/test-c.sh builds them with -Wall -Wextra -Werror and runs them
 * under AddressSanitizer). Each test runs in its own process group under
 * a watchdog that kills the group if it hangs; the last line says
 * "N passed, M failed".
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

/* How long one test may take before the watchdog kills it. */
#define TEST_LIMIT_SECONDS 60

static const char *self_path;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                    \
            return 1;                                                          \
        }                                                                      \
    } while (0)

#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_) {                                                        \
            fprintf(stderr, "  %s:%d: %s == %lld, expected %s == %lld\n",      \
                    __FILE__, __LINE__, #a, a_, #b, b_);                       \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + (i >> 8)); }

/* Waits for a child of the test and returns its exit code (128+signal). */
static int reap(pid_t pid) {
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

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

struct test {
    const char *name;
    int (*run)(void);
};

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
};

/* Runs one test in its own process group; kills the group if the test
 * outlives the limit. Returns 0 if it passed. */
static int run_one(const struct test *t) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        setpgid(0, 0);
        alarm(TEST_LIMIT_SECONDS + 5); /* in case the runner dies too */
        exit(t->run()); /* exit, not _exit: LeakSanitizer checks at exit */
    }
    setpgid(pid, pid);
    int status = 0;
    for (int ticks = 0;; ticks++) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid)
            break;
        if (ticks >= TEST_LIMIT_SECONDS * 100) {
            fprintf(stderr, "  watchdog: %s took over %d s; killing it\n", t->name,
                    TEST_LIMIT_SECONDS);
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        struct timespec tick = {0, 10 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    /* Whatever the test left behind goes with it. */
    kill(-pid, SIGKILL);
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc > 1 && strcmp(argv[1], "--spawned") == 0)
        return spawned_child();
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (filter && !strstr(tests[i].name, filter))
            continue;
        int bad = run_one(&tests[i]);
        printf("test c::%s ... %s\n", tests[i].name, bad ? "FAILED" : "ok");
        bad ? failed++ : passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
