//! The hot state an end lends to a fast path outside this crate.

use std::sync::atomic::AtomicU64;

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
