/* Prints what a C compiler makes of the header's inline state: the size,
 * alignment, and every field's offset and size of struct shmpipe_fast,
 * and the SHMPIPE_FAST_* constants, one "name value" a line.
 * crates/capi/tests/conformance.rs compiles and runs it, and checks each
 * value against the Rust struct the library lends and the ring's layout:
 * the header's inline functions read that struct by these offsets. */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#include <shmpipe.h>

#define FIELD(f)                                                                     \
    printf("offset.%s %zu\nsize.%s %zu\n", #f, offsetof(struct shmpipe_fast, f), #f, \
           sizeof(((struct shmpipe_fast *)0)->f))

int main(void) {
    printf("size %zu\n", sizeof(struct shmpipe_fast));
    printf("align %zu\n", alignof(struct shmpipe_fast));
    FIELD(kind);
    FIELD(step);
    FIELD(data);
    FIELD(mask);
    FIELD(pos);
    FIELD(limit);
    FIELD(index);
    FIELD(peer_parked);
    FIELD(woken);
    FIELD(light);
    FIELD(noted);
    FIELD(lent_pos);
    printf("SHMPIPE_FAST_WRITER %llu\n", (unsigned long long)SHMPIPE_FAST_WRITER);
    printf("SHMPIPE_FAST_READER %llu\n", (unsigned long long)SHMPIPE_FAST_READER);
    printf("SHMPIPE_FAST_STEP %llu\n", (unsigned long long)SHMPIPE_FAST_STEP);
    printf("SHMPIPE_FAST_PARKED %llu\n", (unsigned long long)SHMPIPE_FAST_PARKED);
    return 0;
}
