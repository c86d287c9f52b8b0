/* Pipes used through calls made by number (`syscall(2)`), an io_uring and
 * a descriptor taken from another process (`pidfd_getfd`): run natively
 * and under `shmpipe run`, the output must be the same.
 *
 * 1. Raw reads and writes: a child writes 20000 numbered records of mixed
 *    sizes, by `write` and `syscall(SYS_write)` in turn, and the last 100
 *    by those and `syscall(SYS_writev)` in turn (a `writev` hands a ring's
 *    pipe to the kernel for good, so the rest travel on the ring), waiting
 *    for the reader every 1000; the parent reads them alternately by
 *    `read` and `syscall(SYS_read)`. A record missed, doubled or out of
 *    order changes the checksum.
 * 2. A raw close: a pipe's write end, after 1000 bytes, is copied by
 *    `syscall(SYS_fcntl, F_DUPFD_CLOEXEC)`, the copy writes 1000 more,
 *    then the end is closed by `syscall(SYS_close)` and the copy by
 *    `syscall(SYS_close_range)`; the reader (a child) gets the 2000 bytes
 *    in order and EOF (a socket pair's end closed so: unseen_close.c with
 *    "raw").
 * 3. An io_uring made by `syscall(SYS_io_uring_setup)` reads a pipe whose
 *    writer (a child, gone by then) left 20000 bytes on its ring.
 * 4. `pidfd_getfd` takes a pipe's read end from a child that holds it;
 *    the taker reads the 5000 bytes another child left on the pipe.
 * Where the kernel refuses an io_uring or `pidfd_getfd`, the line says so
 * (the same natively). Every run first prints what calls with no route
 * return, failing (`-1` and `errno`) and not. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what) {
    perror(what);
    exit(2);
}

/* Reads exactly n bytes, alternating the C call and the raw one. */
static int turn;
static int full_read(int fd, unsigned char *b, size_t n) {
    while (n > 0) {
        ssize_t r = (turn++ & 1) ? syscall(SYS_read, fd, b, n) : read(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static void full_write(int fd, const unsigned char *b, size_t n, int how) {
    while (n > 0) {
        ssize_t r;
        if (how == 0) {
            r = write(fd, b, n);
        } else if (how == 1) {
            r = syscall(SYS_write, fd, b, n);
        } else {
            struct iovec v[2] = {{(void *)b, n / 2}, {(void *)(b + n / 2), n - n / 2}};
            r = syscall(SYS_writev, fd, v, 2);
        }
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die("write");
        b += r;
        n -= (size_t)r;
    }
}

/* Record k: a 4-byte length, then that many bytes of k's pattern. */
static size_t record(unsigned k, unsigned char *b) {
    size_t len = 1 + (k * 7919u) % 3000u;
    memcpy(b, &len, 4);
    for (size_t i = 0; i < len; i++) b[4 + i] = (unsigned char)(k + i);
    return 4 + len;
}

/* Every 1000 records the writer waits for the reader's word that it has
 * them all: a writer always ahead of its reader would keep a pipe that
 * went to the kernel (its reader having waited a wake-up's time for the
 * first record) there for good, and the ring would carry nothing. */
#define BATCH 1000

static void raw_reads_and_writes(void) {
    int p[2], ack[2];
    if (pipe(p) != 0 || pipe(ack) != 0) die("pipe");
    pid_t child = fork();
    if (child < 0) die("fork");
    static unsigned char b[4 + 3000];
    if (child == 0) {
        close(p[0]);
        close(ack[1]);
        for (unsigned k = 0; k < 20000; k++) {
            full_write(p[1], b, record(k, b), (int)(k < 19900 ? k % 2 : k % 3));
            char c;
            if (k % BATCH == BATCH - 1 && read(ack[0], &c, 1) != 1) _exit(3);
        }
        _exit(0);
    }
    close(p[1]);
    close(ack[0]);
    uint64_t sum = 0, bytes = 0;
    unsigned k = 0;
    for (;; k++) {
        uint32_t len;
        if (full_read(p[0], (unsigned char *)&len, 4) != 0) break;
        if (len > 3000 || full_read(p[0], b, len) != 0) die("a torn record");
        for (uint32_t i = 0; i < len; i++) {
            if (b[i] != (unsigned char)(k + i)) die("a record out of order");
            sum = sum * 31 + b[i];
        }
        bytes += 4 + len;
        if (k % BATCH == BATCH - 1 && write(ack[1], "a", 1) != 1) die("the word to the writer");
    }
    close(p[0]);
    close(ack[1]);
    waitpid(child, NULL, 0);
    printf("raw reads and writes: %u records, %llu bytes, checksum %llx\n", k,
           (unsigned long long)bytes, (unsigned long long)sum);
}

static void raw_close(void) {
    int p[2], report[2];
    if (pipe(p) != 0 || pipe(report) != 0) die("pipe");
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        close(p[1]);
        close(report[0]);
        unsigned char b[512];
        long got = 0;
        ssize_t r;
        while ((r = read(p[0], b, sizeof b)) > 0) {
            for (ssize_t i = 0; i < r; i++)
                if (b[i] != (got + i < 1000 ? 'w' : 'c')) got = -1000000;
            got += r;
        }
        if (write(report[1], &got, sizeof got) != sizeof got) _exit(3);
        _exit(0);
    }
    close(p[0]);
    close(report[1]);
    unsigned char b[1000];
    memset(b, 'w', sizeof b);
    full_write(p[1], b, sizeof b, 0);
    int copy = (int)syscall(SYS_fcntl, p[1], F_DUPFD_CLOEXEC, 100);
    if (copy < 100) die("raw F_DUPFD_CLOEXEC");
    memset(b, 'c', sizeof b);
    full_write(copy, b, sizeof b, 0);
    if (syscall(SYS_close, p[1]) != 0) die("raw close");
    if (syscall(SYS_close_range, copy, copy, 0) != 0) die("raw close_range");
    long got = -1;
    if (read(report[0], &got, sizeof got) != sizeof got) die("the reader's count");
    close(report[0]);
    waitpid(child, NULL, 0);
    printf("raw close of a pipe: the reader got %ld bytes in order and EOF\n", got);
}

/* One IORING_OP_READ at a time on `fd` until EOF; -1 if the kernel
 * refuses an io_uring. */
static long uring_read_all(int fd, uint64_t *sum) {
    struct io_uring_params par;
    memset(&par, 0, sizeof par);
    int ring = (int)syscall(SYS_io_uring_setup, 4, &par);
    if (ring < 0) return -1;
    size_t sq_len = par.sq_off.array + par.sq_entries * sizeof(unsigned);
    size_t cq_len = par.cq_off.cqes + par.cq_entries * sizeof(struct io_uring_cqe);
    unsigned char *sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
                             IORING_OFF_SQ_RING);
    unsigned char *cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
                             IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes = mmap(NULL, par.sq_entries * sizeof(struct io_uring_sqe),
                                     PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
                                     IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) die("io_uring mmap");
    unsigned *sq_tail = (unsigned *)(sq + par.sq_off.tail);
    unsigned *sq_mask = (unsigned *)(sq + par.sq_off.ring_mask);
    unsigned *sq_array = (unsigned *)(sq + par.sq_off.array);
    unsigned *cq_head = (unsigned *)(cq + par.cq_off.head);
    unsigned *cq_tail = (unsigned *)(cq + par.cq_off.tail);
    unsigned *cq_mask = (unsigned *)(cq + par.cq_off.ring_mask);
    struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + par.cq_off.cqes);
    static unsigned char b[4096];
    long total = 0;
    for (;;) {
        unsigned t = *sq_tail, i = t & *sq_mask;
        memset(&sqes[i], 0, sizeof sqes[i]);
        sqes[i].opcode = IORING_OP_READ;
        sqes[i].fd = fd;
        sqes[i].addr = (uint64_t)(uintptr_t)b;
        sqes[i].len = sizeof b;
        sqes[i].off = (uint64_t)-1;
        sq_array[i] = i;
        __atomic_store_n(sq_tail, t + 1, __ATOMIC_RELEASE);
        if (syscall(SYS_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
            die("io_uring_enter");
        unsigned h = *cq_head;
        if (h == __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE)) die("no completion");
        int res = cqes[h & *cq_mask].res;
        __atomic_store_n(cq_head, h + 1, __ATOMIC_RELEASE);
        if (res == -EINTR || res == -EAGAIN) continue;
        if (res < 0) {
            errno = -res;
            die("io_uring read");
        }
        if (res == 0) break;
        for (int k = 0; k < res; k++) *sum = *sum * 31 + b[k];
        total += res;
    }
    close(ring);
    return total;
}

static void io_uring_read(void) {
    int p[2];
    if (pipe(p) != 0) die("pipe");
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        close(p[0]);
        unsigned char b[2000];
        for (int k = 0; k < 10; k++) {
            for (size_t i = 0; i < sizeof b; i++) b[i] = (unsigned char)(k * 13 + i);
            full_write(p[1], b, sizeof b, 0);
        }
        _exit(0);
    }
    close(p[1]);
    waitpid(child, NULL, 0);
    uint64_t sum = 0;
    long got = uring_read_all(p[0], &sum);
    if (got < 0)
        printf("io_uring: refused by the kernel\n");
    else
        printf("io_uring: read %ld bytes, checksum %llx\n", got, (unsigned long long)sum);
    close(p[0]);
    /* After an io_uring, pipes still work (on the kernel). */
    int q[2];
    if (pipe(q) != 0) die("pipe");
    full_write(q[1], (const unsigned char *)"after", 5, 0);
    char after[5];
    if (full_read(q[0], (unsigned char *)after, 5) != 0 || memcmp(after, "after", 5) != 0)
        die("a pipe after the io_uring");
    close(q[0]);
    close(q[1]);
}

static void taken_read_end(void) {
    int p[2], ready[2];
    if (pipe(p) != 0 || pipe(ready) != 0) die("pipe");
    pid_t writer = fork();
    if (writer < 0) die("fork");
    if (writer == 0) {
        close(p[0]);
        unsigned char b[5000];
        memset(b, 't', sizeof b);
        full_write(p[1], b, sizeof b, 0);
        _exit(0);
    }
    pid_t holder = fork();
    if (holder < 0) die("fork");
    if (holder == 0) {
        close(p[1]);
        close(ready[0]);
        if (write(ready[1], &p[0], sizeof p[0]) != sizeof p[0]) _exit(3);
        pause();
        _exit(0);
    }
    close(ready[1]);
    int held;
    if (read(ready[0], &held, sizeof held) != sizeof held) die("the holder");
    close(ready[0]);
    close(p[0]);
    close(p[1]);
    waitpid(writer, NULL, 0);
    int pidfd = (int)syscall(SYS_pidfd_open, holder, 0);
    int taken = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, held, 0);
    if (taken < 0) {
        printf("pidfd_getfd: refused by the kernel\n");
    } else {
        unsigned char b[1024];
        long got = 0;
        ssize_t r;
        while ((r = read(taken, b, sizeof b)) > 0) got += r;
        printf("pidfd_getfd: read %ld bytes and EOF\n", got);
        close(taken);
    }
    if (pidfd >= 0) close(pidfd);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
}

int main(int argc, char **argv) {
    /* With an argument, only that part (1-4). */
    int only = argc > 1 ? atoi(argv[1]) : 0;
    alarm(50); /* a hang fails the test here, not only at the watchdog */
    /* Calls with no route, failing and not: the C library's answers. */
    errno = 0;
    long none = syscall(99999), e1 = errno;
    long negative = syscall(-1), e2 = errno;
    long bad_fd = syscall(SYS_fsync, -1), e3 = errno;
    long ppid = syscall(SYS_getppid);
    printf("no route: %ld/%ld %ld/%ld %ld/%ld %d\n", none, e1, negative, e2, bad_fd, e3,
           ppid == (long)getppid());
    if (only == 0 || only == 1) raw_reads_and_writes();
    if (only == 0 || only == 2) raw_close();
    if (only == 0 || only == 3) io_uring_read();
    if (only == 0 || only == 4) taken_read_end();
    return 0;
}
