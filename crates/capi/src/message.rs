//! Message pipes: each `shmpipe_recv` returns exactly one `shmpipe_send`,
//! from 0 bytes up to `shmpipe_sender_max_message`.

use std::ffi::{c_int, c_void};

use shmpipe::{Receiver, Sender};

use crate::args;
use crate::error::{guard, guard_int, guard_void, Errno};
use crate::handle::{self, handle, Guard, Slot};
use crate::stream::options;
use crate::wait::sliced;
use crate::{shmpipe_const_iovec, shmpipe_iovec, ssize_t};

/// The receiving end of a message pipe.
#[derive(Debug)]
#[repr(C)]
pub struct shmpipe_receiver {
    magic: u32,
    guard: Guard,
    slot: Slot<Receiver>,
    next: *mut shmpipe_receiver,
}

/// The sending end of a message pipe.
#[derive(Debug)]
#[repr(C)]
pub struct shmpipe_sender {
    magic: u32,
    guard: Guard,
    slot: Slot<Sender>,
    next: *mut shmpipe_sender,
}

handle!(shmpipe_receiver, Receiver, 0x5348_4D52); // "SHMR"
handle!(shmpipe_sender, Sender, 0x5348_4D53); // "SHMS"

/// `-EMSGSIZE` where Rust says `InvalidInput` (the only size error here).
fn size_error(e: std::io::Error) -> i32 {
    if e.kind() == std::io::ErrorKind::InvalidInput {
        libc::EMSGSIZE
    } else {
        crate::error::errno(&e)
    }
}

/// Creates a message pipe, blocking, with the default capacity.
///
/// # Safety
///
/// `receiver` and `sender` are writable (NULL gives `-EINVAL`).
#[no_mangle]
pub unsafe extern "C" fn shmpipe_message_pipe(
    receiver: *mut *mut shmpipe_receiver,
    sender: *mut *mut shmpipe_sender,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { shmpipe_message_pipe_with(0, -1, receiver, sender) }
}

/// Creates a message pipe with the capacity and spin time of
/// `shmpipe_pipe_with`; the largest message is the capacity less 8 bytes.
///
/// # Safety
///
/// As `shmpipe_message_pipe`.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_message_pipe_with(
    capacity: usize,
    spin_ns: i64,
    receiver: *mut *mut shmpipe_receiver,
    sender: *mut *mut shmpipe_sender,
) -> c_int {
    // SAFETY: the caller's promise.
    guard_int(|| unsafe {
        handle::open_pair(receiver, sender, || {
            options(capacity, spin_ns).message_pipe().errno()
        })
    })
}

/// The largest message `sender` carries, or a negative errno.
///
/// # Safety
///
/// `sender` is NULL or a sender handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_sender_max_message(sender: *mut shmpipe_sender) -> ssize_t {
    // SAFETY: the caller's promise.
    guard(|| Ok(unsafe { handle::using(sender) }?.end()?.max_message() as isize))
}

/// Sends one message of `len` bytes (0 is fine). Returns 0, `-EMSGSIZE`
/// if it is longer than the maximum (nothing is sent), `-EPIPE` once the
/// receiver is gone, or another negative errno.
///
/// # Safety
///
/// `sender` is NULL or a sender handle; `buf` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_send(
    sender: *mut shmpipe_sender,
    buf: *const c_void,
    len: usize,
) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's promise.
        let (mut u, b) = unsafe { (handle::using(sender)?, args::bytes(buf, len)?) };
        // A send that waits sends nothing before, so it may run again.
        sliced(&mut u, |s| s.send(b).map_err(size_error))?;
        Ok(0)
    })
}

/// Receives one message into `buf` and returns its length. `-EMSGSIZE` if
/// `len` is too small (the message stays; `shmpipe_receiver_peek` tells
/// its size), `-EPIPE` once the sender is gone and every message was
/// received, `-EPROTO` if the sender broke the protocol.
///
/// # Safety
///
/// `receiver` is NULL or a receiver handle; `buf` is writable for `len`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_recv(
    receiver: *mut shmpipe_receiver,
    buf: *mut c_void,
    len: usize,
) -> ssize_t {
    guard(|| {
        // SAFETY: the caller's promise.
        let (mut u, b) = unsafe { (handle::using(receiver)?, args::bytes_mut(buf, len)?) };
        sliced(&mut u, |r| Ok(r.recv(b).map_err(size_error)? as isize))
    })
}

/// Waits for room for a `len`-byte message and describes its payload in
/// `parts[0]` and `parts[1]`, to be filled in place and sent by
/// `shmpipe_sender_commit`.
///
/// # Safety
///
/// `sender` is NULL or a sender handle; `parts` is NULL or two writable
/// iovecs.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_sender_reserve(
    sender: *mut shmpipe_sender,
    len: usize,
    parts: *mut shmpipe_iovec,
) -> c_int {
    guard_int(|| {
        let parts = args::out(parts)?;
        // SAFETY: the caller's promise.
        let mut u = unsafe { handle::using(sender)? };
        sliced(&mut u, |s| {
            let mut grant = s.reserve(len).map_err(size_error)?;
            // SAFETY: a checked out-pointer to two iovecs (the caller's promise).
            unsafe { args::put_parts(parts, grant.as_mut_slices()) };
            // Dropping the grant sends nothing; the commit reserves again.
            let _ = grant;
            Ok(())
        })?;
        u.slot().grant = len + 1;
        Ok(0)
    })
}

/// Sends the message the last `shmpipe_sender_reserve` described
/// (`-EINVAL` if there is none).
///
/// # Safety
///
/// `sender` is NULL or a sender handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_sender_commit(sender: *mut shmpipe_sender) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's promise.
        let mut u = unsafe { handle::using(sender)? };
        let slot = u.slot();
        let len = slot.grant.checked_sub(1).ok_or(libc::EINVAL)?;
        slot.grant = 0;
        let s = u.end()?;
        // The room is free already: this does not wait, and rewrites the
        // same header before the payload written in place.
        s.reserve(len).map_err(size_error)?.commit();
        Ok(0)
    })
}

/// Waits for the next message and describes it in place in `parts[0]` and
/// `parts[1]` without receiving it; returns its length, `-EPIPE` at end,
/// or another negative errno. `shmpipe_receiver_consume` then drops it.
/// The caveat of `shmpipe_reader_peek` applies.
///
/// # Safety
///
/// `receiver` is NULL or a receiver handle; `parts` is NULL or two
/// writable iovecs.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_receiver_peek(
    receiver: *mut shmpipe_receiver,
    parts: *mut shmpipe_const_iovec,
) -> ssize_t {
    guard(|| {
        let parts = args::out(parts)?;
        // SAFETY: the caller's promise.
        let mut u = unsafe { handle::using(receiver)? };
        let len = sliced(&mut u, |r| {
            let msg = r.recv_in_place().errno()?;
            let len = msg.len();
            let view = msg.bytes();
            // SAFETY: only the addresses are taken (see shmpipe_reader_peek).
            // `parts`: a checked out-pointer to two iovecs (the caller's
            // promise).
            unsafe { args::put_const_parts(parts, view.as_slices()) };
            // Not dropped: dropping would consume the message.
            std::mem::forget(msg);
            Ok(len)
        })?;
        u.slot().grant = len + 1;
        Ok(len as isize)
    })
}

/// Drops the message the last `shmpipe_receiver_peek` showed (`-EINVAL`
/// if there is none).
///
/// # Safety
///
/// `receiver` is NULL or a receiver handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_receiver_consume(receiver: *mut shmpipe_receiver) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's promise.
        let mut u = unsafe { handle::using(receiver)? };
        let slot = u.slot();
        if slot.grant == 0 {
            return Err(libc::EINVAL);
        }
        slot.grant = 0;
        let r = u.end()?;
        // The same message again, there already: no wait; dropped, consumed.
        drop(r.recv_in_place().errno()?);
        Ok(0)
    })
}

/// Closes this copy of the receiving end.
///
/// # Safety
///
/// `receiver` is NULL or a receiver handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_receiver_close(receiver: *mut shmpipe_receiver) {
    // SAFETY: the caller's promise.
    guard_void(|| unsafe { handle::close(receiver) })
}

/// Closes this copy of the sending end.
///
/// # Safety
///
/// `sender` is NULL or a sender handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_sender_close(sender: *mut shmpipe_sender) {
    // SAFETY: the caller's promise.
    guard_void(|| unsafe { handle::close(sender) })
}
