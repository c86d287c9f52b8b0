//! The hot state an end lends to a fast path outside this crate.

use crate::sync::{AtomicU64, Ordering};

/// An end's hot state, lent to a fast path outside this crate: the C
/// header's inline `shmpipe_write`/`shmpipe_read` (crates/capi).
///
/// Such a path moves `pos` on by itself within `pos..limit` and publishes
/// exactly as [`Producer::publish`](crate::Producer::publish) and
/// [`Consumer::publish`](crate::Consumer::publish) do:
///
/// 1. a producer writes the slots (a consumer reads them), each slot at
///    `data + (p & mask)`;
/// 2. stores the new `pos` into `index` with Release;
/// 3. issues a SeqCst fence, or only a compiler fence if `light`;
/// 4. loads `peer_parked` (Relaxed); if its [`PARKED`](crate::layout::PARKED)
///    bit is set and it is not `woken`, the owning end must publish again,
///    which wakes the peer (once per parking).
///
/// A producer's path need not keep the inline copy beside the tail (see
/// [`inline`](crate::inline)): a reader reads the data whenever the copy
/// does not start where its cached tail ended, which is the case after
/// such a publish.
///
/// Before the owning end is used again it must be told how far `pos` went
/// (a producer's [`commit`](crate::Producer::commit), a consumer's
/// [`consume`](crate::Consumer::consume), then `publish`, which stores the
/// same index again), and the lent state is stale after that. An end
/// about to be dropped need not be told: the path published all it did,
/// and a copy of the end left by `fork` may have gone further since.
///
/// # Examples
///
/// ```
/// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
/// let hot: shmpipe_ring::Hot = tx.hot().unwrap();
/// assert_eq!((hot.pos, hot.mask), (0, 63));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Hot {
    /// The ring's first data byte (read-only for a consumer).
    pub data: *mut u8,
    /// Capacity - 1: a position's slot is `pos & mask`.
    pub mask: u64,
    /// Our position (a producer's tail, a consumer's head), committed and
    /// published.
    pub pos: u64,
    /// How far `pos` may go by our cached copy of the peer's index: a
    /// producer's cached head plus the capacity, a consumer's cached tail.
    /// The copy was checked when it was loaded.
    pub limit: u64,
    /// Our index word in shared memory.
    pub index: *const AtomicU64,
    /// The peer's parked word.
    pub peer_parked: *const AtomicU64,
    /// The peer's parked word we last asked to wake.
    pub woken: u64,
    /// We publish with a compiler fence only. Any use of the owning end
    /// may switch that (`peer_shares_cpu`, at its CPU-hint exchanges) and
    /// its header tells the peer at once: a path that publishes with a
    /// `light` read before such a use may lose the peer's wake-up.
    pub light: bool,
}

/// Steps 2 to 4 of a lent path's publish (see [`Hot`]): stores `pos` into
/// `index` with Release, fences (only the compiler, unless `hard()`: the
/// lent `light` was false; asked after the store, as the ends do), and
/// returns the peer's parked word. The same code publishes for the ends
/// themselves: this crate is the one place that writes the protocol.
///
/// # Safety
///
/// `index` and `peer_parked` are a [`Hot`]'s, and the memory they point
/// into is still mapped (the end it came from lives, or a
/// [`keepalive`](crate::Producer::keepalive) of it).
///
/// # Examples
///
/// ```
/// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
/// let hot = tx.hot().unwrap();
/// // SAFETY: `tx` lives; nothing was written, so position 0 is published again.
/// let parked = unsafe { shmpipe_ring::publish_lent(hot.index, hot.peer_parked, 0, || !hot.light) };
/// assert_eq!(parked & shmpipe_ring::layout::PARKED, 0);
/// ```
#[inline(always)]
pub unsafe fn publish_lent(
    index: *const AtomicU64,
    peer_parked: *const AtomicU64,
    pos: u64,
    hard: impl FnOnce() -> bool,
) -> u64 {
    // SAFETY: both point to live atomics (the caller's contract).
    let (index, peer_parked) = unsafe { (&*index, &*peer_parked) };
    // SYNC: as Producer::publish_copy and Consumer::publish: Release pairs
    // with the peer's Acquire of this index.
    index.store(pos, Ordering::Release);
    crate::link::fence_and_look::<false>(peer_parked, hard())
}
