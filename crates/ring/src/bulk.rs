//! Copies of more than 16 bytes into and out of the ring: `memcpy`, but
//! for a few pages on AMD Zen 3 and later, where it goes by vector moves.
//!
//! Why: from 2112 bytes on (with FSRM) glibc 2.36's `memcpy` uses
//! `rep movsb`, whose start on the AMD Zen 5 guest of issue 25 costs about
//! 80 ns more than a vector loop when the lines sit in the other core's
//! cache, as a ring's do: a stream of 4 KiB writes between two processes
//! took 248 ns a write against 164 with the writer's loop (medians of 9
//! interleaved rounds), and of 8 KiB writes 249 against 181 with the
//! reader's. Past a few pages `rep movsb` wins again, by more (the
//! writer's 8 KiB: 1.3x slower by vectors, the reader's 24 KiB: 1.2x),
//! so each side keeps `memcpy` above its own bound: [`WRITE_VECTOR_MAX`],
//! [`READ_VECTOR_MAX`]. Only Zen 5 was measured; Zen 3 and 4 share the
//! gate because their `bandwidth-4KiB` also trailed shmem-ipc's (0.90x on
//! Zen 4). On Intel, where shmpipe's 4 KiB writes with `rep movsb` were
//! ahead of shmem-ipc's, nothing changes. Measurements: docs/roundtrip.md,
//! "The copy on Zen 5"; such copies through a ring: `tests/ring.rs`.
//!
//! # Examples
//!
//! ```
//! use shmpipe_ring::bulk::{READ_VECTOR_MAX, WRITE_VECTOR_MAX};
//!
//! // A 4 KiB write (one page) may go by vectors; reads up to four pages.
//! assert_eq!(WRITE_VECTOR_MAX, 4096);
//! assert_eq!(READ_VECTOR_MAX, 4 * 4096);
//! ```

/// The longest copy into the ring that goes by vectors (where they are
/// used at all): one page.
pub const WRITE_VECTOR_MAX: usize = 4096;

/// The longest copy out of the ring that goes by vectors: four pages.
pub const READ_VECTOR_MAX: usize = 4 * 4096;

/// Copies shorter than this go by `memcpy` everywhere: below glibc's
/// `rep movsb` threshold, where its own vector loop already runs.
const VECTOR_MIN: usize = 2048;

/// Copies `len` (more than 16) bytes from `src` to `dst`; by vectors if
/// `len` is at most `VECTOR_MAX` and this CPU is one where they win.
///
/// # Safety
///
/// As for `ptr::copy_nonoverlapping`.
#[inline(never)]
pub(crate) unsafe fn copy<const VECTOR_MAX: usize>(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if (VECTOR_MIN..=VECTOR_MAX).contains(&len) && vectors_win() {
        // SAFETY: the caller's promise, passed on; len >= 64.
        unsafe { copy_by_vectors(src, dst, len) };
        return;
    }
    // SAFETY: the caller's promise, passed on.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Whether this CPU is an AMD (or Hygon) of family 0x19 (Zen 3) or later
/// (see [`crate::cpu`]: looked up once, then a load).
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline(always)]
fn vectors_win() -> bool {
    crate::cpu::this().is_amd_zen3_or_later()
}

/// The vector copy: 64 bytes a step in 16-byte SSE2 moves (every x86_64
/// has them), the last 64 bytes as one more step that may overlap the
/// one before.
///
/// # Safety
///
/// As for `ptr::copy_nonoverlapping`, and `len >= 64`.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline(never)]
unsafe fn copy_by_vectors(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
    debug_assert!(len >= 64);
    // SAFETY: every step reads and writes 64 bytes at an offset of at
    // most len - 64, inside both ranges the caller vouches for; unaligned
    // 16-byte loads and stores are what these instructions are for.
    let step = |at: usize| unsafe {
        let s = src.add(at).cast::<__m128i>();
        let d = dst.add(at).cast::<__m128i>();
        let (a, b, c, e) = (
            _mm_loadu_si128(s),
            _mm_loadu_si128(s.add(1)),
            _mm_loadu_si128(s.add(2)),
            _mm_loadu_si128(s.add(3)),
        );
        _mm_storeu_si128(d, a);
        _mm_storeu_si128(d.add(1), b);
        _mm_storeu_si128(d.add(2), c);
        _mm_storeu_si128(d.add(3), e);
    };
    let mut at = 0;
    while at + 64 <= len {
        step(at);
        at += 64;
    }
    if at < len {
        step(len - 64);
    }
}

#[cfg(all(test, target_arch = "x86_64", not(miri), not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_vector_copy_copies_every_byte_and_nothing_else() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in [64, 65, 127, 2048, 2049, 4095, 4096, 4100, 16_384] {
            for offset in [0, 1, 15, 63] {
                let mut dst = vec![0xAAu8; len + 200];
                // SAFETY: src holds offset + len bytes, dst 100 + len + 100.
                unsafe {
                    copy_by_vectors(src.as_ptr().add(offset), dst.as_mut_ptr().add(100), len)
                };
                assert_eq!(
                    &dst[100..100 + len],
                    &src[offset..offset + len],
                    "{len} {offset}"
                );
                assert!(dst[..100]
                    .iter()
                    .chain(&dst[100 + len..])
                    .all(|&b| b == 0xAA));
            }
        }
    }

    #[test]
    fn the_cpu_check_agrees_with_itself() {
        assert_eq!(vectors_win(), crate::cpu::this().is_amd_zen3_or_later());
        assert_eq!(vectors_win(), vectors_win());
    }
}
