//! Byte-stream pipes: `shmpipe_pipe`, `shmpipe_write`, `shmpipe_read` and
//! their zero-copy forms.

use std::ffi::{c_int, c_void};
use std::io::{Read, Write};
use std::ptr::addr_of_mut;
use std::time::Duration;

use shmpipe::{Reader, Writer};

use crate::args;
use crate::error::{guard, guard_int, guard_void, Errno};
use crate::fast::{self, shmpipe_fast, Lent, SHMPIPE_FAST_READER, SHMPIPE_FAST_WRITER};
use crate::handle::{self, handle, Guard, Handle, Slot, Using};
use crate::wait::sliced;
use crate::{shmpipe_const_iovec, shmpipe_iovec, ssize_t};

/// The reading end of a byte-stream pipe. It starts with the state its
/// inline `shmpipe_read` works with (see `fast`).
#[derive(Debug)]
#[repr(C)]
pub struct shmpipe_reader {
    fast: shmpipe_fast,
    guard: Guard,
    slot: Slot<Reader>,
    next: *mut shmpipe_reader,
}

/// The writing end of a byte-stream pipe. It starts with the state its
/// inline `shmpipe_write` works with (see `fast`).
#[derive(Debug)]
#[repr(C)]
pub struct shmpipe_writer {
    fast: shmpipe_fast,
    guard: Guard,
    slot: Slot<Writer>,
    next: *mut shmpipe_writer,
}

// The magic word is the inline state's `kind`, at offset 0.
handle!(shmpipe_reader, Reader, SHMPIPE_FAST_READER, lent);
handle!(shmpipe_writer, Writer, SHMPIPE_FAST_WRITER, lent);

/// Runs `op` on the handle `h` (taking back the state lent to the
/// inline path first, as every call does) and lends it again after,
/// unless the handle closes.
///
/// # Safety
///
/// `h` is NULL or a handle.
#[inline(always)]
unsafe fn lending<H, E>(
    h: *mut H,
    fast: impl FnOnce(*mut H) -> *mut shmpipe_fast,
    op: impl FnOnce(&mut Using<H>) -> Result<isize, i32>,
) -> Result<isize, i32>
where
    H: Handle<End = E>,
    E: Lent,
{
    // SAFETY: the caller's promise.
    let mut u = unsafe { handle::using(h)? };
    let r = op(&mut u);
    if !u.closing() {
        if let Ok(end) = u.end() {
            // Only an end on its fast path lends: one that takes turns
            // looks whether its other copies are gone (an error here is
            // the next call's to meet).
            let _ = end.check_copies();
            // SAFETY: `h` is a handle of type H held by this call (checked
            // by `using`), never freed.
            unsafe { fast::lend(fast(h), end) };
        }
    }
    r
}

/// Has the writer publish what the header's inline `shmpipe_write` wrote,
/// and wake the reader if it sleeps (the inline code calls it when it
/// sees the reader's parked word). Returns 0 or a negative errno:
/// `-EPIPE` once every copy of the reader is gone (a reader that goes says
/// so in its parked word, so this is where the inline path learns it).
/// Other code never needs it.
///
/// # Safety
///
/// `writer` is NULL or a writer handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_writer_sync(writer: *mut shmpipe_writer) -> c_int {
    let op = |u: &mut Using<shmpipe_writer>| u.end()?.sync_lent().errno().map(|()| 0);
    // SAFETY: the caller's promise.
    guard_int(|| unsafe { lending(writer, |h| addr_of_mut!((*h).fast), op) }.map(|_| 0))
}

/// As `shmpipe_writer_sync`, for the reader: publishes what the inline
/// `shmpipe_read` consumed and wakes the writer if it sleeps.
///
/// # Safety
///
/// `reader` is NULL or a reader handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_reader_sync(reader: *mut shmpipe_reader) -> c_int {
    // SAFETY: the caller's promise.
    guard_int(|| unsafe { lending(reader, |h| addr_of_mut!((*h).fast), |_| Ok(0)) }.map(|_| 0))
}

/// The options of a `*_with` call: `capacity` 0 or `spin_ns` negative
/// keep the default.
pub(crate) fn options(capacity: usize, spin_ns: i64) -> shmpipe::Options {
    let mut o = shmpipe::Options::new();
    if capacity != 0 {
        o.capacity(capacity);
    }
    if spin_ns >= 0 {
        o.spin(Duration::from_nanos(spin_ns as u64));
    }
    o
}

/// Creates a byte-stream pipe, blocking, with the default capacity
/// (256 KiB). Returns 0 or a negative errno.
///
/// # Safety
///
/// `reader` and `writer` are writable (NULL gives `-EINVAL`).
#[no_mangle]
pub unsafe extern "C" fn shmpipe_pipe(
    reader: *mut *mut shmpipe_reader,
    writer: *mut *mut shmpipe_writer,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { shmpipe_pipe_with(0, -1, reader, writer) }
}

/// Creates a byte-stream pipe with a ring of `capacity` bytes (a power of
/// two, at least 8; 0 for the default) whose ends spin `spin_ns`
/// nanoseconds before sleeping (negative for the default, 0 to sleep at
/// once).
///
/// # Safety
///
/// As `shmpipe_pipe`.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_pipe_with(
    capacity: usize,
    spin_ns: i64,
    reader: *mut *mut shmpipe_reader,
    writer: *mut *mut shmpipe_writer,
) -> c_int {
    // SAFETY: the caller's promise.
    guard_int(|| unsafe {
        handle::open_pair(reader, writer, || options(capacity, spin_ns).pipe().errno())
    })
}

/// Writes all `len` bytes and returns `len`, or a negative errno: `-EPIPE`
/// once the reader is gone, `-EAGAIN` or `-ETIMEDOUT` in non-blocking mode
/// or past the timeout (some of the bytes may have been written then; see
/// `shmpipe_write_some`).
///
/// # Safety
///
/// `writer` is NULL or a writer handle; `buf` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_write(
    writer: *mut shmpipe_writer,
    buf: *const c_void,
    len: usize,
) -> ssize_t {
    guard(|| {
        // SAFETY: the caller's promise.
        let mut u = unsafe { handle::using(writer)? };
        // SAFETY: the caller's promise.
        unsafe { write_op(&mut u, buf, len) }
    })
}

/// `shmpipe_write`, then lends the writer's state to the header's inline
/// `shmpipe_write`, which calls this when it cannot write by itself.
/// (The library's own `shmpipe_write` lends nothing: a program that only
/// calls it pays nothing for the inline path.)
///
/// # Safety
///
/// As `shmpipe_write`.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_fast_write(
    writer: *mut shmpipe_writer,
    buf: *const c_void,
    len: usize,
) -> ssize_t {
    let op = |u: &mut Using<shmpipe_writer>| {
        // SAFETY: the caller's promise.
        unsafe { write_op(u, buf, len) }
    };
    // SAFETY: the caller's promise.
    guard(|| unsafe { lending(writer, |h| addr_of_mut!((*h).fast), op) })
}

/// What `shmpipe_write` does with the end.
///
/// # Safety
///
/// `buf` is readable for `len` bytes.
#[inline(always)]
unsafe fn write_op(
    u: &mut Using<shmpipe_writer>,
    buf: *const c_void,
    len: usize,
) -> Result<isize, i32> {
    // SAFETY: readable for `len` bytes by the caller's promise.
    let b = unsafe { args::bytes(buf, len)? };
    // `Write::write`, not `write_all`: a wait may end with a slice (see
    // `wait`), and what was written before it must not be written again.
    let mut done = 0;
    sliced(u, |w| {
        if done == 0 {
            // A length known at compile time for the common items: the
            // copy is a move, not a call to memcpy.
            done = match len {
                4 => w.write(fixed::<4>(b)),
                8 => w.write(fixed::<8>(b)),
                16 => w.write(fixed::<16>(b)),
                _ => w.write(b),
            }
            .errno()?;
        }
        if done < len {
            return write_rest(w, b, &mut done);
        }
        Ok(len as isize)
    })
}

/// The rest of `shmpipe_write` once the ring took part of it.
#[cold]
#[inline(never)]
fn write_rest(w: &mut Writer, b: &[u8], done: &mut usize) -> Result<isize, i32> {
    while *done < b.len() {
        *done += w.write(&b[*done..]).errno()?;
    }
    Ok(b.len() as isize)
}

/// `b` as an array of its length `N`.
#[inline(always)]
fn fixed<const N: usize>(b: &[u8]) -> &[u8; N] {
    b.try_into().expect("the length was matched")
}

/// As [`fixed`], writable.
#[inline(always)]
fn fixed_mut<const N: usize>(b: &mut [u8]) -> &mut [u8; N] {
    b.try_into().expect("the length was matched")
}

/// `Read::read` with a fast path for a small item that is all there: one
/// copy of a length known at compile time.
#[inline(always)]
fn read_small<const N: usize>(r: &mut Reader, b: &mut [u8]) -> std::io::Result<usize> {
    if r.buffered() >= N {
        r.read_exact(fixed_mut::<N>(b))?;
        return Ok(N);
    }
    r.read(b)
}

/// Writes what fits, at least one byte (waiting for room as configured),
/// and returns the count, as `write(2)` does; 0 only for `len` 0.
///
/// # Safety
///
/// As `shmpipe_write`.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_write_some(
    writer: *mut shmpipe_writer,
    buf: *const c_void,
    len: usize,
) -> ssize_t {
    guard(|| {
        // SAFETY: the caller's promise.
        let (mut u, b) = unsafe { (handle::using(writer)?, args::bytes(buf, len)?) };
        // A write that waits writes nothing before, so it may run again.
        sliced(&mut u, |w| Ok(w.write(b).errno()? as isize))
    })
}

/// Blocks until at least one byte is there; returns the count (at most
/// `len`), 0 at end of file (every copy of the writer closed and the pipe
/// drained), or a negative errno.
///
/// # Safety
///
/// `reader` is NULL or a reader handle; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_read(
    reader: *mut shmpipe_reader,
    buf: *mut c_void,
    len: usize,
) -> ssize_t {
    guard(|| {
        // SAFETY: the caller's promise.
        let mut u = unsafe { handle::using(reader)? };
        // SAFETY: the caller's promise.
        unsafe { read_op(&mut u, buf, len) }
    })
}

/// `shmpipe_read`, then lends the reader's state to the header's inline
/// `shmpipe_read`, which calls this when it cannot read by itself (see
/// `shmpipe_fast_write`).
///
/// # Safety
///
/// As `shmpipe_read`.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_fast_read(
    reader: *mut shmpipe_reader,
    buf: *mut c_void,
    len: usize,
) -> ssize_t {
    let op = |u: &mut Using<shmpipe_reader>| {
        // SAFETY: the caller's promise.
        unsafe { read_op(u, buf, len) }
    };
    // SAFETY: the caller's promise.
    guard(|| unsafe { lending(reader, |h| addr_of_mut!((*h).fast), op) })
}

/// What `shmpipe_read` does with the end.
///
/// # Safety
///
/// `buf` is writable for `len` bytes.
#[inline(always)]
unsafe fn read_op(
    u: &mut Using<shmpipe_reader>,
    buf: *mut c_void,
    len: usize,
) -> Result<isize, i32> {
    let r = u.end()?;
    // As in shmpipe_write: the 8-byte item that is all there already
    // is one copy of a length known at compile time.
    if len == 8 && !buf.is_null() && r.buffered() >= 8 {
        // SAFETY: writable for 8 bytes by the caller's promise.
        r.read_exact(unsafe { &mut *buf.cast::<[u8; 8]>() })
            .errno()?;
        return Ok(8);
    }
    // A read that waits reads nothing before, so it may run again.
    sliced(u, |r| read(r, buf, len))
}

/// `shmpipe_read` for any length, or when the item is not all there.
#[inline(never)]
fn read(r: &mut Reader, buf: *mut c_void, len: usize) -> Result<isize, i32> {
    // SAFETY: writable for `len` bytes by the promise of shmpipe_read's caller.
    let b = unsafe { args::bytes_mut(buf, len)? };
    let n = match len {
        4 => read_small::<4>(r, b),
        16 => read_small::<16>(r, b),
        _ => r.read(b),
    };
    Ok(n.errno()? as isize)
}

/// Closes this copy of the reading end. The pipe's reading side closes
/// when every copy (across `fork`, say) is closed; the writer then gets
/// `-EPIPE`.
///
/// # Safety
///
/// `reader` is NULL or a reader handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_reader_close(reader: *mut shmpipe_reader) {
    // SAFETY: the caller's promise.
    guard_void(|| unsafe { handle::close(reader) })
}

/// Closes this copy of the writing end; once every copy is closed the
/// reader drains the pipe and then reads end of file.
///
/// # Safety
///
/// `writer` is NULL or a writer handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_writer_close(writer: *mut shmpipe_writer) {
    // SAFETY: the caller's promise.
    guard_void(|| unsafe { handle::close(writer) })
}

/// Waits until `len` bytes are free (at most the capacity) and describes
/// them in `parts[0]` and `parts[1]` (the second is empty unless the room
/// wraps around the ring's end), to be filled in place and published by
/// `shmpipe_writer_commit`. Returns 0 or a negative errno.
///
/// # Safety
///
/// `writer` is NULL or a writer handle; `parts` is NULL or two writable
/// iovecs.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_writer_reserve(
    writer: *mut shmpipe_writer,
    len: usize,
    parts: *mut shmpipe_iovec,
) -> c_int {
    guard_int(|| {
        let parts = args::out(parts)?;
        // SAFETY: the caller's promise.
        let mut u = unsafe { handle::using(writer)? };
        sliced(&mut u, |w| {
            let mut grant = w.reserve(len).errno()?;
            // SAFETY: a checked out-pointer to two iovecs (the caller's promise).
            unsafe { args::put_parts(parts, grant.as_mut_slices()) };
            // The grant is only a borrow: dropping it writes nothing, and
            // the commit takes the same room again.
            let _ = grant;
            Ok(())
        })?;
        u.slot().grant = len;
        Ok(0)
    })
}

/// Publishes the first `n` bytes of the room the last
/// `shmpipe_writer_reserve` gave (`-EINVAL` if `n` is more). Any other
/// write in between ends the reservation.
///
/// # Safety
///
/// `writer` is NULL or a writer handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_writer_commit(writer: *mut shmpipe_writer, n: usize) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's promise.
        let mut u = unsafe { handle::using(writer)? };
        let slot = u.slot();
        if n > slot.grant {
            return Err(libc::EINVAL);
        }
        slot.grant = 0;
        let w = u.end()?;
        // The room is free already, so this reserve does not wait.
        w.reserve(n).errno()?.commit(n);
        Ok(0)
    })
}

/// Waits for at least one byte and describes the readable bytes in place
/// in `parts[0]` and `parts[1]`, without consuming them; returns their
/// count, 0 at end of file, or a negative errno. `shmpipe_reader_consume`
/// then releases them.
///
/// The bytes are in memory the writer can write: an honest writer never
/// changes them before they are consumed, a hostile one could.
///
/// # Safety
///
/// `reader` is NULL or a reader handle; `parts` is NULL or two writable
/// iovecs.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_reader_peek(
    reader: *mut shmpipe_reader,
    parts: *mut shmpipe_const_iovec,
) -> ssize_t {
    guard(|| {
        let parts = args::out(parts)?;
        // SAFETY: the caller's promise.
        let mut u = unsafe { handle::using(reader)? };
        let len = sliced(&mut u, |r| {
            let chunk = r.read_chunk().errno()?;
            let view = chunk.bytes();
            // SAFETY: only the addresses are taken; C reads the bytes,
            // under the caveat in this function's documentation.
            // `parts`: a checked out-pointer to two iovecs (the caller's
            // promise).
            unsafe { args::put_const_parts(parts, view.as_slices()) };
            Ok(chunk.len())
        })?;
        u.slot().grant = len;
        Ok(len as isize)
    })
}

/// Consumes the first `n` bytes the last `shmpipe_reader_peek` showed
/// (`-EINVAL` if `n` is more), freeing their room for the writer.
///
/// # Safety
///
/// `reader` is NULL or a reader handle.
#[no_mangle]
pub unsafe extern "C" fn shmpipe_reader_consume(reader: *mut shmpipe_reader, n: usize) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's promise.
        let mut u = unsafe { handle::using(reader)? };
        let slot = u.slot();
        if n > slot.grant {
            return Err(libc::EINVAL);
        }
        slot.grant -= n;
        let r = u.end()?;
        if n > 0 {
            // The bytes are there already, so this does not wait.
            r.read_chunk().errno()?.consume(n);
        }
        Ok(0)
    })
}
