//! The inline copy: the bytes of the writer's last small publish, kept on
//! the cache line of its tail, so that a reader waiting on the tail gets
//! them with it.
//!
//! Why: a message announced by a tail on one line and written to the data
//! on another costs a waiting reader two cache-line transfers in a row (the
//! tail, then the data), and the writer a third (taking back the data line
//! the reader read last). A copy beside the tail makes it one transfer each
//! way, as a bouncing cache line (measured between two threads on the AMD
//! guest: 120 ns per 8-byte round trip with the data apart, 90 ns with the
//! copy beside the tail, one bouncing line 114 ns). On Intel a transfer
//! costs about twice as much (266 ns per bouncing-line round trip), so the
//! transfer saved is worth more there, while the copy costs the same few
//! stores to a line the writer owns anyway.
//!
//! ```text
//! writer's index line (offset 128, 64 bytes):
//! [ tail: u64 | at: u64 | len: u64 | bytes: 40, little-endian words ]
//! ```
//!
//! The protocol is a sequence lock whose sequence word is `at`, the
//! position of the copy's first byte:
//!
//! - the writer, publishing `n <= INLINE_MAX` bytes from position `p`,
//!   stores `at = BUSY`, fences (Release), stores `len` and the words,
//!   stores `at = p` (Release), then the tail (Release) as always;
//! - a reader whose cached tail was `p` and that loaded a newer tail `t`
//!   (Acquire) loads `at` (Acquire); only if it is `p`, loads `len` and the
//!   words, fences (Acquire) and loads `at` again: if still `p`, no word it
//!   read comes from a later rewrite, and the copy holds the bytes of the
//!   one publish that started at `p`.
//!
//! The tail stays the authority: the copy is used only for bytes below the
//! tail just loaded, and only if it says it starts exactly where the
//! reader's cached tail ended; anything else (a copy being rewritten, one
//! from an earlier publish, a writer that does not keep one, such as the C
//! API's inline path, or a hostile writer's lie about `len`) makes the
//! reader read the data as before. Everything here is loaded from the
//! peer's memory as plain words and checked like an index: a hostile
//! writer can make the reader read garbage bytes, as it could by writing
//! them to the data, and nothing else.
//!
//! # Examples
//!
//! ```
//! // A small publish travels with the tail: the reader gets the same bytes
//! // whether it takes them from the copy or from the data.
//! let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
//! assert_eq!(tx.push_publish_copy(b"small", true), Some(false));
//! let mut buf = [0; 5];
//! rx.available(1).unwrap();
//! assert_eq!(rx.pop(&mut buf), 5);
//! assert_eq!(&buf, b"small");
//! ```

use crate::sync::{fence, AtomicU64, Ordering};

/// The most bytes an inline copy holds: what fits on the tail's 64-byte
/// line beside the tail, `at` and `len`.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::inline::INLINE_MAX;
/// use shmpipe_ring::layout::offset;
///
/// // The copy fills the index's 64-byte line after the index, `at` and `len`.
/// assert_eq!(offset::INLINE + INLINE_MAX, offset::INDEX + 64);
/// ```
pub const INLINE_MAX: usize = 40;

const WORDS: usize = INLINE_MAX / 8;

/// `at` while the writer rewrites the copy: no position a reader looks
/// for (a reader at position `u64::MAX` reads the data).
const BUSY: u64 = u64::MAX;

/// The inline copy's words in a control block (see the module docs).
///
/// # Examples
///
/// ```
/// use shmpipe_ring::inline::{Inline, INLINE_MAX};
///
/// // `at`, `len` and the words: 56 bytes, with the tail one 64-byte line.
/// assert_eq!(std::mem::size_of::<Inline>(), 16 + INLINE_MAX);
/// ```
#[derive(Debug)]
#[repr(C)]
pub struct Inline {
    at: AtomicU64,
    len: AtomicU64,
    words: [AtomicU64; WORDS],
}

impl Inline {
    /// Offset of `len` from `at`, for `layout::offset`.
    #[cfg(not(loom))]
    pub(crate) const LEN_OFFSET: usize = std::mem::offset_of!(Inline, len);
    /// Offset of the words from `at`, for `layout::offset`.
    #[cfg(not(loom))]
    pub(crate) const WORDS_OFFSET: usize = std::mem::offset_of!(Inline, words);

    /// An empty copy.
    pub(crate) fn new() -> Inline {
        Inline {
            at: AtomicU64::new(BUSY),
            len: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Empties the copy (the owner, before the block is shared).
    pub(crate) fn clear(&self) {
        self.at.store(BUSY, Ordering::Relaxed);
        self.len.store(0, Ordering::Relaxed);
    }

    /// The writer: records the `len` bytes (at most [`INLINE_MAX`]) from
    /// position `at`, given as little-endian words (`word(i)` holds bytes
    /// `8 * i ..`; what it holds past `len` is not read); the caller
    /// stores the tail next.
    #[inline]
    pub(crate) fn write(&self, at: u64, len: usize, word: impl Fn(usize) -> u64) {
        debug_assert!(len <= INLINE_MAX);
        self.at.store(BUSY, Ordering::Relaxed);
        // SYNC: pairs with the Acquire fence in `read`: a reader that loads
        // any word stored below loads BUSY (or a later `at`) after its
        // fence, and drops what it read.
        fence(Ordering::Release);
        self.len.store(len as u64, Ordering::Relaxed);
        for (i, w) in self.words.iter().enumerate().take(len.div_ceil(8)) {
            w.store(word(i), Ordering::Relaxed);
        }
        // SYNC: Release pairs with the Acquire load of `at` in `read`: the
        // words above are visible to a reader that sees this `at`.
        self.at.store(at, Ordering::Release);
    }

    /// A reader whose cached tail was `at` and that has seen `avail` more
    /// bytes published (the tail it loaded, with Acquire, minus `at`):
    /// copies into `stash` the copy's bytes if it holds the bytes from
    /// `at` and stayed whole while read, and returns how many (0: read the
    /// data instead).
    #[inline]
    pub(crate) fn read(&self, at: u64, avail: u64, stash: &mut [u8; INLINE_MAX]) -> usize {
        let (n, words) = self.read_words(at, avail);
        if n != 0 {
            for (chunk, w) in stash.chunks_exact_mut(8).zip(words) {
                chunk.copy_from_slice(&w.to_le_bytes());
            }
        }
        n
    }

    /// [`read_words`](Self::read_words) for a reader that has seen
    /// exactly `n` more bytes published (1 to [`INLINE_MAX`]) and wants
    /// all of them: the words if the copy holds exactly those `n` bytes.
    /// The same loads and fences; one test of `len` (equal to `n`) where
    /// `read_words` makes three.
    #[inline(always)]
    pub(crate) fn read_exact_words(&self, at: u64, n: u64) -> Option<[u64; WORDS]> {
        debug_assert!((1..=INLINE_MAX as u64).contains(&n));
        let mut words = [0u64; WORDS];
        // SYNC: Acquire pairs with the Release store of `at` in `write`.
        if at == BUSY || self.at.load(Ordering::Acquire) != at {
            return None;
        }
        // `n` is no more than the tail says is there nor than the copy
        // holds: `len` equal to it is checked like an index.
        if self.len.load(Ordering::Relaxed) != n {
            return None;
        }
        // As in `read_words`: every word (loom: those `n` covers).
        #[cfg(not(loom))]
        let count = WORDS;
        #[cfg(loom)]
        let count = (n as usize).div_ceil(8);
        for (w, word) in words.iter_mut().zip(&self.words).take(count) {
            *w = word.load(Ordering::Relaxed);
        }
        // SYNC: pairs with the Release fence in `write` (see there).
        fence(Ordering::Acquire);
        if self.at.load(Ordering::Relaxed) != at {
            return None;
        }
        Some(words)
    }

    /// [`read`](Self::read)'s protocol, giving the words as loaded:
    /// how many bytes the copy holds (0: read the data instead) and its
    /// words (`words[i]` holds bytes `8 * i ..`, little-endian).
    #[inline(always)]
    pub(crate) fn read_words(&self, at: u64, avail: u64) -> (usize, [u64; WORDS]) {
        let mut words = [0u64; WORDS];
        // SYNC: Acquire pairs with the Release store of `at` in `write`.
        if at == BUSY || self.at.load(Ordering::Acquire) != at {
            return (0, words);
        }
        // Checked like an index: never more than the tail says is there,
        // never more than the copy holds.
        let len = self.len.load(Ordering::Relaxed);
        if len == 0 || len > avail || len > INLINE_MAX as u64 {
            return (0, words);
        }
        let n = len as usize;
        // Every word, whatever `len` says: they came with the line just
        // loaded, and a fixed count needs no loop (loom: only the words
        // `len` covers, to keep the model small; the rest are not used).
        #[cfg(not(loom))]
        let count = WORDS;
        #[cfg(loom)]
        let count = n.div_ceil(8);
        for (w, word) in words.iter_mut().zip(&self.words).take(count) {
            *w = word.load(Ordering::Relaxed);
        }
        // SYNC: pairs with the Release fence in `write` (see there).
        fence(Ordering::Acquire);
        if self.at.load(Ordering::Relaxed) != at {
            return (0, words);
        }
        (n, words)
    }
}
