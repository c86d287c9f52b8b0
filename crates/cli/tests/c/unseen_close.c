/* A socket-pair end closed where no wrapper sees it (glibc's `fclose` of a
 * stream `fdopen` made on it), its number then taken by a socket the
 * library never saw made (a `socketpair` made by the `syscall`
 * instruction itself, which no wrapper sees, not even the library's
 * `syscall`): what the program writes there must reach that new socket,
 * never the old pair's other end, whose reader (the child) still waits.
 * With the argument "raw", the end is closed by `syscall(SYS_close)`
 * (which the library's `syscall` wrapper sees) instead.
 *
 * The parent and child pass 2000 bytes back and forth on the old pair
 * first (so that the parent's end gets its notes: `socket_options` in the
 * preload crate), then the parent writes 100 one-byte messages to the
 * new socket (fewer than its buffer holds) and counts what arrived at its
 * other end. Prints that count (100) and what the child got after the round trips (0 bytes). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

/* socketpair(2) by the instruction, as a static binary or Go's runtime
 * makes it: the library's wrappers, its `syscall` among them, never see it. */
static long unseen_socketpair(int fds[2]) {
#if defined(__x86_64__)
    long r;
    register long r10 __asm__("r10") = (long)fds;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "0"((long)SYS_socketpair), "D"((long)AF_UNIX), "S"((long)SOCK_STREAM),
                       "d"(0L), "r"(r10)
                     : "rcx", "r11", "memory");
    if (r < 0) {
        errno = (int)-r; /* for die's perror, as the C library's syscall sets it */
        return -1;
    }
    return r;
#else
    /* Rings run on x86-64 only: elsewhere nothing is carried to go astray. */
    return syscall(SYS_socketpair, AF_UNIX, SOCK_STREAM, 0, fds);
#endif
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

int main(int argc, char **argv) {
    /* With "raw", the end is closed by `syscall(SYS_close)` instead. */
    int raw = argc > 1 && argv[1][0] == 'r';
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int sv[2], report[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || pipe(report) != 0) die("socketpair");
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        pin(cpus > 1 ? 1 : 0);
        close(sv[0]);
        close(report[0]);
        char c;
        for (int i = 0; i < 2000; i++) {
            if (read(sv[1], &c, 1) != 1 || write(sv[1], &c, 1) != 1) _exit(3);
        }
        /* Every byte after the round trips is one that went astray. */
        long astray = 0;
        while (read(sv[1], &c, 1) == 1) {
            astray++;
            if (write(report[1], &astray, sizeof astray) != sizeof astray) _exit(4);
        }
        _exit(0);
    }
    pin(0);
    close(report[1]);
    char c = 'p';
    for (int i = 0; i < 2000; i++) {
        if (write(sv[0], &c, 1) != 1 || read(sv[0], &c, 1) != 1) die("round trip");
    }
    int old = sv[0];
    if (raw) {
        if (syscall(SYS_close, old) != 0) die("raw close");
    } else {
        FILE *f = fdopen(old, "r+");
        if (f == NULL || fclose(f) != 0) die("fdopen");
    }
    int fresh[2];
    if (unseen_socketpair(fresh) != 0) die("unseen socketpair");
    if (fresh[0] != old) {
        fprintf(stderr, "the new socket is %d, not %d\n", fresh[0], old);
        return 2;
    }
    c = 'x';
    for (int i = 0; i < 100; i++) {
        if (write(fresh[0], &c, 1) != 1) die("write");
    }
    int arrived = 0;
    if (ioctl(fresh[1], FIONREAD, &arrived) != 0) die("FIONREAD");
    printf("arrived at the new socket: %d\n", arrived);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    long astray = 0, last;
    while (read(report[0], &last, sizeof last) == sizeof last) astray = last;
    printf("astray at the old pair's other end: %ld\n", astray);
    return 0;
}
