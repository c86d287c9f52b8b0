/* Handlers without SA_RESTART, for crates/cli/tests/run.rs: run natively
 * and under `shmpipe run` with SHMPIPE_RUN_RINGS=2, the output must be the
 * same. The library installs such handlers behind a trampoline that counts
 * them, so this program's reads still wait in the ring.
 *
 *   1. SIGSEGV and SIGBUS handlers as Rust's std installs them
 *      (SA_SIGINFO | SA_ONSTACK), SIGBUS's through glibc's exported
 *      __sigaction: a query names the program's handler and flags.
 *   2. A SIGUSR1 handler without SA_RESTART gets its siginfo (sigqueue's
 *      value).
 *   3. 2000 one-byte round trips with a child over two pipes (run.rs
 *      checks that, on two CPUs, bytes went through rings).
 *   4. A read with nothing to read fails with EINTR under a repeating
 *      SIGALRM whose handler lacks SA_RESTART.
 *   5. The C library's siginterrupt(SIGALRM, 0) gives that handler
 *      SA_RESTART where no wrapper sees it: 20 reads whose writer comes
 *      2 ms late, under a timer of 5 us, then 20, each get their byte.
 *   6. signal, bsd_signal, sigset, sysv_signal and ssignal, replacing a
 *      handler installed by sigaction without SA_RESTART, return the
 *      program's handler as the old one; sigset's SIG_HOLD still holds.
 *   7. A handler without SA_RESTART that ends its thread with
 *      pthread_exit, an unwind through whatever called the handler: the
 *      thread's cleanup runs and it is joined.
 *   8. Two threads install handlers without SA_RESTART on one signal at
 *      once, one with SA_SIGINFO and one without: after each round the
 *      disposition a query names is one thread's handler with that
 *      thread's flags.
 *   9. One thread changes a real-time signal's handler back and forth,
 *      between one whose mask is empty and one whose mask holds SIGPROF,
 *      while another raises it 100000 times: each handler runs with its
 *      own mask.
 *      A change waits for a raise made wholly after the one before: under
 *      the library, a signal's handler is looked up by the trampoline the
 *      kernel chose, and two changes before that look may reuse its entry
 *      (a gap named in docs/run.md).
 *  10. A vfork child installs its own SIGURG handler without SA_RESTART,
 *      then exits: the parent's handler is still the one that runs in
 *      the parent, and the one a query names.
 *  11. While system() runs a 0.3 s command (glibc sets SIGQUIT to SIG_IGN
 *      and puts the old disposition back, by calls no wrapper sees),
 *      another thread installs a second SIGQUIT handler at 0.1 s: the
 *      handler that runs after is the first, which system() put back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* Still in glibc, no longer declared by its headers. */
extern __sighandler_t bsd_signal(int, __sighandler_t);
extern int __sigaction(int, const struct sigaction *, struct sigaction *);

static void on_fault(int s, siginfo_t *i, void *c) { (void)s; (void)i; (void)c; }
static volatile sig_atomic_t usr1_value = -1;
static void on_usr1(int s, siginfo_t *i, void *c) { (void)c; usr1_value = s == SIGUSR1 ? i->si_value.sival_int : -2; }
static void on_alarm(int s) { (void)s; }

static void on_exit_thread(int s) { (void)s; pthread_exit(0); }
static volatile sig_atomic_t cleaned = 0;
static void cleanup(void *arg) { (void)arg; cleaned = 1; }
static void *sleeper(void *arg) {
    pthread_cleanup_push(cleanup, 0);
    for (;;) pause();
    pthread_cleanup_pop(0);
    return arg;
}

static void on_usr2_plain(int s) { (void)s; }
static pthread_barrier_t both;
static void *installer(void *arg) {
    struct sigaction a;
    memset(&a, 0, sizeof a);
    if (arg) { a.sa_sigaction = on_fault; a.sa_flags = SA_SIGINFO; }
    else a.sa_handler = on_usr2_plain;
    pthread_barrier_wait(&both);
    sigaction(SIGUSR2, &a, 0);
    return 0;
}

static volatile sig_atomic_t flips_wrong = 0, flips_ran = 0;
static int prof_blocked(void) {
    sigset_t m;
    pthread_sigmask(SIG_BLOCK, 0, &m);
    return sigismember(&m, SIGPROF);
}
static void on_winch_open(int s) { (void)s; flips_ran++; if (prof_blocked()) flips_wrong++; }
static void on_winch_held(int s) { (void)s; flips_ran++; if (!prof_blocked()) flips_wrong++; }
static volatile int flipping = 1;
static volatile long raised = 0;
static void *flipper(void *arg) {
    struct sigaction open, held;
    memset(&open, 0, sizeof open);
    memset(&held, 0, sizeof held);
    open.sa_handler = on_winch_open;
    held.sa_handler = on_winch_held;
    sigaddset(&held.sa_mask, SIGPROF);
    for (long i = 0; flipping; i++) {
        sigaction(SIGRTMIN + 3, i & 1 ? &held : &open, 0);
        /* The raise after the next began after this change. */
        long seen = raised;
        while (flipping && raised < seen + 2) sched_yield();
    }
    return arg;
}

static volatile sig_atomic_t urg_parent = 0, urg_child = 0;
static void on_urg_parent(int s) { (void)s; urg_parent = 1; }
static void on_urg_child(int s) { (void)s; urg_child = 1; }

static volatile sig_atomic_t quit_ran = 0;
static void on_quit_first(int s) { (void)s; quit_ran = 1; }
static void on_quit_second(int s) { (void)s; quit_ran = 2; }
static void *quit_installer(void *arg) {
    usleep(100000);
    struct sigaction q;
    memset(&q, 0, sizeof q);
    q.sa_handler = on_quit_second;
    sigaction(SIGQUIT, &q, 0);
    return arg;
}

static void install(int sig, void (*f)(int, siginfo_t *, void *), int flags) {
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_sigaction = f;
    a.sa_flags = flags;
    sigaction(sig, &a, 0);
}

int main(void) {
    install(SIGSEGV, on_fault, SA_SIGINFO | SA_ONSTACK);
    struct sigaction bus;
    memset(&bus, 0, sizeof bus);
    bus.sa_sigaction = on_fault;
    bus.sa_flags = SA_SIGINFO | SA_ONSTACK;
    __sigaction(SIGBUS, &bus, 0);
    struct sigaction old;
    sigaction(SIGSEGV, 0, &old);
    printf("query: %s\n", old.sa_sigaction == on_fault && (old.sa_flags & (SA_SIGINFO | SA_ONSTACK | SA_RESTART)) == (SA_SIGINFO | SA_ONSTACK) ? "ok" : "changed");

    install(SIGUSR1, on_usr1, SA_SIGINFO);
    sigqueue(getpid(), SIGUSR1, (union sigval){.sival_int = 42});
    printf("siginfo: %d\n", (int)usr1_value);
    fflush(stdout);

    int ab[2], ba[2];
    if (pipe(ab) || pipe(ba)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(ab[1]); close(ba[0]);
        char c;
        while (read(ab[0], &c, 1) == 1)
            if (write(ba[1], &c, 1) != 1) _exit(1);
        _exit(0);
    }
    close(ab[0]); close(ba[1]);
    int good = 0;
    for (int i = 0; i < 2000; i++) {
        char c = (char)i, d = 0;
        if (write(ab[1], &c, 1) != 1 || read(ba[0], &d, 1) != 1) break;
        good += c == d;
    }
    close(ab[1]);
    waitpid(pid, 0, 0);
    printf("round trips: %d\n", good);

    int p[2];
    if (pipe(p)) return 1;
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_handler = on_alarm;
    sigaction(SIGALRM, &a, 0);
    struct itimerval t = {{0, 2000}, {0, 2000}};
    setitimer(ITIMER_REAL, &t, 0);
    char c;
    ssize_t r = read(p[0], &c, 1);
    int e = errno;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, 0);
    printf("read: %zd, %s\n", r, r < 0 && e == EINTR ? "EINTR" : "other");
    fflush(stdout);

    siginterrupt(SIGALRM, 0);
    int q[2], go[2];
    if (pipe(q) || pipe(go)) return 1;
    pid = fork();
    if (pid == 0) {
        close(q[0]); close(go[1]);
        char g;
        while (read(go[0], &g, 1) == 1) {
            usleep(2000);
            if (write(q[1], "y", 1) != 1) _exit(1);
        }
        _exit(0);
    }
    close(q[1]); close(go[0]);
    int got = 0, eintr = 0;
    struct itimerval fast = {{0, 20}, {0, 5}};
    for (int i = 0; i < 20; i++) {
        if (write(go[1], "g", 1) != 1) break;
        setitimer(ITIMER_REAL, &fast, 0);
        ssize_t k = read(q[0], &c, 1);
        int ke = errno;
        setitimer(ITIMER_REAL, &off, 0);
        if (k == 1) got++;
        else if (k < 0 && ke == EINTR) eintr++;
    }
    close(go[1]);
    waitpid(pid, 0, 0);
    printf("restarted: got %d, eintr %d\n", got, eintr);

    void (*f)(int) = (void (*)(int))on_fault;
    install(SIGUSR2, on_fault, SA_SIGINFO);
    printf("signal: %s\n", signal(SIGSEGV, SIG_DFL) == f ? "ok" : "changed");
    printf("bsd_signal: %s\n", bsd_signal(SIGBUS, SIG_DFL) == f ? "ok" : "changed");
    printf("sigset: %s\n", sigset(SIGUSR2, SIG_DFL) == f ? "ok" : "changed");
    printf("sysv_signal: %s\n", sysv_signal(SIGUSR1, SIG_DFL) == (void (*)(int))on_usr1 ? "ok" : "changed");
    install(SIGUSR2, on_fault, SA_SIGINFO);
    printf("ssignal: %s\n", ssignal(SIGUSR2, SIG_DFL) == f ? "ok" : "changed");
    sigset_t m;
    sigset(SIGUSR2, SIG_HOLD);
    sigprocmask(SIG_BLOCK, 0, &m);
    printf("sigset SIG_HOLD holds: %d\n", sigismember(&m, SIGUSR2));
    sigset(SIGUSR2, SIG_DFL);
    sigprocmask(SIG_BLOCK, 0, &m);
    printf("sigset SIG_DFL releases: %d\n", !sigismember(&m, SIGUSR2));
    fflush(stdout);

    memset(&a, 0, sizeof a);
    a.sa_handler = on_exit_thread;
    sigaction(SIGUSR1, &a, 0);
    pthread_t thread;
    if (pthread_create(&thread, 0, sleeper, 0)) return 1;
    usleep(10000);
    pthread_kill(thread, SIGUSR1);
    pthread_join(thread, 0);
    printf("thread ended by its handler, cleaned up: %d\n", (int)cleaned);

    int consistent = 0;
    pthread_barrier_init(&both, 0, 2);
    for (int round = 0; round < 1000; round++) {
        pthread_t one, other;
        if (pthread_create(&one, 0, installer, (void *)1) || pthread_create(&other, 0, installer, 0)) return 1;
        pthread_join(one, 0);
        pthread_join(other, 0);
        struct sigaction now;
        sigaction(SIGUSR2, 0, &now);
        consistent += now.sa_flags & SA_SIGINFO ? now.sa_sigaction == on_fault : now.sa_handler == on_usr2_plain;
    }
    printf("installs at once, consistent: %d of 1000\n", consistent);

    memset(&a, 0, sizeof a);
    a.sa_handler = on_winch_open;
    sigaction(SIGRTMIN + 3, &a, 0);
    pthread_t flips;
    if (pthread_create(&flips, 0, flipper, 0)) return 1;
    for (int i = 0; i < 100000; i++) {
        raise(SIGRTMIN + 3);
        raised = i + 1;
    }
    flipping = 0;
    pthread_join(flips, 0);
    printf("handlers changed while raised, with their own masks: %d of %d\n",
           (int)(flips_ran - flips_wrong), (int)flips_ran);

    memset(&a, 0, sizeof a);
    a.sa_handler = on_urg_parent;
    sigaction(SIGURG, &a, 0);
    pid = vfork();
    if (pid == 0) {
        struct sigaction c;
        memset(&c, 0, sizeof c);
        c.sa_handler = on_urg_child;
        sigaction(SIGURG, &c, 0);
        _exit(0);
    }
    waitpid(pid, 0, 0);
    raise(SIGURG);
    sigaction(SIGURG, 0, &old);
    printf("after a vfork child's install: parent's handler ran %d, child's %d, query %s\n",
           (int)urg_parent, (int)urg_child, old.sa_handler == on_urg_parent ? "ok" : "changed");

    memset(&a, 0, sizeof a);
    a.sa_handler = on_quit_first;
    sigaction(SIGQUIT, &a, 0);
    pthread_t quits;
    if (pthread_create(&quits, 0, quit_installer, 0)) return 1;
    if (system("sleep 0.3") != 0) return 1;
    pthread_join(quits, 0);
    raise(SIGQUIT);
    printf("handler after system(): %s\n", quit_ran == 1 ? "the one put back" : quit_ran == 2 ? "the second" : "none");
    return 0;
}
