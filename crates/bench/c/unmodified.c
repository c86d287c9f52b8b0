/* The "unmodified programs" of `shmpipe bench --unmodified`: lmbench's
 * lat_pipe, lat_unix, bw_pipe, bw_unix and lat_ctx, written again with
 * plain libc calls only (no shmpipe header), so that the bench can run each
 * natively and under `shmpipe run` and compare.
 *
 * Like lmbench's harness (benchmp in lib_timing.c), the control pipes are
 * made before fork and shared by every process, the parent waits for its
 * children with select() and zero timeouts (and select(0, ...) as a
 * sleep), SIGCHLD and SIGTERM have handlers installed with signal() (which
 * in glibc gives them SA_RESTART), and the children are killed with
 * SIGKILL at the end.
 *
 *   unmodified TEST PLACEMENT MS [PROCS]
 *   TEST: lat_pipe lat_unix bw_pipe bw_unix lat_ctx write_file, or
 *         bw_pipe_thread: bw_pipe whose writer has started a second
 *         thread, which idles (a writer of a program with threads)
 *   PLACEMENT: cross (process i on CPU i mod n) or same (all on CPU 0)
 *
 * Prints one number: nanoseconds per round trip (lat_pipe, lat_unix), per
 * context switch (lat_ctx), or MB/s (bw_pipe, bw_unix), measured for
 * about MS milliseconds after a warm-up. write_file writes MS single bytes
 * to a regular file instead, for counting instructions. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define XFER (64 * 1024)
#define MAXPROCS 64

static int same_core;
static volatile sig_atomic_t children_gone;

static void on_chld(int sig) { (void)sig; children_gone++; }
static void on_term(int sig) { (void)sig; _exit(1); }

static void die(const char *what) {
    perror(what);
    exit(2);
}

static void pin(int i) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(same_core || n < 1 ? 0 : i % n, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity");
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void full_read(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die("read");
        p += r;
        n -= (size_t)r;
    }
}

static void full_write(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die("write");
        p += r;
        n -= (size_t)r;
    }
}

/* The harness's control pipes, made before any fork as benchmp makes
 * its: children report ready on one, the parent says go on the other. */
static int ready[2], go[2];

/* In a child: report ready, wait for go. */
static void child_start(void) {
    char c = 'r';
    full_write(ready[1], &c, 1);
    full_read(go[0], &c, 1);
}

/* In the parent: wait until `n` children are ready (polling with zero
 * timeouts and sleeping with select(0, ...), as benchmp does), then let
 * them go. */
static void parent_start(int n) {
    int seen = 0;
    while (seen < n) {
        fd_set rd, ex;
        struct timeval zero = {0, 0};
        FD_ZERO(&rd);
        FD_ZERO(&ex);
        FD_SET(ready[0], &rd);
        FD_SET(ready[0], &ex);
        int r = select(ready[0] + 1, &rd, NULL, &ex, &zero);
        if (r < 0 && errno != EINTR) die("select");
        if (r > 0 && FD_ISSET(ready[0], &rd)) {
            char c;
            full_read(ready[0], &c, 1);
            seen++;
            continue;
        }
        struct timeval nap = {0, 1000};
        select(0, NULL, NULL, NULL, &nap);
    }
    for (int i = 0; i < n; i++) full_write(go[1], "g", 1);
}

static pid_t kids[MAXPROCS];
static int nkids;

static pid_t spawn(void) {
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid > 0) kids[nkids++] = pid;
    return pid;
}

static void kill_children(void) {
    for (int i = 0; i < nkids; i++) kill(kids[i], SIGKILL);
    for (int i = 0; i < nkids; i++) waitpid(kids[i], NULL, 0);
}

/* Runs STEP (one operation) for a tenth of `ns` to warm up, then for
 * `ns`, checking the clock every 16 operations; leaves the operations
 * counted in `done_ops` and the time taken in `took_ns`. */
#define TIMED(ns, STEP)                                                      \
    do {                                                                     \
        double end_ = now_ns() + (ns) / 10;                                  \
        while (now_ns() < end_)                                              \
            for (int i_ = 0; i_ < 16; i_++) { STEP; }                        \
        double start_ = now_ns();                                            \
        end_ = start_ + (ns);                                                \
        done_ops = 0;                                                        \
        do {                                                                 \
            for (int i_ = 0; i_ < 16; i_++) { STEP; }                        \
            done_ops += 16;                                                  \
        } while ((took_ns = now_ns() - start_) < (ns));                      \
    } while (0)

static double took_ns;
static long done_ops;

/* lat_pipe and lat_unix: one byte there and back. `a` is the parent's
 * pair of descriptors, `b` the child's. */
static double round_trips(int a_rd, int a_wr, int b_rd, int b_wr, double ns) {
    if (spawn() == 0) {
        pin(1);
        child_start();
        char c;
        for (;;) {
            full_read(b_rd, &c, 1);
            full_write(b_wr, &c, 1);
        }
    }
    pin(0);
    parent_start(1);
    char c = 'x';
    TIMED(ns, full_write(a_wr, &c, 1); full_read(a_rd, &c, 1));
    return took_ns / done_ops;
}

static void *idle(void *x) {
    (void)x;
    for (;;) pause();
    return 0;
}

/* bw_pipe and bw_unix: the child writes 64 KiB at a time, the parent
 * reads; MB/s as lmbench counts them (10^6 bytes). With `thread`, the
 * child starts an idle thread first. */
static double bandwidth(int rd, int wr, double ns, int thread) {
    static char buf[XFER];
    memset(buf, 'b', sizeof buf);
    if (spawn() == 0) {
        pin(1);
        pthread_t t;
        if (thread && pthread_create(&t, 0, idle, 0) != 0) die("pthread_create");
        child_start();
        for (;;) full_write(wr, buf, XFER);
    }
    pin(0);
    parent_start(1);
    TIMED(ns, full_read(rd, buf, XFER));
    return (double)done_ops * XFER / 1e6 / (took_ns / 1e9);
}

/* lat_ctx with a zero-size working set: `procs` processes in a ring of
 * pipes pass a token around; ns per hand-off. */
static double context_switches(int procs, double ns) {
    int ring[MAXPROCS][2];
    for (int i = 0; i < procs; i++)
        if (pipe(ring[i]) != 0) die("pipe");
    for (int i = 1; i < procs; i++) {
        if (spawn() == 0) {
            pin(i);
            child_start();
            int rd = ring[i][0], wr = ring[(i + 1) % procs][1];
            char c;
            for (;;) {
                full_read(rd, &c, 1);
                full_write(wr, &c, 1);
            }
        }
    }
    pin(0);
    parent_start(procs - 1);
    int rd = ring[0][0], wr = ring[1 % procs][1];
    char c = 't';
    TIMED(ns, full_write(wr, &c, 1); full_read(rd, &c, 1));
    return took_ns / ((double)done_ops * procs);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TEST cross|same COUNT [PROCS]\n", argv[0]);
        return 2;
    }
    const char *test = argv[1];
    same_core = strcmp(argv[2], "same") == 0;
    long count = atol(argv[3]);
    double ns = count * 1e6;
    int procs = argc > 4 ? atoi(argv[4]) : 2;
    if (procs < 2 || procs > MAXPROCS) procs = 2;

    if (strcmp(test, "write_file") == 0) {
        char path[] = "/tmp/shmpipe-unmodified-XXXXXX";
        int fd = mkstemp(path);
        if (fd < 0) die("mkstemp");
        unlink(path);
        for (long i = 0; i < count; i++)
            if (write(fd, "w", 1) != 1) die("write");
        close(fd);
        puts("0");
        return 0;
    }

    signal(SIGCHLD, on_chld);
    signal(SIGTERM, on_term);
    if (pipe(ready) != 0 || pipe(go) != 0) die("pipe");

    double r;
    int p[2], q[2];
    if (strcmp(test, "lat_pipe") == 0) {
        if (pipe(p) != 0 || pipe(q) != 0) die("pipe");
        r = round_trips(q[0], p[1], p[0], q[1], ns);
    } else if (strcmp(test, "lat_unix") == 0) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, p) != 0) die("socketpair");
        r = round_trips(p[0], p[0], p[1], p[1], ns);
    } else if (strcmp(test, "bw_pipe") == 0 || strcmp(test, "bw_pipe_thread") == 0) {
        if (pipe(p) != 0) die("pipe");
        r = bandwidth(p[0], p[1], ns, strcmp(test, "bw_pipe_thread") == 0);
    } else if (strcmp(test, "bw_unix") == 0) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, p) != 0) die("socketpair");
        r = bandwidth(p[0], p[1], ns, 0);
    } else if (strcmp(test, "lat_ctx") == 0) {
        r = context_switches(procs, ns);
    } else {
        fprintf(stderr, "unknown test %s\n", test);
        return 2;
    }
    kill_children();
    printf("%.3f\n", r);
    return 0;
}
