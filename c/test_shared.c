/* One end used by several processes (docs/shared-ends.md), through the C
 * API and its inline calls (scripts/test-c.sh builds this with -Wall
 * -Wextra -Werror under AddressSanitizer, as test_capi.c): a copy of an
 * end left by fork and the original take turns, and every byte arrives
 * exactly once; writers at once each see their PIPE_BUF writes arrive
 * whole. What arrived is checked, never how long it took. Each test runs
 * in a child under the watchdog of c/harness.h; the last line says
 * "N passed, M failed".
 *
 *   ./test_shared [NAME]    run every test, or those whose name contains NAME
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shmpipe.h>

#include "harness.h"

/* Reads exactly len bytes (shmpipe_read returns what is there); 0 or a
 * negative errno. */
static int read_all(shmpipe_reader *r, void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = shmpipe_read(r, p, len);
        if (n <= 0)
            return n < 0 ? (int)n : -EPIPE;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The child writes, then the parent: both arrive, in that order. */
static int test_child_writes_then_parent_writes(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe(&r, &w), 0);
    CHECK_EQ(shmpipe_write(w, "x", 1), 1); /* lends the inline path */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        _exit(shmpipe_write(w, "child ", 6) == 6 ? 0 : 1);
    CHECK_EQ(reap(pid), 0);
    CHECK_EQ(shmpipe_write(w, "parent", 6), 6);
    char got[13] = {0};
    CHECK_EQ(read_all(r, got, 13), 0);
    CHECK(memcmp(got, "xchild parent", 13) == 0);
    shmpipe_writer_close(w);
    shmpipe_reader_close(r);
    return 0;
}

/* The child reads the first word, then the parent reads the rest. */
static int test_child_reads_then_parent_reads(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe(&r, &w), 0);
    CHECK_EQ(shmpipe_write(w, "firstsecond", 11), 11);
    char one[1];
    CHECK_EQ(shmpipe_read(r, one, 0), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char got[5];
        _exit(read_all(r, got, 5) == 0 && memcmp(got, "first", 5) == 0 ? 0 : 1);
    }
    CHECK_EQ(reap(pid), 0);
    char got[6];
    CHECK_EQ(read_all(r, got, 6), 0);
    CHECK(memcmp(got, "second", 6) == 0);
    shmpipe_writer_close(w);
    shmpipe_reader_close(r);
    return 0;
}

#define WRITERS 4
#define EACH 100
#define RECORD 4096

static void record(unsigned char *rec, uint32_t writer, uint32_t seq) {
    memcpy(rec, &writer, 4);
    memcpy(rec + 4, &seq, 4);
    for (size_t i = 8; i < RECORD; i++)
        rec[i] = (unsigned char)(writer * 31 + seq * 7 + i);
}

/* Writers at once, one PIPE_BUF write per record and no lock of their
 * own: every record arrives whole, once. */
static int test_writers_at_once(void) {
    shmpipe_reader *r;
    shmpipe_writer *w;
    CHECK_EQ(shmpipe_pipe_with(1 << 15, -1, &r, &w), 0);
    pid_t pids[WRITERS];
    for (uint32_t id = 0; id < WRITERS; id++) {
        pids[id] = fork();
        CHECK(pids[id] >= 0);
        if (pids[id] == 0) {
            static unsigned char rec[RECORD];
            for (uint32_t seq = 0; seq < EACH; seq++) {
                record(rec, id, seq);
                if (shmpipe_write(w, rec, RECORD) != RECORD)
                    _exit(1);
            }
            _exit(0);
        }
    }
    static unsigned char seen[WRITERS][EACH];
    static unsigned char rec[RECORD], want[RECORD];
    for (int i = 0; i < WRITERS * EACH; i++) {
        CHECK_EQ(read_all(r, rec, RECORD), 0);
        uint32_t writer, seq;
        memcpy(&writer, rec, 4);
        memcpy(&seq, rec + 4, 4);
        CHECK(writer < WRITERS && seq < EACH);
        record(want, writer, seq);
        CHECK(memcmp(rec, want, RECORD) == 0);
        CHECK(!seen[writer][seq]);
        seen[writer][seq] = 1;
    }
    for (int id = 0; id < WRITERS; id++)
        CHECK_EQ(reap(pids[id]), 0);
    shmpipe_writer_close(w);
    shmpipe_reader_close(r);
    return 0;
}

static const struct test tests[] = {
    {"shared_child_writes_then_parent_writes", test_child_writes_then_parent_writes},
    {"shared_child_reads_then_parent_reads", test_child_reads_then_parent_reads},
    {"shared_writers_at_once", test_writers_at_once},
};

int main(int argc, char **argv) {
    return run_tests(tests, sizeof tests / sizeof tests[0], "", argc > 1 ? argv[1] : NULL);
}
