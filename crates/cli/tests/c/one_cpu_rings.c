/* Stage 2b on one CPU (docs/run.md, "One CPU"): every process pinned to
 * the first usable CPU after it starts, so that each waiting side's peer
 * shares its CPU and waits by yielding to it. Run natively and under
 * `shmpipe run`, the output must be the same: round trips of one byte,
 * bulk transfers of mixed sizes (more than a ring at a time, so that
 * writers wait for room and leads bring KERNEL pipes back), for pipes and
 * socket pairs, and a token ring of 8 processes. A byte lost, doubled or
 * out of order changes a checksum; a wait that never ends is the
 * watchdog's. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int first_cpu;

static void pin(void) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(first_cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static void find_cpu(void) {
    cpu_set_t s;
    sched_getaffinity(0, sizeof s, &s);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &s)) {
            first_cpu = c;
            return;
        }
}

static void full_write(int fd, const unsigned char *b, size_t n) {
    while (n > 0) {
        ssize_t r = write(fd, b, n);
        if (r <= 0) { perror("write"); exit(3); }
        b += r; n -= (size_t)r;
    }
}

/* The same pseudo-random sizes in every process and run. */
static uint32_t next(uint32_t *x) {
    *x ^= *x << 13; *x ^= *x >> 17; *x ^= *x << 5;
    return *x;
}

static int wait_all(void) {
    int status, bad = 0;
    while (wait(&status) > 0)
        bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return bad;
}

/* [0] and [1] of a pipe or of a socket pair: read end, write end. */
static void channel(int socket, int fds[2]) {
    if (socket ? socketpair(AF_UNIX, SOCK_STREAM, 0, fds) : pipe(fds)) {
        perror("channel");
        exit(2);
    }
}

static void round_trips(int socket, int n) {
    int there[2], back[2];
    channel(socket, there);
    channel(socket, back);
    if (fork() == 0) {
        pin();
        close(there[1]); close(back[0]);
        unsigned char c;
        while (read(there[0], &c, 1) == 1) full_write(back[1], &c, 1);
        _exit(0);
    }
    pin();
    close(there[0]); close(back[1]);
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)(i * 7), got;
        full_write(there[1], &c, 1);
        if (read(back[0], &got, 1) != 1) { perror("read"); exit(4); }
        sum = sum * 31 + got;
    }
    close(there[1]);
    unsigned char c;
    printf("%s round trips: %d, sum %lu, then %zd, children %d\n", socket ? "socket" : "pipe", n,
           sum, read(back[0], &c, 1), wait_all());
    close(back[0]);
}

static void bulk(int socket, size_t total) {
    static unsigned char buf[200 * 1024];
    int fds[2];
    channel(socket, fds);
    if (fork() == 0) {
        pin();
        close(fds[0]);
        uint32_t x = 7;
        size_t sent = 0;
        while (sent < total) {
            size_t k = 1 + next(&x) % sizeof buf;
            if (k > total - sent) k = total - sent;
            for (size_t i = 0; i < k; i++) buf[i] = (unsigned char)(sent + i);
            full_write(fds[1], buf, k);
            sent += k;
        }
        _exit(0);
    }
    pin();
    close(fds[1]);
    uint32_t x = 11;
    size_t got = 0, wrong = 0;
    for (;;) {
        size_t k = 1 + next(&x) % sizeof buf;
        ssize_t r = read(fds[0], buf, k);
        if (r < 0) { perror("read"); exit(4); }
        if (r == 0) break;
        for (ssize_t i = 0; i < r; i++) wrong += buf[i] != (unsigned char)(got + (size_t)i);
        got += (size_t)r;
    }
    printf("%s bulk: %zu bytes, %zu out of place, children %d\n", socket ? "socket" : "pipe", got,
           wrong, wait_all());
    close(fds[0]);
}

static void token_ring(int procs, int laps) {
    int p[8][2];
    for (int i = 0; i < procs; i++) channel(0, p[i]);
    for (int i = 1; i < procs; i++)
        if (fork() == 0) {
            pin();
            for (int j = 0; j < procs; j++) {
                if (j != i - 1) close(p[j][0]);
                if (j != i) close(p[j][1]);
            }
            unsigned char t;
            while (read(p[i - 1][0], &t, 1) == 1) {
                t++;
                full_write(p[i][1], &t, 1);
            }
            close(p[i][1]);
            _exit(0);
        }
    pin();
    for (int i = 1; i < procs; i++) { close(p[i - 1][0]); close(p[i][1]); }
    unsigned long hops = 0;
    unsigned char t = 0;
    for (int lap = 0; lap < laps; lap++) {
        full_write(p[0][1], &t, 1);
        if (read(p[procs - 1][0], &t, 1) != 1) { perror("read"); exit(4); }
        hops += t;
    }
    close(p[0][1]);
    printf("token ring of %d: %d laps, %lu, then %zd, children %d\n", procs, laps, hops,
           read(p[procs - 1][0], &t, 1), wait_all());
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    find_cpu();
    for (int socket = 0; socket <= 1; socket++) {
        round_trips(socket, 20000);
        bulk(socket, 16u << 20);
    }
    token_ring(8, 2000);
    return 0;
}
