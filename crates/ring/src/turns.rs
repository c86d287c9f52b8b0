//! One end held by several processes: the holders of an end, and the
//! [`Gate`] that keeps an end off its fast path while it may have others.
//!
//! An end's fast path works from private copies of the positions (see
//! [`Producer`](crate::Producer)), which are right only while this copy
//! of the end is the only one in use. Once another process may hold a
//! copy (a `fork`, a hand-off), the owner of the copy (the `shmpipe`
//! crate) closes its gate, and every operation then goes the slow way:
//! it takes the end's lock, reads the shared positions
//! ([`Producer::begin_turn`](crate::Producer::begin_turn)), does its work
//! and publishes, and ends its turn
//! ([`Producer::end_turn`](crate::Producer::end_turn)), which opens the
//! gate again if this copy turned out to be the only one left. The whole
//! design, with its reasons, is in docs/shared-ends.md.
//!
//! The holders are counted in the end's own control block (see
//! [`Turns`](crate::layout::Turns)): each process that holds a copy has a
//! slot with its process id, and a copy made but not yet claimed (a fork
//! whose child has not run yet, a hand-off in flight) counts in `pending`.
//!
//! # Examples
//!
//! ```
//! let (mut tx, mut rx) = shmpipe_ring::local::channel(64).unwrap();
//! tx.gate().close(); // another process may hold a copy now
//! assert_eq!(tx.push_publish(b"x"), None); // so the fast path refuses
//! tx.gate().claim(1); // process 1 holds it
//! tx.begin_turn().unwrap(); // (under the end's lock)
//! tx.push(b"x");
//! let _ = tx.publish();
//! assert!(tx.end_turn(1)); // the only holder after all: open again
//! assert_eq!(tx.push_publish(b"y"), Some(false));
//! assert_eq!(rx.available(1).unwrap(), 2);
//! ```

use std::sync::Arc;

use crate::layout::{Control, HOLDER_SLOTS};
use crate::sync::{fence, AtomicBool, AtomicU64, Ordering};
use crate::Keepalive;

/// How far behind the end's published index a closed gate's bound lies.
/// The fast path asks whether `pos + len` is at most its bound by the
/// sign of their difference (positions are free-running and wrap), and
/// this copy's position is never this far from the published index
/// (it is within a ring of it, or behind by what other copies moved it
/// since: 2^62 bytes take decades to move at any speed).
const FAR: u64 = 1 << 62;

/// Whether `len` bytes from `pos` fit below `bound`: the sign of the
/// difference, so that positions may wrap around `u64::MAX`.
#[inline(always)]
pub(crate) fn fits(pos: u64, len: usize, bound: u64) -> bool {
    (bound.wrapping_sub(pos.wrapping_add(len as u64)) as i64) >= 0
}

/// What an end's fast path may do without a look at shared memory: up
/// to which position (a producer's limit, a consumer's cached tail), or
/// nothing while the gate is closed. Shared (an `Arc`) between the end
/// and its owner's list of ends, so that the owner can close it at a
/// `fork` from any thread: every field is atomic, and the end reads
/// `bound` where it read its private limit before, with the same
/// instruction on x86 and ARM (a Relaxed load).
#[derive(Debug)]
pub struct Gate {
    /// How far the fast path may go; far behind every position while
    /// closed (see `FAR`).
    bound: AtomicU64,
    /// The end may have holders in other processes: operations take turns.
    shared: AtomicBool,
    /// This end's own control block, for the holders.
    own: std::ptr::NonNull<Control>,
    /// Keeps `own` mapped while the gate lives.
    _keep: KeepDebug,
}

struct KeepDebug(#[allow(dead_code)] Keepalive);

impl std::fmt::Debug for KeepDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keepalive")
    }
}

// SAFETY: `own` points to a Control (all atomics) kept mapped by `_keep`,
// which travels with the gate; everything else is atomic.
unsafe impl Send for Gate {}
// SAFETY: as above: only atomics are reached through `&Gate`.
unsafe impl Sync for Gate {}

impl Gate {
    /// # Safety
    ///
    /// `own` must stay valid while `keep` lives.
    pub(crate) unsafe fn new(own: std::ptr::NonNull<Control>, keep: Keepalive) -> Arc<Gate> {
        Arc::new(Gate {
            bound: AtomicU64::new(0),
            shared: AtomicBool::new(false),
            own,
            _keep: KeepDebug(keep),
        })
    }

    /// The gate of a copy of the end, as `fork` leaves one (see
    /// `local::fork_copy`).
    pub(crate) fn fork_copy(&self) -> Arc<Gate> {
        Arc::new(Gate {
            bound: AtomicU64::new(self.bound.load(Ordering::Relaxed)),
            shared: AtomicBool::new(self.shared.load(Ordering::Relaxed)),
            own: self.own,
            _keep: KeepDebug(self._keep.0.clone()),
        })
    }

    fn own(&self) -> &Control {
        // SAFETY: valid while `_keep` lives (contract of `new`).
        unsafe { self.own.as_ref() }
    }

    /// Closes the fast path: from now on every operation of the end takes
    /// a turn, until one finds it is the only holder left. Any thread may
    /// call it at any moment (the `fork` handlers do).
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert!(!tx.gate().is_shared());
    /// tx.gate().close();
    /// assert!(tx.gate().is_shared());
    /// ```
    pub fn close(&self) {
        self.shared.store(true, Ordering::Relaxed);
        // SYNC: this fence pairs with the one in `set`: either the owner's
        // re-check after its fence sees `shared`, or its bound store is
        // before its fence, before ours, so before our store below in the
        // bound's order (docs/shared-ends.md). Loom checks it
        // (tests/loom_turns.rs).
        fence(Ordering::SeqCst);
        self.bound.store(self.closed(), Ordering::Relaxed);
    }

    /// A bound no position of this copy fits below (see `FAR`).
    fn closed(&self) -> u64 {
        self.own()
            .index
            .0
            .pos
            .load(Ordering::Relaxed)
            .wrapping_sub(FAR)
    }

    /// Whether the end may have holders in other processes.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert!(!tx.gate().is_shared());
    /// ```
    #[inline]
    pub fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Relaxed)
    }

    /// The fast path's bound (far behind while closed).
    #[inline(always)]
    pub(crate) fn bound(&self) -> u64 {
        self.bound.load(Ordering::Relaxed)
    }

    /// Opens the fast path up to `bound`, unless the end is shared.
    #[inline]
    pub(crate) fn set(&self, bound: u64) {
        self.bound.store(bound, Ordering::Relaxed);
        // SYNC: pairs with the fence in `close` (see there): a bound we
        // store after a close is taken back here.
        fence(Ordering::SeqCst);
        if self.shared.load(Ordering::Relaxed) {
            self.bound.store(self.closed(), Ordering::Relaxed);
        }
    }

    /// Opens the gate again (the caller found itself the only holder),
    /// then re-checks the holders: true if it stays open.
    pub(crate) fn reopen(&self, me: u32, bound: u64) -> bool {
        self.shared.store(false, Ordering::Relaxed);
        // SYNC: pairs with the fence in `fork_prepare`: either our look at
        // the holders sees its new copy, or its close (after its fence)
        // comes after our store above in `shared`'s order.
        fence(Ordering::SeqCst);
        if !self.only(me) {
            self.close();
            return false;
        }
        self.set(bound);
        true
    }

    /// Whether `me` holds the only copy: one slot is ours, no other slot
    /// is taken, nothing pending (liveness is the caller's to check first,
    /// see [`others`](Self::others)).
    fn only(&self, me: u32) -> bool {
        let t = &self.own().turns.0;
        if t.pending.load(Ordering::SeqCst) != 0 {
            return false;
        }
        let mut mine = 0;
        for h in &t.holders {
            match h.load(Ordering::SeqCst) {
                0 => {}
                pid if pid == me => mine += 1,
                _ => return false,
            }
        }
        mine == 1
    }

    /// Before a `fork`: the child will hold a copy (claimed by
    /// [`fork_child`](Self::fork_child)), so count it and close.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.gate().claim(1);
    /// tx.gate().fork_prepare();
    /// assert!(tx.gate().is_shared());
    /// tx.gate().fork_child(2); // in the child
    /// assert_eq!(tx.gate().others(1).collect::<Vec<_>>(), vec![2]);
    /// ```
    pub fn fork_prepare(&self) {
        self.own().turns.0.pending.fetch_add(1, Ordering::Relaxed);
        // SYNC: pairs with the fence in `reopen` (see there).
        fence(Ordering::SeqCst);
        self.close();
    }

    /// In a child just forked (its only thread): claims the copy the
    /// fork made, as process `me`, and closes the gate (again: a bound
    /// another thread stored during the fork is not the child's).
    pub fn fork_child(&self, me: u32) {
        self.close();
        self.claim(me);
        self.unpend();
    }

    /// A copy is being handed to another process, which claims it
    /// ([`claim_handed`](Self::claim_handed)): count it and close.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.gate().hand_on();
    /// assert!(tx.gate().is_shared());
    /// ```
    pub fn hand_on(&self) {
        self.fork_prepare();
    }

    /// A copy handed on ([`hand_on`](Self::hand_on)) arrived here, where
    /// it was [`claim`](Self::claim)ed: it is no longer in flight. It
    /// starts shared; its first turn looks whether it is the only one.
    pub fn arrived(&self) {
        self.unpend();
        self.close();
    }

    fn unpend(&self) {
        let p = &self.own().turns.0.pending;
        // Never below zero (a hostile or confused copy may have cleared it).
        let _ = p.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// Takes a holder slot for process `me`; with every slot taken, counts
    /// the copy as pending for good (never claimed: the end stays shared,
    /// which is slower, never wrong).
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// tx.gate().claim(7);
    /// assert_eq!(tx.gate().others(1).collect::<Vec<_>>(), vec![7]);
    /// tx.gate().release(7);
    /// assert_eq!(tx.gate().others(1).count(), 0);
    /// ```
    pub fn claim(&self, me: u32) {
        let t = &self.own().turns.0;
        for h in &t.holders {
            if h.compare_exchange(0, me, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
        t.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether process `pid` has a slot.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = shmpipe_ring::local::channel(64).unwrap();
    /// assert!(!tx.gate().holds(7));
    /// tx.gate().claim(7);
    /// assert!(tx.gate().holds(7));
    /// ```
    pub fn holds(&self, pid: u32) -> bool {
        let t = &self.own().turns.0;
        t.holders.iter().any(|h| h.load(Ordering::SeqCst) == pid)
    }

    /// This copy, held by process `me`, is going: frees one of its slots.
    pub fn release(&self, me: u32) {
        let t = &self.own().turns.0;
        for h in &t.holders {
            if h.compare_exchange(me, 0, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// The processes other than `me` that hold a slot, for the caller to
    /// ask the kernel whether they still live ([`forget`](Self::forget)
    /// those that do not).
    pub fn others(&self, me: u32) -> impl Iterator<Item = u32> + '_ {
        let t = &self.own().turns.0;
        t.holders
            .iter()
            .map(|h| h.load(Ordering::SeqCst))
            .filter(move |&pid| pid != 0 && pid != me)
    }

    /// Frees the slots of process `pid`, which the caller found dead.
    pub fn forget(&self, pid: u32) {
        let t = &self.own().turns.0;
        for h in &t.holders {
            let _ = h.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::Relaxed);
        }
    }

    /// The 64 bytes of the end's lock (see [`Turns`](crate::layout::Turns)),
    /// for the `shmpipe` crate's process-shared mutex. Valid while the gate
    /// lives.
    pub fn lock_area(&self) -> *const AtomicU64 {
        self.own().lock_area()
    }
}

impl Control {
    /// The 64 bytes of this block's lock (see [`Turns`](crate::layout::Turns)),
    /// for the `shmpipe` crate's process-shared mutex, which its creator
    /// sets up there.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_ring::layout::{offset, Control};
    /// let c = Control::new();
    /// let at = c.lock_area() as usize - &c as *const Control as usize;
    /// assert_eq!(at, offset::TURN_LOCK);
    /// ```
    pub fn lock_area(&self) -> *const AtomicU64 {
        self.turns.0.lock.as_ptr()
    }
}

/// The number of holder slots, for tests.
#[doc(hidden)]
pub const SLOTS: usize = HOLDER_SLOTS;
