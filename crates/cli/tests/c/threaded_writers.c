/* A pipe whose writer is a process with a second thread, for
 * crates/cli/tests/run.rs: run natively and under `shmpipe run` with
 * SHMPIPE_RUN_RINGS=2, the output must be the same. Such a write cannot
 * hold signals while it waits for room (the kernel would send the
 * process's to the other thread), so it spins for room with signals left
 * alone, and with none by the end of the spin the ring's bytes and the
 * rest go to the kernel, until the reader has caught up.
 *
 *   1. The reader sleeps 100 ms while the writer writes 1 MiB at once:
 *      the ring fills, the spin finds no room, the rest waits in the
 *      kernel. Every byte arrives, in order.
 *   2. Then 50 rounds of one 64 KiB write, each answered by a byte on a
 *      second pipe once the reader has it all: the pipe has come back
 *      from the kernel, so on two CPUs some of these go through the ring
 *      (run.rs checks for more ring bytes than the 64 KiB of step 1).
 *   3. 64 MiB in 64 KiB writes to a reader that reads at once: in order.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { BIG = 1 << 20, ROUND = 64 << 10, ROUNDS = 50, STREAM = 64 << 20 };

static unsigned char byte_at(size_t i) { return (unsigned char)(i * 7 + i / 251); }

static void *idle(void *x) { (void)x; for (;;) pause(); return 0; }

/* Reads exactly n bytes from fd, checking each against byte_at from at. */
static int read_checked(int fd, size_t at, size_t n) {
    static unsigned char buf[1 << 16];
    int ok = 1;
    while (n > 0) {
        ssize_t r = read(fd, buf, n < sizeof buf ? n : sizeof buf);
        if (r <= 0) return 0;
        for (ssize_t i = 0; i < r; i++) ok &= buf[i] == byte_at(at + (size_t)i);
        at += (size_t)r;
        n -= (size_t)r;
    }
    return ok;
}

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return 0;
        p += w;
        n -= (size_t)w;
    }
    return 1;
}

int main(void) {
    static unsigned char out[STREAM];
    for (size_t i = 0; i < sizeof out; i++) out[i] = byte_at(i);
    int p[2], ack[2];
    if (pipe(p) || pipe(ack)) return 1;
    pid_t c = fork();
    if (c == 0) {
        close(p[1]);
        close(ack[0]);
        int ok = 1;
        usleep(100000);
        ok &= read_checked(p[0], 0, BIG);
        for (int r = 0; r < ROUNDS; r++) {
            ok &= read_checked(p[0], (size_t)r * ROUND, ROUND);
            if (write(ack[1], "k", 1) != 1) ok = 0;
        }
        ok &= read_checked(p[0], 0, STREAM);
        _exit(ok ? 0 : 3);
    }
    close(p[0]);
    close(ack[1]);
    pthread_t t;
    if (pthread_create(&t, 0, idle, 0)) return 1;
    int wrote = write_all(p[1], out, BIG);
    printf("a stalled reader: the 1 MiB write done %s\n", wrote ? "yes" : "no");
    int acks = 0;
    for (int r = 0; r < ROUNDS; r++) {
        char k;
        wrote &= write_all(p[1], out + (size_t)r * ROUND, ROUND);
        acks += read(ack[0], &k, 1) == 1;
    }
    printf("rounds answered: %d of %d\n", acks, ROUNDS);
    for (size_t at = 0; at < STREAM; at += ROUND) wrote &= write_all(p[1], out + at, ROUND);
    close(p[1]);
    int st;
    waitpid(c, &st, 0);
    printf("every write done %s, every byte came in order %s\n", wrote ? "yes" : "no",
           WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "yes" : "no");
    return 0;
}
