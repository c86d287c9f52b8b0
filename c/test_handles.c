/* Tests of the C handles' own defences (SECURITY.md, "C API handles"):
 * a handle of the wrong type is refused with -EINVAL by every call, and a
 * handle closed while another thread is blocked on it (or calls it) is
 * released safely: the blocked call returns -EBADF, a call meanwhile gets
 * -EBUSY or -EBADF, and nothing touches freed memory. scripts/test-c.sh
 * runs them under AddressSanitizer against the release library and
 * against a debug build (whose Rust checks abort on a misaligned or
 * out-of-bounds handle read). Each test runs under the watchdog of
 * c/harness.h.
 *
 *   ./test_handles [NAME]    run every test, or those whose name contains NAME
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shmpipe.h>

#include "harness.h"

/* How many times each close-while-blocked race runs. */
#define ROUNDS 100

static void nap_us(long us) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

/* Waits a little before a close, differently each round, so that the
 * close meets the other thread before its call, as it enters, and (most
 * rounds) while it sleeps in the kernel. */
static void stagger(int round) {
    switch (round % 4) {
    case 0:
        break;
    case 1:
        sched_yield();
        break;
    case 2:
        nap_us(200);
        break;
    default:
        nap_us(2000);
        break;
    }
}

/* ------------------------------------------------- wrong handle types */

/* One handle of each type, to pass as every other type. */
struct handles {
    shmpipe_reader *r;
    shmpipe_writer *w;
    shmpipe_receiver *rx;
    shmpipe_sender *tx;
    shmpipe_listener *l;
};

/* Every call that takes a reader, given `h` (not a reader): -EINVAL. */
static int refused_as_reader(void *h) {
    shmpipe_reader *r = h;
    char buf[8];
    shmpipe_const_iovec civ[2];
    CHECK_EQ(shmpipe_read(r, buf, 8), -EINVAL); /* the header's inline path */
    CHECK_EQ((shmpipe_read)(r, buf, 8), -EINVAL);
    CHECK_EQ(shmpipe_fast_read(r, buf, 8), -EINVAL);
    CHECK_EQ(shmpipe_reader_sync(r), -EINVAL);
    CHECK_EQ(shmpipe_reader_peek(r, civ), -EINVAL);
    CHECK_EQ(shmpipe_reader_consume(r, 0), -EINVAL);
    CHECK_EQ(shmpipe_reader_set_nonblocking(r, 1), -EINVAL);
    CHECK_EQ(shmpipe_reader_set_timeout(r, 5), -EINVAL);
    CHECK_EQ(shmpipe_reader_fd(r), -EINVAL);
    CHECK_EQ(shmpipe_reader_arm(r), -EINVAL);
    shmpipe_pass p = {"X", r, NULL, NULL, NULL};
    char *argv[] = {"true", NULL};
    CHECK_EQ(shmpipe_spawn("true", (const char *const *)argv, &p, 1, NULL), -EINVAL);
    shmpipe_reader_close(r); /* does nothing */
    return 0;
}

static int refused_as_writer(void *h) {
    shmpipe_writer *w = h;
    shmpipe_iovec iov[2];
    CHECK_EQ(shmpipe_write(w, "12345678", 8), -EINVAL);
    CHECK_EQ((shmpipe_write)(w, "12345678", 8), -EINVAL);
    CHECK_EQ(shmpipe_fast_write(w, "12345678", 8), -EINVAL);
    CHECK_EQ(shmpipe_write_some(w, "1", 1), -EINVAL);
    CHECK_EQ(shmpipe_writer_sync(w), -EINVAL);
    CHECK_EQ(shmpipe_writer_reserve(w, 1, iov), -EINVAL);
    CHECK_EQ(shmpipe_writer_commit(w, 0), -EINVAL);
    CHECK_EQ(shmpipe_writer_set_nonblocking(w, 1), -EINVAL);
    CHECK_EQ(shmpipe_writer_set_timeout(w, 5), -EINVAL);
    CHECK_EQ(shmpipe_writer_fd(w), -EINVAL);
    CHECK_EQ(shmpipe_writer_arm(w), -EINVAL);
    shmpipe_pass p = {"X", NULL, w, NULL, NULL};
    char *argv[] = {"true", NULL};
    CHECK_EQ(shmpipe_spawn("true", (const char *const *)argv, &p, 1, NULL), -EINVAL);
    shmpipe_writer_close(w);
    return 0;
}

static int refused_as_receiver(void *h) {
    shmpipe_receiver *rx = h;
    char buf[8];
    shmpipe_const_iovec civ[2];
    CHECK_EQ(shmpipe_recv(rx, buf, sizeof buf), -EINVAL);
    CHECK_EQ(shmpipe_receiver_peek(rx, civ), -EINVAL);
    CHECK_EQ(shmpipe_receiver_consume(rx), -EINVAL);
    CHECK_EQ(shmpipe_receiver_set_nonblocking(rx, 1), -EINVAL);
    CHECK_EQ(shmpipe_receiver_set_timeout(rx, 5), -EINVAL);
    CHECK_EQ(shmpipe_receiver_fd(rx), -EINVAL);
    CHECK_EQ(shmpipe_receiver_arm(rx), -EINVAL);
    shmpipe_pass p = {"X", NULL, NULL, rx, NULL};
    char *argv[] = {"true", NULL};
    CHECK_EQ(shmpipe_spawn("true", (const char *const *)argv, &p, 1, NULL), -EINVAL);
    shmpipe_receiver_close(rx);
    return 0;
}

static int refused_as_sender(void *h) {
    shmpipe_sender *tx = h;
    shmpipe_iovec iov[2];
    CHECK_EQ(shmpipe_send(tx, "1", 1), -EINVAL);
    CHECK_EQ(shmpipe_sender_max_message(tx), -EINVAL);
    CHECK_EQ(shmpipe_sender_reserve(tx, 1, iov), -EINVAL);
    CHECK_EQ(shmpipe_sender_commit(tx), -EINVAL);
    CHECK_EQ(shmpipe_sender_set_nonblocking(tx, 1), -EINVAL);
    CHECK_EQ(shmpipe_sender_set_timeout(tx, 5), -EINVAL);
    CHECK_EQ(shmpipe_sender_fd(tx), -EINVAL);
    CHECK_EQ(shmpipe_sender_arm(tx), -EINVAL);
    shmpipe_pass p = {"X", NULL, NULL, NULL, tx};
    char *argv[] = {"true", NULL};
    CHECK_EQ(shmpipe_spawn("true", (const char *const *)argv, &p, 1, NULL), -EINVAL);
    shmpipe_sender_close(tx);
    return 0;
}

static int refused_as_listener(void *h) {
    shmpipe_listener *l = h;
    shmpipe_reader *r = NULL;
    shmpipe_writer *w = NULL;
    shmpipe_receiver *rx = NULL;
    shmpipe_sender *tx = NULL;
    CHECK_EQ(shmpipe_accept(l, &r, &w, NULL), -EINVAL);
    CHECK_EQ(shmpipe_accept_messages(l, &rx, &tx, NULL), -EINVAL);
    CHECK(r == NULL && w == NULL && rx == NULL && tx == NULL);
    shmpipe_listener_close(l);
    return 0;
}

/* Each handle still works after every other call refused it. */
static int still_open(struct handles *h, const char *path) {
    char buf[8];
    CHECK_EQ(shmpipe_write(h->w, "12345678", 8), 8);
    CHECK_EQ(shmpipe_read(h->r, buf, 8), 8);
    CHECK(memcmp(buf, "12345678", 8) == 0);
    CHECK_EQ(shmpipe_send(h->tx, "m", 1), 0);
    CHECK_EQ(shmpipe_recv(h->rx, buf, sizeof buf), 1);
    CHECK(access(path, F_OK) == 0); /* the listener's socket file */
    return 0;
}

static int test_wrong_handle_types_are_refused(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/shmpipe-handles-%d.sock", (int)getpid());
    unlink(path);
    struct handles h;
    CHECK_EQ(shmpipe_pipe(&h.r, &h.w), 0);
    CHECK_EQ(shmpipe_message_pipe(&h.rx, &h.tx), 0);
    CHECK_EQ(shmpipe_listen(path, &h.l), 0);
    /* Lend the stream ends' inline state first, as a program's first
     * calls do. */
    CHECK_EQ(shmpipe_write(h.w, "12345678", 8), 8);
    char buf[8];
    CHECK_EQ(shmpipe_read(h.r, buf, 8), 8);
    void *all[] = {h.r, h.w, h.rx, h.tx, h.l};
    int (*as[])(void *) = {refused_as_reader, refused_as_writer, refused_as_receiver,
                           refused_as_sender, refused_as_listener};
    for (int type = 0; type < 5; type++) {
        for (int other = 0; other < 5; other++) {
            if (other == type)
                continue;
            if (as[type](all[other]) != 0) {
                fprintf(stderr, "  handle %d passed as type %d\n", other, type);
                return 1;
            }
        }
    }
    if (still_open(&h, path) != 0)
        return 1;
    shmpipe_reader_close(h.r);
    shmpipe_writer_close(h.w);
    shmpipe_receiver_close(h.rx);
    shmpipe_sender_close(h.tx);
    shmpipe_listener_close(h.l);
    CHECK(access(path, F_OK) != 0);
    return 0;
}

/* ------------------------------------------- closing while blocked */

/* A call made on another thread, and what it returned. */
struct blocked {
    void *h;
    int what;
    ssize_t rc;
    /* Call again while another call holds the handle (-EBUSY). */
    int retry_busy;
};

enum { READ, READ_LIBRARY, WRITE, RECV, SEND, ACCEPT, PEEK };

static void *blocked_call(void *arg) {
    struct blocked *b = arg;
    static char big[1 << 16];
    char buf[64];
    shmpipe_const_iovec civ[2];
    switch (b->what) {
    case READ:
        do
            b->rc = shmpipe_read((shmpipe_reader *)b->h, buf, 8);
        while (b->rc == -EBUSY && b->retry_busy);
        break;
    case READ_LIBRARY:
        b->rc = (shmpipe_read)((shmpipe_reader *)b->h, buf, 8);
        break;
    case PEEK:
        b->rc = shmpipe_reader_peek((shmpipe_reader *)b->h, civ);
        break;
    case WRITE:
        b->rc = shmpipe_write((shmpipe_writer *)b->h, big, sizeof big);
        break;
    case RECV:
        b->rc = shmpipe_recv((shmpipe_receiver *)b->h, buf, sizeof buf);
        break;
    case SEND:
        b->rc = shmpipe_send((shmpipe_sender *)b->h, big, 3000);
        break;
    case ACCEPT: {
        shmpipe_reader *r;
        shmpipe_writer *w;
        b->rc = shmpipe_accept((shmpipe_listener *)b->h, &r, &w, NULL);
        break;
    }
    }
    return NULL;
}

/* Starts `what` on `h` in a thread, closes `h` here while it (most
 * likely) sleeps, and checks that the call returned -EBADF and that the
 * closed handle refuses calls. */
static int close_under(void *h, int what, int round, void (*closer)(void *)) {
    struct blocked b = {h, what, 1, 0};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, blocked_call, &b), 0);
    stagger(round);
    closer(h);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(b.rc, -EBADF);
    return 0;
}

static void close_reader(void *h) { shmpipe_reader_close(h); }
static void close_writer(void *h) { shmpipe_writer_close(h); }
static void close_receiver(void *h) { shmpipe_receiver_close(h); }
static void close_sender(void *h) { shmpipe_sender_close(h); }
static void close_listener(void *h) { shmpipe_listener_close(h); }

static int test_close_while_a_read_blocks(void) {
    char buf[8];
    for (int round = 0; round < ROUNDS; round++) {
        shmpipe_reader *r;
        shmpipe_writer *w;
        CHECK_EQ(shmpipe_pipe(&r, &w), 0);
        if (round % 2) {
            /* Lent state first: the blocked read is the inline one's call. */
            CHECK_EQ(shmpipe_write(w, "12345678", 8), 8);
            CHECK_EQ(shmpipe_read(r, buf, 8), 8);
        }
        int what = (round / 2) % 3 == 0 ? READ : (round / 2) % 3 == 1 ? READ_LIBRARY : PEEK;
        if (close_under(r, what, round, close_reader) != 0)
            return 1;
        CHECK_EQ(shmpipe_read(r, buf, 8), -EBADF);
        shmpipe_writer_close(w);
    }
    return 0;
}

static int test_close_while_a_write_blocks(void) {
    static char big[1 << 16];
    for (int round = 0; round < ROUNDS / 2; round++) {
        shmpipe_reader *r;
        shmpipe_writer *w;
        CHECK_EQ(shmpipe_pipe_with(4096, -1, &r, &w), 0);
        CHECK_EQ(shmpipe_write(w, big, 4096), 4096); /* full */
        if (close_under(w, WRITE, round, close_writer) != 0)
            return 1;
        CHECK_EQ(shmpipe_write(w, "x", 1), -EBADF);
        /* The reader drains what was written, then reads end of file. */
        ssize_t n;
        while ((n = shmpipe_read(r, big, sizeof big)) > 0) {
        }
        CHECK_EQ(n, 0);
        shmpipe_reader_close(r);
    }
    return 0;
}

static int test_close_while_messages_block(void) {
    static char big[4096];
    for (int round = 0; round < ROUNDS / 2; round++) {
        shmpipe_receiver *rx;
        shmpipe_sender *tx;
        CHECK_EQ(shmpipe_message_pipe_with(4096, -1, &rx, &tx), 0);
        if (close_under(rx, RECV, round, close_receiver) != 0)
            return 1;
        CHECK_EQ(shmpipe_recv(rx, big, sizeof big), -EBADF);
        shmpipe_sender_close(tx);

        CHECK_EQ(shmpipe_message_pipe_with(4096, -1, &rx, &tx), 0);
        CHECK_EQ(shmpipe_send(tx, big, 3000), 0); /* no room for another */
        if (close_under(tx, SEND, round, close_sender) != 0)
            return 1;
        CHECK_EQ(shmpipe_recv(rx, big, sizeof big), 3000);
        CHECK_EQ(shmpipe_recv(rx, big, sizeof big), -EPIPE);
        shmpipe_receiver_close(rx);
    }
    return 0;
}

static int test_close_while_accept_blocks(void) {
    char path[64];
    for (int round = 0; round < ROUNDS / 4; round++) {
        snprintf(path, sizeof path, "/tmp/shmpipe-handles-%d-%d.sock", (int)getpid(), round);
        unlink(path);
        shmpipe_listener *l;
        CHECK_EQ(shmpipe_listen(path, &l), 0);
        if (close_under(l, ACCEPT, round, close_listener) != 0)
            return 1;
        CHECK(access(path, F_OK) != 0);
        shmpipe_reader *r;
        shmpipe_writer *w;
        CHECK_EQ(shmpipe_accept(l, &r, &w, NULL), -EBADF);
    }
    return 0;
}

/* A second call while one is in progress is refused, not run alongside. */
static int test_a_call_while_another_blocks_is_busy(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe(&r, &w), 0);
    /* The read may start while an arm below holds the handle: it then
     * gets -EBUSY itself, and tries again, so that it is the call that
     * stays in. */
    struct blocked b = {r, READ, 1, 1};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, blocked_call, &b), 0);
    /* Until the read is in: before, the call runs (and finds nothing). */
    int rc;
    while ((rc = shmpipe_reader_arm(r)) == 0)
        nap_us(100);
    CHECK_EQ(rc, -EBUSY);
    char buf[8];
    CHECK_EQ((shmpipe_read)(r, buf, 8), -EBUSY);
    shmpipe_reader_close(r);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(b.rc, -EBADF);
    CHECK_EQ(shmpipe_reader_arm(r), -EBADF);
    shmpipe_writer_close(w);
    return 0;
}

/* Across processes: the reader's peer is another process; a close from a
 * second thread while the read blocks ends the read, and the writing
 * process, told to write only once the close returned, then sees the
 * reader gone (the end was released, not kept by the blocked call). */
static int test_close_while_blocked_across_processes(void) {
    for (int round = 0; round < ROUNDS / 4; round++) {
        shmpipe_reader *r;
        shmpipe_writer *w;
        int go[2];
        CHECK_EQ(pipe(go), 0);
        CHECK_EQ(shmpipe_pipe_with(4096, -1, &r, &w), 0);
        pid_t writer = fork();
        CHECK(writer >= 0);
        if (writer == 0) {
            shmpipe_reader_close(r);
            close(go[1]);
            char buf[64] = {0};
            if (read(go[0], buf, 1) != 0) /* end of file: the close returned */
                _exit(2);
            ssize_t n;
            while ((n = shmpipe_write(w, buf, sizeof buf)) == (ssize_t)sizeof buf) {
            }
            _exit(n == -EPIPE ? 0 : 1);
        }
        close(go[0]);
        shmpipe_writer_close(w);
        int bad = close_under(r, round % 2 ? READ : READ_LIBRARY, round, close_reader);
        close(go[1]);
        CHECK_EQ(bad, 0);
        CHECK_EQ(reap(writer), 0);
    }
    return 0;
}

static const struct test tests[] = {
    {"wrong_handle_types_are_refused", test_wrong_handle_types_are_refused},
    {"close_while_a_read_blocks", test_close_while_a_read_blocks},
    {"close_while_a_write_blocks", test_close_while_a_write_blocks},
    {"close_while_messages_block", test_close_while_messages_block},
    {"close_while_accept_blocks", test_close_while_accept_blocks},
    {"a_call_while_another_blocks_is_busy", test_a_call_while_another_blocks_is_busy},
    {"close_while_blocked_across_processes", test_close_while_blocked_across_processes},
};

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    return run_tests(tests, sizeof tests / sizeof tests[0], "handles::", filter);
}
