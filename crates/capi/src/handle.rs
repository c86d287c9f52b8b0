//! The C handles: each pipe end (or listener) lives in a slot that is never
//! given back to the allocator. Closing an end drops it and returns its slot
//! to a per-type pool for the next handle of that type, so a call on a
//! closed handle finds an empty slot and fails with `-EBADF` instead of
//! touching freed memory (as `close`d descriptor numbers do, a slot may
//! later be reused by a new handle). Memory stays bounded by the most
//! handles of a type open at once.
//!
//! Every handle type starts with its magic word at offset 0 (for the
//! stream ends that is `shmpipe_fast::kind`), so a handle of one type
//! given as another is refused by reading that one word, whatever the
//! two layouts.
//!
//! Every call holds its handle for its duration ([`Using`]): one compare-
//! and-swap in, one store out. A second call meanwhile gets `-EBUSY`
//! (`-EBADF` once a close holds it); a
//! close from another thread marks the handle closing and waits for the
//! call to return (a call that waits looks at the mark every `SLICE`, see
//! `wait`) before it drops the end. The header's inline path holds
//! nothing: it runs in the caller's thread between library calls.
//!
//! The pool is fork-safe without locks: a close pushes its slot with one
//! compare-and-swap, and a taker that finds another taker busy (perhaps a
//! thread that did not survive `fork`) allocates a fresh slot instead of
//! waiting. One taker at a time keeps the pop free of the ABA problem.
//! Likewise a handle held by a thread that did not survive `fork` is free
//! in the child: holds are stamped with the fork generation.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::time::Duration;

/// Whose a handle is: the call in it, and whether it closes. Outside the
/// slot, so that a closing thread reads it while a call uses the slot.
#[derive(Debug, Default)]
pub struct Guard {
    /// 0, or the fork generation of the call that holds the handle.
    busy: AtomicU32,
    /// 0, or the fork generation in which a close began.
    closing: AtomicU32,
}

/// The fork generation: odd, never 0, bumped in the child of every `fork`.
static GENERATION: AtomicU32 = AtomicU32::new(1);

/// `pthread_atfork`'s child handler: the parent's holds are stale here.
extern "C" fn forked() {
    GENERATION.fetch_add(2, Ordering::Relaxed);
}

/// Registers [`forked`] once (before the first handle exists).
fn watch_forks() {
    // (Not a Once, for fork's sake, as the pool's taker flag.)
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    if !REGISTERED.swap(true, Ordering::Relaxed) {
        // SAFETY: registers a handler that only bumps an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    }
}

impl Guard {
    /// Takes the handle for a call: `EBUSY` if another call holds it,
    /// `EBADF` if it closes.
    #[inline]
    fn enter(&self) -> Result<(), i32> {
        let now = GENERATION.load(Ordering::Relaxed);
        let mut seen = 0;
        // SeqCst here and in `close`: the hold and the closing mark are
        // two words, and each side must see the other's (Dekker).
        while let Err(held) =
            self.busy
                .compare_exchange(seen, now, Ordering::SeqCst, Ordering::Acquire)
        {
            if held == now {
                // Held by a close (it marks, then takes: the Acquire above
                // shows its mark) is closed, not busy.
                return Err(if self.closing.load(Ordering::SeqCst) == now {
                    libc::EBADF
                } else {
                    libc::EBUSY
                });
            }
            seen = held; // free again, or held before a fork
        }
        if self.closing.load(Ordering::SeqCst) == now {
            self.leave();
            return Err(libc::EBADF);
        }
        Ok(())
    }

    /// Gives the handle back.
    #[inline]
    fn leave(&self) {
        // Release: the call's writes to the slot come before the next
        // holder's reads.
        self.busy.store(0, Ordering::Release);
    }

    /// Whether a close waits for the call holding the handle.
    #[inline]
    fn closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed) == GENERATION.load(Ordering::Relaxed)
    }

    /// Takes the handle whatever its closing mark, once the call holding
    /// it (if any) returns.
    fn hold(&self) {
        let now = GENERATION.load(Ordering::Relaxed);
        let mut tries = 0u32;
        loop {
            let held = self.busy.load(Ordering::Relaxed);
            if held != now
                && self
                    .busy
                    .compare_exchange(held, now, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            // A call that waits returns within a slice of seeing the
            // closing mark (see `wait`), one that does not within moments.
            if tries < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
            tries += 1;
        }
    }

    /// Marks the handle closing and takes it once the call in it (if any)
    /// returns. False if it closes already.
    fn take_to_close(&self) -> bool {
        let now = GENERATION.load(Ordering::Relaxed);
        if self.closing.swap(now, Ordering::SeqCst) == now {
            return false;
        }
        self.hold();
        true
    }
}

/// What every handle type holds besides its magic word and its guard.
#[derive(Debug)]
pub struct Slot<E> {
    /// The end; `None` once closed.
    pub(crate) end: Option<E>,
    /// Bytes granted by the last reserve or seen by the last peek, so a
    /// commit or consume can be checked against it.
    pub(crate) grant: usize,
    /// The timeout the program set (the end's own is at most a slice, see
    /// `wait`).
    pub(crate) timeout: Option<Duration>,
}

/// The handle types: a slot, its magic word and its pool.
pub(crate) trait Handle: Sized + 'static {
    /// The Rust end inside.
    type End: Prepare;
    /// The word at offset 0 of every handle of this type, unique to it.
    const MAGIC: u32;
    /// The guard.
    ///
    /// # Safety
    ///
    /// `h` is a handle of this type.
    unsafe fn guard<'a>(h: *mut Self) -> &'a Guard;
    /// The slot, reached without a reference to the whole handle (whose
    /// inline fast-path state, if any, C code and a thread-local flag
    /// share, and whose guard other threads read).
    ///
    /// # Safety
    ///
    /// `h` is a handle held by the caller (see [`Using`]).
    unsafe fn slot<'a>(h: *mut Self) -> &'a mut Slot<Self::End>;
    /// The free-list link (meaningful while the handle is pooled).
    ///
    /// # Safety
    ///
    /// As [`slot`](Self::slot), or the handle is the caller's alone.
    unsafe fn next<'a>(h: *mut Self) -> &'a mut *mut Self;
    /// Takes back the state lent to the header's inline calls (see
    /// `fast`), before the end is used here, telling the end what the
    /// inline code did unless it is `closing`.
    ///
    /// # Safety
    ///
    /// As [`slot`](Self::slot).
    #[inline]
    unsafe fn revoke(_h: *mut Self, _closing: bool) -> Result<(), i32> {
        Ok(())
    }
    /// Makes a handle around a slot.
    fn wrap(slot: Slot<Self::End>) -> Self;
    /// The type's pool of closed slots.
    fn pool() -> &'static Pool<Self>;
}

/// Readies an end for the C calls as it enters a handle.
pub(crate) trait Prepare {
    /// Sets what the calls rely on (the end's slice of waiting, say).
    fn prepare(&mut self);
}

/// A stack of closed handles, ready for reuse.
#[derive(Debug)]
pub(crate) struct Pool<H> {
    head: AtomicPtr<H>,
    taking: AtomicBool,
}

impl<H: Handle> Pool<H> {
    /// An empty pool.
    pub(crate) const fn new() -> Self {
        Pool {
            head: AtomicPtr::new(ptr::null_mut()),
            taking: AtomicBool::new(false),
        }
    }

    /// A pooled handle, if one is there and no other taker is busy.
    fn take(&self) -> Option<*mut H> {
        // Acquire: pairs with the Release below, so the previous taker's
        // pop is complete before we look at the head.
        if self.taking.swap(true, Ordering::Acquire) {
            return None;
        }
        let mut head = self.head.load(Ordering::Acquire);
        while !head.is_null() {
            // SAFETY: pooled handles are never freed, and no other taker
            // can pop `head` meanwhile, so it is a valid pooled handle.
            let next = unsafe { *H::next(head) };
            // Acquire: pairs with the Release CAS in `put`, making the
            // handle's writes (its link) visible.
            match self
                .head
                .compare_exchange(head, next, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        self.taking.store(false, Ordering::Release);
        (!head.is_null()).then_some(head)
    }

    /// Pushes a closed handle.
    fn put(&self, h: *mut H) {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `h` is a closed handle owned by this call until the
            // CAS below publishes it.
            unsafe { *H::next(h) = head };
            // Release: publishes the link written just above.
            match self
                .head
                .compare_exchange_weak(head, h, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }
}

/// Opens a handle around `end`.
pub(crate) fn open<H: Handle>(mut end: H::End) -> *mut H {
    watch_forks();
    end.prepare();
    let slot = Slot {
        end: Some(end),
        grant: 0,
        timeout: None,
    };
    match H::pool().take() {
        Some(h) => {
            // SAFETY: a pooled handle is valid. A stale pointer to it may
            // still be used: hold it while the slot is rewritten (such a
            // call sees it closing and lets go at once).
            unsafe {
                let guard = H::guard(h);
                guard.hold();
                *H::slot(h) = slot;
                guard.closing.store(0, Ordering::SeqCst);
                guard.leave();
            }
            h
        }
        None => Box::into_raw(Box::new(H::wrap(slot))),
    }
}

/// Makes a pair of ends with `make` and stores handles around them
/// through `first` and `second`, which are checked for NULL first (so
/// nothing is made for a bad call). Returns 0 or an errno.
///
/// # Safety
///
/// `first` and `second` are NULL or writable.
pub(crate) unsafe fn open_pair<A: Handle, B: Handle>(
    first: *mut *mut A,
    second: *mut *mut B,
    make: impl FnOnce() -> Result<(A::End, B::End), i32>,
) -> Result<i32, i32> {
    let (fo, so) = (crate::args::out(first)?, crate::args::out(second)?);
    let (a, b) = make()?;
    // SAFETY: checked out-pointers, writable by the caller's promise.
    unsafe {
        crate::args::put(fo, open(a));
        crate::args::put(so, open(b));
    }
    Ok(0)
}

/// Whether `h` is a handle of type `H`: not NULL, and its first word is
/// the type's magic.
///
/// # Safety
///
/// `h` is NULL or a handle (of any type) this library returned.
#[inline(always)]
unsafe fn is<H: Handle>(h: *mut H) -> bool {
    // SAFETY: every handle starts with a u32 (its magic) and is never
    // freed; that word is never written after the handle is made.
    !h.is_null() && unsafe { h.cast::<u32>().read() } == H::MAGIC
}

/// A handle held by one call: the slot is this call's alone until it is
/// dropped.
#[derive(Debug)]
pub(crate) struct Using<H: Handle> {
    h: *mut H,
}

impl<H: Handle> Using<H> {
    /// The slot.
    pub(crate) fn slot(&mut self) -> &mut Slot<H::End> {
        // SAFETY: held by this call (see `using`).
        unsafe { H::slot(self.h) }
    }

    /// The open end: `-EBADF` if closed.
    pub(crate) fn end(&mut self) -> Result<&mut H::End, i32> {
        self.slot().end.as_mut().ok_or(libc::EBADF)
    }

    /// Whether a close waits for this call to return.
    pub(crate) fn closing(&self) -> bool {
        // SAFETY: a handle of type H (checked by `using`).
        unsafe { H::guard(self.h) }.closing()
    }
}

impl<H: Handle> Drop for Using<H> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: a handle of type H (checked by `using`).
        unsafe { H::guard(self.h) }.leave();
    }
}

/// Holds `h` for a call (taking back the state lent to the inline path
/// first): `-EINVAL` for NULL or a pointer that is not a handle of this
/// type, `-EBUSY` while another call holds it, `-EBADF` if it is closed
/// or closing.
///
/// # Safety
///
/// `h` is NULL or a handle (of any type) this library returned, open or
/// closed.
#[inline]
pub(crate) unsafe fn using<H: Handle>(h: *mut H) -> Result<Using<H>, i32> {
    // SAFETY: the caller's promise.
    if !unsafe { is(h) } {
        return Err(libc::EINVAL);
    }
    // SAFETY: a handle of type H, as just checked.
    unsafe { H::guard(h) }.enter()?;
    let mut u = Using { h };
    // SAFETY: held by this call.
    unsafe { H::revoke(h, false)? };
    u.end()?;
    Ok(u)
}

/// Closes `h`: marks it closing, waits for a call holding it to return,
/// drops its end and pools its slot. NULL, closed handles and handles of
/// another type are left alone.
///
/// # Safety
///
/// As [`using`].
pub(crate) unsafe fn close<H: Handle>(h: *mut H) {
    // SAFETY: the caller's promise.
    if !unsafe { is(h) } {
        return;
    }
    // SAFETY: a handle of type H, as just checked.
    let guard = unsafe { H::guard(h) };
    if !guard.take_to_close() {
        return;
    }
    // SAFETY: held by this close.
    let slot = unsafe {
        let _ = H::revoke(h, true);
        H::slot(h)
    };
    let end = slot.end.take();
    slot.grant = 0;
    guard.leave();
    if let Some(end) = end {
        drop(end);
        H::pool().put(h);
    }
}

/// Declares what makes `$ty` a handle around `$end`.
macro_rules! handle {
    ($ty:ident, $end:ty, $magic:expr) => {
        const _: () = assert!(std::mem::offset_of!($ty, magic) == 0);
        crate::handle::handle!(@ $ty, $end, $magic, { magic: $magic, }, {});
    };
    // A stream end: its handle starts with the inline path's state, whose
    // first word is its magic.
    ($ty:ident, $end:ty, $magic:expr, lent) => {
        const _: () = assert!(
            std::mem::offset_of!($ty, fast) == 0
                && std::mem::offset_of!(crate::fast::shmpipe_fast, kind) == 0
        );
        crate::handle::handle!(@ $ty, $end, $magic,
            { fast: crate::fast::shmpipe_fast::new($magic), },
            {
                #[inline]
                unsafe fn revoke(h: *mut Self, closing: bool) -> Result<(), i32> {
                    // SAFETY: forwarded from our caller.
                    unsafe {
                        let end = (*std::ptr::addr_of_mut!((*h).slot)).end.as_mut();
                        crate::fast::revoke(
                            std::ptr::addr_of_mut!((*h).fast),
                            if closing { None } else { end },
                        )
                    }
                }
            });
    };
    (@ $ty:ident, $end:ty, $magic:expr, { $($field:tt)* }, { $($revoke:tt)* }) => {
        impl crate::handle::Handle for $ty {
            type End = $end;
            const MAGIC: u32 = $magic;
            unsafe fn guard<'a>(h: *mut Self) -> &'a crate::handle::Guard {
                // SAFETY: the caller's promise.
                unsafe { &*std::ptr::addr_of!((*h).guard) }
            }
            unsafe fn slot<'a>(h: *mut Self) -> &'a mut crate::handle::Slot<$end> {
                // SAFETY: the caller's promise.
                unsafe { &mut *std::ptr::addr_of_mut!((*h).slot) }
            }
            unsafe fn next<'a>(h: *mut Self) -> &'a mut *mut Self {
                // SAFETY: the caller's promise.
                unsafe { &mut *std::ptr::addr_of_mut!((*h).next) }
            }
            $($revoke)*
            fn wrap(slot: crate::handle::Slot<$end>) -> Self {
                $ty {
                    $($field)*
                    guard: crate::handle::Guard::default(),
                    slot,
                    next: std::ptr::null_mut(),
                }
            }
            fn pool() -> &'static crate::handle::Pool<Self> {
                static POOL: crate::handle::Pool<$ty> = crate::handle::Pool::new();
                &POOL
            }
        }
    };
}

pub(crate) use handle;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_after_a_close_took_the_handle_is_refused_as_closed() {
        let g = Guard::default();
        assert_eq!(g.enter(), Ok(()));
        assert_eq!(g.enter(), Err(libc::EBUSY), "another call holds it");
        g.leave();
        assert!(g.take_to_close());
        // The close holds the handle now: a call that comes too late to
        // be waited for finds it closed, as after the close returns.
        assert_eq!(g.enter(), Err(libc::EBADF));
    }
}
