//! The writing end of a ring.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::data::Data;
use crate::frame;
use crate::inline::INLINE_MAX;
use crate::layout::{Control, Role};
use crate::link::{Keepalive, Link};
use crate::sync::Ordering;
use crate::turns::Gate;
#[cfg(not(loom))]
use crate::Hot;
use crate::ProtocolError;

mod turn;
mod window;
pub use window::{STALL_LOOKS, WINDOW};

/// The writing end of a ring: owns the tail, reads the consumer's head.
///
/// Invariants (for an honest consumer): `head <= published <= tail`
/// (`published` being `tail - pending`) and
/// `tail - head <= capacity`, all as free-running `u64` positions.
/// A head that breaks them is reported as [`ProtocolError`], never used.
///
/// # Examples
///
/// ```
/// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
/// tx.push(b"ping");
/// assert!(!tx.publish()); // the consumer is not asleep
/// let mut buf = [0; 4];
/// assert_eq!(rx.available(1).unwrap(), 4);
/// assert_eq!(rx.pop(&mut buf), 4);
/// assert_eq!(&buf, b"ping");
/// ```
#[derive(Debug)]
pub struct Producer {
    link: Link,
    data: Data,
    capacity: u64,
    /// Next position to write; may be ahead of the tail last stored to
    /// shared memory (`published()`).
    tail: u64,
    /// Bytes committed and not yet published: `tail` less the tail last
    /// stored. Kept as a count, not a position, so that a write published
    /// at once (`push_publish`) stores one private word, not two: a
    /// streaming writer's stores queue behind the data line's transfer
    /// when the reader has it, and every store more per item fills the
    /// store buffer sooner (measured, stream-8B on the AMD guest while a
    /// transfer cost ~14 ns: 10.6 ns per item with two private stores an
    /// item, 7.7 with one).
    pending: u64,
    /// Our cached copy of the consumer's head, reloaded only when the
    /// window runs out (see `limit`).
    head: u64,
    /// Looks in a row that found the head where the look before left it,
    /// with bytes waiting (see [`STALL_LOOKS`]).
    unmoved_looks: u32,
    /// How far `tail` may go before we look at the consumer's head again:
    /// the cached head plus the capacity, but at most [`WINDOW`] (or what
    /// the last `free` wanted, if more) past the tail at that look.
    /// Invariant: `tail <= limit <= head + capacity`.
    limit: u64,
    /// The fast path's own copy of `limit`, 0 while this end may have
    /// holders in other processes (see [`crate::turns`]): the one-step
    /// writes (`push_publish`, `try_push`) check it, so that a `fork`
    /// handler can stop them from any thread.
    gate: Arc<Gate>,
    /// We hold the end's lock and work from the shared positions (see
    /// [`begin_turn`](Self::begin_turn)).
    turn: bool,
    /// The consumer is gone (see [`shut`](Self::shut)): no room, ever.
    shut: bool,
    /// We keep the inline copy beside the tail (see `set_inline_copy`).
    inline: bool,
}

impl Producer {
    /// Attaches to a ring whose writer block is `own` and reader block is
    /// `peer`; both headers are checked.
    ///
    /// # Safety
    ///
    /// `own` and `peer` must point to [`Control`] blocks and `data` to the
    /// ring's data, all valid while `keep` lives. Within this process no
    /// other `Producer` may exist for this ring.
    pub unsafe fn new(
        own: NonNull<Control>,
        peer: NonNull<Control>,
        data: Data,
        keep: Keepalive,
    ) -> Result<Producer, ProtocolError> {
        // SAFETY: `own` is valid while `keep` lives (our caller's contract).
        let gate = unsafe { Gate::new(own, keep.clone()) };
        // SAFETY: forwarded from our caller.
        let link = unsafe { Link::new(own, peer, keep) };
        let capacity = link.own().check(Role::Writer)?;
        // The reader's block declares a capacity too, but ours decides how
        // we index (a reader sizes itself to its writer, see
        // `Control::set_capacity`), so only its validity is checked.
        link.peer().check(Role::Reader)?;
        if data.capacity() as u64 != capacity {
            return Err(ProtocolError::BadCapacity(capacity));
        }
        // Only we write our tail, so our own last store is what we read.
        let tail = link.own().index.0.pos.load(Ordering::Relaxed);
        // SYNC: Acquire pairs with the Release store in Consumer::publish.
        let head = link.peer().index.0.pos.load(Ordering::Acquire);
        if tail.wrapping_sub(head) > capacity {
            return Err(ProtocolError::IndexOutOfRange {
                which: "head",
                value: head,
            });
        }
        let mut producer = Producer {
            link,
            data,
            capacity,
            tail,
            pending: 0,
            head,
            unmoved_looks: 0,
            limit: tail,
            gate,
            turn: false,
            shut: false,
            inline: true,
        };
        producer.set_limit(0);
        Ok(producer)
    }

    /// Ring capacity in bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(tx.capacity(), 64);
    /// ```
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Free bytes according to the cached head (no shared-memory load).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(tx.free_cached(), 64);
    /// tx.push(&[7; 10]);
    /// assert_eq!(tx.free_cached(), 54);
    /// ```
    #[inline]
    pub fn free_cached(&self) -> usize {
        self.limit.wrapping_sub(self.tail) as usize
    }

    /// Copies `src` into the ring after the last committed byte and commits
    /// it (without publishing).
    ///
    /// # Panics
    ///
    /// If `src` is longer than [`free_cached`](Self::free_cached).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"ab");
    /// tx.push(b"cd");
    /// assert_eq!(rx.available(1).unwrap(), 0); // committed, not yet published
    /// let _ = tx.publish();
    /// assert_eq!(rx.available(1).unwrap(), 4);
    /// ```
    #[inline]
    pub fn push(&mut self, src: &[u8]) {
        assert!(src.len() <= self.free_cached(), "push beyond free space");
        self.data.write(self.tail, src);
        self.tail = self.tail.wrapping_add(src.len() as u64);
        self.pending = self.pending.wrapping_add(src.len() as u64);
    }

    /// Copies `src` into the ring and commits it (without publishing) if
    /// [`free_cached`](Self::free_cached) bytes allow and the fast path is
    /// open (see [`crate::turns`]); false otherwise, with nothing written.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, _rx) = shmpipe_ring::local::channel(8).unwrap();
    /// assert!(tx.try_push(b"abcdef"));
    /// assert!(!tx.try_push(b"ghi")); // 2 bytes free
    /// assert_eq!(tx.free_cached(), 2);
    /// ```
    #[inline]
    pub fn try_push(&mut self, src: &[u8]) -> bool {
        if !self.fast_fits(src.len()) {
            return false;
        }
        self.data.write(self.tail, src);
        self.tail = self.tail.wrapping_add(src.len() as u64);
        self.pending = self.pending.wrapping_add(src.len() as u64);
        true
    }

    /// [`try_push`](Self::try_push) and [`publish_copy(false)`](Self::publish_copy)
    /// in one, with one store to our own state: `None` (nothing written)
    /// unless nothing waits to be published and
    /// [`free_cached`](Self::free_cached) bytes allow; else whether the
    /// consumer sleeps and must be woken.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(8).unwrap();
    /// assert_eq!(tx.push_publish(b"abcd"), Some(false));
    /// assert_eq!(tx.push_publish(b"efghi"), None); // no room
    /// let mut buf = [0; 4];
    /// rx.available(1).unwrap();
    /// assert_eq!(rx.pop(&mut buf), 4);
    /// assert_eq!(&buf, b"abcd");
    /// ```
    #[must_use = "a parked consumer must be woken"]
    #[inline]
    pub fn push_publish(&mut self, src: &[u8]) -> Option<bool> {
        self.push_publish_copy(src, false)
    }

    /// [`push_publish`](Self::push_publish) that also keeps the inline
    /// copy beside the tail if `copy` (as [`publish_copy`](Self::publish_copy)
    /// does), taken from `src` itself rather than read back from the data:
    /// for a reply, which the consumer is likely waiting for, written with
    /// fewer instructions between the wait that ended and the tail store.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(tx.push_publish_copy(b"reply", true), Some(false));
    /// let mut buf = [0; 5];
    /// rx.available(1).unwrap(); // takes the bytes from the copy
    /// assert_eq!(rx.pop(&mut buf), 5);
    /// assert_eq!(&buf, b"reply");
    /// ```
    #[must_use = "a parked consumer must be woken"]
    #[inline]
    pub fn push_publish_copy(&mut self, src: &[u8], copy: bool) -> Option<bool> {
        if self.pending != 0 || !self.fast_fits(src.len()) {
            return None;
        }
        if src.is_empty() {
            return Some(false);
        }
        let at = self.tail;
        self.data.write(at, src);
        let tail = at.wrapping_add(src.len() as u64);
        self.tail = tail;
        if copy && src.len() <= INLINE_MAX {
            self.link
                .own()
                .index
                .0
                .inline
                .write(at, src.len(), |i| word_of(src, 8 * i));
        }
        // SYNC: Release pairs with the Acquire load of tail in
        // Consumer::refresh_tail, as in `publish_copy`.
        self.link.own().index.0.pos.store(tail, Ordering::Release);
        // SYNC: as in `publish_copy`: see Link::peer_needs_wake.
        Some(self.link.peer_needs_wake())
    }

    /// Whether `len` bytes fit by the fast path's bound (the gate's copy
    /// of `limit`, see [`crate::turns`]).
    #[inline(always)]
    fn fast_fits(&self, len: usize) -> bool {
        crate::turns::fits(self.tail, len, self.gate.bound())
    }

    /// Frames `msg` as one message and commits it (without publishing).
    ///
    /// # Panics
    ///
    /// If the frame does not fit in [`free_cached`](Self::free_cached) bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push_message(b"hello");
    /// let _ = tx.publish();
    /// assert_eq!(rx.next_message().unwrap(), Some(5));
    /// let mut buf = [0; 5];
    /// rx.peek(shmpipe_ring::frame::HEADER, &mut buf);
    /// assert_eq!(&buf, b"hello");
    /// ```
    pub fn push_message(&mut self, msg: &[u8]) {
        let len = frame::frame_len(msg.len());
        assert!(len <= self.free_cached(), "push_message beyond free space");
        self.data.write(self.tail, &frame::encode_header(msg.len()));
        self.data
            .write(self.tail.wrapping_add(frame::HEADER as u64), msg);
        self.tail = self.tail.wrapping_add(len as u64);
        self.pending = self.pending.wrapping_add(len as u64);
    }

    /// Writes a message header for `payload_len` bytes at the next
    /// position, for a caller that fills the payload in place.
    ///
    /// # Panics
    ///
    /// If the frame does not fit in [`free_cached`](Self::free_cached) bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::frame::{frame_len, HEADER};
    ///
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.write_message_header(3);
    /// let (a, b) = tx.slices_mut(HEADER, 3);
    /// assert!(b.is_empty());
    /// a.copy_from_slice(b"abc");
    /// tx.commit(frame_len(3));
    /// let _ = tx.publish();
    /// assert_eq!(rx.next_message().unwrap(), Some(3));
    /// ```
    pub fn write_message_header(&mut self, payload_len: usize) {
        assert!(frame::frame_len(payload_len) <= self.free_cached());
        self.data
            .write(self.tail, &frame::encode_header(payload_len));
    }

    /// The uncommitted space from `offset` bytes past the last committed
    /// byte, `len` bytes long, as at most two mutable slices (the second is
    /// empty unless the range wraps around the end of the buffer).
    ///
    /// # Panics
    ///
    /// If `offset + len` exceeds [`free_cached`](Self::free_cached).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// let (a, b) = tx.slices_mut(0, 4);
    /// a.copy_from_slice(b"fill");
    /// assert!(b.is_empty()); // no wrap at the start of the ring
    /// tx.commit(4);
    /// let _ = tx.publish();
    /// let mut buf = [0; 4];
    /// rx.available(4).unwrap();
    /// rx.pop(&mut buf);
    /// assert_eq!(&buf, b"fill");
    /// ```
    #[cfg(not(loom))]
    #[inline]
    pub fn slices_mut(&mut self, offset: usize, len: usize) -> (&mut [u8], &mut [u8]) {
        assert!(offset
            .checked_add(len)
            .is_some_and(|end| end <= self.free_cached()));
        let [(a, alen), (b, blen)] = self.data.ranges(self.tail.wrapping_add(offset as u64), len);
        // SAFETY: the range lies past the committed tail and within the free
        // space, which an honest consumer does not read until we publish
        // it, and which no one else in this process writes (contract of
        // `new`); the two ranges are disjoint and inside the buffer
        // (`Data::ranges`); `&mut self` keeps them exclusive while borrowed.
        unsafe {
            (
                std::slice::from_raw_parts_mut(a, alen),
                std::slice::from_raw_parts_mut(b, blen),
            )
        }
    }

    /// Commits `n` bytes written in place (see `slices_mut`), without
    /// publishing.
    ///
    /// # Panics
    ///
    /// If `n` exceeds [`free_cached`](Self::free_cached).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.slices_mut(0, 2).0.copy_from_slice(b"ok");
    /// tx.commit(2);
    /// assert_eq!(tx.free_cached(), 62);
    /// let _ = tx.publish();
    /// assert_eq!(rx.available(1).unwrap(), 2);
    /// ```
    #[inline]
    pub fn commit(&mut self, n: usize) {
        assert!(n <= self.free_cached(), "commit beyond free space");
        self.tail = self.tail.wrapping_add(n as u64);
        self.pending = self.pending.wrapping_add(n as u64);
    }

    /// Whether committed bytes wait to be published.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert!(!tx.has_unpublished());
    /// tx.push(b"x");
    /// assert!(tx.has_unpublished());
    /// let _ = tx.publish();
    /// assert!(!tx.has_unpublished());
    /// ```
    pub fn has_unpublished(&self) -> bool {
        self.pending != 0
    }

    /// The tail last stored to shared memory.
    #[inline]
    fn published(&self) -> u64 {
        self.tail.wrapping_sub(self.pending)
    }

    /// Publishes everything committed with one store of the tail. Returns
    /// `true` when the consumer is asleep and must be woken by the caller,
    /// and also when a copy of the consumer was dropped since (it says so
    /// as a parking, see `Link::announce_gone`): the caller then asks the
    /// kernel whether any copy is left (after
    /// [`peer_left_fence`](Self::peer_left_fence)).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(rx.park(), Ok(false)); // the consumer goes to sleep
    /// tx.push(b"wake");
    /// assert!(tx.publish()); // so the caller must wake it
    /// rx.unpark();
    /// assert_eq!(rx.available(1).unwrap(), 4);
    /// ```
    #[must_use = "a parked consumer must be woken"]
    #[inline]
    pub fn publish(&mut self) -> bool {
        self.publish_copy(self.inline)
    }

    /// [`publish`](Self::publish), keeping the inline copy beside the tail
    /// for this publish if `copy`, whatever
    /// [`set_inline_copy`](Self::set_inline_copy) said: for a caller that
    /// decides per publish, without a store to decide it.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"abc");
    /// let _ = tx.publish_copy(false); // the reader reads the data
    /// let mut buf = [0; 3];
    /// rx.available(1).unwrap();
    /// assert_eq!(rx.pop(&mut buf), 3);
    /// assert_eq!(&buf, b"abc");
    /// ```
    #[must_use = "a parked consumer must be woken"]
    #[inline]
    pub fn publish_copy(&mut self, copy: bool) -> bool {
        if self.pending == 0 {
            return false;
        }
        if copy {
            self.copy_inline();
        }
        // SYNC: Release pairs with the Acquire load of tail in
        // Consumer::refresh_tail: the slots written above become visible
        // with the new tail.
        self.link
            .own()
            .index
            .0
            .pos
            .store(self.tail, Ordering::Release);
        self.pending = 0;
        // SYNC: the handshake's fence pairs with Consumer::park (no lost
        // wake-up); see Link::peer_needs_wake.
        self.link.peer_needs_wake()
    }

    /// Copies a small publish beside the tail, so that a reader waiting
    /// on the tail gets the bytes with it (see [`crate::inline`]). Inlined
    /// (the call cost more than the copy: 1074 instructions per 8-byte
    /// round trip with it, 1020 without); a stream's publishes skip it by
    /// a constant `copy` (`publish_copy(false)`), which keeps their loop
    /// small.
    #[inline]
    fn copy_inline(&self) {
        let n = self.pending as usize;
        if n <= INLINE_MAX {
            let at = self.published();
            // Word by word from the data, without a copy in between.
            let word = |i: usize| {
                self.data
                    .read_word(at.wrapping_add(8 * i as u64), n - 8 * i)
            };
            self.link.own().index.0.inline.write(at, n, word);
        }
    }

    /// Keeps the inline copy of small publishes beside the tail (the
    /// default), or stops: a reader then always reads the data. For loom
    /// models that explore every interleaving of the data protocol, which
    /// the copy's extra words would put out of reach (a model of its own
    /// checks the copy).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.set_inline_copy(false);
    /// tx.push(b"abc");
    /// let _ = tx.publish();
    /// let mut buf = [0; 3];
    /// rx.available(1).unwrap();
    /// assert_eq!(rx.pop(&mut buf), 3); // read from the data
    /// assert_eq!(&buf, b"abc");
    /// ```
    pub fn set_inline_copy(&mut self, on: bool) {
        self.inline = on;
    }

    /// Says that the wake [`publish`](Self::publish) asked for could not
    /// be sent (a failed system call): the consumer is not counted as woken,
    /// and the next `publish` asks for the wake again.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert!(!rx.park().unwrap()); // the consumer sleeps
    /// tx.push(b"a");
    /// assert!(tx.publish()); // wake it ... but the wake could not be sent
    /// tx.wake_failed();
    /// tx.push(b"b");
    /// assert!(tx.publish()); // so this publish asks again
    /// ```
    pub fn wake_failed(&mut self) {
        self.link.wake_failed();
    }

    /// [`publish`](Self::publish), unless another copy of this end has
    /// published since our last publish: a copy left behind by `fork`, or
    /// by handing the end to another process. Its tail is newer than ours,
    /// and storing ours over it would move the tail backwards. For a copy
    /// about to be dropped, which cannot know whether it was the one in
    /// use. Returns `true` when the peer must be woken. Always fences
    /// fully: another copy may have switched the fences since this one
    /// last looked (see [`peer_shares_cpu`](Self::peer_shares_cpu)).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"pending");
    /// let _ = tx.publish_if_current(); // no other copy published: it does
    /// assert!(!tx.has_unpublished());
    /// ```
    #[must_use = "a parked peer must be woken"]
    pub fn publish_if_current(&mut self) -> bool {
        if self.pending == 0 {
            return false;
        }
        // SYNC: Release as in `publish`, pairing with Consumer::refresh_tail; the
        // compare-and-swap fails if any other copy stored since.
        let stored = self.link.own().index.0.pos.compare_exchange(
            self.published(),
            self.tail,
            Ordering::Release,
            Ordering::Relaxed,
        );
        if stored.is_err() {
            return false;
        }
        self.pending = 0;
        // A copy's fence mode may be stale (see Link::peer_needs_wake_fenced).
        self.link.peer_needs_wake_fenced()
    }

    /// Announces that we are about to sleep until `want` bytes are free,
    /// then re-checks. Returns `Ok(true)` if the space is already there
    /// (and we are unparked again); `Ok(false)` means: sleep until woken,
    /// then call [`unpark`](Self::unpark).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(8).unwrap();
    /// assert_eq!(tx.park(1), Ok(true)); // room already: no sleep
    /// tx.push(&[0; 8]);
    /// let _ = tx.publish();
    /// assert_eq!(tx.park(1), Ok(false)); // full: sleep until woken
    /// rx.available(1).unwrap();
    /// rx.consume(8);
    /// assert!(rx.publish()); // the consumer sees the producer asleep
    /// tx.unpark();
    /// assert_eq!(tx.free(1).unwrap(), 8);
    /// ```
    pub fn park(&mut self, want: usize) -> Result<bool, ProtocolError> {
        self.park_with(want, || ())
    }

    /// [`park`](Self::park) that runs `barrier` between announcing and
    /// re-checking if the consumer uses light fences
    /// ([`peer_uses_light_fences`](Self::peer_uses_light_fences)); the
    /// barrier must be `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`: it
    /// stands in for the fence the consumer's publish left out.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, _rx) = shmpipe_ring::local::channel(8).unwrap();
    /// tx.push(&[0; 8]);
    /// let _ = tx.publish();
    /// // The consumer publishes with full fences, so no barrier runs.
    /// assert_eq!(tx.park_with(1, || unreachable!()), Ok(false));
    /// tx.unpark();
    /// ```
    pub fn park_with(
        &mut self,
        want: usize,
        barrier: impl FnOnce(),
    ) -> Result<bool, ProtocolError> {
        // SYNC: see Link::announce_park: either our re-check below sees
        // the consumer's new head, or it sees our parked word.
        self.link.announce_park(barrier);
        match self.refresh_head(want) {
            Ok(()) if self.free_cached() < want => Ok(false),
            other => {
                self.unpark();
                other.map(|()| true)
            }
        }
    }

    /// Publishes with a compiler fence instead of a hardware fence from now
    /// on (or not), and says so in our header. Only sound when every CPU
    /// that runs this side will execute a full barrier whenever the peer,
    /// after parking, calls `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`:
    /// that is, this process is registered for it. The `shmpipe` crate
    /// decides; models and Miri run with full fences.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert!(!rx.peer_uses_light_fences());
    /// tx.use_light_fences(true);
    /// assert!(rx.peer_uses_light_fences());
    /// ```
    pub fn use_light_fences(&mut self, on: bool) {
        self.link.use_light_fences(on);
    }

    /// Says whether the consumer runs on our CPU. While it does, an end
    /// allowed light fences ([`use_light_fences`](Self::use_light_fences))
    /// publishes with full ones and clears the flag that says so, so that
    /// the consumer's park needs no `membarrier`: a light publish saves
    /// nothing when the consumer cannot run until we sleep, and that system
    /// call is what a same-CPU round trip would pay for it. Any call, at
    /// any moment, is sound (the flag tells the consumer which way we
    /// publish); a wrong `same` costs only speed.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.use_light_fences(true);
    /// rx.use_light_fences(true);
    /// tx.peer_shares_cpu(true);
    /// rx.peer_shares_cpu(true);
    /// assert!(!rx.peer_uses_light_fences() && !tx.peer_uses_light_fences());
    /// tx.peer_shares_cpu(false);
    /// assert!(rx.peer_uses_light_fences());
    /// ```
    pub fn peer_shares_cpu(&mut self, same: bool) {
        self.link.peer_shares_cpu(same);
    }

    /// Whether the peer publishes with light fences, so that parking needs
    /// the membarrier barrier (see [`park_with`](Self::park_with)).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// rx.use_light_fences(true);
    /// assert!(tx.peer_uses_light_fences());
    /// rx.use_light_fences(false);
    /// assert!(!tx.peer_uses_light_fences());
    /// ```
    pub fn peer_uses_light_fences(&self) -> bool {
        self.link.peer_uses_light_fences()
    }

    /// Publishes the CPU this side runs on and returns the one the peer
    /// last published (`u32::MAX`: unknown). A scheduling hint only: it
    /// orders nothing, and a peer's lie costs at most some spinning.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(tx.exchange_cpu_hint(3), u32::MAX); // the consumer said nothing yet
    /// assert_eq!(rx.exchange_cpu_hint(5), 3);
    /// assert_eq!(tx.exchange_cpu_hint(3), 5);
    /// ```
    #[inline]
    pub fn exchange_cpu_hint(&mut self, cpu: u32) -> u32 {
        self.link.set_cpu(cpu);
        self.link.peer_cpu()
    }

    /// Clears our parked word after sleeping.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(8).unwrap();
    /// tx.push(&[0; 8]);
    /// let _ = tx.publish();
    /// assert_eq!(tx.park(1), Ok(false));
    /// tx.unpark(); // awake again: the consumer need not wake us
    /// rx.available(1).unwrap();
    /// rx.consume(8);
    /// assert!(!rx.publish());
    /// ```
    pub fn unpark(&mut self) {
        self.link.unpark();
    }

    /// A share of what keeps this ring's memory mapped (its data and both
    /// control blocks): a path lent this end's [`Hot`] state keeps it, so
    /// that the pointers it holds stay valid whatever becomes of the end.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// let keep: shmpipe_ring::Keepalive = tx.keepalive();
    /// drop(tx);
    /// drop(keep); // the memory goes with the last share
    /// ```
    #[cfg(not(loom))]
    pub fn keepalive(&self) -> crate::Keepalive {
        self.link.keepalive()
    }

    /// Our hot state, to lend to a fast path elsewhere (see [`Hot`]);
    /// `None` while committed bytes wait to be published.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(tx.hot().map(|h| h.limit - h.pos), Some(64)); // all free
    /// tx.push(b"abc");
    /// assert!(tx.hot().is_none()); // not published yet
    /// ```
    #[cfg(not(loom))]
    pub fn hot(&self) -> Option<Hot> {
        if self.has_unpublished() || self.gate.is_shared() {
            return None;
        }
        Some(Hot {
            data: self.data.base(),
            mask: self.capacity - 1,
            pos: self.tail,
            limit: self.limit,
            index: &self.link.own().index.0.pos,
            peer_parked: &self.link.peer().parked.0,
            woken: self.link.woken(),
            light: self.link.light(),
        })
    }
}

/// The bytes of `src` from `from`, at most 8 of them, as a little-endian
/// word, zero above them (`from < src.len()`).
#[inline(always)]
fn word_of(src: &[u8], from: usize) -> u64 {
    let rest = &src[from..];
    match rest.get(..8) {
        Some(w) => u64::from_le_bytes(w.try_into().expect("8 bytes")),
        None => {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            u64::from_le_bytes(w)
        }
    }
}
