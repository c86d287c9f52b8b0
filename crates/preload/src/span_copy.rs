//! Copies between a program's buffer and one span of a resident ring's
//! bytes (`resident`, which splits a copy at the ring's end).
//!
//! The ring's bytes are atomics: a reader's copy may race with the writer
//! (when another reader took those bytes first, and the copy is thrown
//! away), which a plain copy would make a data race. On x86_64 a span
//! goes by one `rep movsb` in inline assembly, whose accesses are the
//! hardware's own (each byte read or written whole, as relaxed atomic
//! accesses are) and which the compiler cannot reorder or split: a
//! 64 KiB `bw_pipe` across the two CPUs of the Intel guest (model 207)
//! moved 3.3 times the bytes a second of the word-at-a-time loop it
//! replaces, and 1.2 times those of a loop of 16-byte vector moves
//! (docs/run.md, "The copy"). Elsewhere, and under Miri, a span goes by
//! relaxed atomic loads and stores of whole words.
//!
//! The last write's copy (`resident`) also relies on the order x86 keeps
//! between a `rep movsb` and the single stores and loads around it (a
//! string operation's stores do not pass earlier stores, nor later ones
//! pass them; its loads are ordered with later loads): its sequence lock
//! needs the fences around the copy to hold for the copy's accesses.
//!
//! The test below checks both ways byte for byte.

use core::sync::atomic::{AtomicU64, Ordering};

/// Copies `len` bytes from `from` into `words`' bytes from byte `at` on.
///
/// # Safety
///
/// `from` is readable for `len` bytes; `at + len` is at most the bytes
/// of `words`.
#[inline(always)]
pub unsafe fn put(words: &[AtomicU64], at: usize, from: *const u8, len: usize) {
    debug_assert!(at + len <= words.len() * 8);
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: the bytes are atomics (interior mutability, so writable
    // through a shared reference), `at + len` inside them and `from`
    // readable for `len` (the caller's contract).
    unsafe {
        movsb(from, words.as_ptr().cast::<u8>().cast_mut().add(at), len)
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: the caller's contract, passed on.
    unsafe {
        put_by_words(words, at, from, len)
    };
}

/// Copies `len` of `words`' bytes from byte `at` on to `to`.
///
/// # Safety
///
/// `to` is writable for `len` bytes; `at + len` is at most the bytes of
/// `words`.
#[inline(always)]
pub unsafe fn take(words: &[AtomicU64], at: usize, to: *mut u8, len: usize) {
    debug_assert!(at + len <= words.len() * 8);
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `at + len` inside the words' bytes, `to` writable for `len`
    // (the caller's contract).
    unsafe {
        movsb(words.as_ptr().cast::<u8>().add(at), to, len)
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: the caller's contract, passed on.
    unsafe {
        take_by_words(words, at, to, len)
    };
}

/// `rep movsb`: `len` bytes from `src` to `dst`, lowest address first.
///
/// # Safety
///
/// `src` readable and `dst` writable for `len` bytes, not overlapping.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline(always)]
unsafe fn movsb(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract; the direction flag is clear, as the
    // ABI keeps it outside code that sets it.
    unsafe {
        core::arch::asm!(
            "rep movsb",
            inout("rcx") len => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags),
        )
    };
}

/// `put` by relaxed atomic words: a part word at either end is read,
/// changed and stored back whole (its other bytes are free or published
/// and unchanged, so storing them back as read changes nothing).
///
/// # Safety
///
/// As for `put`.
#[cfg_attr(all(target_arch = "x86_64", not(miri)), allow(dead_code))]
unsafe fn put_by_words(words: &[AtomicU64], at: usize, from: *const u8, len: usize) {
    let mut i = 0;
    while i < len {
        let (w, off) = ((at + i) / 8, (at + i) % 8);
        let word = &words[w];
        let k = (8 - off).min(len - i);
        let v = if k == 8 {
            // SAFETY: `from[i..i + 8]` is readable (the caller's contract).
            unsafe { from.add(i).cast::<u64>().read_unaligned() }
        } else {
            let mut bytes = word.load(Ordering::Relaxed).to_ne_bytes();
            // SAFETY: `from[i..i + k]` is readable (the caller's contract).
            unsafe { core::ptr::copy_nonoverlapping(from.add(i), bytes.as_mut_ptr().add(off), k) };
            u64::from_ne_bytes(bytes)
        };
        word.store(v, Ordering::Relaxed);
        i += k;
    }
}

/// `take` by relaxed atomic words.
///
/// # Safety
///
/// As for `take`.
#[cfg_attr(all(target_arch = "x86_64", not(miri)), allow(dead_code))]
unsafe fn take_by_words(words: &[AtomicU64], at: usize, to: *mut u8, len: usize) {
    let mut i = 0;
    while i < len {
        let (w, off) = ((at + i) / 8, (at + i) % 8);
        let bytes = words[w].load(Ordering::Relaxed).to_ne_bytes();
        let k = (8 - off).min(len - i);
        // SAFETY: `to[i..i + k]` is writable (the caller's contract).
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr().add(off), to.add(i), k) };
        i += k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every offset and length over three words, by both ways, against a
    /// plain array: the copy moves exactly the bytes asked for.
    #[test]
    fn spans_move_exactly_their_bytes() {
        type Put = unsafe fn(&[AtomicU64], usize, *const u8, usize);
        type Take = unsafe fn(&[AtomicU64], usize, *mut u8, usize);
        let way: [(Put, Take); 2] = [(put, take), (put_by_words, take_by_words)];
        for (put, take) in way {
            for at in 0..24 {
                for len in 0..=24 - at {
                    let words: [AtomicU64; 3] = Default::default();
                    let mut want = [0u8; 24];
                    let src: Vec<u8> = (1..=len as u8).collect();
                    want[at..at + len].copy_from_slice(&src);
                    // SAFETY: at + len <= 24 bytes; `src` holds len bytes.
                    unsafe { put(&words, at, src.as_ptr(), len) };
                    let mut all = [0u8; 24];
                    // SAFETY: 24 bytes of three words into 24 bytes.
                    unsafe { take(&words, 0, all.as_mut_ptr(), 24) };
                    assert_eq!(all, want, "put at {at}, {len} bytes");
                    let mut back = vec![0u8; len];
                    // SAFETY: as for the put.
                    unsafe { take(&words, at, back.as_mut_ptr(), len) };
                    assert_eq!(back, src, "take at {at}, {len} bytes");
                }
            }
        }
    }
}
