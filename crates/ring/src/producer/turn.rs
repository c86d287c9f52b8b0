//! The writer's turns: while its end may have holders in other processes
//! (see [`crate::turns`]), each operation runs under the end's lock from
//! the shared tail, not from this copy's own.

use std::sync::Arc;

use super::Producer;
use crate::sync::Ordering;
use crate::turns::Gate;
use crate::ProtocolError;

impl Producer {
    /// This end's gate (see [`crate::turns`]), for its owner's list of
    /// ends, which closes it at a `fork`.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert!(!tx.gate().is_shared());
    /// ```
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Whether an operation must take a turn first: the end may have
    /// other holders, and we are not in a turn.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.gate().close();
    /// assert!(tx.needs_turn());
    /// tx.begin_turn().unwrap();
    /// assert!(!tx.needs_turn());
    /// ```
    #[inline]
    pub fn needs_turn(&self) -> bool {
        self.gate.is_shared() && !self.turn
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

    /// Starts a turn; the caller holds the end's lock. If another copy of
    /// the end published since our last publish, its tail is the truth:
    /// we go on from there (what we committed and did not publish is
    /// dropped: another copy has written over it), with a fresh look at
    /// the consumer's head. Until [`end_turn`](Self::end_turn), the end
    /// works as if it had no other holder, from its own copies, except
    /// that the one-step fast path stays shut.
    ///
    /// # Errors
    ///
    /// [`ProtocolError`] if the shared positions are not possible.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// // SAFETY: neither copy lends slices.
    /// let mut copy = unsafe { shmpipe_ring::local::fork_copy_producer(&tx) };
    /// tx.gate().close();
    /// copy.gate().close();
    /// copy.begin_turn().unwrap();
    /// copy.push(b"child");
    /// let _ = copy.publish();
    /// copy.end_turn(2);
    /// tx.begin_turn().unwrap(); // sees the copy's tail
    /// tx.push(b"parent");
    /// let _ = tx.publish();
    /// tx.end_turn(1);
    /// assert_eq!(rx.available(1).unwrap(), 11); // both, once each
    /// ```
    pub fn begin_turn(&mut self) -> Result<(), ProtocolError> {
        self.turn = true;
        // SYNC: Acquire pairs with the Release of the tail store of the
        // copy that published last (the lock orders them too).
        let tail = self.link.own().index.0.pos.load(Ordering::Acquire);
        if tail == self.published() {
            return Ok(());
        }
        // SYNC: Acquire pairs with the Release store in Consumer::publish.
        let head = self.link.peer().index.0.pos.load(Ordering::Acquire);
        if tail.wrapping_sub(head) > self.capacity {
            return Err(ProtocolError::IndexOutOfRange {
                which: "head",
                value: head,
            });
        }
        self.tail = tail;
        self.pending = 0;
        self.head = head;
        self.set_limit(0);
        Ok(())
    }

    /// Ends a turn (after publishing everything: what is committed and
    /// unpublished now would be another copy's to overwrite). If the
    /// holders show that process `me` holds the only copy left, the fast
    /// path opens again and true is returned; the caller asks the kernel
    /// about the other holders first (see [`Gate::others`]).
    pub fn end_turn(&mut self, me: u32) -> bool {
        debug_assert!(!self.has_unpublished(), "a turn ends published");
        self.turn = false;
        self.gate.reopen(me, self.limit)
    }

    /// An exact copy of this end, as `fork` leaves one in the child (see
    /// `local::fork_copy_producer`), with a gate of its own.
    pub(crate) fn fork_copy(&self) -> Producer {
        Producer {
            link: self.link.fork_copy(),
            data: self.data.clone_loom(),
            capacity: self.capacity,
            tail: self.tail,
            pending: self.pending,
            head: self.head,
            unmoved_looks: self.unmoved_looks,
            limit: self.limit,
            gate: self.gate.fork_copy(),
            turn: self.turn,
            shut: self.shut,
            inline: self.inline,
        }
    }
}
