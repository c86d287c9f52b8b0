/* Reads and writes whose buffers are on the main thread's stack (where
 * the preload library copies without asking the kernel), before and after
 * the program makes a page of that stack read-only or inaccessible with
 * mprotect: the kernel answers those with EFAULT, and so must a hand-over.
 * A parent on one CPU reads what a child on another writes; the output
 * must be the same natively and under `shmpipe run`. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 500
#define FAULTS 100

static void pin_to(int which) {
    cpu_set_t all, one;
    if (sched_getaffinity(0, sizeof all, &all) != 0) return;
    int cpus[CPU_SETSIZE], n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) cpus[n++] = c;
    if (n < 2) return;
    CPU_ZERO(&one);
    CPU_SET(which ? cpus[n - 1] : cpus[0], &one);
    sched_setaffinity(0, sizeof one, &one);
}

static void nap_us(long us) {
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

/* Reads exactly 4 bytes into `buf`, or returns the failing read's result
 * with errno. */
static ssize_t read4(int fd, char *buf) {
    size_t got = 0;
    while (got < 4) {
        ssize_t r = read(fd, buf + got, 4 - got);
        if (r <= 0) return r;
        got += (size_t)r;
    }
    return 4;
}

static char *page_in(char *area) {
    return (char *)(((uintptr_t)area + 4095) & ~(uintptr_t)4095);
}

/* The child: for each command byte, writes 4 bytes from its stack; for
 * 'f' first tries to write them from a page it made inaccessible. */
static int child(int cmd, int data) {
    char area[3 * 4096];
    char *page = page_in(area);
    int faults = 0;
    pin_to(1);
    for (int i = 0;; i++) {
        char c;
        if (read(cmd, &c, 1) != 1) break;
        char m[5];
        snprintf(m, sizeof m, "%04d", i % 10000);
        if (i % 8 == 7) nap_us(20); /* the reader often already waits */
        if (c == 'f') {
            memcpy(page, m, 4);
            if (mprotect(page, 4096, PROT_NONE) != 0) die("mprotect");
            if (write(data, page, 4) == -1 && errno == EFAULT) faults++;
            if (mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0) die("mprotect");
        }
        if (write(data, m, 4) != 4) die("write");
    }
    return faults == FAULTS ? 0 : 1;
}

int main(void) {
    char area[3 * 4096];
    char *page = page_in(area);
    int cmd[2], data[2];
    if (pipe(cmd) != 0 || pipe(data) != 0) die("pipe");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        close(cmd[1]);
        close(data[0]);
        _exit(child(cmd[0], data[1]));
    }
    close(cmd[0]);
    close(data[1]);
    pin_to(0);
    int i = 0, good = 0, faults = 0, after = 0;
    char got[4], want[5];
    /* 1: plain round trips, both buffers on the stack. */
    for (int k = 0; k < ROUNDS; k++, i++) {
        if (write(cmd[1], "n", 1) != 1) die("write");
        snprintf(want, sizeof want, "%04d", i % 10000);
        good += read4(data[0], got) == 4 && memcmp(got, want, 4) == 0;
    }
    /* 2: a read into a read-only page of this stack fails with EFAULT and
     * loses nothing: the same bytes arrive once the page is writable. */
    for (int k = 0; k < FAULTS; k++, i++) {
        if (mprotect(page, 4096, PROT_READ) != 0) die("mprotect");
        if (write(cmd[1], "n", 1) != 1) die("write");
        if (read(data[0], page, 4) == -1 && errno == EFAULT) faults++;
        if (mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0) die("mprotect");
        snprintf(want, sizeof want, "%04d", i % 10000);
        good += read4(data[0], page) == 4 && memcmp(page, want, 4) == 0;
    }
    /* 3: the child's write from an inaccessible page fails, nothing of it
     * arrives; 4: plain round trips again. */
    for (int k = 0; k < FAULTS + ROUNDS; k++, i++) {
        if (write(cmd[1], k < FAULTS ? "f" : "n", 1) != 1) die("write");
        snprintf(want, sizeof want, "%04d", i % 10000);
        after += read4(data[0], got) == 4 && memcmp(got, want, 4) == 0;
    }
    close(cmd[1]);
    int status;
    if (waitpid(pid, &status, 0) != pid) die("waitpid");
    printf("round trips %d of %d, read-only page: EFAULT %d of %d, "
           "no-access page: child's EFAULTs %s, after %d of %d\n",
           good, ROUNDS + FAULTS, faults, FAULTS,
           WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "all" : "not all",
           after, FAULTS + ROUNDS);
    return 0;
}
