/* A 1-byte round trip between a parent and its forked child over two
 * pipes, with plain read and write (lmbench's lat_pipe shape, written
 * afresh; libc only, no shmpipe header). For measuring `shmpipe run`'s
 * hand-over (docs/run.md, stage 2a) by hand:
 *
 *   cc -O2 -o /tmp/pingpong crates/bench/c/pingpong.c
 *   /tmp/pingpong same 20000                 # natively
 *   SHMPIPE_RUN_RINGS=1 target/release/shmpipe run -- /tmp/pingpong same 20000
 *
 * PLACEMENT: same (both processes pinned to CPU 0 after the fork, as
 * lmbench's harness pins), cross (parent on CPU 0, child on CPU 1), free
 * (left to the scheduler). Prints nanoseconds per round trip. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void pin(const char *placement, int cpu) {
    if (strcmp(placement, "free") == 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(strcmp(placement, "same") == 0 ? 0 : cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("sched_setaffinity");
        exit(2);
    }
}

static void one(int fd, int out) {
    char c;
    if (read(fd, &c, 1) != 1 || write(out, &c, 1) != 1) exit(3);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s same|cross|free ROUND_TRIPS\n", argv[0]);
        return 2;
    }
    long n = atol(argv[2]);
    int there[2], back[2];
    if (pipe(there) != 0 || pipe(back) != 0) return 2;
    pid_t pid = fork();
    if (pid == 0) {
        pin(argv[1], 1);
        close(there[1]);
        close(back[0]);
        for (;;) one(there[0], back[1]);
    }
    pin(argv[1], 0);
    close(there[0]);
    close(back[1]);
    char c = 'x';
    for (long i = 0; i < n / 10 + 1; i++) {
        if (write(there[1], &c, 1) != 1 || read(back[0], &c, 1) != 1) return 3;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        if (write(there[1], &c, 1) != 1 || read(back[0], &c, 1) != 1) return 3;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    close(there[1]);
    waitpid(pid, NULL, 0);
    printf("%.0f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
}
