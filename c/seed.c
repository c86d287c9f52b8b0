/* The seeds' experiment (shared/seeds 000 and 001), on shmpipe.
 *
 * One process streams a counter, one 8-byte value per write, to another,
 * which checks every value. Once through shmpipe (shmpipe_write and
 * shmpipe_read), once through a kernel pipe, each without and then with
 * CPU affinity (the two processes pinned to two different CPUs), and the
 * seeds' lines are printed: the average time per item in seconds, and how
 * many times faster shmpipe is.
 *
 *   cc -O2 seed.c $(pkg-config --cflags --libs shmpipe) -o seed
 *   ./seed [ITEMS]        (default 10000000)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shmpipe.h>

/* One side of a transport: shmpipe or a kernel pipe. */
struct link {
    shmpipe_reader *r;
    shmpipe_writer *w;
    int fds[2];
};

static void die(const char *what, long err) {
    fprintf(stderr, "seed: %s: %s\n", what, strerror((int)(err < 0 ? -err : err)));
    exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        die("sched_setaffinity", errno);
}

/* Reads exactly one value (a stream may split it; here it never does). */
static int get_shm(struct link *l, size_t *v) {
    char *p = (char *)v;
    size_t got = 0;
    while (got < sizeof *v) {
        ssize_t n = shmpipe_read(l->r, p + got, sizeof *v - got);
        if (n <= 0)
            return n == 0 ? -EPIPE : (int)n;
        got += (size_t)n;
    }
    return 0;
}

static int get_kernel(struct link *l, size_t *v) {
    char *p = (char *)v;
    size_t got = 0;
    while (got < sizeof *v) {
        ssize_t n = read(l->fds[0], p + got, sizeof *v - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n == 0 ? -EPIPE : -errno;
        got += (size_t)n;
    }
    return 0;
}

static int put_shm(struct link *l, size_t v) {
    ssize_t n = shmpipe_write(l->w, &v, sizeof v);
    return n < 0 ? (int)n : 0;
}

static int put_kernel(struct link *l, size_t v) {
    ssize_t n;
    do
        n = write(l->fds[1], &v, sizeof v);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof v ? 0 : -EIO;
}

/* Average seconds per item over `items`, or exits on a wrong value. */
static double run(int shm, int affinity, size_t items) {
    struct link l = {0};
    int rc = shm ? shmpipe_pipe(&l.r, &l.w) : (pipe(l.fds) ? -errno : 0);
    if (rc != 0)
        die("creating the pipe", rc);
    pid_t child = fork();
    if (child < 0)
        die("fork", errno);
    if (child == 0) {
        /* The writer: closes the reading end, streams 0..items. */
        if (affinity)
            pin(1);
        if (shm)
            shmpipe_reader_close(l.r);
        else
            close(l.fds[0]);
        for (size_t i = 0; i <= items; i++) {
            rc = shm ? put_shm(&l, i) : put_kernel(&l, i);
            if (rc != 0)
                die("write", rc);
        }
        _exit(0);
    }
    if (affinity)
        pin(0);
    if (shm)
        shmpipe_writer_close(l.w);
    else
        close(l.fds[1]);
    /* The clock starts once the first value is in: both sides run. */
    size_t v;
    rc = shm ? get_shm(&l, &v) : get_kernel(&l, &v);
    if (rc != 0 || v != 0)
        die("first read", rc ? rc : EPROTO);
    double start = now();
    for (size_t i = 1; i <= items; i++) {
        rc = shm ? get_shm(&l, &v) : get_kernel(&l, &v);
        if (rc != 0)
            die("read", rc);
        if (v != i) {
            fprintf(stderr, "seed: consistency check failed: got %zu, expected %zu\n", v, i);
            kill(child, SIGKILL);
            exit(1);
        }
    }
    double per = (now() - start) / (double)items;
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("the writer failed", EIO);
    if (shm)
        shmpipe_reader_close(l.r);
    else
        close(l.fds[0]);
    if (affinity) {
        cpu_set_t all;
        CPU_ZERO(&all);
        for (int c = 0; c < CPU_SETSIZE; c++)
            CPU_SET(c, &all);
        sched_setaffinity(0, sizeof all, &all);
    }
    return per;
}

int main(int argc, char **argv) {
    size_t items = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    if (items == 0) {
        fprintf(stderr, "usage: seed [ITEMS]\n");
        return 2;
    }
    int pinnable = sysconf(_SC_NPROCESSORS_ONLN) >= 2;
    double shm = run(1, 0, items), kernel = run(0, 0, items);
    printf("SHMEM Time:  %.18f\n", shm);
    printf("KERNEL Time: %.18f\n", kernel);
    printf("RATIO: shmpipe %.1fx faster\n", kernel / shm);
    if (pinnable) {
        double ashm = run(1, 1, items), akernel = run(0, 1, items);
        printf("AFFINITY SHMEM:  %.18f\n", ashm);
        printf("AFFINITY KERNEL: %.18f\n", akernel);
        printf("AFFINITY RATIO: shmpipe %.1fx faster\n", akernel / ashm);
    } else {
        printf("AFFINITY: skipped (one CPU)\n");
    }
    return 0;
}
