/* Signals during reads that wait, for crates/cli/tests/run.rs: run
 * natively and under `shmpipe run` with hand-over on, the output must be
 * the same. Calls only libc.
 *
 *   signals restart   handlers with SA_RESTART (installed with signal(),
 *                     as lmbench's harness does): timers fire while the
 *                     parent reads what its child writes late; no read
 *                     fails with EINTR and every byte arrives.
 *   signals install   a thread waits in read() with nothing to read while
 *                     the main thread installs a handler without
 *                     SA_RESTART and signals it: its read fails with EINTR.
 *   signals unseen    a handler without SA_RESTART installed where no
 *                     preload wrapper sees it (libc's own sigaction, looked
 *                     up in libc itself): a timer interrupts every read.
 *   signals rcvtimeo  a socket pair end with a receive timeout: a signal
 *                     whose handler has SA_RESTART still interrupts its
 *                     read (signal(7)), 20 reads, each signalled once.
 *
 * The signals of `install` and `unseen` repeat until a read fails, as a
 * native read may begin after the first one; so these two check that an
 * interrupted read fails, not which signal did it (the handshake that
 * decides it is checked by loom, crates/preload/src/signal_gate).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t ticks;
static void on_signal(int sig) { (void)sig; ticks++; }

static void die(const char *what) { perror(what); exit(2); }

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set); /* one CPU: fine, nothing waits */
}

static void spin_us(long us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static void timer_us(long first, long every) {
    struct itimerval t = {{0, every}, {0, first}};
    setitimer(ITIMER_REAL, &t, NULL);
}

static int restart(void) {
    signal(SIGALRM, on_signal);
    int data[2], go[2];
    if (pipe(data) || pipe(go)) die("pipe");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        pin(1);
        close(data[0]);
        close(go[1]);
        char c;
        for (int i = 0; read(go[0], &c, 1) == 1; i++) {
            spin_us(i % 5 * 40); /* 0 to 160 us: inside and past a reader's wait */
            if (write(data[1], "x", 1) != 1) die("write");
        }
        _exit(0);
    }
    pin(0);
    close(data[1]);
    close(go[0]);
    int eintr = 0, got = 0;
    for (int i = 0; i < 300; i++) {
        if (write(go[1], "g", 1) != 1) die("write go");
        timer_us(10 + i % 7 * 15, 30);
        char c;
        ssize_t n = read(data[0], &c, 1);
        if (n < 0 && errno == EINTR) eintr++;
        if (n == 1) got++;
        timer_us(0, 0);
        while (n < 0 && errno == EINTR) n = read(data[0], &c, 1), got += n == 1;
    }
    close(go[1]);
    waitpid(pid, NULL, 0);
    printf("restart: eintr %d, got %d\n", eintr, got);
    return 0;
}

static int quiet[2];
static volatile int reader_done;
static ssize_t reader_result;
static int reader_errno;

static void *reader(void *arg) {
    (void)arg;
    char c;
    reader_result = read(quiet[0], &c, 1);
    reader_errno = errno;
    reader_done = 1;
    return NULL;
}

static int install(long delay_us) {
    if (pipe(quiet)) die("pipe");
    pthread_t t;
    if (pthread_create(&t, NULL, reader, NULL)) die("pthread_create");
    spin_us(delay_us);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART */
    if (sigaction(SIGUSR1, &sa, NULL)) die("sigaction");
    /* Until the read returns: the first signal may come before it began. */
    while (!reader_done) {
        pthread_kill(t, SIGUSR1);
        spin_us(1000);
    }
    pthread_join(t, NULL);
    printf("install: read %zd, %s\n", reader_result,
           reader_result < 0 && reader_errno == EINTR ? "EINTR" : "no EINTR");
    return 0;
}

static int unseen(void) {
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    int (*libc_sigaction)(int, const struct sigaction *, struct sigaction *) =
        libc ? (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(libc, "sigaction") : NULL;
    if (!libc_sigaction) die("dlsym");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART */
    if (libc_sigaction(SIGALRM, &sa, NULL)) die("sigaction");
    int p[2];
    if (pipe(p)) die("pipe");
    int eintr = 0;
    for (int i = 0; i < 20; i++) {
        timer_us(20 + i * 10, 1000);
        char c;
        if (read(p[0], &c, 1) < 0 && errno == EINTR) eintr++;
        timer_us(0, 0);
    }
    printf("unseen: eintr %d of 20\n", eintr);
    return 0;
}

static int rcvtimeo(void) {
    signal(SIGALRM, on_signal); /* SA_RESTART */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) die("socketpair");
    struct timeval timeout = {0, 50000};
    if (setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout)) die("setsockopt");
    int eintr = 0;
    for (int i = 0; i < 20; i++) {
        timer_us(100, 0); /* once, while the read waits */
        char c;
        if (read(sv[0], &c, 1) < 0 && errno == EINTR) eintr++;
        timer_us(0, 0);
    }
    /* Natively every read is interrupted, unless its signal came before
       it began (100 us after the timer was set: rare). */
    printf("rcvtimeo: at least 12 of 20 reads interrupted: %s\n", eintr >= 12 ? "yes" : "no");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "restart") == 0) return restart();
    if (argc == 3 && strcmp(argv[1], "install") == 0) return install(atol(argv[2]));
    if (argc == 2 && strcmp(argv[1], "unseen") == 0) return unseen();
    if (argc == 2 && strcmp(argv[1], "rcvtimeo") == 0) return rcvtimeo();
    fprintf(stderr, "usage: %s restart | install DELAY_US | unseen | rcvtimeo\n", argv[0]);
    return 2;
}
