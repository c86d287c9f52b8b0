/* Children that end without closing their pipe ends, 300 of them (more
 * than a tree's pool of rings), each by the way `argv[1]` names: `exit`,
 * `_exit` or a return from `main`. Each writes one byte to its parent on
 * a pipe of its own and ends holding its write end. Then the parent
 * makes one more pipe and sends itself 1000 bytes on it: under `shmpipe
 * run` that pipe must still find a free ring (the test counts the bytes
 * that went through rings). Prints how many bytes arrived from the
 * children and whether the 1000 came back intact. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILDREN 300

static void die(const char *what) {
    perror(what);
    exit(2);
}

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "exit";
    long got = 0;
    for (int i = 0; i < CHILDREN; i++) {
        int p[2];
        if (pipe(p) != 0) die("pipe");
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            close(p[0]);
            if (write(p[1], "x", 1) != 1) die("write");
            if (strcmp(how, "_exit") == 0) _exit(0);
            if (strcmp(how, "return") == 0) return 0;
            exit(0);
        }
        close(p[1]);
        char c;
        got += read(p[0], &c, 1) == 1;
        close(p[0]);
        if (waitpid(pid, NULL, 0) != pid) die("waitpid");
    }
    /* One more pipe, written and read by this process: under `shmpipe
     * run` its bytes go through a ring if one is free. */
    int p[2];
    if (pipe(p) != 0) die("pipe");
    char out[1000], in[1000];
    for (int k = 0; k < 1000; k++) out[k] = (char)('a' + k % 26);
    if (write(p[1], out, sizeof out) != (ssize_t)sizeof out) die("write");
    ssize_t k = read(p[0], in, sizeof in);
    printf("%s: %ld bytes from %d children, then %zd bytes %s\n", how, got, CHILDREN, k,
           k == (ssize_t)sizeof in && memcmp(in, out, sizeof in) == 0 ? "intact" : "changed");
    return 0;
}
