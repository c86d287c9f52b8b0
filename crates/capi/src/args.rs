//! Arguments from C: buffers, out-pointers and strings, checked for NULL.
//! The only place besides the handles that trusts a C pointer.

use std::ffi::{c_char, c_void, CStr};

use crate::{shmpipe_const_iovec, shmpipe_iovec};

/// `len` bytes at `buf` (NULL is fine when `len` is 0): `-EINVAL` for NULL
/// with a length, or a length past `isize::MAX`.
///
/// # Safety
///
/// `buf` is NULL or readable for `len` bytes while the slice lives.
#[inline(always)]
pub(crate) unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> Result<&'a [u8], i32> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() || len > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-NULL, and readable for `len` bytes by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast(), len) })
}

/// As [`bytes`], writable.
///
/// # Safety
///
/// `buf` is NULL or writable for `len` bytes, not aliased, while the slice
/// lives.
#[inline(always)]
pub(crate) unsafe fn bytes_mut<'a>(buf: *mut c_void, len: usize) -> Result<&'a mut [u8], i32> {
    if len == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() || len > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-NULL, writable and unaliased by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) })
}

/// Checks that an out-pointer is not NULL.
#[inline]
pub(crate) fn out<T>(p: *mut T) -> Result<*mut T, i32> {
    if p.is_null() {
        Err(libc::EINVAL)
    } else {
        Ok(p)
    }
}

/// Stores `v` through a checked out-pointer.
///
/// # Safety
///
/// `p` came from [`out`] and is writable.
#[inline]
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: the caller's promise; `write` drops nothing old (C memory).
    unsafe { p.write(v) }
}

/// Describes the two parts of a reserved room in `parts[0]` and
/// `parts[1]`.
///
/// # Safety
///
/// `parts` came from [`out`] and holds two writable iovecs.
pub(crate) unsafe fn put_parts(parts: *mut shmpipe_iovec, (a, b): (&mut [u8], &mut [u8])) {
    for (i, s) in [a, b].into_iter().enumerate() {
        let iov = shmpipe_iovec {
            base: s.as_mut_ptr().cast(),
            len: s.len(),
        };
        // SAFETY: `parts` holds two iovecs by the caller's promise.
        unsafe { put(parts.add(i), iov) };
    }
}

/// As [`put_parts`], for the two parts of what a peek shows.
///
/// # Safety
///
/// As [`put_parts`].
pub(crate) unsafe fn put_const_parts(parts: *mut shmpipe_const_iovec, (a, b): (&[u8], &[u8])) {
    for (i, s) in [a, b].into_iter().enumerate() {
        let iov = shmpipe_const_iovec {
            base: s.as_ptr().cast(),
            len: s.len(),
        };
        // SAFETY: `parts` holds two iovecs by the caller's promise.
        unsafe { put(parts.add(i), iov) };
    }
}

/// A C string as UTF-8 text: `-EINVAL` for NULL or other bytes.
///
/// # Safety
///
/// `s` is NULL or a NUL-terminated string.
pub(crate) unsafe fn text<'a>(s: *const c_char) -> Result<&'a str, i32> {
    if s.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: NUL-terminated by the caller's promise.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| libc::EINVAL)
}

/// A C string as a path (any bytes): `-EINVAL` for NULL.
///
/// # Safety
///
/// As [`text`].
pub(crate) unsafe fn path<'a>(s: *const c_char) -> Result<&'a std::path::Path, i32> {
    use std::os::unix::ffi::OsStrExt;
    if s.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: NUL-terminated by the caller's promise.
    let b = unsafe { CStr::from_ptr(s) }.to_bytes();
    Ok(std::path::Path::new(std::ffi::OsStr::from_bytes(b)))
}

/// A timeout in milliseconds: negative waits forever, 0 is `-EINVAL`
/// (use non-blocking mode to not wait at all).
pub(crate) fn timeout(ms: i64) -> Result<Option<std::time::Duration>, i32> {
    match ms {
        ..0 => Ok(None),
        0 => Err(libc::EINVAL),
        ms => Ok(Some(std::time::Duration::from_millis(ms as u64))),
    }
}
