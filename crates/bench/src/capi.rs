//! `shmpipe-c`: the same pipe as `shmpipe`, driven through the C API as a
//! C program drives it: `shmpipe_write`/`shmpipe_read` of `shmpipe.h`,
//! whose inline fast path (crates/capi/src/fast.rs) copies a small item
//! and publishes it without calling the library. They are compiled from C
//! (c/capi_inline.c, by build.rs) and called through function pointers
//! hidden from the optimizer ([`std::hint::black_box`]): one call per item
//! more than a C program's loop, which inlines them. (`c/seed.c` measures
//! the same from a real C program.)

use std::ffi::c_void;
use std::io;

use shmpipe_capi::{shmpipe_reader, shmpipe_writer};

use crate::check::item_failed;
use crate::links::{eof, Link, LinkParams, Rx, Tx};

// The handles are opaque here, as in C.
extern "C" {
    /// The header's `shmpipe_write` (c/capi_inline.c).
    fn shmpipe_bench_write(w: *mut c_void, buf: *const c_void, len: usize) -> isize;
    /// The header's `shmpipe_read` (c/capi_inline.c).
    fn shmpipe_bench_read(r: *mut c_void, buf: *mut c_void, len: usize) -> isize;
    /// The stream test's sender, in C.
    fn shmpipe_bench_send_counters(w: *mut c_void, first: u64, last: u64) -> isize;
    /// The stream test's receiver, in C.
    fn shmpipe_bench_recv_counters(
        r: *mut c_void,
        first: u64,
        last: u64,
        at: *mut u64,
        got: *mut u64,
    ) -> isize;
}

type WriteFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> isize;
type ReadFn = unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> isize;

/// A C-API writer handle.
#[derive(Debug)]
pub struct CapiTx {
    w: *mut shmpipe_writer,
    write: WriteFn,
}

/// A C-API reader handle.
#[derive(Debug)]
pub struct CapiRx {
    r: *mut shmpipe_reader,
    read: ReadFn,
}

/// A negative errno as an `io::Error`.
#[cold]
fn errno(n: isize) -> io::Error {
    io::Error::from_raw_os_error(-n as i32)
}

impl Tx for CapiTx {
    #[inline(always)]
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        // SAFETY: `w` is an open writer handle owned by this value; `buf`
        // is readable for its length.
        let n = unsafe { (self.write)(self.w.cast(), buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(errno(n));
        }
        Ok(())
    }

    /// The loop in C, as a C program's.
    fn send_counters(&mut self, first: u64, last: u64) -> io::Result<()> {
        // SAFETY: `w` is an open writer handle owned by this value.
        let n = unsafe { shmpipe_bench_send_counters(self.w.cast(), first, last) };
        if n < 0 {
            return Err(errno(n));
        }
        Ok(())
    }
}

impl Rx for CapiRx {
    #[inline(always)]
    fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `r` is an open reader handle owned by this value; `buf`
        // is writable for its length.
        let n = unsafe { (self.read)(self.r.cast(), buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 if !buf.is_empty() => Err(eof()),
            n if n < 0 => Err(errno(n)),
            n => Ok(n as usize),
        }
    }

    /// The loop in C, as a C program's.
    fn recv_counters(&mut self, first: u64, last: u64) -> io::Result<()> {
        let (mut at, mut got) = (0, 0);
        // SAFETY: `r` is an open reader handle owned by this value; two
        // writable out-values.
        let n =
            unsafe { shmpipe_bench_recv_counters(self.r.cast(), first, last, &mut at, &mut got) };
        match n {
            0 => Ok(()),
            1 => Err(item_failed(at, got)),
            2 => Err(eof()),
            n => Err(errno(n)),
        }
    }
}

impl Drop for CapiTx {
    fn drop(&mut self) {
        // SAFETY: the handle is ours and closed only here.
        unsafe { shmpipe_capi::shmpipe_writer_close(self.w) }
    }
}

impl Drop for CapiRx {
    fn drop(&mut self) {
        // SAFETY: the handle is ours and closed only here.
        unsafe { shmpipe_capi::shmpipe_reader_close(self.r) }
    }
}

/// `shmpipe-c`: shmpipe's default pipe through its C API.
#[derive(Debug)]
pub enum ShmpipeCLink {}

impl Link for ShmpipeCLink {
    type Tx = CapiTx;
    type Rx = CapiRx;
    const MAX_MESSAGE: usize = usize::MAX;
    fn new(_: &LinkParams) -> io::Result<(CapiTx, CapiRx)> {
        pair(0)
    }
}

/// A pipe of `capacity` bytes (0: the default) through the C API.
pub fn pair(capacity: usize) -> io::Result<(CapiTx, CapiRx)> {
    let (mut r, mut w) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: two writable out-pointers.
    let rc = unsafe { shmpipe_capi::shmpipe_pipe_with(capacity, -1, &mut r, &mut w) };
    if rc != 0 {
        return Err(errno(rc as isize));
    }
    // The C calls need the library's calls they make linked in.
    let used: [*const (); 4] = [
        shmpipe_capi::shmpipe_fast_write as *const (),
        shmpipe_capi::shmpipe_fast_read as *const (),
        shmpipe_capi::shmpipe_writer_sync as *const (),
        shmpipe_capi::shmpipe_reader_sync as *const (),
    ];
    std::hint::black_box(used);
    let write: WriteFn = shmpipe_bench_write;
    let read: ReadFn = shmpipe_bench_read;
    Ok((
        CapiTx {
            w,
            write: std::hint::black_box(write),
        },
        CapiRx {
            r,
            read: std::hint::black_box(read),
        },
    ))
}
