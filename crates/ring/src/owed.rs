//! A list of wakes that could not be sent, to be sent again before sleeping.
//!
//! A publish that must wake a sleeping peer can fail to (the kernel is out
//! of memory) and must not wait to try again. `shmpipe` then notes the wake
//! in one list for the whole process, and every thread about to sleep in
//! `shmpipe` first sends the noted wakes again: otherwise a thread could
//! sleep waiting for a reply while its peer sleeps waiting for the wake
//! (review finding F6; see `shmpipe`'s `owed` module for the whole story).
//!
//! This module is that list's concurrency core, generic over the wake
//! ([`Wake`]), so that loom checks it (`tests/loom_owed.rs`). A flag says
//! whether anything is owed, so a sleep with nothing owed costs one load.
//! The list sits behind a lock of its own, not a `Mutex`, so that a forked
//! child can free it ([`OwedList::forget_after_fork`]): [`OwedList::owe`]
//! waits for the lock (a wake must never be dropped), [`OwedList::pay`]
//! only tries it (another thread is paying).
//!
//! # Examples
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use shmpipe_ring::owed::{OwedList, Wake};
//!
//! // A wake whose first send fails.
//! struct Bell(AtomicBool);
//! impl Wake for Bell {
//!     fn same(&self, _: &Self) -> bool {
//!         true
//!     }
//!     fn wake(&self) -> bool {
//!         self.0.swap(true, Ordering::Relaxed)
//!     }
//! }
//!
//! let owed = OwedList::new();
//! let bell = Bell(AtomicBool::new(false));
//! if !bell.wake() {
//!     owed.owe(Bell(AtomicBool::new(true))); // noted, to send again
//! }
//! assert!(owed.pay()); // before sleeping: everything owed was sent
//! ```

use std::fmt;

use crate::sync::{yield_now, AtomicBool, Ordering, UnsafeCell};

/// A wake that can be sent again: what an [`OwedList`] holds.
///
/// # Examples
///
/// A wake that counts what it sends and fails while its peer's bell is
/// "down":
///
/// ```
/// use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
/// use std::sync::Arc;
///
/// use shmpipe_ring::owed::Wake;
///
/// #[derive(Clone, Default)]
/// struct Doorbell(Arc<(AtomicBool, AtomicU32)>);
///
/// impl Wake for Doorbell {
///     fn same(&self, other: &Self) -> bool {
///         Arc::ptr_eq(&self.0, &other.0)
///     }
///     fn wake(&self) -> bool {
///         if self.0 .0.load(Ordering::Relaxed) {
///             return false;
///         }
///         self.0 .1.fetch_add(1, Ordering::Relaxed);
///         true
///     }
/// }
///
/// let bell = Doorbell::default();
/// assert!(bell.same(&bell.clone()));
/// assert!(!bell.same(&Doorbell::default()));
/// assert!(bell.wake());
/// ```
pub trait Wake {
    /// Whether both wake the same peer (the list keeps one of them).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use shmpipe_ring::owed::Wake;
    /// # #[derive(Clone, Default)]
    /// # struct Doorbell(Arc<()>);
    /// # impl Wake for Doorbell {
    /// #     fn same(&self, other: &Self) -> bool { Arc::ptr_eq(&self.0, &other.0) }
    /// #     fn wake(&self) -> bool { true }
    /// # }
    /// let bell = Doorbell::default();
    /// assert!(bell.same(&bell.clone()));
    /// assert!(!bell.same(&Doorbell::default()));
    /// ```
    fn same(&self, other: &Self) -> bool;

    /// Sends the wake without blocking: true once it is sent (or no longer
    /// needed), false if it is still owed.
    ///
    /// # Examples
    ///
    /// ```
    /// # use shmpipe_ring::owed::Wake;
    /// struct Broken;
    /// impl Wake for Broken {
    ///     fn same(&self, _: &Self) -> bool { true }
    ///     fn wake(&self) -> bool { false }
    /// }
    /// assert!(!Broken.wake());
    /// ```
    fn wake(&self) -> bool;
}

/// Wakes that could not be sent and have not been sent since, behind a
/// flag lock (see the [module documentation](self)).
///
/// # Examples
///
/// ```
/// # use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
/// # use std::sync::Arc;
/// # use shmpipe_ring::owed::Wake;
/// # #[derive(Clone, Default)]
/// # struct Doorbell(Arc<(AtomicBool, AtomicU32)>);
/// # impl Wake for Doorbell {
/// #     fn same(&self, other: &Self) -> bool { Arc::ptr_eq(&self.0, &other.0) }
/// #     fn wake(&self) -> bool {
/// #         if self.0 .0.load(Ordering::Relaxed) { return false; }
/// #         self.0 .1.fetch_add(1, Ordering::Relaxed);
/// #         true
/// #     }
/// # }
/// use shmpipe_ring::owed::OwedList;
///
/// static OWED: OwedList<Doorbell> = OwedList::new();
///
/// let bell = Doorbell::default();
/// bell.0 .0.store(true, Ordering::Relaxed); // the bell is down
/// if !bell.wake() {
///     OWED.owe(bell.clone());
/// }
/// // Before sleeping: still owed, so sleep only briefly.
/// assert!(!OWED.pay());
/// bell.0 .0.store(false, Ordering::Relaxed);
/// assert!(OWED.pay());
/// assert_eq!(bell.0 .1.load(Ordering::Relaxed), 1);
/// ```
pub struct OwedList<W> {
    /// Whether `wakes` may hold a wake (stored under the lock: set after a
    /// push, cleared once empty, so the last store matches the list).
    any: AtomicBool,
    /// The lock over `wakes`.
    locked: AtomicBool,
    /// The wakes not sent yet; touched only with `locked` held.
    wakes: UnsafeCell<Vec<W>>,
}

// SAFETY: `wakes` is touched only through a `Guard`, by the one thread
// holding `locked`, or by `forget_after_fork`, whose caller promises that
// no other thread uses the list; the wakes move between threads, hence
// `W: Send`.
unsafe impl<W: Send> Sync for OwedList<W> {}

impl<W> OwedList<W> {
    /// An empty list, nothing owed.
    ///
    /// # Examples
    ///
    /// ```
    /// # use shmpipe_ring::owed::{OwedList, Wake};
    /// # struct Doorbell;
    /// # impl Wake for Doorbell {
    /// #     fn same(&self, _: &Self) -> bool { true }
    /// #     fn wake(&self) -> bool { true }
    /// # }
    /// static OWED: OwedList<Doorbell> = OwedList::new();
    /// assert!(OWED.pay());
    /// ```
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            any: AtomicBool::new(false),
            locked: AtomicBool::new(false),
            wakes: UnsafeCell::new(Vec::new()),
        }
    }

    /// An empty list, nothing owed (loom's atomics cannot be `const`).
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            any: AtomicBool::new(false),
            locked: AtomicBool::new(false),
            wakes: UnsafeCell::new(Vec::new()),
        }
    }

    /// Forgets every owed wake (leaked, not dropped) and frees the lock,
    /// even if a thread held it: for a child after a `fork`, whose only
    /// thread runs this (from a `pthread_atfork` child handler) before
    /// anything else. A thread of the parent may have held the lock, even
    /// been midway through changing the list, so the list may be torn;
    /// and those wakes are the parent's to pay.
    ///
    /// # Safety
    ///
    /// No other thread may use the list while this runs, and no call on
    /// this thread may be midway through `owe` or `pay`: as in a forked
    /// child's atfork handler. A [`Guard`] held before must not be
    /// dropped after (it would free the lock under its next holder).
    ///
    /// # Examples
    ///
    /// ```
    /// # use shmpipe_ring::owed::{OwedList, Wake};
    /// # struct Doorbell;
    /// # impl Wake for Doorbell {
    /// #     fn same(&self, _: &Self) -> bool { true }
    /// #     fn wake(&self) -> bool { false }
    /// # }
    /// let owed = OwedList::new();
    /// owed.owe(Doorbell);
    /// assert!(!owed.pay());
    /// // SAFETY: this thread is the only one using `owed`.
    /// unsafe { owed.forget_after_fork() };
    /// assert!(owed.pay());
    /// ```
    pub unsafe fn forget_after_fork(&self) {
        // SAFETY: the caller promises that no one else reads or writes the
        // list; `write` drops nothing of the old one.
        self.wakes
            .with_mut(|wakes| unsafe { wakes.write(Vec::new()) });
        self.any.store(false, Ordering::Relaxed);
        self.locked.store(false, Ordering::Release);
    }

    fn try_lock(&self) -> Option<Guard<'_, W>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Guard(self))
    }

    /// Waits for the list's lock and holds it until the guard drops: a
    /// thread's `owe` waits meanwhile, its `pay` reports false. `owe` and
    /// `pay` take it themselves; this is for tests (of a fork while the
    /// lock is held, say). `pay` holds it only for a few non-blocking
    /// sends: this yields meanwhile.
    ///
    /// # Examples
    ///
    /// ```
    /// # use shmpipe_ring::owed::{OwedList, Wake};
    /// # struct Doorbell;
    /// # impl Wake for Doorbell {
    /// #     fn same(&self, _: &Self) -> bool { true }
    /// #     fn wake(&self) -> bool { true }
    /// # }
    /// let owed = OwedList::new();
    /// owed.owe(Doorbell);
    /// let held = owed.lock();
    /// assert!(!owed.pay()); // cannot look at the list now
    /// drop(held);
    /// assert!(owed.pay());
    /// ```
    pub fn lock(&self) -> Guard<'_, W> {
        loop {
            if let Some(guard) = self.try_lock() {
                return guard;
            }
            yield_now();
        }
    }
}

impl<W: Wake> OwedList<W> {
    /// Notes a wake that could not be sent (once per peer: a wake the list
    /// holds already, by [`Wake::same`], is not added again). Waits for
    /// the lock, which `pay` holds only for a few sends: a wake must never
    /// be dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// # use shmpipe_ring::owed::{OwedList, Wake};
    /// # struct Doorbell;
    /// # impl Wake for Doorbell {
    /// #     fn same(&self, _: &Self) -> bool { true }
    /// #     fn wake(&self) -> bool { false }
    /// # }
    /// let owed = OwedList::new();
    /// owed.owe(Doorbell);
    /// assert!(!owed.pay());
    /// ```
    pub fn owe(&self, wake: W) {
        let mut owed = self.lock();
        owed.with(|wakes| {
            if !wakes.iter().any(|w| w.same(&wake)) {
                wakes.push(wake);
            }
        });
        self.any.store(true, Ordering::Release);
    }

    /// Sends the owed wakes again (keeping those that fail); true if none
    /// is owed any more. Costs one load when none is owed. False also if
    /// another thread holds the lock (it may be paying: what it sends is
    /// not known sent yet), without waiting for it.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::cell::Cell;
    /// # use shmpipe_ring::owed::{OwedList, Wake};
    /// /// Fails as many times as it is told.
    /// struct Flaky(Cell<u32>);
    /// impl Wake for Flaky {
    ///     fn same(&self, _: &Self) -> bool { true }
    ///     fn wake(&self) -> bool {
    ///         let fails = self.0.get();
    ///         self.0.set(fails.saturating_sub(1));
    ///         fails == 0
    ///     }
    /// }
    /// let owed = OwedList::new();
    /// assert!(owed.pay()); // nothing owed
    /// owed.owe(Flaky(Cell::new(1)));
    /// assert!(!owed.pay()); // failed again: still owed
    /// assert!(owed.pay()); // sent
    /// ```
    pub fn pay(&self) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return true;
        }
        // Another thread pays now: what it sends is not known sent yet.
        let Some(mut owed) = self.try_lock() else {
            return false;
        };
        let paid = owed.with(|wakes| {
            wakes.retain(|w| !w.wake());
            wakes.is_empty()
        });
        if paid {
            self.any.store(false, Ordering::Release);
        }
        paid
    }
}

#[cfg(feature = "test-kit")]
impl<W> OwedList<W> {
    /// For tests and models (`test-kit` feature): whether `pay` would look
    /// at the list (its flag), and how many wakes the list holds. Waits
    /// for the lock.
    ///
    /// # Examples
    ///
    /// ```
    /// # use shmpipe_ring::owed::{OwedList, Wake};
    /// # struct Doorbell;
    /// # impl Wake for Doorbell {
    /// #     fn same(&self, _: &Self) -> bool { true }
    /// #     fn wake(&self) -> bool { false }
    /// # }
    /// let owed = OwedList::new();
    /// assert_eq!(owed.state(), (false, 0));
    /// owed.owe(Doorbell);
    /// owed.owe(Doorbell); // the same peer: noted once
    /// assert_eq!(owed.state(), (true, 1));
    /// ```
    pub fn state(&self) -> (bool, usize) {
        let mut owed = self.lock();
        let len = owed.with(|wakes| wakes.len());
        // Every store to the flag is made under the lock we hold.
        (self.any.load(Ordering::Relaxed), len)
    }
}

impl<W> Default for OwedList<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<W> fmt::Debug for OwedList<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwedList")
            .field("any", &self.any.load(Ordering::Relaxed))
            .field("locked", &self.locked.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// An [`OwedList`]'s lock, held: frees it when dropped (see
/// [`OwedList::lock`]).
///
/// # Examples
///
/// ```
/// # use shmpipe_ring::owed::{OwedList, Wake};
/// # struct Doorbell;
/// # impl Wake for Doorbell {
/// #     fn same(&self, _: &Self) -> bool { true }
/// #     fn wake(&self) -> bool { true }
/// # }
/// let owed = OwedList::<Doorbell>::new();
/// let held = owed.lock();
/// drop(held);
/// assert!(owed.pay());
/// ```
pub struct Guard<'a, W>(&'a OwedList<W>);

impl<W> fmt::Debug for Guard<'_, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Guard").field(self.0).finish()
    }
}

impl<W> Guard<'_, W> {
    /// Calls `f` with the list.
    fn with<R>(&mut self, f: impl FnOnce(&mut Vec<W>) -> R) -> R {
        // SAFETY: we hold the lock, so no one else touches the list, and
        // `&mut self` keeps this the only reference through this guard.
        self.0.wakes.with_mut(|wakes| f(unsafe { &mut *wakes }))
    }
}

impl<W> Drop for Guard<'_, W> {
    fn drop(&mut self) {
        self.0.locked.store(false, Ordering::Release);
    }
}
