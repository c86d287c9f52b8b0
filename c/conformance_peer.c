/* The C side of the conformance test of the header's inline fast path
 * against the ring's protocol as the Rust library runs it
 * (crates/capi/tests/conformance.rs starts this program; scripts/test-c.sh
 * builds it under AddressSanitizer and UBSan and runs that test).
 *
 * The Rust test makes two pipes and hands this program one end of each:
 * TO_C, a reader (the test writes its other end through the ring's
 * Producer), and FROM_C, a writer (the test reads through the ring's
 * Consumer). This program reads and writes mostly through the header's
 * inline shmpipe_read and shmpipe_write, sometimes through the library's
 * calls, and checks every byte it reads: byte i of a stream is
 * pattern(salt, i). It also checks that the state the library lends
 * points where the ring's layout (given on the command line) says.
 *
 *   conformance_peer KEY=VALUE...    (the keys are those of `struct args`)
 *
 * On success it prints one line of counts and exits 0:
 *   c-peer: wrote=N read=N inline_writes=N ... layout_checks=N
 * otherwise it says why on stderr and exits non-zero. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <shmpipe.h>

/* The two streams' salts (the Rust test has the same). */
#define TO_C_SALT 0x746f2d63ull   /* "to-c" */
#define FROM_C_SALT 0x66726f6dull /* "from" */
/* The largest item either side moves in one call. */
#define MAX_ITEM 9216

#define FAIL(code, ...)                                                        \
    do {                                                                       \
        fprintf(stderr, "c-peer: " __VA_ARGS__);                               \
        fputc('\n', stderr);                                                   \
        exit(code); /* exit, not _exit: LeakSanitizer checks at exit */       \
    } while (0)

/* The command line. */
static struct args {
    const char *scenario; /* stream, wake_reader or wake_writer */
    uint64_t seed;
    uint64_t capacity;   /* of both rings */
    uint64_t to_c;       /* bytes to read from TO_C before its end of file */
    uint64_t from_c;     /* bytes to write to FROM_C */
    uint64_t sleep;      /* chance of a nap before a step, per mille */
    uint64_t close;      /* 1: close FROM_C once written; 0: exit with it open */
    uint64_t corrupt_at; /* a position of FROM_C to write wrong, or UINT64_MAX */
    uint64_t skip_wake;  /* wake scenarios: make the header skip its wake */
    uint64_t limit;      /* seconds before SIGALRM ends this program */
    /* The ring's layout (shmpipe_ring::layout), as the Rust test has it. */
    uint64_t data_offset, magic_at, version_at, role_at, capacity_at, index_at, parked_at;
    uint64_t magic, version, writer_role, reader_role, parked_bit;
} A = {.scenario = "stream", .close = 1, .corrupt_at = UINT64_MAX, .limit = 120};

static struct {
    uint64_t wrote, read;
    uint64_t inline_writes, inline_reads;
    uint64_t inline_write_wakes, inline_read_wakes;
    uint64_t scenario_wakes, layout_checks;
    uint64_t light_publishes; /* inline publishes with a compiler fence only */
} stats;

static shmpipe_reader *r; /* TO_C */
static shmpipe_writer *w; /* FROM_C */
static uint64_t rng;
static unsigned char item[MAX_ITEM];

static uint64_t next_rand(void) { /* splitmix64 */
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static unsigned char pattern(uint64_t salt, uint64_t i) {
    return (unsigned char)(((i ^ salt) * 0x9E3779B97F4A7C15ull) >> 56);
}

/* Half small items (the inline path's), some up to its limit and past
 * it, a few larger than a small ring (the library's, in pieces). */
static size_t item_size(void) {
    uint64_t c = next_rand() % 100;
    if (c < 50)
        return 1 + next_rand() % 16;
    if (c < 80)
        return 17 + next_rand() % 48;
    if (c < 95)
        return 65 + next_rand() % 960;
    return 1025 + next_rand() % (MAX_ITEM - 1024);
}

static void nap_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

static struct shmpipe_fast *fast_w(void) { return (struct shmpipe_fast *)(void *)w; }
static struct shmpipe_fast *fast_r(void) { return (struct shmpipe_fast *)(void *)r; }

/* Whether the header's inline functions will move `len` bytes without
 * the library, by the conditions they test. */
static int write_goes_inline(const struct shmpipe_fast *f, size_t len) {
    return f->kind == SHMPIPE_FAST_WRITER && len - 1 < f->step && f->limit - f->pos >= len &&
           (f->pos & f->mask) + len <= f->mask + 1 && __atomic_load_n(&f->noted, __ATOMIC_RELAXED) != 0;
}

static int read_goes_inline(const struct shmpipe_fast *f, size_t len) {
    return f->kind == SHMPIPE_FAST_READER && len - 1 < f->step && f->limit - f->pos >= len &&
           (f->pos & f->mask) + len <= f->mask + 1;
}

/* ------------------------------------------------- the lent state's layout */

static uint64_t load64(const unsigned char *p) { return __atomic_load_n((const uint64_t *)(const void *)p, __ATOMIC_RELAXED); }
static uint32_t load32(const unsigned char *p) { return __atomic_load_n((const uint32_t *)(const void *)p, __ATOMIC_RELAXED); }

/* A control block's header, at `block`, is the ring's. */
static void check_block(const unsigned char *block, uint64_t role, const char *what) {
    if ((uintptr_t)block % A.data_offset != 0)
        FAIL(5, "layout: %s is not at the start of a region (%p)", what, (const void *)block);
    if (load64(block + A.magic_at) != A.magic)
        FAIL(5, "layout: %s: magic %#llx, expected %#llx", what,
             (unsigned long long)load64(block + A.magic_at), (unsigned long long)A.magic);
    if (load32(block + A.version_at) != A.version)
        FAIL(5, "layout: %s: version %u, expected %llu", what, load32(block + A.version_at),
             (unsigned long long)A.version);
    if (load32(block + A.role_at) != role)
        FAIL(5, "layout: %s: role %#x, expected %#llx", what, load32(block + A.role_at),
             (unsigned long long)role);
    if (load64(block + A.capacity_at) != A.capacity)
        FAIL(5, "layout: %s: capacity %llu, expected %llu", what,
             (unsigned long long)load64(block + A.capacity_at), (unsigned long long)A.capacity);
}

/* The state a writer lends: its data after its own control block, its
 * index in that block, the peer's parked word in the reader's block. */
static void check_lent_writer(void) {
    static int done;
    const struct shmpipe_fast *f = fast_w();
    if (done || f->step == 0)
        return;
    if (f->mask + 1 != A.capacity)
        FAIL(5, "layout: the writer's mask is %#llx", (unsigned long long)f->mask);
    const unsigned char *own = f->data - A.data_offset;
    check_block(own, A.writer_role, "the writer's block (data - DATA_OFFSET)");
    if ((const unsigned char *)f->index != own + A.index_at)
        FAIL(5, "layout: the writer's index is at +%td of its block, expected +%llu",
             (const unsigned char *)f->index - own, (unsigned long long)A.index_at);
    const unsigned char *peer = (const unsigned char *)f->peer_parked - A.parked_at;
    check_block(peer, A.reader_role, "the reader's block (peer_parked - offset::PARKED)");
    done = 1;
    stats.layout_checks++;
}

/* The state a reader lends: the data after the writer's block, whose
 * parked word is the peer's; its own index in its own block. */
static void check_lent_reader(void) {
    static int done;
    const struct shmpipe_fast *f = fast_r();
    if (done || f->step == 0)
        return;
    if (f->mask + 1 != A.capacity)
        FAIL(5, "layout: the reader's mask is %#llx", (unsigned long long)f->mask);
    const unsigned char *peer = f->data - A.data_offset;
    check_block(peer, A.writer_role, "the writer's block (data - DATA_OFFSET)");
    if ((const unsigned char *)f->peer_parked != peer + A.parked_at)
        FAIL(5, "layout: the peer's parked word is at +%td of the writer's block, expected +%llu",
             (const unsigned char *)f->peer_parked - peer, (unsigned long long)A.parked_at);
    const unsigned char *own = (const unsigned char *)f->index - A.index_at;
    check_block(own, A.reader_role, "the reader's block (index - offset::INDEX)");
    done = 1;
    stats.layout_checks++;
}

/* ------------------------------------------------------ moving the bytes */

/* Writes the next `n` bytes of FROM_C in one of the ways C code can. */
static void write_item(size_t n) {
    for (size_t i = 0; i < n; i++) {
        item[i] = pattern(FROM_C_SALT, stats.wrote + i);
        if (stats.wrote + i == A.corrupt_at)
            item[i] ^= 0x5a;
    }
    uint64_t how = next_rand() % 100;
    ssize_t rc;
    if (how < 80 || (how >= 94 && n > A.capacity)) {
        struct shmpipe_fast *f = fast_w();
        int in = write_goes_inline(f, n);
        uint64_t woken = f->woken;
        rc = shmpipe_write(w, item, n); /* the header's inline function */
        if (in) {
            stats.inline_writes++;
            stats.inline_write_wakes += f->woken != woken;
            stats.light_publishes += f->light != 0;
        }
    } else if (how < 88) {
        rc = (shmpipe_write)(w, item, n); /* the library's */
    } else if (how < 94) {
        size_t done = 0;
        while (done < n) {
            ssize_t k = shmpipe_write_some(w, item + done, n - done);
            if (k <= 0)
                FAIL(3, "write_some at byte %llu: %zd", (unsigned long long)(stats.wrote + done), k);
            done += (size_t)k;
        }
        rc = (ssize_t)done;
    } else {
        shmpipe_iovec parts[2];
        int e = shmpipe_writer_reserve(w, n, parts);
        if (e < 0)
            FAIL(3, "reserve of %zu bytes at byte %llu: %d", n, (unsigned long long)stats.wrote, e);
        memcpy(parts[0].base, item, parts[0].len);
        memcpy(parts[1].base, item + parts[0].len, parts[1].len);
        e = shmpipe_writer_commit(w, n);
        rc = e < 0 ? e : (ssize_t)n;
    }
    if (rc != (ssize_t)n)
        FAIL(3, "write of %zu bytes at byte %llu: %zd", n, (unsigned long long)stats.wrote, rc);
    stats.wrote += n;
    check_lent_writer();
}

/* Checks `n` bytes just read from TO_C. */
static void check_read(const unsigned char *p, size_t n) {
    if (stats.read + n > A.to_c)
        FAIL(10, "C reader: more than the %llu bytes sent", (unsigned long long)A.to_c);
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern(TO_C_SALT, stats.read + i))
            FAIL(10, "C reader: byte %llu is 0x%02x, expected 0x%02x",
                 (unsigned long long)(stats.read + i), p[i], pattern(TO_C_SALT, stats.read + i));
    stats.read += n;
}

/* Reads up to `want` bytes of TO_C in one of the ways C code can; 0 at
 * its end of file (which must come after the last byte, not before). */
static int read_item(size_t want) {
    uint64_t how = next_rand() % 100;
    ssize_t n;
    if (how < 80) {
        struct shmpipe_fast *f = fast_r();
        int in = read_goes_inline(f, want);
        uint64_t woken = f->woken;
        n = shmpipe_read(r, item, want); /* the header's inline function */
        if (in) {
            stats.inline_reads++;
            stats.inline_read_wakes += f->woken != woken;
            stats.light_publishes += f->light != 0;
        }
    } else if (how < 90) {
        n = (shmpipe_read)(r, item, want); /* the library's */
    } else {
        shmpipe_const_iovec parts[2];
        n = shmpipe_reader_peek(r, parts);
        if (n > 0) {
            size_t take = (size_t)n < want ? (size_t)n : want;
            size_t a = take < parts[0].len ? take : parts[0].len;
            memcpy(item, parts[0].base, a);
            memcpy(item + a, parts[1].base, take - a);
            int e = shmpipe_reader_consume(r, take);
            n = e < 0 ? e : (ssize_t)take;
        }
    }
    if (n < 0)
        FAIL(3, "read at byte %llu: %zd", (unsigned long long)stats.read, n);
    if (n == 0) {
        if (stats.read != A.to_c)
            FAIL(10, "C reader: end of file after %llu of %llu bytes", (unsigned long long)stats.read,
                 (unsigned long long)A.to_c);
        return 0;
    }
    check_read(item, (size_t)n);
    check_lent_reader();
    return 1;
}

/* Both streams at once from one thread, in random steps and naps: the
 * Rust test reads and writes on threads of its own, so neither side
 * waits for the other in a circle. */
static void stream(void) {
    int reading = 1;
    if (stats.wrote == A.from_c && A.close) {
        shmpipe_writer_close(w);
        w = NULL;
    }
    while (stats.wrote < A.from_c || reading) {
        uint64_t c = next_rand() % 1000;
        if (c < A.sleep) {
            nap_ms(1 + (long)(next_rand() % 2));
        } else if (stats.wrote < A.from_c && (!reading || (c & 1))) {
            size_t n = item_size();
            if (n > A.from_c - stats.wrote)
                n = (size_t)(A.from_c - stats.wrote);
            write_item(n);
            if (stats.wrote == A.from_c && A.close) {
                shmpipe_writer_close(w); /* the Rust reader's end of file */
                w = NULL;
            }
        } else {
            reading = read_item(item_size());
        }
    }
}

/* ---------------------------------------------------------- the wake-ups */

static uint64_t parked_word(const struct shmpipe_fast *f) {
    return __atomic_load_n(f->peer_parked, __ATOMIC_RELAXED);
}

/* Waits until the peer sleeps in a parking other than `not`, and still
 * does a while later (it set the bit before its last look at our index;
 * the nap lets that look pass). */
static uint64_t wait_parked(const struct shmpipe_fast *f, uint64_t not) {
    for (;;) {
        uint64_t p = parked_word(f);
        if ((p & SHMPIPE_FAST_PARKED) != 0 && p != not) {
            nap_ms(20);
            if (parked_word(f) == p)
                return p;
        } else {
            nap_ms(1);
        }
    }
}

/* Waits until the peer leaves the parking `p`: only a wake-up ends it. */
static void wait_woken(const struct shmpipe_fast *f, uint64_t p) {
    while (parked_word(f) == p)
        nap_ms(1);
}

/* The Rust reader sleeps on an empty ring; the header's inline write
 * must wake it (with skip_wake, the state says that parking was woken
 * already, and the Rust reader sleeps on: the test's watchdog must see a
 * hang). */
static void wake_reader(void) {
    for (size_t i = 0; i < 8; i++)
        item[i] = pattern(FROM_C_SALT, i);
    /* Not lent yet: the inline function calls the library, which lends. */
    if (shmpipe_write(w, item, 8) != 8)
        FAIL(3, "wake_reader: the first write failed");
    stats.wrote = 8;
    struct shmpipe_fast *f = fast_w();
    check_lent_writer();
    if (f->step == 0)
        FAIL(4, "wake_reader: the writer's state was not lent");
    uint64_t p = wait_parked(f, f->woken);
    if (!write_goes_inline(f, 8))
        FAIL(4, "wake_reader: 8 bytes would not go inline");
    if (A.skip_wake)
        f->woken = p;
    uint64_t woken = f->woken;
    for (size_t i = 0; i < 8; i++)
        item[i] = pattern(FROM_C_SALT, stats.wrote + i);
    if (shmpipe_write(w, item, 8) != 8)
        FAIL(3, "wake_reader: the inline write failed");
    stats.wrote += 8;
    stats.inline_writes++;
    stats.scenario_wakes += f->woken != woken;
    stats.inline_write_wakes += f->woken != woken;
    printf("c-peer: armed\n");
    fflush(stdout);
    wait_woken(f, p);
}

/* The Rust writer sleeps on a full ring; the header's inline read must
 * wake it (skip_wake as above). */
static void wake_writer(void) {
    if (shmpipe_reader_sync(r) != 0) /* lends the state */
        FAIL(4, "wake_writer: shmpipe_reader_sync failed");
    struct shmpipe_fast *f = fast_r();
    if (f->step == 0)
        FAIL(4, "wake_writer: the reader's state was not lent");
    check_lent_reader();
    /* The ring is full and the writer asleep; the library's read sees
     * the full ring, wakes the writer and lends it all. */
    uint64_t p = wait_parked(f, 0);
    ssize_t n = shmpipe_fast_read(r, item, 8);
    if (n != 8)
        FAIL(3, "wake_writer: the library's read gave %zd", n);
    check_read(item, 8);
    p = wait_parked(f, p); /* asleep again, on a full ring again */
    if (!read_goes_inline(f, 8))
        FAIL(4, "wake_writer: 8 bytes would not go inline");
    if (A.skip_wake)
        f->woken = p;
    uint64_t woken = f->woken;
    if (shmpipe_read(r, item, 8) != 8)
        FAIL(3, "wake_writer: the inline read failed");
    check_read(item, 8);
    stats.inline_reads++;
    stats.scenario_wakes += f->woken != woken;
    stats.inline_read_wakes += f->woken != woken;
    printf("c-peer: armed\n");
    fflush(stdout);
    wait_woken(f, p);
}

/* ------------------------------------------------------------------ main */

static void parse(int argc, char **argv) {
    static const struct {
        const char *name;
        uint64_t *value;
    } keys[] = {
        {"seed", &A.seed},           {"capacity", &A.capacity},       {"to_c", &A.to_c},
        {"from_c", &A.from_c},       {"sleep", &A.sleep},             {"close", &A.close},
        {"corrupt_at", &A.corrupt_at}, {"skip_wake", &A.skip_wake},   {"limit", &A.limit},
        {"data_offset", &A.data_offset}, {"magic_at", &A.magic_at},   {"version_at", &A.version_at},
        {"role_at", &A.role_at},     {"capacity_at", &A.capacity_at}, {"index_at", &A.index_at},
        {"parked_at", &A.parked_at}, {"magic", &A.magic},             {"version", &A.version},
        {"writer_role", &A.writer_role}, {"reader_role", &A.reader_role},
        {"parked_bit", &A.parked_bit},
    };
    for (int i = 1; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq == NULL)
            FAIL(2, "argument %s is not KEY=VALUE", argv[i]);
        *eq = '\0';
        if (strcmp(argv[i], "scenario") == 0) {
            A.scenario = eq + 1;
            continue;
        }
        size_t k = 0;
        while (k < sizeof keys / sizeof keys[0] && strcmp(keys[k].name, argv[i]) != 0)
            k++;
        if (k == sizeof keys / sizeof keys[0])
            FAIL(2, "unknown key %s", argv[i]);
        char *end;
        errno = 0;
        *keys[k].value = strtoull(eq + 1, &end, 0);
        if (errno != 0 || *end != '\0')
            FAIL(2, "%s=%s is not a number", argv[i], eq + 1);
    }
    if (A.data_offset == 0 || A.capacity == 0)
        FAIL(2, "the layout and the capacity are needed");
    if (A.parked_bit != SHMPIPE_FAST_PARKED)
        FAIL(5, "layout: the ring's PARKED bit is %#llx, the header's SHMPIPE_FAST_PARKED %#llx",
             (unsigned long long)A.parked_bit, (unsigned long long)SHMPIPE_FAST_PARKED);
}

int main(int argc, char **argv) {
    /* Never outlive the test, even if it dies without killing us. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    parse(argc, argv);
    alarm((unsigned)A.limit);
    rng = A.seed;
    int e = shmpipe_reader_from_env("TO_C", &r);
    if (e != 0)
        FAIL(2, "shmpipe_reader_from_env(TO_C): %d", e);
    e = shmpipe_writer_from_env("FROM_C", &w);
    if (e != 0)
        FAIL(2, "shmpipe_writer_from_env(FROM_C): %d", e);
    if (strcmp(A.scenario, "wake_reader") == 0)
        wake_reader();
    else if (strcmp(A.scenario, "wake_writer") == 0)
        wake_writer();
    else if (strcmp(A.scenario, "stream") != 0)
        FAIL(2, "unknown scenario %s", A.scenario);
    stream();
    printf("c-peer: wrote=%llu read=%llu inline_writes=%llu inline_reads=%llu "
           "inline_write_wakes=%llu inline_read_wakes=%llu scenario_wakes=%llu layout_checks=%llu "
           "light_publishes=%llu\n",
           (unsigned long long)stats.wrote, (unsigned long long)stats.read,
           (unsigned long long)stats.inline_writes, (unsigned long long)stats.inline_reads,
           (unsigned long long)stats.inline_write_wakes, (unsigned long long)stats.inline_read_wakes,
           (unsigned long long)stats.scenario_wakes, (unsigned long long)stats.layout_checks,
           (unsigned long long)stats.light_publishes);
    if (A.close)
        shmpipe_reader_close(r);
    return 0;
}
