//! The reading end of a ring.

use std::ptr::NonNull;

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

mod reply;
mod turn;

/// The reading end of a ring: owns the head, reads the producer's tail.
///
/// Invariants (for an honest producer): `published <= head <= tail` and
/// `tail - head <= capacity`. A tail that breaks them is reported as
/// [`ProtocolError`], never used.
///
/// # Examples
///
/// ```
/// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
/// tx.push(b"pong");
/// let _ = tx.publish();
/// let mut buf = [0; 4];
/// assert_eq!(rx.available(1).unwrap(), 4);
/// assert_eq!(rx.pop(&mut buf), 4);
/// assert!(!rx.publish()); // the producer is not asleep
/// assert_eq!(&buf, b"pong");
/// ```
#[derive(Debug)]
pub struct Consumer {
    link: Link,
    data: Data,
    capacity: u64,
    /// The longest reply [`take_reply`](Self::take_reply) takes: what the
    /// inline copy holds, and never more than the capacity (one test of
    /// a reply's length instead of two).
    reply_max: u64,
    /// Next position to read; may be ahead of `published`.
    head: u64,
    /// Last head stored to shared memory.
    published: u64,
    /// Our cached copy of the producer's tail, reloaded only when the ring
    /// looks empty (or holds less than the caller wants).
    tail: u64,
    /// The bytes from `stash_at`, `stash_len` of them, as the producer's
    /// inline copy gave them (see [`crate::inline`]): read from here, they
    /// cost no transfer of the data's cache line.
    stash: [u8; INLINE_MAX],
    stash_at: u64,
    stash_len: u64,
    /// The fast path's copy of `tail`, 0 while this end may have holders
    /// in other processes (see [`crate::turns`]): `pop_publish` checks it.
    gate: std::sync::Arc<Gate>,
    /// We hold the end's lock (see [`begin_turn`](Self::begin_turn)).
    turn: bool,
}

impl Drop for Consumer {
    /// Says in our parked word that this copy is going (see
    /// [`Producer::publish`](crate::Producer::publish)): the producer's next
    /// publish asks its owner to look whether any copy is left. An owner
    /// that holds a liveness descriptor for this end closes it first.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"a");
    /// assert!(!tx.publish());
    /// drop(rx);
    /// tx.push(b"b");
    /// assert!(tx.publish()); // look: the consumer may be gone
    /// tx.push(b"c");
    /// assert!(!tx.publish()); // once per drop
    /// ```
    fn drop(&mut self) {
        self.link.announce_gone();
    }
}

impl Consumer {
    /// Attaches to a ring whose reader block is `own` and writer block is
    /// `peer`; both headers are checked.
    ///
    /// # Safety
    ///
    /// `own` and `peer` must point to [`Control`] blocks and `data` to the
    /// ring's data, all valid while `keep` lives.
    pub unsafe fn new(
        own: NonNull<Control>,
        peer: NonNull<Control>,
        data: Data,
        keep: Keepalive,
    ) -> Result<Consumer, ProtocolError> {
        // SAFETY: `own` is valid while `keep` lives (our caller's contract).
        let gate = unsafe { Gate::new(own, keep.clone()) };
        // SAFETY: forwarded from our caller.
        let link = unsafe { Link::new(own, peer, keep) };
        let capacity = link.own().check(Role::Reader)?;
        if link.peer().check(Role::Writer)? != capacity || data.capacity() as u64 != capacity {
            return Err(ProtocolError::BadCapacity(capacity));
        }
        let head = link.own().index.0.pos.load(Ordering::Relaxed);
        let mut c = Consumer {
            link,
            data,
            capacity,
            reply_max: capacity.min(INLINE_MAX as u64),
            head,
            published: head,
            tail: head,
            stash: [0; INLINE_MAX],
            stash_at: head,
            stash_len: 0,
            gate,
            turn: false,
        };
        c.refresh_tail()?;
        c.gate.set(c.tail);
        Ok(c)
    }

    /// Ring capacity in bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_tx, rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(rx.capacity(), 64);
    /// ```
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Readable bytes according to the cached tail (no shared-memory load).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"abc");
    /// let _ = tx.publish();
    /// assert_eq!(rx.available_cached(), 0); // the cached tail is stale
    /// rx.available(1).unwrap();
    /// assert_eq!(rx.available_cached(), 3);
    /// ```
    #[inline]
    pub fn available_cached(&self) -> usize {
        self.tail.wrapping_sub(self.head) as usize
    }

    /// Readable bytes, reloading the producer's tail only if the cached copy
    /// shows fewer than `want`.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(rx.available(1).unwrap(), 0);
    /// tx.push(b"abc");
    /// let _ = tx.publish();
    /// assert_eq!(rx.available(1).unwrap(), 3);
    /// ```
    #[inline]
    pub fn available(&mut self, want: usize) -> Result<usize, ProtocolError> {
        if self.available_cached() < want {
            self.refresh_tail()?;
        }
        Ok(self.available_cached())
    }

    /// Reloads and checks the producer's tail.
    #[inline]
    fn refresh_tail(&mut self) -> Result<(), ProtocolError> {
        // SYNC: Acquire pairs with the Release store of tail in
        // Producer::publish: the slots below the tail are written before we
        // read them.
        let tail = self.link.peer().index.0.pos.load(Ordering::Acquire);
        // The tail may only move forward, and never more than a ring ahead.
        let ahead = tail.wrapping_sub(self.head);
        if ahead > self.capacity || ahead < self.tail.wrapping_sub(self.head) {
            return Err(ProtocolError::IndexOutOfRange {
                which: "tail",
                value: tail,
            });
        }
        // A small publish since our last look: take its bytes from the
        // copy beside the tail, which came with it.
        let new = tail.wrapping_sub(self.tail);
        if new != 0 && new <= INLINE_MAX as u64 {
            let inline = &self.link.peer().index.0.inline;
            self.stash_len = inline.read(self.tail, new, &mut self.stash) as u64;
            self.stash_at = self.tail;
        }
        self.tail = tail;
        Ok(())
    }

    /// Copies the readable bytes from position `pos` into `dst`: from the
    /// stash if it holds them all, from the data otherwise (the bytes are
    /// the same; the tail was loaded before either).
    #[inline(always)]
    fn copy_out(&self, pos: u64, dst: &mut [u8]) {
        let off = pos.wrapping_sub(self.stash_at);
        if off < self.stash_len && dst.len() as u64 <= self.stash_len - off {
            let off = off as usize;
            crate::data::copy_small(&self.stash[off..off + dst.len()], dst);
        } else {
            self.data.read(pos, dst);
        }
    }

    /// Copies readable bytes starting `offset` bytes past the head into
    /// `dst`, without consuming them.
    ///
    /// # Panics
    ///
    /// If `offset + dst.len()` exceeds [`available_cached`](Self::available_cached).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"abcd");
    /// let _ = tx.publish();
    /// rx.available(1).unwrap();
    /// let mut buf = [0; 2];
    /// rx.peek(2, &mut buf);
    /// assert_eq!(&buf, b"cd");
    /// assert_eq!(rx.available_cached(), 4); // nothing consumed
    /// ```
    #[inline]
    pub fn peek(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset
            .checked_add(dst.len())
            .is_some_and(|end| end <= self.available_cached()));
        self.copy_out(self.head.wrapping_add(offset as u64), dst);
    }

    /// Copies up to `dst.len()` cached-readable bytes into `dst`, consumes
    /// them (without publishing) and returns how many. Always inlined: a
    /// stream's `read_exact` called it out of line (measured, stream-8B on
    /// the AMD guest: 4.5 ns per item with the call, 3.4 inlined; 104
    /// instructions per item, 79).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"abc");
    /// let _ = tx.publish();
    /// rx.available(1).unwrap();
    /// let mut buf = [0; 8];
    /// assert_eq!(rx.pop(&mut buf), 3); // no more than is readable
    /// assert_eq!(&buf[..3], b"abc");
    /// assert_eq!(rx.available_cached(), 0);
    /// ```
    #[inline(always)]
    pub fn pop(&mut self, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.available_cached());
        self.copy_out(self.head, &mut dst[..n]);
        self.head = self.head.wrapping_add(n as u64);
        n
    }

    /// [`pop`](Self::pop) of all of `dst` and [`publish`](Self::publish)
    /// in one: `None` (nothing read) unless the fast path's copy of the
    /// tail holds all of `dst` (the gate's: a look with
    /// [`available`](Self::available) moves only ours, and
    /// [`refresh_gate`](Self::refresh_gate) brings the gate's up to it;
    /// never while the end may be shared, see [`crate::turns`]);
    /// else whether the producer sleeps and must be woken. A stream's
    /// read: the stash is looked at only while it holds bytes (one test
    /// while it is empty; a stash the head has passed is emptied here),
    /// and the head always moves, so no test of whether it did.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(8).unwrap();
    /// assert_eq!(tx.push_publish(b"abcd"), Some(false));
    /// let mut buf = [0; 4];
    /// assert_eq!(rx.pop_publish(&mut buf), None); // not seen yet
    /// rx.available(1).unwrap();
    /// rx.refresh_gate();
    /// assert_eq!(rx.pop_publish(&mut buf), Some(false));
    /// assert_eq!(&buf, b"abcd");
    /// ```
    #[must_use = "a parked producer must be woken"]
    #[inline(always)]
    pub fn pop_publish(&mut self, dst: &mut [u8]) -> Option<bool> {
        // The gate's copy of the tail, not ours (see `crate::turns`).
        if !crate::turns::fits(self.head, dst.len(), self.gate.bound()) {
            return None;
        }
        if dst.is_empty() {
            return Some(false);
        }
        let head = self.head.wrapping_add(dst.len() as u64);
        if self.stash_len == 0 {
            self.data.read(self.head, dst);
        } else {
            self.copy_out_and_trim(head, dst);
        }
        self.head = head;
        self.published = head;
        // SYNC: as in `publish`.
        self.link.own().index.0.pos.store(head, Ordering::Release);
        // SYNC: as in `publish`: see Link::peer_needs_wake.
        Some(self.link.peer_needs_wake())
    }

    /// `pop_publish`'s copy while the stash holds bytes: `copy_out` from
    /// the head, then empties the stash if `new_head` reached its end, so
    /// that the reads after it take the short path. (The stash lies at or
    /// ahead of the head when made, both within a ring of each other, so
    /// the signed distance says which is ahead.)
    #[inline(never)]
    fn copy_out_and_trim(&mut self, new_head: u64, dst: &mut [u8]) {
        self.copy_out(self.head, dst);
        let end = self.stash_at.wrapping_add(self.stash_len);
        if new_head.wrapping_sub(end) as i64 >= 0 {
            self.stash_len = 0;
        }
    }

    /// The readable bytes from `offset` past the head, `len` long, as at
    /// most two raw ranges (pointer, length) inside the data buffer.
    ///
    /// The ranges are memory the peer can write: read them only through raw
    /// or volatile reads, never as `&[u8]`.
    ///
    /// # Panics
    ///
    /// If `offset + len` exceeds [`available_cached`](Self::available_cached).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"abc");
    /// let _ = tx.publish();
    /// rx.available(1).unwrap();
    /// let [(p, n), (_, rest)] = rx.ranges(0, 3);
    /// assert_eq!((n, rest), (3, 0));
    /// // SAFETY: `p` points to `n` readable bytes of the ring, which lives
    /// // while `rx` does; they are read through raw pointers only.
    /// let bytes: Vec<u8> = (0..n).map(|i| unsafe { p.add(i).read_volatile() }).collect();
    /// assert_eq!(bytes, b"abc");
    /// ```
    #[cfg(not(loom))]
    #[inline]
    pub fn ranges(&self, offset: usize, len: usize) -> [(*const u8, usize); 2] {
        assert!(offset
            .checked_add(len)
            .is_some_and(|end| end <= self.available_cached()));
        let [(a, alen), (b, blen)] = self.data.ranges(self.head.wrapping_add(offset as u64), len);
        [(a.cast_const(), alen), (b.cast_const(), blen)]
    }

    /// Consumes `n` bytes (without publishing).
    ///
    /// # Panics
    ///
    /// If `n` exceeds [`available_cached`](Self::available_cached).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"skip");
    /// let _ = tx.publish();
    /// rx.available(1).unwrap();
    /// rx.consume(4);
    /// assert_eq!(rx.available_cached(), 0);
    /// let _ = rx.publish();
    /// assert_eq!(tx.free(64).unwrap(), 64);
    /// ```
    #[inline]
    pub fn consume(&mut self, n: usize) {
        assert!(
            n <= self.available_cached(),
            "consume beyond available data"
        );
        self.head = self.head.wrapping_add(n as u64);
    }

    /// Reads the header of the next message, if one is readable, and checks
    /// it: returns its payload length. The payload starts
    /// [`frame::HEADER`] bytes past the head; [`consume_message`](Self::consume_message)
    /// drops it.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(rx.next_message().unwrap(), None);
    /// tx.push_message(b"hi");
    /// let _ = tx.publish();
    /// let len = rx.next_message().unwrap().unwrap();
    /// let mut buf = vec![0; len];
    /// rx.peek(shmpipe_ring::frame::HEADER, &mut buf);
    /// assert_eq!(buf, b"hi");
    /// ```
    pub fn next_message(&mut self) -> Result<Option<usize>, ProtocolError> {
        let avail = self.available(1)?;
        if avail == 0 {
            return Ok(None);
        }
        if avail < frame::HEADER {
            return Err(ProtocolError::BadMessage { len: avail as u64 });
        }
        let mut header = [0u8; frame::HEADER];
        self.peek(0, &mut header);
        let len = frame::decode_header(header, self.capacity)?;
        // A producer publishes whole frames, so the whole frame is readable.
        if frame::frame_len(len) > avail {
            return Err(ProtocolError::BadMessage { len: len as u64 });
        }
        Ok(Some(len))
    }

    /// Consumes the frame of a message of `payload_len` bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push_message(b"one");
    /// tx.push_message(b"three");
    /// let _ = tx.publish();
    /// assert_eq!(rx.next_message().unwrap(), Some(3));
    /// rx.consume_message(3);
    /// assert_eq!(rx.next_message().unwrap(), Some(5));
    /// ```
    pub fn consume_message(&mut self, payload_len: usize) {
        self.consume(frame::frame_len(payload_len));
    }

    /// Publishes the head with one store. Returns `true` when the producer
    /// is asleep waiting for space and must be woken by the caller.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(8).unwrap();
    /// tx.push(&[0; 8]);
    /// let _ = tx.publish();
    /// assert_eq!(tx.park(1), Ok(false)); // the producer waits for room
    /// rx.available(1).unwrap();
    /// rx.consume(8);
    /// assert!(rx.publish()); // so the caller must wake it
    /// tx.unpark();
    /// ```
    #[must_use = "a parked producer must be woken"]
    #[inline]
    pub fn publish(&mut self) -> bool {
        if self.head == self.published {
            return false;
        }
        // SYNC: Release pairs with the Acquire load of head in
        // Producer::refresh_head: our reads of the freed slots happen before
        // the producer reuses them.
        self.link
            .own()
            .index
            .0
            .pos
            .store(self.head, Ordering::Release);
        self.published = self.head;
        // SYNC: the handshake's fence pairs with Producer::park (no lost
        // wake-up); see Link::peer_needs_wake.
        self.link.peer_needs_wake()
    }

    /// Says that the wake [`publish`](Self::publish) asked for could not
    /// be sent (a failed system call): the producer is not counted as woken,
    /// and the next `publish` asks for the wake again.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(8).unwrap();
    /// tx.push(&[0; 8]);
    /// let _ = tx.publish();
    /// assert!(!tx.park(1).unwrap()); // the producer sleeps on a full ring
    /// rx.available(1).unwrap();
    /// rx.consume(1);
    /// assert!(rx.publish()); // wake it ... but the wake could not be sent
    /// rx.wake_failed();
    /// rx.consume(1);
    /// assert!(rx.publish()); // so this publish asks again
    /// ```
    pub fn wake_failed(&mut self) {
        self.link.wake_failed();
    }

    /// [`publish`](Self::publish), unless another copy of this end has
    /// published since our last publish: a copy left behind by `fork`, or
    /// by handing the end to another process. Its head is newer than ours,
    /// and storing ours over it would move the head backwards. For a copy
    /// about to be dropped, which cannot know whether it was the one in
    /// use. Returns `true` when the peer must be woken. Always fences
    /// fully: another copy may have switched the fences since this one
    /// last looked (see [`peer_shares_cpu`](Self::peer_shares_cpu)).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"ab");
    /// let _ = tx.publish();
    /// rx.available(1).unwrap();
    /// rx.consume(2);
    /// let _ = rx.publish_if_current(); // no other copy published: it does
    /// ```
    #[must_use = "a parked peer must be woken"]
    pub fn publish_if_current(&mut self) -> bool {
        if self.head == self.published {
            return false;
        }
        // SYNC: Release as in `publish`, pairing with Producer::refresh_head; the
        // compare-and-swap fails if any other copy stored since.
        let stored = self.link.own().index.0.pos.compare_exchange(
            self.published,
            self.head,
            Ordering::Release,
            Ordering::Relaxed,
        );
        if stored.is_err() {
            return false;
        }
        self.published = self.head;
        // A copy's fence mode may be stale (see Link::peer_needs_wake_fenced).
        self.link.peer_needs_wake_fenced()
    }

    /// An exact copy of this end, as `fork` leaves one in the child (see
    /// `local::fork_copy`), with a gate of its own as the child's is.
    pub(crate) fn fork_copy(&self) -> Consumer {
        let link = self.link.fork_copy();
        Consumer {
            gate: self.gate.fork_copy(),
            turn: self.turn,
            link,
            data: self.data.clone_loom(),
            capacity: self.capacity,
            reply_max: self.reply_max,
            head: self.head,
            published: self.published,
            tail: self.tail,
            stash: self.stash,
            stash_at: self.stash_at,
            stash_len: self.stash_len,
        }
    }

    /// Announces that we are about to sleep until data arrives, then
    /// re-checks. Returns `Ok(true)` if data is already there (and we are
    /// unparked again); `Ok(false)` means: sleep until woken, then call
    /// [`unpark`](Self::unpark).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(rx.park(), Ok(false)); // empty: sleep until woken
    /// tx.push(b"x");
    /// assert!(tx.publish()); // the producer sees us asleep
    /// rx.unpark();
    /// assert_eq!(rx.park(), Ok(true)); // data already: no sleep
    /// ```
    pub fn park(&mut self) -> Result<bool, ProtocolError> {
        self.park_with(|| ())
    }

    /// [`park`](Self::park) that runs `barrier` between announcing and
    /// re-checking if the producer uses light fences
    /// ([`peer_uses_light_fences`](Self::peer_uses_light_fences)); the
    /// barrier must be `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`: it
    /// stands in for the fence the producer's publish left out.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// // The producer publishes with full fences, so no barrier runs.
    /// assert_eq!(rx.park_with(|| unreachable!()), Ok(false));
    /// rx.unpark();
    /// tx.use_light_fences(true);
    /// let mut ran = false;
    /// assert_eq!(rx.park_with(|| ran = true), Ok(false));
    /// assert!(ran);
    /// rx.unpark();
    /// ```
    pub fn park_with(&mut self, barrier: impl FnOnce()) -> Result<bool, ProtocolError> {
        // SYNC: see Link::announce_park: either our re-check below sees
        // the producer's new tail, or it sees our parked word.
        self.link.announce_park(barrier);
        match self.refresh_tail() {
            Ok(()) if self.available_cached() == 0 => Ok(false),
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
    /// assert!(!tx.peer_uses_light_fences());
    /// rx.use_light_fences(true);
    /// assert!(tx.peer_uses_light_fences());
    /// ```
    pub fn use_light_fences(&mut self, on: bool) {
        self.link.use_light_fences(on);
    }

    /// Says whether the producer runs on our CPU. While it does, an end
    /// allowed light fences ([`use_light_fences`](Self::use_light_fences))
    /// publishes with full ones and clears the flag that says so, so that
    /// the producer's park needs no `membarrier`: a light publish saves
    /// nothing when the producer cannot run until we sleep, and that system
    /// call is what a same-CPU round trip would pay for it. Any call, at
    /// any moment, is sound (the flag tells the producer which way we
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
    /// tx.use_light_fences(true);
    /// assert!(rx.peer_uses_light_fences());
    /// tx.use_light_fences(false);
    /// assert!(!rx.peer_uses_light_fences());
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
    /// assert_eq!(rx.exchange_cpu_hint(2), u32::MAX); // the producer said nothing yet
    /// assert_eq!(tx.exchange_cpu_hint(0), 2);
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
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert_eq!(rx.park(), Ok(false));
    /// rx.unpark(); // awake again: the producer need not wake us
    /// tx.push(b"x");
    /// assert!(!tx.publish());
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
    /// `None` while consumed bytes wait to be published.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"abc");
    /// let _ = tx.publish();
    /// rx.available(1).unwrap();
    /// let hot = rx.hot().unwrap();
    /// assert_eq!(hot.limit - hot.pos, 3); // readable by the cached tail
    /// ```
    #[cfg(not(loom))]
    pub fn hot(&self) -> Option<Hot> {
        if self.head != self.published || self.gate.is_shared() {
            return None;
        }
        Some(Hot {
            data: self.data.base(),
            mask: self.capacity - 1,
            pos: self.head,
            limit: self.tail,
            index: &self.link.own().index.0.pos,
            peer_parked: &self.link.peer().parked.0,
            woken: self.link.woken(),
            light: self.link.light(),
        })
    }
}
