//! The reader's first look for a reply: a request's answer, taken whole
//! in the look that finds it, straight from the copy beside the tail.

use super::Consumer;
use crate::data::put_words;
use crate::sync::Ordering;

impl Consumer {
    /// Looks at the producer's tail and, if the producer published exactly
    /// `dst.len()` bytes (1 to [`INLINE_MAX`](crate::inline::INLINE_MAX),
    /// and at most the capacity) since the cached view emptied, reads them
    /// into `dst` and publishes the head: a reply to a request, in one
    /// call. The bytes come from the inline copy beside
    /// the tail when it holds them (see [`crate::inline`]), from the data
    /// otherwise. `None`, with nothing read and nothing changed, if the
    /// cached view is not empty or the producer published anything else
    /// (nothing yet, less or more, a tail out of range): the caller then
    /// looks the usual way ([`available`](Self::available)). Else whether
    /// the producer sleeps and must be woken.
    ///
    /// Not behind the gate (see [`crate::turns`]): for a caller that has
    /// checked that no other copy of the end is in use.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
    /// let mut buf = [0; 4];
    /// assert_eq!(rx.take_reply(&mut buf), None); // nothing yet
    /// assert_eq!(tx.push_publish_copy(b"pong", true), Some(false));
    /// assert_eq!(rx.take_reply(&mut buf), Some(false));
    /// assert_eq!(&buf, b"pong");
    /// tx.push(b"twice");
    /// let _ = tx.publish();
    /// assert_eq!(rx.take_reply(&mut buf), None); // more than asked for
    /// assert_eq!(rx.available(1).unwrap(), 5);
    /// ```
    #[must_use = "a parked producer must be woken"]
    #[inline(always)]
    pub fn take_reply(&mut self, dst: &mut [u8]) -> Option<bool> {
        let n = dst.len() as u64;
        // 1 to `reply_max` bytes (wrapping: 0 fails too).
        if self.tail != self.head || n.wrapping_sub(1) >= self.reply_max {
            return None;
        }
        // One load of the pointer for the tail and the copy beside it.
        let index = &self.link.peer().index.0;
        // SYNC: Acquire pairs with the Release store of tail in
        // Producer::publish, as in `refresh_tail`.
        let tail = index.pos.load(Ordering::Acquire);
        // Exactly `n` more: within the range `refresh_tail` checks (the
        // tail moved forward, by at most the capacity).
        if tail.wrapping_sub(self.head) != n {
            return None;
        }
        if let Some(words) = index.inline.read_exact_words(self.head, n) {
            put_words(words, dst);
        } else {
            self.data.read(self.head, dst);
        }
        // All read: nothing cached, nothing stashed.
        self.tail = tail;
        self.head = tail;
        self.published = tail;
        self.stash_len = 0;
        // SYNC: as in `publish`.
        self.link.own().index.0.pos.store(tail, Ordering::Release);
        // SYNC: as in `publish`: see Link::peer_needs_wake.
        Some(self.link.peer_needs_wake())
    }
}
