//! The writer's view of its room: when it looks at the reader's head (at
//! the latest every [`WINDOW`]), and no room once it learnt that the
//! reader is gone.

use super::Producer;
use crate::sync::Ordering;
use crate::ProtocolError;

/// The most bytes a [`Producer`] writes between two looks at the
/// consumer's head (unless one write wants more): 16 KiB.
///
/// A consumer that leaves says so in its parked word (see
/// [`Producer::publish`]), but one killed outright, or ending without
/// dropping its end, says nothing. Its writer still looks at its head at
/// least every window, and a head that stayed where it was for
/// [`STALL_LOOKS`] looks in a row, with bytes waiting, makes the writer's
/// owner ask the kernel ([`Producer::renew_window`]): so a writer learns
/// that its reader died within four windows (64 KiB) of data, where
/// without a window it would fill the whole ring first. A look costs one
/// load of the consumer's line: once per 16 KiB it is lost in the copy.
///
/// # Examples
///
/// ```
/// let (tx, _rx) = shmpipe_ring::local::channel(1 << 20).unwrap();
/// assert_eq!(tx.free_cached() as u64, shmpipe_ring::WINDOW); // not the whole ring
/// ```
pub const WINDOW: u64 = 16 * 1024;

/// Looks in a row at an unmoved head (bytes waiting) that make a writer
/// ask the kernel whether its reader is gone: three.
///
/// Not one: a live reader publishes its head once per read, of up to 64
/// KiB (a stream's publish step), so one window of writing often passes
/// while it copies: asked at every such look, the writer made about one
/// `ppoll` per 64 KiB written and three per 256 KiB on the Zen 5 guest,
/// a fifth of a large copy's time. Three looks span 48 KiB; with the
/// window before them, the bound on a dead reader is four windows, the
/// 64 KiB that one look a window of 32 KiB gave.
///
/// # Examples
///
/// ```
/// use shmpipe_ring::{STALL_LOOKS, WINDOW};
/// // A dead reader is learnt within this much data.
/// assert_eq!((u64::from(STALL_LOOKS) + 1) * WINDOW, 64 * 1024);
/// ```
pub const STALL_LOOKS: u32 = 3;

impl Producer {
    /// Free bytes, reloading the consumer's head only if the cached copy
    /// shows fewer than `want`.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(8).unwrap();
    /// tx.push(&[1; 8]);
    /// let _ = tx.publish();
    /// rx.available(1).unwrap();
    /// rx.consume(8);
    /// let _ = rx.publish();
    /// assert_eq!(tx.free_cached(), 0); // the cached head is stale
    /// assert_eq!(tx.free(1).unwrap(), 8); // reloaded
    /// ```
    #[inline]
    pub fn free(&mut self, want: usize) -> Result<usize, ProtocolError> {
        if self.free_cached() < want {
            self.refresh_head(want)?;
        }
        Ok(self.free_cached())
    }

    /// Reloads and checks the consumer's head, and opens the window for
    /// `want` bytes from it.
    #[inline]
    pub(super) fn refresh_head(&mut self, want: usize) -> Result<(), ProtocolError> {
        // SYNC: Acquire pairs with the Release store of head in
        // Consumer::publish, so the consumer's reads of the slots it freed
        // happen before we overwrite them.
        let head = self.link.peer().index.0.pos.load(Ordering::Acquire);
        // The head may only move forward, and never past what we published.
        if head.wrapping_sub(self.head) > self.published().wrapping_sub(self.head) {
            return Err(ProtocolError::IndexOutOfRange {
                which: "head",
                value: head,
            });
        }
        self.head = head;
        self.set_limit(want);
        Ok(())
    }

    /// The window ran out (fewer than `want` bytes by
    /// [`free_cached`](Self::free_cached)) while the cached head still
    /// shows `want` free: reloads the head and opens the next window.
    /// `Some(stalled)` then, `stalled` saying that the consumer's head has
    /// not moved for [`STALL_LOOKS`] looks in a row although bytes wait
    /// for it: the caller should ask the kernel whether the consumer is
    /// still there (it may have died without a word, see [`WINDOW`]).
    /// `None` if the cached head shows the ring full (wait for the
    /// consumer, as for `free`).
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::WINDOW;
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(4 * WINDOW as usize).unwrap();
    /// let chunk = vec![7u8; WINDOW as usize];
    /// tx.push(&chunk);
    /// let _ = tx.publish();
    /// assert_eq!(tx.free_cached(), 0); // the window ran out, not the ring
    /// assert_eq!(tx.renew_window(1), Ok(Some(false))); // unmoved: once
    /// tx.push(&chunk);
    /// let _ = tx.publish();
    /// assert_eq!(tx.renew_window(1), Ok(Some(false))); // twice
    /// tx.push(&chunk);
    /// let _ = tx.publish();
    /// assert_eq!(tx.renew_window(1), Ok(Some(true))); // three times: stalled
    /// rx.available(1).unwrap();
    /// rx.consume(WINDOW as usize);
    /// let _ = rx.publish();
    /// assert_eq!(tx.renew_window(1), Ok(Some(false))); // the head moved
    /// ```
    pub fn renew_window(&mut self, want: usize) -> Result<Option<bool>, ProtocolError> {
        let room = self.capacity - self.tail.wrapping_sub(self.head);
        if self.shut || room < want as u64 {
            return Ok(None);
        }
        let before = self.head;
        self.refresh_head(want)?;
        if self.head == before && self.head != self.published() {
            self.unmoved_looks = self.unmoved_looks.saturating_add(1);
        } else {
            self.unmoved_looks = 0;
        }
        Ok(Some(self.unmoved_looks >= STALL_LOOKS))
    }

    /// The consumer is gone (its owner learnt it from the kernel): no room
    /// from now on, so that every write goes to the slow path, where the
    /// owner reports it.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, rx) = shmpipe_ring::local::channel(64).unwrap();
    /// drop(rx);
    /// tx.shut();
    /// assert_eq!(tx.free(1).unwrap(), 0);
    /// assert!(!tx.try_push(b"x"));
    /// ```
    pub fn shut(&mut self) {
        self.shut = true;
        self.limit = self.tail;
        self.gate.set(self.limit);
    }

    /// Whether the consumer has taken everything we published (a fresh
    /// look at its head): a consumer found gone just after our publish
    /// may have read it first, and then that write was delivered.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"abc");
    /// let _ = tx.publish();
    /// assert!(!tx.consumed_all());
    /// rx.available(1).unwrap();
    /// rx.consume(3);
    /// let _ = rx.publish();
    /// assert!(tx.consumed_all());
    /// ```
    pub fn consumed_all(&mut self) -> bool {
        let want = self.free_cached();
        self.refresh_head(want).is_ok() && self.head == self.published()
    }

    /// Whether [`shut`](Self::shut) was called.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert!(!tx.is_shut());
    /// tx.shut();
    /// assert!(tx.is_shut());
    /// ```
    pub fn is_shut(&self) -> bool {
        self.shut
    }

    /// The fence a writer issues after its publish found a parking, before
    /// it asks the kernel whether the consumer is gone: pairs with the
    /// Release of a dropped consumer's word (see [`publish`](Self::publish)),
    /// so that its closing of descriptors, done before, is seen.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, rx) = shmpipe_ring::local::channel(64).unwrap();
    /// drop(rx); // says so in its parked word
    /// tx.push(b"x");
    /// assert!(tx.publish()); // the writer takes its wake path ...
    /// tx.peer_left_fence(); // ... and asks the kernel after this
    /// ```
    pub fn peer_left_fence(&self) {
        // SYNC: Acquire pairs with the Release in Link::announce_gone; the
        // load it orders is the parked word's in `publish`.
        crate::sync::fence(Ordering::Acquire);
    }

    /// Opens the window from the cached head: at most [`WINDOW`] bytes
    /// (or `want`, if more) past the tail, never past the ring's end.
    #[inline]
    pub(super) fn set_limit(&mut self, want: usize) {
        if self.shut {
            self.limit = self.tail;
        } else {
            let window = WINDOW.max(want as u64);
            let ring_end = self.head.wrapping_add(self.capacity);
            let room = ring_end.wrapping_sub(self.tail);
            self.limit = self.tail.wrapping_add(room.min(window));
        }
        self.gate.set(self.limit);
    }
}
