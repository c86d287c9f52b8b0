//! The reader's turns: while its end may have holders in other processes
//! (see [`crate::turns`]), each operation runs under the end's lock from
//! the shared head, not from this copy's own.

use std::sync::Arc;

use super::Consumer;
use crate::sync::Ordering;
use crate::turns::Gate;
use crate::ProtocolError;

impl Consumer {
    /// This end's gate (see [`crate::turns`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let (_tx, rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert!(!rx.gate().is_shared());
    /// ```
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Whether an operation must take a turn first (see the producer's
    /// [`needs_turn`](crate::Producer::needs_turn)).
    ///
    /// # Examples
    ///
    /// ```
    /// let (_tx, rx) = shmpipe_ring::local::channel(64).unwrap();
    /// rx.gate().close();
    /// assert!(rx.needs_turn());
    /// ```
    #[inline]
    pub fn needs_turn(&self) -> bool {
        self.gate.is_shared() && !self.turn
    }

    /// Brings the fast path's copy of the tail (see [`crate::turns`]) up
    /// to ours, if bytes wait beyond the head by ours: for a reader's slow
    /// path after it looked at the tail, so that the reads after it take
    /// the fast path ([`pop_publish`](Self::pop_publish)). Not in the
    /// look itself, which a wait repeats in its loop (kept small there),
    /// and not when we read all we saw (the next read looks again anyway).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"abcd");
    /// let _ = tx.publish();
    /// rx.available(1).unwrap();
    /// let mut two = [0; 2];
    /// assert_eq!(rx.pop_publish(&mut two), None); // the copy is behind
    /// rx.refresh_gate();
    /// assert_eq!(rx.pop_publish(&mut two), Some(false));
    /// ```
    #[cold]
    #[inline(never)]
    pub fn refresh_gate(&self) {
        if self.tail != self.head && self.gate.bound() != self.tail {
            self.gate.set(self.tail);
        }
    }

    /// Whether we are in a turn (between `begin_turn` and `end_turn`).
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert!(!rx.in_turn());
    /// rx.begin_turn().unwrap();
    /// assert!(rx.in_turn());
    /// rx.end_turn(1);
    /// # let _ = &mut tx;
    /// ```
    pub fn in_turn(&self) -> bool {
        self.turn
    }

    /// Starts a turn; the caller holds the end's lock. If another copy
    /// published a head since our last publish, we go on from it, and
    /// look at the producer's tail afresh.
    ///
    /// # Errors
    ///
    /// [`ProtocolError`] if the shared positions are not possible.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.push(b"firstsecond");
    /// let _ = tx.publish();
    /// let mut copy = shmpipe_ring::local::fork_copy(&rx);
    /// rx.gate().close();
    /// copy.gate().close();
    /// copy.begin_turn().unwrap();
    /// let mut buf = [0; 5];
    /// copy.pop(&mut buf);
    /// let _ = copy.publish();
    /// copy.end_turn(2);
    /// rx.begin_turn().unwrap(); // sees the copy's head
    /// let mut rest = [0; 6];
    /// assert_eq!(rx.pop(&mut rest), 6);
    /// assert_eq!(&rest, b"second");
    /// ```
    pub fn begin_turn(&mut self) -> Result<(), ProtocolError> {
        self.turn = true;
        // Only copies of this end store the head; the lock orders their
        // stores before our load.
        let head = self.link.own().index.0.pos.load(Ordering::Relaxed);
        if head != self.published {
            self.head = head;
            self.published = head;
            self.tail = head;
            self.stash_len = 0;
        }
        self.refresh_tail()
    }

    /// Ends a turn (after publishing): true if process `me` holds the
    /// only copy left and the fast path is open again (see the
    /// producer's [`end_turn`](crate::Producer::end_turn)).
    pub fn end_turn(&mut self, me: u32) -> bool {
        self.turn = false;
        self.gate.reopen(me, self.tail)
    }
}
