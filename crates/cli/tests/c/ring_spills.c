/* Stage 2b's hand-overs to the kernel, each where a reviewer found one
 * missing or wrong (docs/run.md, "2b wired"): run natively and under
 * `shmpipe run` with SHMPIPE_RUN_RINGS=2, the output must be the same.
 * Built with _FORTIFY_SOURCE, so `read` into a sized buffer is glibc's
 * `__read_chk`. */
#undef _FORTIFY_SOURCE
#define _FORTIFY_SOURCE 2
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

static void nothing(int s) { (void)s; }

static int status_of(pid_t c) {
    int st;
    waitpid(c, &st, 0);
    return WIFSIGNALED(st) ? 1000 + WTERMSIG(st) : WEXITSTATUS(st);
}

int main(int argc, char **argv) {
    (void)argc; (void)argv;
    char cmd[64];
    int p[2];

    /* execl (a variadic wrapper) with a read end the child inherits. */
    if (pipe(p)) return 1;
    write(p[1], "execl reads the ring's bytes\n", 29);
    pid_t c = fork();
    if (c == 0) {
        close(p[1]);
        snprintf(cmd, sizeof cmd, "cat <&%d", p[0]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)0);
        _exit(9);
    }
    close(p[0]); close(p[1]);
    printf("execl child %d\n", status_of(c));
    fflush(stdout);

    /* vfork, dup2 of a close-on-exec end onto 7, execl. */
    if (pipe2(p, O_CLOEXEC)) return 1;
    write(p[1], "vfork and dup2\n", 15);
    c = vfork();
    if (c == 0) {
        dup2(p[0], 7);
        execl("/bin/sh", "sh", "-c", "exec head -c 15 <&7", (char *)0);
        _exit(9);
    }
    printf("vfork child %d\n", status_of(c));
    fflush(stdout);
    close(p[0]); close(p[1]);

    /* vfork, dup2 onto 0, both ends closed: the ring's bytes are where
     * the table no longer says. */
    if (pipe(p)) return 1;
    write(p[1], "vfork, dup2 onto stdin\n", 23);
    c = vfork();
    if (c == 0) {
        dup2(p[0], 0);
        close(p[0]);
        close(p[1]);
        execl("/bin/sh", "sh", "-c", "exec head -c 23", (char *)0);
        _exit(9);
    }
    printf("vfork stdin child %d\n", status_of(c));
    fflush(stdout);
    close(p[0]); close(p[1]);

    /* vfork, the write end's number reused for a file: the ring's bytes
     * must not go into the file. */
    char tmp[] = "/tmp/ring-spills-XXXXXX";
    int keep = mkstemp(tmp);
    if (keep < 0) return 1;
    unlink(tmp);
    if (pipe(p)) return 1;
    write(p[1], "not in the file\n", 16);
    c = vfork();
    if (c == 0) {
        close(p[1]);
        int f2 = dup(keep); /* takes p[1]'s number */
        (void)f2;
        snprintf(cmd, sizeof cmd, "exec head -c 16 <&%d", p[0]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)0);
        _exit(9);
    }
    printf("vfork reused child %d\n", status_of(c));
    close(p[0]); close(p[1]);
    printf("file has %ld bytes\n", (long)lseek(keep, 0, SEEK_END));
    fflush(stdout);
    close(keep);

    /* A reader that slept in the kernel, then went: the next write fails
     * with EPIPE at once. */
    signal(SIGPIPE, SIG_IGN);
    if (pipe(p)) return 1;
    c = fork();
    if (c == 0) {
        close(p[1]);
        char b[1];
        _exit(read(p[0], b, 1) == 1 ? 0 : 3);
    }
    close(p[0]);
    usleep(20000);
    write(p[1], "x", 1);
    printf("sleeping reader %d\n", status_of(c));
    ssize_t late = write(p[1], "y", 1);
    printf("write after it went %zd%s\n", late, late < 0 && errno == EPIPE ? " EPIPE" : "");
    fflush(stdout);
    close(p[1]);
    signal(SIGPIPE, SIG_DFL);

    /* __read_chk. */
    if (pipe(p)) return 1;
    c = fork();
    if (c == 0) { close(p[0]); write(p[1], "hello\n", 6); _exit(0); }
    close(p[1]);
    char small[128];
    size_t want = strlen(argv[0]) + 100 > 128 ? 128 : strlen(argv[0]) + 100;
    ssize_t k = read(p[0], small, want);
    printf("__read_chk %zd\n", k);
    status_of(c);
    close(p[0]);

    /* A handler without SA_RESTART, a writer that fills the ring and
     * more, a reader that selects before it reads: every byte in order. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = nothing;
    sigaction(SIGUSR1, &sa, 0);
    int n = 65600;
    unsigned char *d = malloc(n), *g = malloc(n + 1);
    for (int i = 0; i < n; i++) d[i] = (unsigned char)(i * 7 + i / 251);
    if (pipe(p)) return 1;
    c = fork();
    if (c == 0) { close(p[0]); write(p[1], d, n); _exit(0); }
    close(p[1]);
    usleep(200000);
    fd_set s;
    FD_ZERO(&s);
    FD_SET(p[0], &s);
    struct timeval tv = {5, 0};
    printf("select %d\n", select(p[0] + 1, &s, 0, 0, &tv));
    int got = 0;
    while ((k = read(p[0], g + got, n + 1 - got)) > 0) got += (int)k;
    printf("%d bytes, %s\n", got, got == n && !memcmp(d, g, n) ? "in order" : "DIFFERENT");
    status_of(c);
    close(p[0]);

    /* A spill of a write end whose reader is gone raises no SIGPIPE. */
    if (pipe(p)) return 1;
    c = fork();
    if (c == 0) { close(p[1]); char b[1]; read(p[0], b, 1); _exit(0); }
    close(p[0]);
    write(p[1], "abc", 3);
    status_of(c);
    struct pollfd f = {p[1], POLLOUT, 0};
    printf("poll %d revents %x\n", poll(&f, 1, 0), f.revents);
    close(p[1]);

    /* write and dprintf (glibc's __write) on one pipe, in order. */
    if (pipe(p)) return 1;
    c = fork();
    if (c == 0) {
        close(p[0]);
        for (int i = 0; i < 100; i++) {
            char line[32];
            int m = snprintf(line, sizeof line, "write %d\n", i);
            write(p[1], line, m);
            dprintf(p[1], "dprintf %d\n", i);
        }
        _exit(0);
    }
    close(p[1]);
    fflush(stdout);
    char buf[4096];
    while ((k = read(p[0], buf, sizeof buf)) > 0) fwrite(buf, 1, k, stdout);
    status_of(c);
    return 0;
}
