/* Signals during long pipe writes, for crates/cli/tests/run.rs: run
 * natively and under `shmpipe run` with rings on, the output must be the
 * same. Calls only libc. A kernel `write` of more than PIPE_BUF bytes
 * that has to wait for room ends with the count so far when a signal
 * with a handler comes, SA_RESTART or not (pipe(7), signal(7)).
 *
 *   long_writes stalled   the reader reads nothing until the writer's
 *                         timer (SA_RESTART) has fired: the writer's 1 MiB
 *                         write returns short, then the reader takes
 *                         exactly the bytes it counted.
 *   long_writes eintr     as stalled, with a handler without SA_RESTART,
 *                         and then a second write, which can put nothing:
 *                         it fails with EINTR.
 *   long_writes spill     the reader signals the stalled writer and at once
 *                         gives its end to the kernel (F_SETPIPE_SZ, a
 *                         call the ring does not carry), then waits for
 *                         the writer's count: the write returns short.
 *   long_writes errno     as spill, the signal 100 ms after the spill, and
 *                         a handler that sets errno: the short write leaves
 *                         errno as the handler left it.
 *   long_writes threaded  a second thread idles with signals unblocked
 *                         while the main thread's write waits: the timer's
 *                         signal still goes to the writing thread and ends
 *                         the write short.
 *   long_writes slow      the reader takes 4 KiB a millisecond while a
 *                         timer interrupts the writer every 3 ms: its
 *                         4 MiB writes return short (and it goes on from
 *                         there); every byte arrives, in order.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t ticks;
static void on_tick(int sig) { (void)sig; ticks++; }

static void timer(long us) {
    struct itimerval t = {{us / 1000000, us % 1000000}, {us / 1000000, us % 1000000}};
    setitimer(ITIMER_REAL, &t, 0);
}

static unsigned char byte_at(size_t i) { return (unsigned char)(i * 7 + i / 251); }

/* Reads until EOF, checking every byte; returns how many came. */
static size_t read_all(int fd, useconds_t pause_us, size_t each) {
    static unsigned char buf[1 << 16];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf, each);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (ssize_t k = 0; k < r; k++)
            if (buf[k] != byte_at(got + k)) {
                printf("byte %zu wrong\n", got + k);
                exit(3);
            }
        got += r;
        if (pause_us) usleep(pause_us);
    }
    return got;
}

static int stalled(int restart) {
    enum { N = 1 << 20 };
    static unsigned char out[N];
    for (size_t i = 0; i < N; i++) out[i] = byte_at(i);
    int p[2], go[2], back[2];
    if (pipe(p) || pipe(go) || pipe(back)) return 1;
    pid_t c = fork();
    if (c == 0) {
        close(p[1]); close(go[1]); close(back[0]);
        char x;
        while (read(go[0], &x, 1) < 0 && errno == EINTR) {}
        size_t got = read_all(p[0], 0, 1 << 16);
        if (write(back[1], &got, sizeof got) != sizeof got) _exit(1);
        _exit(0);
    }
    close(p[0]); close(go[0]); close(back[1]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_tick;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGALRM, &sa, 0);
    timer(200000);
    ssize_t w = write(p[1], out, N);
    int e = errno;
    ssize_t again = 0;
    int e2 = 0;
    if (!restart) {
        again = write(p[1], out, N);
        e2 = errno;
    }
    timer(0);
    /* The reader goes on only now, so it can count what it gets. */
    if (write(go[1], "g", 1) != 1) return 1;
    close(p[1]);
    size_t got = 0;
    if (read(back[0], &got, sizeof got) != sizeof got) return 1;
    waitpid(c, 0, 0);
    printf("%s: write short %s, after a tick %s, reader got the count %s\n",
           restart ? "stalled" : "eintr",
           w > 0 && w < N ? "yes" : w < 0 ? strerror(e) : "no", ticks > 0 ? "yes" : "no",
           w > 0 && got == (size_t)w ? "yes" : "no");
    if (!restart)
        printf("eintr: a second write fails with EINTR %s\n",
               again < 0 && e2 == EINTR ? "yes" : again < 0 ? strerror(e2) : "no");
    return 0;
}

static void on_tick_errno(int sig) { (void)sig; ticks++; errno = ERANGE; }

static int spill(int late) {
    static unsigned char out[1 << 20];
    int p[2], back[2];
    if (pipe(p) || pipe(back)) return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = late ? on_tick_errno : on_tick;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, 0);
    pid_t writer = getpid();
    pid_t c = fork();
    if (c == 0) {
        close(p[1]); close(back[1]);
        usleep(200000);
        if (late) {
            fcntl(p[0], F_SETPIPE_SZ, 65536);
            usleep(100000);
            kill(writer, SIGUSR1);
        } else {
            kill(writer, SIGUSR1);
            fcntl(p[0], F_SETPIPE_SZ, 65536);
        }
        ssize_t n = 0;
        while (read(back[0], &n, sizeof n) < 0 && errno == EINTR) {}
        size_t got = read_all(p[0], 0, 1 << 16);
        _exit(n > 0 && got == (size_t)n ? 0 : 1);
    }
    close(p[0]); close(back[0]);
    for (size_t i = 0; i < sizeof out; i++) out[i] = byte_at(i);
    errno = 0;
    ssize_t w = write(p[1], out, sizeof out);
    int e = errno;
    if (write(back[1], &w, sizeof w) != sizeof w) return 1;
    close(p[1]);
    int st;
    waitpid(c, &st, 0);
    printf("%s: write short %s, after the signal %s, reader got the count %s\n",
           late ? "errno" : "spill",
           w > 0 && (size_t)w < sizeof out ? "yes" : "no", ticks > 0 ? "yes" : "no",
           WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "yes" : "no");
    if (late)
        printf("errno: as the handler left it %s\n", e == ERANGE ? "yes" : strerror(e));
    return 0;
}

static volatile pid_t handled_on;
static void on_tick_where(int sig) { (void)sig; handled_on = gettid(); }
static void *idle(void *x) { (void)x; for (;;) pause(); return 0; }

static int threaded(void) {
    static unsigned char out[1 << 20];
    int p[2];
    if (pipe(p)) return 1;
    pid_t c = fork();
    if (c == 0) {
        close(p[1]);
        usleep(500000);
        read_all(p[0], 0, 1 << 16);
        _exit(0);
    }
    close(p[0]);
    for (size_t i = 0; i < sizeof out; i++) out[i] = byte_at(i);
    signal(SIGALRM, on_tick_where);
    pthread_t t;
    pthread_create(&t, 0, idle, 0);
    struct itimerval once = {{0, 0}, {0, 200000}};
    setitimer(ITIMER_REAL, &once, 0);
    ssize_t w = write(p[1], out, sizeof out);
    close(p[1]);
    waitpid(c, 0, 0);
    printf("threaded: write short %s, handled by the writing thread %s\n",
           w > 0 && (size_t)w < sizeof out ? "yes" : "no", handled_on == getpid() ? "yes" : "no");
    return 0;
}

static int slow(void) {
    enum { N = 4 << 20, ROUNDS = 3 };
    static unsigned char out[N * ROUNDS];
    for (size_t i = 0; i < sizeof out; i++) out[i] = byte_at(i);
    int p[2], done[2];
    if (pipe(p) || pipe(done)) return 1;
    pid_t c = fork();
    if (c == 0) {
        close(p[1]); close(done[0]);
        size_t got = read_all(p[0], 1000, 4096 * 4);
        if (write(done[1], &got, sizeof got) != sizeof got) _exit(1);
        _exit(0);
    }
    close(p[0]); close(done[1]);
    signal(SIGALRM, on_tick);
    timer(3000);
    size_t at = 0;
    int shorts = 0, calls = 0;
    while (at < sizeof out) {
        size_t n = sizeof out - at < N ? sizeof out - at : N;
        ssize_t w = write(p[1], out + at, n);
        calls++;
        if (w < 0) {
            if (errno == EINTR) { printf("slow: EINTR under SA_RESTART\n"); return 1; }
            perror("write");
            return 1;
        }
        if ((size_t)w < n) shorts++;
        at += w;
    }
    timer(0);
    close(p[1]);
    size_t got = 0;
    if (read(done[0], &got, sizeof got) != sizeof got) return 1;
    waitpid(c, 0, 0);
    printf("slow: some writes short %s, every byte came in order %s\n",
           shorts > 0 ? "yes" : "no", got == sizeof out ? "yes" : "no");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "stalled")) return stalled(1);
    if (argc > 1 && !strcmp(argv[1], "eintr")) return stalled(0);
    if (argc > 1 && !strcmp(argv[1], "slow")) return slow();
    if (argc > 1 && !strcmp(argv[1], "spill")) return spill(0);
    if (argc > 1 && !strcmp(argv[1], "errno")) return spill(1);
    if (argc > 1 && !strcmp(argv[1], "threaded")) return threaded();
    fprintf(stderr, "usage: long_writes stalled|eintr|spill|errno|threaded|slow\n");
    return 2;
}
