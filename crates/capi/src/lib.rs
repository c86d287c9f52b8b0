//! The C API of shmpipe: `libshmpipe.so`, `libshmpipe.a` and `shmpipe.h`
//! (generated from this crate by cbindgen, committed as `include/shmpipe.h`;
//! `bash scripts/install-c.sh PREFIX` builds and installs all three).
//!
//! The conventions, for every call:
//!
//! * Success is 0 (or a count); failure is a negative errno, returned, not
//!   left in `errno`. No call raises `SIGPIPE` (a writer whose reader is
//!   gone gets `-EPIPE`) and no call aborts: a Rust panic is caught at the
//!   boundary and becomes `-EIO`.
//! * A handle argument is NULL, or a handle this library returned. NULL
//!   or a handle of another type gives `-EINVAL` (every handle starts
//!   with a word that says its type); a closed handle gives `-EBADF` (its
//!   memory is kept for reuse by later handles of the same type, so, as
//!   with descriptor numbers, a closed handle may name a newer one).
//!   Closing NULL, a closed handle or one of another type does nothing.
//! * Buffers are NULL only with a length of 0.
//! * A handle is used by one thread at a time: a call while another
//!   thread's call holds it gives `-EBUSY`. A close may come from any
//!   thread, even while another thread's call waits on the handle: that
//!   call returns `-EBADF` within a slice of waiting (50 ms), and the close
//!   returns once it has, the end released. Not while another thread may
//!   run the header's inline `shmpipe_read`/`shmpipe_write`, which use
//!   the end without the library (see the header). Ends survive `fork` as
//!   in Rust: the pipe closes when every copy of an end is closed.
//!
//! A peer that breaks the protocol gives `-EPROTO`, never a crash.
//!
//! # Examples
//!
//! ```
//! use shmpipe_capi::*;
//! let (mut r, mut w) = (std::ptr::null_mut(), std::ptr::null_mut());
//! // SAFETY: the arguments follow the conventions above.
//! unsafe {
//!     assert_eq!(shmpipe_pipe(&mut r, &mut w), 0);
//!     assert_eq!(shmpipe_write(w, b"hi".as_ptr().cast(), 2), 2);
//!     shmpipe_writer_close(w);
//!     let mut buf = [0u8; 8];
//!     assert_eq!(shmpipe_read(r, buf.as_mut_ptr().cast(), 8), 2);
//!     assert_eq!(shmpipe_read(r, buf.as_mut_ptr().cast(), 8), 0);
//!     shmpipe_reader_close(r);
//!     assert_eq!(shmpipe_read(r, buf.as_mut_ptr().cast(), 8), -(libc::EBADF as isize));
//! }
//! ```

#![allow(non_camel_case_types)]

mod args;
mod error;
mod handle;
mod wait;

pub mod fast;

pub mod end;
pub mod handoff;
pub mod listener;
pub mod message;
pub mod stream;

pub use end::*;
pub use fast::*;
pub use handoff::*;
pub use listener::*;
pub use message::*;
pub use stream::*;

/// The C library's `ssize_t` (cbindgen prints the name; `sys/types.h`
/// defines it).
pub type ssize_t = isize;

/// The C library's `pid_t`.
pub type pid_t = i32;

/// Part of a ring to fill in place: `len` writable bytes at `base`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmpipe_iovec {
    /// The first byte.
    pub base: *mut std::ffi::c_void,
    /// How many bytes.
    pub len: usize,
}

/// Part of a ring to read in place: `len` bytes at `base`, read-only
/// (the memory is the peer's, mapped read-only here).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmpipe_const_iovec {
    /// The first byte.
    pub base: *const std::ffi::c_void,
    /// How many bytes.
    pub len: usize,
}
