//! The C handles: each pipe end (or listener) lives in a slot that is never
//! given back to the allocator. Closing an end drops it and returns its slot
//! to a per-type pool for the next handle of that type, so a call on a
//! closed handle finds an empty slot and fails with `-EBADF` instead of
//! touching freed memory (as `close`d descriptor numbers do, a slot may
//! later be reused by a new handle). Memory stays bounded by the most
//! handles of a type open at once.
//!
//! The pool is fork-safe without locks: a close pushes its slot with one
//! compare-and-swap, and a taker that finds another taker busy (perhaps a
//! thread that did not survive `fork`) allocates a fresh slot instead of
//! waiting. One taker at a time keeps the pop free of the ABA problem.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// What every handle type holds.
#[derive(Debug)]
pub struct Slot<E> {
    /// Tells a handle of this type from a pointer to something else.
    magic: u32,
    /// The end; `None` once closed.
    pub(crate) end: Option<E>,
    /// Bytes granted by the last reserve or seen by the last peek, so a
    /// commit or consume can be checked against it.
    pub(crate) grant: usize,
}

/// The handle types: a slot, its magic word and its pool.
pub(crate) trait Handle: Sized + 'static {
    /// The Rust end inside.
    type End;
    /// A value unique to this type.
    const MAGIC: u32;
    /// The slot, reached without a reference to the whole handle (whose
    /// inline fast-path state, if any, C code and a thread-local flag
    /// share).
    ///
    /// # Safety
    ///
    /// `h` is a handle, not used by another thread meanwhile.
    unsafe fn slot<'a>(h: *mut Self) -> &'a mut Slot<Self::End>;
    /// The free-list link (meaningful while the handle is pooled).
    ///
    /// # Safety
    ///
    /// As [`slot`](Self::slot).
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
pub(crate) fn open<H: Handle>(end: H::End) -> *mut H {
    let slot = Slot {
        magic: H::MAGIC,
        end: Some(end),
        grant: 0,
    };
    match H::pool().take() {
        Some(h) => {
            // SAFETY: a pooled handle is valid and now ours alone.
            unsafe { *H::slot(h) = slot };
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

/// The slot behind `h`: `-EINVAL` for NULL or a pointer that is not a
/// handle of this type.
///
/// # Safety
///
/// `h` is NULL or a handle of type `H` this library returned (open or
/// closed), not used by another thread meanwhile.
#[inline]
pub(crate) unsafe fn slot<'a, H: Handle>(h: *mut H) -> Result<&'a mut Slot<H::End>, i32> {
    if h.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's promise: handles are never freed.
    if unsafe { H::slot(h) }.magic != H::MAGIC {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's promise; a handle of type H, as just checked.
    unsafe {
        H::revoke(h, false)?;
        Ok(H::slot(h))
    }
}

/// The open end behind `h`: `-EINVAL` as [`slot`], `-EBADF` if closed.
///
/// # Safety
///
/// As [`slot`].
#[inline]
pub(crate) unsafe fn end<'a, H: Handle>(h: *mut H) -> Result<&'a mut H::End, i32> {
    // SAFETY: the caller's promise.
    match unsafe { slot(h) }?.end.as_mut() {
        Some(e) => Ok(e),
        None => Err(libc::EBADF),
    }
}

/// Closes `h`: drops its end and pools its slot. NULL and closed handles
/// are left alone.
///
/// # Safety
///
/// As [`slot`].
pub(crate) unsafe fn close<H: Handle>(h: *mut H) {
    if h.is_null() {
        return;
    }
    // SAFETY: the caller's promise: handles are never freed.
    if unsafe { H::slot(h) }.magic != H::MAGIC {
        return;
    }
    // SAFETY: as above.
    let slot = unsafe {
        let _ = H::revoke(h, true);
        H::slot(h)
    };
    if let Some(end) = slot.end.take() {
        slot.grant = 0;
        drop(end);
        H::pool().put(h);
    }
}

/// Declares what makes `$ty` a handle around `$end`.
macro_rules! handle {
    ($ty:ident, $end:ty, $magic:expr) => {
        crate::handle::handle!(@ $ty, $end, $magic, {}, {});
    };
    // A stream end: its handle starts with the inline path's state.
    ($ty:ident, $end:ty, $magic:expr, lent) => {
        crate::handle::handle!(@ $ty, $end, $magic,
            { fast: crate::fast::shmpipe_fast::new(<$end as crate::fast::Lent>::KIND), },
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

/// The slot behind an open handle: `-EINVAL` as [`slot`], `-EBADF` if
/// closed.
///
/// # Safety
///
/// As [`slot`].
pub(crate) unsafe fn open_slot<'a, H: Handle>(h: *mut H) -> Result<&'a mut Slot<H::End>, i32> {
    // SAFETY: the caller's promise.
    let s = unsafe { slot(h) }?;
    if s.end.is_none() {
        return Err(libc::EBADF);
    }
    Ok(s)
}
