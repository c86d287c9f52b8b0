/* An io_uring made through liburing (`io_uring_queue_init`, whose
 * `io_uring_setup` is liburing's own system call instruction) reads a
 * pipe whose writer, a child gone by then, left 20000 bytes on its ring;
 * then writes a pipe through the io_uring while a child reads it with
 * `read`. Run natively and under `shmpipe run`, the output must be the
 * same. Where the kernel refuses an io_uring, the line says so (the same
 * natively). Built with -luring. */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what, int err) {
    fprintf(stderr, "%s: %s\n", what, strerror(err));
    exit(2);
}

/* One operation prepared by `prep`, submitted, and its result. */
static int one(struct io_uring *ring) {
    if (io_uring_submit(ring) != 1) die("io_uring_submit", EIO);
    struct io_uring_cqe *cqe;
    int r = io_uring_wait_cqe(ring, &cqe);
    if (r < 0) die("io_uring_wait_cqe", -r);
    int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    return res;
}

int main(void) {
    alarm(50);
    int p[2];
    if (pipe(p) != 0) die("pipe", errno);
    pid_t child = fork();
    if (child < 0) die("fork", errno);
    if (child == 0) {
        close(p[0]);
        unsigned char b[2000];
        for (int k = 0; k < 10; k++) {
            for (size_t i = 0; i < sizeof b; i++) b[i] = (unsigned char)(k * 13 + i);
            if (write(p[1], b, sizeof b) != (ssize_t)sizeof b) _exit(3);
        }
        _exit(0);
    }
    close(p[1]);
    waitpid(child, NULL, 0);
    struct io_uring ring;
    int r = io_uring_queue_init(4, &ring, 0);
    if (r < 0) {
        printf("liburing: refused by the kernel\n");
        return 0;
    }
    static unsigned char b[4096];
    uint64_t sum = 0;
    long got = 0;
    for (;;) {
        io_uring_prep_read(io_uring_get_sqe(&ring), p[0], b, sizeof b, (uint64_t)-1);
        int res = one(&ring);
        if (res == -EINTR || res == -EAGAIN) continue;
        if (res < 0) die("io_uring read", -res);
        if (res == 0) break;
        for (int k = 0; k < res; k++) sum = sum * 31 + b[k];
        got += res;
    }
    close(p[0]);
    printf("liburing read: %ld bytes, checksum %llx\n", got, (unsigned long long)sum);
    fflush(stdout);

    /* A pipe written through the io_uring and with `write`, in turn. */
    int q[2];
    if (pipe(q) != 0) die("pipe", errno);
    child = fork();
    if (child < 0) die("fork", errno);
    if (child == 0) {
        close(q[1]);
        uint64_t s = 0;
        long n = 0;
        ssize_t k;
        while ((k = read(q[0], b, sizeof b)) > 0) {
            for (ssize_t i = 0; i < k; i++) s = s * 31 + b[i];
            n += k;
        }
        printf("a reader of a pipe written both ways: %ld bytes, checksum %llx\n", n,
               (unsigned long long)s);
        fflush(stdout);
        _exit(0);
    }
    close(q[0]);
    for (int k = 0; k < 200; k++) {
        memset(b, 'a' + k % 26, 1000);
        if (k % 2 == 0) {
            io_uring_prep_write(io_uring_get_sqe(&ring), q[1], b, 1000, (uint64_t)-1);
            if (one(&ring) != 1000) die("io_uring write", EIO);
        } else if (write(q[1], b, 1000) != 1000) {
            die("write", errno);
        }
    }
    close(q[1]);
    waitpid(child, NULL, 0);
    io_uring_queue_exit(&ring);
    return 0;
}
