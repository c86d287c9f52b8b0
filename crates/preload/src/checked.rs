//! The program's buffers, touched only where the kernel would have
//! touched them: a `read` or `write` given a buffer that is not mapped (or
//! not writable, for `read`) fails with `EFAULT` natively; a hand-over
//! that copied with plain loads and stores would kill the process with
//! SIGSEGV instead. So the writer copies with `process_vm_readv` on its
//! own process (one system call, the kernel's own check), and a reader
//! checks its buffer before it waits. A buffer on the main thread's stack
//! needs neither (`main_stack`). A buffer unmapped by another thread
//! while the call runs is a race the program has with itself, natively too.
//!
//! Where the calls are refused (a seccomp filter, as container runtimes
//! install without `CAP_SYS_PTRACE`), every check fails and the bytes go
//! through the kernel: slower, never different.

use core::cell::Cell;
use core::ffi::{c_int, c_void};

use crate::{main_stack, sys};

/// The pages a check of this thread last passed: `(first, end, writable,
/// generation)`. A buffer within them is trusted while no mapping changed
/// through a call the hooks see (`main_stack::generation`): a bulk
/// transfer checks its buffer once, not at every call (a check of 64 KiB
/// costs about 10 us). Memory unmapped where no hook sees it (glibc's
/// `free` of a large block, through its internal `munmap`) and used after
/// that is a use after free the program makes; there a copy may fault
/// where the kernel would say `EFAULT`.
type Passed = (usize, usize, bool, usize);

std::thread_local! {
    static PASSED: Cell<Passed> = const { Cell::new((0, 0, false, usize::MAX)) };
}

/// Whether `buf[..n]` lies in the pages this thread's last check passed
/// (writable ones, if `write`), with no mapping changed since.
fn passed(buf: usize, n: usize, write: bool) -> bool {
    let (first, end, writable, generation) = PASSED.with(Cell::get);
    generation == main_stack::generation()
        && first <= buf
        && buf.checked_add(n).is_some_and(|e| e <= end)
        && (writable || !write)
}

/// Notes the pages of `buf[..n]` as checked (`generation` read before the
/// check).
fn pass(buf: usize, n: usize, writable: bool, generation: usize) {
    let first = buf & !4095;
    let end = (buf + n + 4095) & !4095;
    PASSED.with(|p| p.set((first, end, writable, generation)));
}

/// The longest buffer `writable` checks: a hand-over's most.
pub const MAX_LEN: usize = 64 * 1024;
/// Pages `MAX_LEN` bytes span from any offset.
const PAGES: usize = MAX_LEN / 4096 + 1;

/// Copies `n` bytes from the program's `src` to `dst` (memory of the
/// library's own, valid for `n` bytes): whether every byte was copied.
/// `pid` is this process's (the caller has it already; each getpid is a
/// system call).
pub fn copy_in(pid: c_int, dst: *mut u8, src: *const u8, n: usize) -> bool {
    if main_stack::holds(src.cast(), n) {
        // SAFETY: `src[..n]` is mapped and readable (`main_stack`), and
        // `dst` is `n` writable bytes of the library's, apart from it.
        unsafe { core::ptr::copy_nonoverlapping(src, dst, n) };
        return true;
    }
    let local = sys::IoVec {
        base: dst.cast(),
        len: n,
    };
    let remote = sys::IoVec {
        base: src.cast_mut().cast(),
        len: n,
    };
    // SAFETY: `local` is `n` writable bytes (the caller's contract); the
    // kernel checks `remote` and fails with EFAULT where it is not mapped.
    let got = unsafe { sys::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    got == n as isize
}

/// One-byte iovecs, one per page of `start..start + n` (`n > 0`; the
/// first from the buffer's start, the others from their page's), and how
/// many; `None` past [`PAGES`].
fn one_byte_per_page(start: usize, n: usize) -> Option<([sys::IoVec; PAGES], usize)> {
    let first = start & !4095;
    let last = (start + n - 1) & !4095;
    let pages = (last - first) / 4096 + 1;
    if pages > PAGES {
        return None;
    }
    let mut iovs = [sys::IoVec {
        base: core::ptr::null_mut(),
        len: 1,
    }; PAGES];
    for (i, iov) in iovs.iter_mut().take(pages).enumerate() {
        iov.base = start.max(first + i * 4096) as *mut c_void;
    }
    Some((iovs, pages))
}

/// Whether every page of the program's `buf[..n]` is mapped and writable,
/// `n <= MAX_LEN` (a longer buffer is not checked: false): one byte of
/// each page is copied onto itself by the kernel, in one system call. It
/// reads the byte as another process's memory (mapped and readable) and
/// writes it as the caller's own (`copy_to_user`: mapped and writable),
/// the checks a kernel `read` into `buf` makes. `pid` is this process's.
pub fn writable(pid: c_int, buf: *mut c_void, n: usize) -> bool {
    if n == 0 || main_stack::holds(buf, n) || passed(buf as usize, n, true) {
        return true;
    }
    let generation = main_stack::generation();
    let start = buf as usize;
    let Some((pages_of, pages)) = one_byte_per_page(start, n) else {
        return false;
    };
    let iov = pages_of.as_ptr();
    // SAFETY: the kernel checks every byte on both sides: the remote side
    // (read) as it would another process's, the local side (written) with
    // the fault handling of any copy to user memory, so an unmapped or
    // read-only page fails the call short instead of faulting. Each byte
    // gets its own value back (a thread writing it meanwhile races with
    // the program's own `read` into it, natively too).
    let ok = unsafe {
        sys::process_vm_readv(pid, iov, pages as _, iov, pages as _, 0) == pages as isize
    };
    if ok {
        pass(start, n, true, generation);
    }
    ok
}

/// Whether every page of the program's `buf[..n]` is mapped and
/// readable, `n <= MAX_LEN` (a longer buffer is not checked: false): one
/// byte of each page is read by the kernel, as another process's memory,
/// in one system call. `pid` is this process's.
pub fn readable(pid: c_int, buf: *const c_void, n: usize) -> bool {
    if n == 0 || main_stack::holds(buf, n) || passed(buf as usize, n, false) {
        return true;
    }
    let generation = main_stack::generation();
    let start = buf as usize;
    let Some((pages_of, pages)) = one_byte_per_page(start, n) else {
        return false;
    };
    let mut scratch = [0u8; PAGES];
    let local = sys::IoVec {
        base: scratch.as_mut_ptr().cast(),
        len: pages,
    };
    // SAFETY: `local` is `pages` writable bytes of ours; the kernel checks
    // each remote byte and fails the call short where one is not mapped.
    let ok = unsafe {
        sys::process_vm_readv(pid, &local, 1, pages_of.as_ptr(), pages as _, 0) == pages as isize
    };
    if ok {
        pass(start, n, false, generation);
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> c_int {
        // SAFETY: getpid has no preconditions.
        unsafe { sys::getpid() }
    }

    #[test]
    fn a_copy_from_an_unmapped_buffer_fails_instead_of_faulting() {
        let mut dst = [0u8; 8];
        assert!(!copy_in(me(), dst.as_mut_ptr(), 16 as *const u8, 8));
        let src = *b"12345678";
        assert!(copy_in(me(), dst.as_mut_ptr(), src.as_ptr(), 8));
        assert_eq!(dst, src);
    }

    #[test]
    fn only_mapped_pages_are_readable() {
        let buf = vec![7u8; MAX_LEN];
        assert!(readable(me(), buf.as_ptr().cast(), MAX_LEN));
        assert!(!readable(me(), 16 as *const c_void, 4));
        let page = read_only_page();
        assert!(readable(me(), page, 4096), "read-only is readable");
    }

    #[test]
    fn only_mapped_writable_pages_are_writable() {
        let mut buf = vec![7u8; MAX_LEN];
        assert!(writable(me(), buf.as_mut_ptr().cast(), MAX_LEN));
        assert!(buf.iter().all(|&b| b == 7), "the check changed the buffer");
        assert!(!writable(me(), 16 as *mut c_void, 4));
        // A read-only page, and a buffer whose last page is one.
        let page = read_only_page();
        assert!(!writable(me(), page, 1));
        assert!(!writable(
            me(),
            page.cast::<u8>().wrapping_sub(10).cast(),
            20
        ));
    }

    /// A read-only anonymous page, left mapped (the test process ends).
    fn read_only_page() -> *mut c_void {
        extern "C" {
            fn mmap(a: *mut c_void, n: usize, p: i32, f: i32, fd: i32, o: i64) -> *mut c_void;
        }
        // SAFETY: a fresh private anonymous mapping, no address hint.
        let two = unsafe { mmap(core::ptr::null_mut(), 8192, 3, 0x22, -1, 0) };
        assert_ne!(two as isize, -1);
        extern "C" {
            fn mprotect(a: *mut c_void, n: usize, p: i32) -> i32;
        }
        let second = two.cast::<u8>().wrapping_add(4096).cast();
        // SAFETY: the second page of the mapping just made.
        assert_eq!(unsafe { mprotect(second, 4096, 1) }, 0);
        second
    }
}
