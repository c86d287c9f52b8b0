//! The header's inline fast path, as liburing's: `shmpipe.h` defines
//! `shmpipe_write` and `shmpipe_read` as `static inline` functions (unless
//! `SHMPIPE_NO_INLINE` is defined) that copy a small item and publish it
//! themselves when the ring has room (or data) by what the end already
//! knows, and call the library otherwise.
//!
//! Each stream handle starts with a [`shmpipe_fast`]: the end's hot state,
//! lent to the inline code by the library at the end of the calls the
//! inline code makes when it cannot go on by itself (`shmpipe_fast_write`,
//! `shmpipe_fast_read`, `shmpipe_*_sync`), and taken back ("revoked") at
//! the start of every library call on the handle, which first tells the
//! Rust end how far the inline code went (it commits or consumes those
//! bytes and publishes again: the same index, stored twice, and a wake-up
//! if the peer sleeps). Lent and revoked in the calling thread, so plain
//! memory carries the state both ways. While revoked (`step` 0), every
//! inline call goes to the library.
//!
//! The inline publish follows the ring's protocol exactly (see
//! `shmpipe_ring::Hot`): slots, the index stored with Release, a SeqCst
//! fence (a compiler fence if the end publishes with light fences), then
//! the peer's parked word; if it says the peer sleeps in a parking not
//! woken yet, `shmpipe_*_sync` has the Rust end publish again, which wakes
//! it. Nothing the
//! inline code reads comes from the peer unchecked: `limit` is the Rust
//! end's checked copy of the peer's index.
//!
//! The C code is a second writing of that publish, so a test holds it to
//! the ring's: `tests/conformance.rs` checks a C compiler's layout of
//! [`shmpipe_fast`] against this struct and the ring's `PARKED`, and runs
//! a C program (`c/conformance_peer.c`) that streams through the inline
//! functions, both ways at once, against a Rust process's ring ends, with
//! naps so that each side sleeps and must be woken; `scripts/test-c.sh`
//! runs it under the sanitizers.

use std::ptr::addr_of;
use std::sync::atomic::{AtomicU32, Ordering};

use shmpipe::{Reader, Writer};
use shmpipe_ring::Hot;

use crate::error::Errno;

/// `shmpipe_fast::kind` of a writer handle.
pub const SHMPIPE_FAST_WRITER: u32 = 0x5346_5757; // "WWFS"
/// `shmpipe_fast::kind` of a reader handle.
pub const SHMPIPE_FAST_READER: u32 = 0x5346_5252; // "RRFS"
/// The largest item the inline path copies (larger ones are not worth
/// inlining a copy for).
pub const SHMPIPE_FAST_STEP: u32 = 64;
/// The bit of the peer's parked word that says it sleeps
/// (`shmpipe_ring::layout::PARKED`).
pub const SHMPIPE_FAST_PARKED: u64 = 1;

const _: () = assert!(SHMPIPE_FAST_PARKED == shmpipe_ring::layout::PARKED);

/// The state a stream handle lends to the header's inline
/// `shmpipe_write`/`shmpipe_read`; a handle starts with it. Only the
/// header's inline functions use it; its layout may change with the
/// library's version.
#[repr(C)]
#[derive(Debug)]
pub struct shmpipe_fast {
    /// `SHMPIPE_FAST_WRITER` or `SHMPIPE_FAST_READER`.
    pub kind: u32,
    /// The largest item the inline path may copy; 0 while the state is
    /// not lent.
    pub step: AtomicU32,
    /// The ring's data (read-only for a reader).
    pub data: *mut u8,
    /// Capacity - 1: position `p` is at `data + (p & mask)`.
    pub mask: u64,
    /// Our position (a writer's tail, a reader's head), published.
    pub pos: u64,
    /// How far `pos` may go: the reader's head plus the capacity, or the
    /// writer's tail, as last seen.
    pub limit: u64,
    /// Our index in shared memory: store `pos` here with release.
    pub index: *mut u64,
    /// The peer's parked word.
    pub peer_parked: *const u64,
    /// The parked word of the peer's last parking the library woke: the
    /// inline path calls the library when the peer sleeps and its parked
    /// word says a newer parking.
    pub woken: u64,
    /// Non-zero: publish with a compiler fence only.
    pub light: u32,
    /// A writer: 1 while this thread has noted a send since its last wait,
    /// so the inline path need not (see `shmpipe::mirror_sent`).
    pub noted: AtomicU32,
    /// The library's: `pos` when lent.
    pub lent_pos: u64,
}

impl shmpipe_fast {
    /// Not lent.
    pub(crate) const fn new(kind: u32) -> Self {
        shmpipe_fast {
            kind,
            step: AtomicU32::new(0),
            data: std::ptr::null_mut(),
            mask: 0,
            pos: 0,
            limit: 0,
            index: std::ptr::null_mut(),
            peer_parked: std::ptr::null(),
            woken: 0,
            light: 0,
            noted: AtomicU32::new(0),
            lent_pos: 0,
        }
    }
}

/// A stream end that lends its state.
pub(crate) trait Lent {
    /// `shmpipe_fast::kind`.
    const KIND: u32;
    /// The ring's state to lend.
    fn hot(&self) -> Option<Hot>;
    /// If the end takes turns, whether it may stop (see the ends'
    /// `check_copies`).
    fn check_copies(&mut self) -> std::io::Result<()>;
    /// Takes in `n` bytes the inline code wrote (or read) and published.
    fn catch_up(&mut self, n: usize) -> Result<(), i32>;
}

impl Lent for Writer {
    const KIND: u32 = SHMPIPE_FAST_WRITER;
    fn hot(&self) -> Option<Hot> {
        Writer::hot(self)
    }
    fn check_copies(&mut self) -> std::io::Result<()> {
        Writer::check_copies(self)
    }
    fn catch_up(&mut self, n: usize) -> Result<(), i32> {
        // The room was free (the inline code kept below `limit`), so this
        // does not wait; the commit publishes (and wakes).
        self.reserve(n).errno()?.commit(n);
        Ok(())
    }
}

impl Lent for Reader {
    const KIND: u32 = SHMPIPE_FAST_READER;
    fn hot(&self) -> Option<Hot> {
        Reader::hot(self)
    }
    fn check_copies(&mut self) -> std::io::Result<()> {
        Reader::check_copies(self)
    }
    fn catch_up(&mut self, n: usize) -> Result<(), i32> {
        // The bytes were there, so this does not wait.
        self.read_chunk().errno()?.consume(n);
        Ok(())
    }
}

/// Takes the state back from the inline code: the end learns how far it
/// went (`end` `None`: it is closing, and need not). `-EIO` if the state
/// was not where the inline code may take it.
///
/// # Safety
///
/// `f` is the state of the handle that holds `end`, not used by another
/// thread meanwhile.
#[inline]
pub(crate) unsafe fn revoke<E: Lent>(f: *mut shmpipe_fast, end: Option<&mut E>) -> Result<(), i32> {
    // SAFETY: the caller's promise; plain fields, read and written in place.
    unsafe {
        // (A `fork` may have revoked it, from any thread: see `lend`.)
        if (*f).step.swap(0, Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let n = (*f).pos.wrapping_sub((*f).lent_pos);
        if n == 0 {
            return Ok(());
        }
        // Closing: the end is not told. The inline code published all it
        // did, with its wake-ups; the end publishes nothing more at its
        // drop (its index is behind the stored one, see
        // `publish_if_current`), and must not: if this is a copy left by
        // `fork`, the other copy may have gone further since.
        let Some(end) = end else { return Ok(()) };
        // The end has not moved since it lent (every call here revokes
        // first), so the inline code may have gone up to `limit`.
        if n > (*f).limit.wrapping_sub((*f).lent_pos) {
            return Err(libc::EIO);
        }
        end.catch_up(n as usize)
    }
}

/// Lends the end's state to the inline code (or leaves it revoked).
///
/// # Safety
///
/// `f` is the state of a handle (never freed) that holds `end`, not used
/// by another thread meanwhile.
#[inline]
pub(crate) unsafe fn lend<E: Lent>(f: *mut shmpipe_fast, end: &E) {
    let Some(hot) = end.hot() else { return };
    // SAFETY: the caller's promise; plain fields written in place. The
    // atomics are plain words in C's view (AtomicU64 is a u64 in memory).
    unsafe {
        // Only the first lend of a handle finds no data (see `shmpipe_fast::new`).
        let first = (*f).data.is_null();
        (*f).data = hot.data;
        (*f).mask = hot.mask;
        (*f).pos = hot.pos;
        (*f).lent_pos = hot.pos;
        (*f).limit = hot.limit;
        (*f).index = hot.index.cast_mut().cast();
        (*f).peer_parked = hot.peer_parked.cast();
        (*f).woken = hot.woken;
        (*f).light = u32::from(hot.light);
        // A flag still set mirrors this thread's (or, if the handle moved
        // to this thread since, an older one's: then the inline path skips
        // a note it should have made, which costs only some spinning).
        if E::KIND == SHMPIPE_FAST_WRITER && (*f).noted.load(Ordering::Relaxed) == 0 {
            // Handles are never freed: the flag lives for the program.
            shmpipe::mirror_sent(&*addr_of!((*f).noted));
        }
        // Every `fork` from now on revokes it, in both processes: the
        // end's other copy may be used from then on, and only the end's
        // turns see its progress (see shmpipe's docs/shared-ends.md).
        // Handles are never freed: the word lives for the program.
        if first {
            shmpipe::revoke_on_fork(&*addr_of!((*f).step));
        }
        (*f).step.store(SHMPIPE_FAST_STEP, Ordering::Relaxed);
    }
}
