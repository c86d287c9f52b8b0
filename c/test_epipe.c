/* When a writer learns that every reader is gone (scripts/test-c.sh builds
 * this with -Wall -Wextra -Werror under AddressSanitizer, as test_capi.c):
 * shmpipe_write returns -EPIPE at the first write after the last copy of
 * the reader was closed, or after a reader asleep in a read was killed;
 * within 64 KiB after a reader killed while busy; and never because only a
 * fork's copy of the reader was closed. Counts of writes, never times.
 * Each test runs in a child under the watchdog of c/harness.h; the last
 * line says "N passed, M failed".
 *
 *   ./test_epipe [NAME]    run every test, or those whose name contains NAME
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shmpipe.h>

#include "harness.h"

/* A ring far larger than the bound, so that a full ring cannot be what
 * stops the writer. */
#define BIG (1 << 20)
/* The bound after a reader killed while busy. */
#define BOUND (64 * 1024)

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* Whether process pid is asleep in the kernel (state S in /proc/PID/stat). */
static int asleep(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *end = strrchr(buf, ')');
    return end && end[1] == ' ' && end[2] == 'S';
}

/* Writes 8-byte items (ms apart) until one fails; the count of successes,
 * with the error in *err. Gives up past max successes. */
static long write_until_error(shmpipe_writer *w, long ms, long max, ssize_t *err) {
    long ok = 0;
    for (;;) {
        ssize_t rc = shmpipe_write(w, "12345678", 8);
        if (rc < 0) {
            *err = rc;
            return ok;
        }
        if (++ok > max) {
            *err = 0;
            return ok;
        }
        if (ms)
            sleep_ms(ms);
    }
}

/* The reader closed in this process: the next write fails, and every
 * write after it, inline or not. */
static int test_first_write_after_close_fails(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(BIG, -1, &r, &w), 0);
    CHECK_EQ(shmpipe_write(w, "seen", 4), 4);
    shmpipe_reader_close(r);
    ssize_t err;
    CHECK_EQ(write_until_error(w, 0, 0, &err), 0);
    CHECK_EQ(err, -EPIPE);
    CHECK_EQ(shmpipe_write(w, "12345678", 8), -EPIPE);
    static char big[100000];
    CHECK_EQ(shmpipe_write(w, big, sizeof big), -EPIPE);
    CHECK_EQ((shmpipe_write)(w, "12345678", 8), -EPIPE);
    shmpipe_writer_close(w);
    return 0;
}

/* A writer that writes 8 bytes every 10 ms learns at its next write that
 * the reader's process closed its end and exited, or was killed while it
 * waited in a read. */
static int slow_writer(int kill_it) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(BIG, 0, &r, &w), 0);
    int done[2];
    CHECK_EQ(pipe(done), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmpipe_writer_close(w);
        close(done[0]);
        char buf[8];
        for (int i = 0; i < 5; i++)
            if (shmpipe_read(r, buf, 8) != 8)
                _exit(2);
        if (kill_it) {
            (void)shmpipe_read(r, buf, 8); /* asleep until killed */
            _exit(3);
        }
        shmpipe_reader_close(r);
        if (write(done[1], "!", 1) != 1)
            _exit(4);
        _exit(0);
    }
    shmpipe_reader_close(r); /* our copy: the child's lives on */
    close(done[1]);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(shmpipe_write(w, "12345678", 8), 8);
        sleep_ms(10);
    }
    if (kill_it) {
        while (!asleep(pid))
            sleep_ms(1);
        kill(pid, SIGKILL);
        CHECK_EQ(reap(pid), 128 + SIGKILL);
    } else {
        char b;
        CHECK_EQ(read(done[0], &b, 1), 1);
        CHECK_EQ(reap(pid), 0);
    }
    close(done[0]);
    ssize_t err;
    CHECK_EQ(write_until_error(w, 10, 100, &err), 0);
    CHECK_EQ(err, -EPIPE);
    shmpipe_writer_close(w);
    return 0;
}

static int test_slow_writer_learns_at_next_write_after_close(void) { return slow_writer(0); }
static int test_slow_writer_learns_at_next_write_after_kill(void) { return slow_writer(1); }

/* A reader killed while busy (not in a read: it says nothing and leaves
 * no parking behind): -EPIPE within 64 KiB. */
static int test_reader_killed_while_busy(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(BIG, -1, &r, &w), 0);
    int busy[2];
    CHECK_EQ(pipe(busy), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmpipe_writer_close(w);
        char buf[80];
        size_t got = 0;
        while (got < sizeof buf) {
            ssize_t n = shmpipe_read(r, buf + got, sizeof buf - got);
            if (n <= 0)
                _exit(2);
            got += (size_t)n;
        }
        if (write(busy[1], "!", 1) != 1)
            _exit(4);
        for (volatile unsigned long i = 0;; i++) {
        }
    }
    shmpipe_reader_close(r);
    static char eighty[80];
    CHECK_EQ(shmpipe_write(w, eighty, sizeof eighty), 80);
    char b;
    CHECK_EQ(read(busy[0], &b, 1), 1);
    kill(pid, SIGKILL);
    CHECK_EQ(reap(pid), 128 + SIGKILL);
    ssize_t err;
    long ok = write_until_error(w, 0, BIG / 8, &err);
    CHECK_EQ(err, -EPIPE);
    CHECK(ok * 8 <= BOUND);
    shmpipe_writer_close(w);
    close(busy[0]);
    close(busy[1]);
    return 0;
}

/* The fork idiom: the child closes its copy of the reader (and exits);
 * the parent's copy still reads everything the writer writes. */
static int test_fork_copy_closing_keeps_the_pipe(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(BIG, -1, &r, &w), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmpipe_reader_close(r);
        shmpipe_writer_close(w);
        _exit(0);
    }
    CHECK_EQ(reap(pid), 0);
    for (unsigned long i = 0; i < 1000; i++)
        CHECK_EQ(shmpipe_write(w, &i, sizeof i), (ssize_t)sizeof i);
    for (unsigned long i = 0; i < 1000; i++) {
        unsigned long v = 0;
        CHECK_EQ(shmpipe_read(r, &v, sizeof v), (ssize_t)sizeof v);
        CHECK_EQ(v, i);
    }
    shmpipe_writer_close(w);
    shmpipe_reader_close(r);
    return 0;
}

static const struct test tests[] = {
    {"epipe_first_write_after_close", test_first_write_after_close_fails},
    {"epipe_slow_writer_after_close", test_slow_writer_learns_at_next_write_after_close},
    {"epipe_slow_writer_after_kill", test_slow_writer_learns_at_next_write_after_kill},
    {"epipe_reader_killed_while_busy", test_reader_killed_while_busy},
    {"epipe_fork_copy_closing_keeps_the_pipe", test_fork_copy_closing_keeps_the_pipe},
};

int main(int argc, char **argv) {
    return run_tests(tests, sizeof tests / sizeof tests[0], "", argc > 1 ? argv[1] : NULL);
}
