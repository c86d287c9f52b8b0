/* Stage 2b's rings for Unix stream socket pairs (docs/run.md, "Socket
 * pairs on rings"): run natively and under `shmpipe run`, the output must
 * be the same. Each case prints what it saw; a byte lost, doubled or out
 * of order changes a checksum, and a case that waits for ever is the
 * watchdog's. The parent runs on the first usable CPU, each child on the
 * last, so that on two CPUs the bytes go through rings. Built with
 * _FORTIFY_SOURCE, so `recv` into a sized buffer is glibc's `__recv_chk`. */
#undef _FORTIFY_SOURCE
#define _FORTIFY_SOURCE 2
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int first_cpu, last_cpu;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static void find_cpus(void) {
    cpu_set_t s;
    sched_getaffinity(0, sizeof s, &s);
    first_cpu = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &s)) {
            if (first_cpu < 0) first_cpu = c;
            last_cpu = c;
        }
}

static void full_write(int fd, const char *b, size_t n) {
    while (n > 0) {
        ssize_t r = write(fd, b, n);
        if (r <= 0) { perror("write"); exit(3); }
        b += r; n -= (size_t)r;
    }
}

static size_t full_read(int fd, char *b, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0) { perror("read"); exit(4); }
        if (r == 0) break;
        got += (size_t)r;
    }
    return got;
}

/* A message of `n` bytes that depends on `seed`. */
static void fill(char *b, size_t n, unsigned seed) {
    for (size_t k = 0; k < n; k++) b[k] = (char)('A' + (seed + k * 7) % 53);
}

static unsigned long sum(const char *b, size_t n, unsigned long h) {
    for (size_t k = 0; k < n; k++) h = h * 131 + (unsigned char)b[k];
    return h;
}

static int status_of(pid_t c) {
    int st;
    waitpid(c, &st, 0);
    return WIFSIGNALED(st) ? 1000 + WTERMSIG(st) : WEXITSTATUS(st);
}

static char buf[256 * 1024], back[256 * 1024];

/* lmbench's way: both processes keep both ends; messages of 1 to 6000
 * bytes there and back, the child echoing each. */
static void both_ends_kept(void) {
    int s[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s)) exit(1);
    pid_t c = fork();
    if (c == 0) {
        pin(last_cpu);
        for (;;) {
            unsigned len;
            if (full_read(s[1], (char *)&len, 4) < 4) _exit(0);
            if (len == 0) _exit(0);
            full_read(s[1], buf, len);
            full_write(s[1], buf, len);
        }
    }
    pin(first_cpu);
    unsigned long h = 0;
    for (unsigned i = 0; i < 2000; i++) {
        unsigned len = 1 + (i * 7919) % 6000;
        fill(buf, len, i);
        full_write(s[0], (char *)&len, 4);
        full_write(s[0], buf, len);
        if (full_read(s[0], back, len) != len || memcmp(buf, back, len)) {
            printf("both ends kept: message %u came back wrong\n", i);
            exit(5);
        }
        h = sum(back, len, h);
    }
    unsigned zero = 0;
    full_write(s[0], (char *)&zero, 4);
    printf("both ends kept: %lx, child %d\n", h, status_of(c));
    close(s[0]);
    close(s[1]);
}

/* 120 KiB written in 4 KiB writes with nobody reading (more than a
 * ring, less than the kernel socket holds, about 180 KiB so): the writes
 * end, then the child reads them all. */
static void more_than_a_ring_unread(void) {
    int s[2], go[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s) || pipe(go)) exit(1);
    pid_t c = fork();
    if (c == 0) {
        pin(last_cpu);
        char g;
        if (read(go[0], &g, 1) != 1) _exit(8);
        size_t n = full_read(s[1], back, 120 * 1024);
        printf("unread: child read %zu, %lx\n", n, sum(back, n, 0));
        fflush(stdout);
        _exit(0);
    }
    pin(first_cpu);
    for (unsigned k = 0; k < 30; k++) {
        fill(buf + k * 4096, 4096, k);
        full_write(s[0], buf + k * 4096, 4096);
    }
    printf("unread: 120 KiB written\n");
    fflush(stdout);
    full_write(go[1], "g", 1);
    printf("unread: child %d\n", status_of(c));
    close(s[0]); close(s[1]); close(go[0]); close(go[1]);
}

/* The child closes its copy of the parent's end half-way (the rings'
 * rule: a process holding one end only spills the other's way first),
 * and both go on; then each side's EOF once the other end is gone. */
static void child_closes_one_end(void) {
    int s[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s)) exit(1);
    pid_t c = fork();
    if (c == 0) {
        pin(last_cpu);
        unsigned long h = 0;
        for (unsigned i = 0; i < 400; i++) {
            unsigned len = 1 + (i * 31) % 3000;
            if (i == 200) close(s[0]);
            if (full_read(s[1], back, len) != len) _exit(6);
            h = sum(back, len, h);
            full_write(s[1], back, len);
        }
        char e;
        ssize_t r = read(s[1], &e, 1);
        printf("one end closed: child %lx, then read %zd\n", h, r);
        fflush(stdout);
        _exit(0);
    }
    pin(first_cpu);
    unsigned long h = 0;
    for (unsigned i = 0; i < 400; i++) {
        unsigned len = 1 + (i * 31) % 3000;
        fill(buf, len, i);
        full_write(s[0], buf, len);
        if (full_read(s[0], back, len) != len || memcmp(buf, back, len)) {
            printf("one end closed: message %u came back wrong\n", i);
            exit(5);
        }
        h = sum(back, len, h);
    }
    close(s[1]); /* now only the child holds that end */
    shutdown(s[0], SHUT_WR);
    char e;
    printf("one end closed: parent %lx, child %d, then read %zd\n", h, status_of(c),
           read(s[0], &e, 1));
    close(s[0]);
}

/* Bytes in a ring, then `shutdown`: the reader gets them, then EOF; a
 * write on the shut end fails with EPIPE (SIGPIPE ignored). */
static void shutdown_after_ring_bytes(void) {
    int s[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s)) exit(1);
    signal(SIGPIPE, SIG_IGN);
    pid_t c = fork();
    if (c == 0) {
        pin(last_cpu);
        size_t n = full_read(s[1], back, sizeof back);
        printf("shutdown: child read %zu, %lx\n", n, sum(back, n, 0));
        fflush(stdout);
        _exit(0);
    }
    pin(first_cpu);
    fill(buf, 40000, 3);
    full_write(s[0], buf, 40000);
    shutdown(s[0], SHUT_WR);
    errno = 0;
    ssize_t r = write(s[0], "x", 1);
    int e = errno;
    close(s[1]);
    printf("shutdown: write after it %zd (%s), child %d\n", r, e == EPIPE ? "EPIPE" : "other",
           status_of(c));
    close(s[0]);
    signal(SIGPIPE, SIG_DFL);
}

/* A `vfork` child moves its end onto stdin and closes the rest, then
 * runs `head`, which has no library: the bytes the parent wrote before
 * must reach it, in order. Out of line, and last: the child's calls use
 * the stack of the frame it shares with its parent. */
__attribute__((noinline)) static void vfork_exec_reads_ring_bytes(void) {
    int s[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s)) exit(1);
    const char msg[] = "vfork, dup2 onto stdin, exec head\n";
    full_write(s[0], msg, sizeof msg - 1);
    fflush(stdout);
    pid_t c = vfork();
    if (c == 0) {
        dup2(s[1], 0);
        close(s[0]);
        close(s[1]);
        execl("/bin/sh", "sh", "-c", "exec head -c 34", (char *)0);
        _exit(9);
    }
    printf("vfork child %d\n", status_of(c));
    close(s[0]);
    close(s[1]);
}

/* Calls the rings do not carry, on an end whose other end's bytes may sit
 * in a ring (a reviewer found each reaching the kernel socket unseen):
 * a fortified `recv` (`__recv_chk`), `recvmmsg`, `sendmmsg` then `write`,
 * and a `close_range` that fails (an unknown flag) and so closes nothing. */
static void calls_the_rings_do_not_carry(void) {
    const char *name[] = {"__recv_chk", "recvmmsg", "sendmmsg", "close_range"};
    for (int mode = 0; mode < 4; mode++) {
        int s[2], go[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, s) || pipe(go)) exit(1);
        pid_t c = fork();
        if (c == 0) {
            pin(last_cpu);
            if (mode == 2) {
                struct iovec v = {"first ", 6};
                struct mmsghdr m;
                memset(&m, 0, sizeof m);
                m.msg_hdr.msg_iov = &v;
                m.msg_hdr.msg_iovlen = 1;
                if (sendmmsg(s[1], &m, 1, 0) != 1) _exit(7);
                full_write(s[1], "second", 6);
            } else {
                full_write(s[1], "hello", 5);
            }
            char g;
            if (read(go[0], &g, 1) != 1) _exit(8);
            _exit(0);
        }
        pin(first_cpu);
        char got[64];
        ssize_t r = 0;
        volatile size_t room = sizeof got;
        if (mode == 0) {
            r = recv(s[0], got, room, 0);
        } else if (mode == 1) {
            struct iovec v = {got, sizeof got};
            struct mmsghdr m;
            memset(&m, 0, sizeof m);
            m.msg_hdr.msg_iov = &v;
            m.msg_hdr.msg_iovlen = 1;
            r = recvmmsg(s[0], &m, 1, 0, NULL) == 1 ? (ssize_t)m.msg_len : -1;
        } else if (mode == 2) {
            r = (ssize_t)full_read(s[0], got, 12);
        } else {
            errno = 0;
            int k = close_range((unsigned)s[0], (unsigned)s[0], 0x80);
            printf("close_range: %d (%s)\n", k, errno == EINVAL ? "EINVAL" : "other");
            r = read(s[0], got, 5);
        }
        printf("%s: %zd bytes: %.*s\n", name[mode], r, (int)(r > 0 ? r : 0), got);
        full_write(go[1], "g", 1);
        status_of(c);
        close(s[0]); close(s[1]); close(go[0]); close(go[1]);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    find_cpus();
    both_ends_kept();
    more_than_a_ring_unread();
    child_closes_one_end();
    shutdown_after_ring_bytes();
    calls_the_rings_do_not_carry();
    vfork_exec_reads_ring_bytes();
    return 0;
}
