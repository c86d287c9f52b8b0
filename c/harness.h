/* The C tests' harness, shared by c/test_capi.c, c/test_handles.c and
 * c/test_epipe.c: checks that fail the test with the line that failed,
 * and a runner that runs each test in its own process group under a
 * watchdog that kills the group if it hangs, printing
 * "test c::NAME ... ok" lines and then "N passed, M failed". */
#ifndef SHMPIPE_TEST_HARNESS_H
#define SHMPIPE_TEST_HARNESS_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* How long one test may take before the watchdog kills it. */
#define TEST_LIMIT_SECONDS 60

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

/* Waits for a child of the test and returns its exit code (128+signal). */
static inline int reap(pid_t pid) {
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct test {
    const char *name;
    int (*run)(void);
};

/* Runs one test in its own process group; kills the group if the test
 * outlives the limit. Returns 0 if it passed. */
static inline int run_one(const struct test *t) {
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

/* Runs the `n` tests whose name contains `filter` (all if NULL), named
 * "c::PREFIX" + name in the output; returns the process's exit code. */
static inline int run_tests(const struct test *tests, size_t n, const char *prefix,
                            const char *filter) {
    int passed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (filter && !strstr(tests[i].name, filter))
            continue;
        int bad = run_one(&tests[i]);
        printf("test c::%s%s ... %s\n", prefix, tests[i].name, bad ? "FAILED" : "ok");
        bad ? failed++ : passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}

#endif
