/* `shmpipe-c`'s calls: the header's shmpipe_write and shmpipe_read, as a
 * C program that includes shmpipe.h gets them (inline, see
 * crates/capi/src/fast.rs), behind one call each from the Rust harness. */
#include <errno.h>

#include "shmpipe.h"

ssize_t shmpipe_bench_write(shmpipe_writer *w, const void *buf, size_t len) {
    /* The seeds' item at a length known at compile time, as in a C
     * program's `shmpipe_write(w, &v, sizeof v)`. */
    if (len == 8)
        return shmpipe_write(w, buf, 8);
    return shmpipe_write(w, buf, len);
}

ssize_t shmpipe_bench_read(shmpipe_reader *r, void *buf, size_t len) {
    if (len == 8)
        return shmpipe_read(r, buf, 8);
    return shmpipe_read(r, buf, len);
}

/* The stream test's sender in C: the counters first..last, one 8-byte
 * write each (native byte order: both ends are this program). 0 or a
 * negative errno. */
ssize_t shmpipe_bench_send_counters(shmpipe_writer *w, uint64_t first, uint64_t last) {
    for (uint64_t i = first; i <= last; i++) {
        ssize_t n = shmpipe_write(w, &i, sizeof i);
        if (n != (ssize_t)sizeof i)
            return n < 0 ? n : -EIO;
    }
    return 0;
}

/* The stream test's receiver in C: checks each counter. 0; a negative
 * errno; 2 at an early end of file; or 1 with the first wrong one in *at
 * and what came in *got. */
ssize_t shmpipe_bench_recv_counters(shmpipe_reader *r, uint64_t first, uint64_t last, uint64_t *at,
                                    uint64_t *got) {
    for (uint64_t i = first; i <= last; i++) {
        uint64_t v;
        ssize_t n = shmpipe_read(r, &v, sizeof v);
        if (n != (ssize_t)sizeof v) {
            /* Part of the item: the rest in more reads. */
            unsigned char *p = (unsigned char *)&v;
            size_t have = 0;
            for (;;) {
                if (n < 0)
                    return n;
                if (n == 0)
                    return 2;
                have += (size_t)n;
                if (have == sizeof v)
                    break;
                n = shmpipe_read(r, p + have, sizeof v - have);
            }
        }
        if (v != i) {
            *at = i;
            *got = v;
            return 1;
        }
    }
    return 0;
}
