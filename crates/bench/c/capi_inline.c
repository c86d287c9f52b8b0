/* `shmpipe-c`'s calls: the header's shmpipe_write and shmpipe_read, as a
 * C program that includes shmpipe.h gets them (inline, see
 * crates/capi/src/fast.rs), behind one call each from the Rust harness. */
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
