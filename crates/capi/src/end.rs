//! What every end has: non-blocking mode, a timeout, and the readiness
//! descriptor for `poll`/`epoll` with its level-triggered `arm` call.

use std::ffi::c_int;
use std::os::fd::{AsFd, AsRawFd};

use crate::args;
use crate::error::{guard_int, Errno};
use crate::handle::{self, Handle};
use crate::wait::{self, Timed};
use crate::{shmpipe_reader, shmpipe_receiver, shmpipe_sender, shmpipe_writer};

/// The settings the four end types share in Rust.
trait Settings: AsFd + Timed {
    fn nonblocking(&mut self, on: bool);
    fn arm(&mut self) -> std::io::Result<bool>;
}

macro_rules! settings {
    ($ty:ty) => {
        impl Settings for $ty {
            fn nonblocking(&mut self, on: bool) {
                self.set_nonblocking(on)
            }
            fn arm(&mut self) -> std::io::Result<bool> {
                <$ty>::arm(self)
            }
        }
    };
}

settings!(shmpipe::Reader);
settings!(shmpipe::Writer);
settings!(shmpipe::Receiver);
settings!(shmpipe::Sender);

/// # Safety: `h` is NULL or a handle.
unsafe fn set_nonblocking<H: Handle>(h: *mut H, on: c_int) -> c_int
where
    H::End: Settings,
{
    guard_int(|| {
        // SAFETY: the caller's promise.
        unsafe { handle::using(h) }?.end()?.nonblocking(on != 0);
        Ok(0)
    })
}

/// # Safety: as `set_nonblocking`.
unsafe fn set_timeout<H: Handle>(h: *mut H, ms: i64) -> c_int
where
    H::End: Settings,
{
    guard_int(|| {
        let t = args::timeout(ms)?;
        // SAFETY: the caller's promise.
        wait::set_timeout(&mut unsafe { handle::using(h) }?, t)?;
        Ok(0)
    })
}

/// # Safety: as `set_nonblocking`.
unsafe fn arm<H: Handle>(h: *mut H) -> c_int
where
    H::End: Settings,
{
    // SAFETY: the caller's promise.
    guard_int(|| Ok(unsafe { handle::using(h) }?.end()?.arm().errno()? as c_int))
}

/// # Safety: as `set_nonblocking`.
unsafe fn fd<H: Handle>(h: *mut H) -> c_int
where
    H::End: Settings,
{
    // SAFETY: the caller's promise.
    guard_int(|| Ok(unsafe { handle::using(h) }?.end()?.as_fd().as_raw_fd()))
}

/// Non-blocking mode on (`on` non-zero) or off: a call that would wait
/// fails with `-EAGAIN` instead. Returns 0 or a negative errno.
///
/// # Safety
///
/// `reader` is NULL or a reader handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_reader_set_nonblocking(
    reader: *mut shmpipe_reader,
    on: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { set_nonblocking(reader, on) }
}

/// How long a blocking call waits before failing with `-ETIMEDOUT`:
/// `timeout_ms` milliseconds, or forever if negative (the default); 0 is
/// `-EINVAL` (use non-blocking mode).
///
/// # Safety
///
/// `reader` is NULL or a reader handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_reader_set_timeout(
    reader: *mut shmpipe_reader,
    timeout_ms: i64,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { set_timeout(reader, timeout_ms) }
}

/// The end's readiness descriptor for `poll`/`epoll` (owned by the end:
/// do not close it), as a non-blocking socket's: after a call returned
/// `-EAGAIN` (or the arm call returned 0) it polls readable (`POLLIN`)
/// once that call can progress (data or room arrived, or the peer is
/// gone). Edge-triggered users (`EPOLLET`) retry until `-EAGAIN`;
/// level-triggered ones call the arm call before each poll. It may,
/// rarely, poll readable spuriously; the call then gives `-EAGAIN` again.
/// Returns it or a negative errno.
///
/// # Safety
///
/// `reader` is NULL or a reader handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_reader_fd(reader: *mut shmpipe_reader) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { fd(reader) }
}

/// Level-triggered readiness: 1 if the next call can progress now
/// (data or end of file), and the descriptor of `shmpipe_reader_fd` then polls
/// readable until that is consumed; 0 if not, and the descriptor polls
/// readable once it can; or a negative errno. Call it before each `poll`
/// when you do not try the call first.
///
/// # Safety
///
/// `reader` is NULL or a reader handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_reader_arm(reader: *mut shmpipe_reader) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { arm(reader) }
}

/// Non-blocking mode on (`on` non-zero) or off: a call that would wait
/// fails with `-EAGAIN` instead. Returns 0 or a negative errno.
///
/// # Safety
///
/// `writer` is NULL or a writer handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_writer_set_nonblocking(
    writer: *mut shmpipe_writer,
    on: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { set_nonblocking(writer, on) }
}

/// How long a blocking call waits before failing with `-ETIMEDOUT`:
/// `timeout_ms` milliseconds, or forever if negative (the default); 0 is
/// `-EINVAL` (use non-blocking mode).
///
/// # Safety
///
/// `writer` is NULL or a writer handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_writer_set_timeout(
    writer: *mut shmpipe_writer,
    timeout_ms: i64,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { set_timeout(writer, timeout_ms) }
}

/// The end's readiness descriptor for `poll`/`epoll` (owned by the end:
/// do not close it), as a non-blocking socket's: after a call returned
/// `-EAGAIN` (or the arm call returned 0) it polls readable (`POLLIN`)
/// once that call can progress (data or room arrived, or the peer is
/// gone). Edge-triggered users (`EPOLLET`) retry until `-EAGAIN`;
/// level-triggered ones call the arm call before each poll. It may,
/// rarely, poll readable spuriously; the call then gives `-EAGAIN` again.
/// Returns it or a negative errno.
///
/// # Safety
///
/// `writer` is NULL or a writer handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_writer_fd(writer: *mut shmpipe_writer) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { fd(writer) }
}

/// Level-triggered readiness: 1 if the next call can progress now
/// (room for what its last `-EAGAIN` wanted, or a gone reader), and the descriptor of `shmpipe_writer_fd` then polls
/// readable until that is consumed; 0 if not, and the descriptor polls
/// readable once it can; or a negative errno. Call it before each `poll`
/// when you do not try the call first.
///
/// # Safety
///
/// `writer` is NULL or a writer handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_writer_arm(writer: *mut shmpipe_writer) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { arm(writer) }
}

/// Non-blocking mode on (`on` non-zero) or off: a call that would wait
/// fails with `-EAGAIN` instead. Returns 0 or a negative errno.
///
/// # Safety
///
/// `receiver` is NULL or a receiver handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_receiver_set_nonblocking(
    receiver: *mut shmpipe_receiver,
    on: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { set_nonblocking(receiver, on) }
}

/// How long a blocking call waits before failing with `-ETIMEDOUT`:
/// `timeout_ms` milliseconds, or forever if negative (the default); 0 is
/// `-EINVAL` (use non-blocking mode).
///
/// # Safety
///
/// `receiver` is NULL or a receiver handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_receiver_set_timeout(
    receiver: *mut shmpipe_receiver,
    timeout_ms: i64,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { set_timeout(receiver, timeout_ms) }
}

/// The end's readiness descriptor for `poll`/`epoll` (owned by the end:
/// do not close it), as a non-blocking socket's: after a call returned
/// `-EAGAIN` (or the arm call returned 0) it polls readable (`POLLIN`)
/// once that call can progress (data or room arrived, or the peer is
/// gone). Edge-triggered users (`EPOLLET`) retry until `-EAGAIN`;
/// level-triggered ones call the arm call before each poll. It may,
/// rarely, poll readable spuriously; the call then gives `-EAGAIN` again.
/// Returns it or a negative errno.
///
/// # Safety
///
/// `receiver` is NULL or a receiver handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_receiver_fd(receiver: *mut shmpipe_receiver) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { fd(receiver) }
}

/// Level-triggered readiness: 1 if the next call can progress now
/// (data or end of file), and the descriptor of `shmpipe_receiver_fd` then polls
/// readable until that is consumed; 0 if not, and the descriptor polls
/// readable once it can; or a negative errno. Call it before each `poll`
/// when you do not try the call first.
///
/// # Safety
///
/// `receiver` is NULL or a receiver handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_receiver_arm(receiver: *mut shmpipe_receiver) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { arm(receiver) }
}

/// Non-blocking mode on (`on` non-zero) or off: a call that would wait
/// fails with `-EAGAIN` instead. Returns 0 or a negative errno.
///
/// # Safety
///
/// `sender` is NULL or a sender handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_sender_set_nonblocking(
    sender: *mut shmpipe_sender,
    on: c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { set_nonblocking(sender, on) }
}

/// How long a blocking call waits before failing with `-ETIMEDOUT`:
/// `timeout_ms` milliseconds, or forever if negative (the default); 0 is
/// `-EINVAL` (use non-blocking mode).
///
/// # Safety
///
/// `sender` is NULL or a sender handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_sender_set_timeout(
    sender: *mut shmpipe_sender,
    timeout_ms: i64,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { set_timeout(sender, timeout_ms) }
}

/// The end's readiness descriptor for `poll`/`epoll` (owned by the end:
/// do not close it), as a non-blocking socket's: after a call returned
/// `-EAGAIN` (or the arm call returned 0) it polls readable (`POLLIN`)
/// once that call can progress (data or room arrived, or the peer is
/// gone). Edge-triggered users (`EPOLLET`) retry until `-EAGAIN`;
/// level-triggered ones call the arm call before each poll. It may,
/// rarely, poll readable spuriously; the call then gives `-EAGAIN` again.
/// Returns it or a negative errno.
///
/// # Safety
///
/// `sender` is NULL or a sender handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_sender_fd(sender: *mut shmpipe_sender) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { fd(sender) }
}

/// Level-triggered readiness: 1 if the next call can progress now
/// (room for what its last `-EAGAIN` wanted, or a gone reader), and the descriptor of `shmpipe_sender_fd` then polls
/// readable until that is consumed; 0 if not, and the descriptor polls
/// readable once it can; or a negative errno. Call it before each `poll`
/// when you do not try the call first.
///
/// # Safety
///
/// `sender` is NULL or a sender handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_sender_arm(sender: *mut shmpipe_sender) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { arm(sender) }
}
