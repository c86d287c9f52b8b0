//! The main thread's stack: the one memory of the program's that the
//! library knows to be mapped, readable and writable without asking the
//! kernel, so that a hand-over of a buffer there (lmbench's `char c`)
//! skips `checked`'s system call (1-2 µs a hand-over on a guest where a
//! `process_vm_readv` walks the page tables under the mm's lock).
//!
//! Why it holds: the stack is one growing-down mapping, read-write, from
//! the lowest address it has grown to up past `__libc_stack_end` (the
//! stack pointer the kernel started the process with). The bytes between
//! the current stack pointer and that top are the frames of the running
//! code's callers, so they are mapped and writable. Two things could make
//! that false, and each is ruled out:
//!
//! - A stack pointer that is not on this stack (another thread's stack, a
//!   `sigaltstack`, a coroutine's): only one within `RLIMIT_STACK` (at
//!   most 128 MiB) below the top counts. The kernel keeps that much room
//!   below the stack free of every mapping it places itself (the mmap
//!   base leaves a gap of at least the limit, and at least 128 MiB); a
//!   stack in that room was put there by the program on the main stack
//!   (a local array), and then the frames above it are the main stack's.
//! - The program changing its own stack's mappings (`mprotect`,
//!   `pkey_mprotect`, `munmap`, `mremap`, `madvise`, a `MAP_FIXED` `mmap`
//!   over it): the hooks of those calls turn this off for good when the
//!   range touches the stack's room. A raw system call (`syscall(2)`) is
//!   not seen; a program that unmaps or write-protects the frames of its
//!   own callers while they run is not one a kernel `read` serves either.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::sys;

/// The most of the room below the top that counts as the stack.
const MOST: usize = 128 << 20;
/// `RLIMIT_STACK`.
const RLIMIT_STACK: c_int = 3;

/// The stack's top (`__libc_stack_end`), 0 when not known.
static TOP: AtomicUsize = AtomicUsize::new(0);
/// The lowest address counted as the stack.
static FLOOR: AtomicUsize = AtomicUsize::new(0);
/// Set for good once the program changed a mapping in `FLOOR..TOP`.
static CHANGED: AtomicBool = AtomicBool::new(false);

/// Finds the stack's top and room. Called once from the constructor, when
/// hand-over is on (it runs on the main thread before `main`).
pub fn open() {
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches every object.
    let end = unsafe { sys::dlsym(core::ptr::null_mut(), c"__libc_stack_end".as_ptr()) };
    if end.is_null() {
        return;
    }
    // SAFETY: glibc's `__libc_stack_end` is a `void *`, set before any
    // constructor runs.
    let top = unsafe { *end.cast::<usize>() };
    let mut limit = [0u64; 2];
    // SAFETY: `struct rlimit` is two 64-bit words here.
    if top == 0 || unsafe { sys::getrlimit(RLIMIT_STACK, limit.as_mut_ptr()) } != 0 {
        return;
    }
    let room = usize::try_from(limit[0]).unwrap_or(MOST).min(MOST);
    let here = stack_pointer();
    if here >= top || top - here > room {
        return; // Not on the main stack after all: never count it.
    }
    FLOOR.store(top - room, Ordering::Relaxed);
    TOP.store(top, Ordering::Release);
}

/// Whether `buf[..n]` lies between the current stack pointer and the main
/// stack's top, with the stack pointer on the main stack: memory that is
/// mapped, readable and writable.
#[inline]
pub fn holds(buf: *const c_void, n: usize) -> bool {
    let top = TOP.load(Ordering::Acquire);
    let here = stack_pointer();
    let start = buf as usize;
    top != 0
        && FLOOR.load(Ordering::Relaxed) <= here
        && here <= start
        && start.checked_add(n).is_some_and(|end| end <= top)
        && !CHANGED.load(Ordering::Relaxed)
}

/// Called by the hooks of calls that change mappings, before the change:
/// one over the stack's room turns `holds` off for good.
#[inline]
pub fn changing(addr: *const c_void, len: usize) {
    let top = TOP.load(Ordering::Relaxed);
    let start = addr as usize;
    if top != 0 && start < top && start.saturating_add(len) > FLOOR.load(Ordering::Relaxed) {
        CHANGED.store(true, Ordering::Relaxed);
    }
}

/// An address in the caller's frame: at or above the stack pointer, below
/// every frame of the caller's callers.
#[inline(always)]
fn stack_pointer() -> usize {
    let marker = 0u8;
    core::hint::black_box(&marker) as *const u8 as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_holds_its_callers_frames_until_its_mappings_change() {
        // The test harness runs tests on threads of its own, whose stacks
        // are not the main one: `open` must not count this one.
        let frame = [7u8; 64];
        open();
        assert!(!holds(frame.as_ptr().cast(), 64));
        // This thread's stack stood for the main one: its top above
        // `frame`, its room 1 MiB below. (Other tests' threads are outside
        // it, and it ends turned off.)
        let top = frame.as_ptr() as usize + 4096;
        FLOOR.store(top - (1 << 20), Ordering::Relaxed);
        TOP.store(top, Ordering::Release);
        let heap = Box::new([0u8; 64]);
        assert!(callee_holds(frame.as_ptr(), 64), "a caller's frame");
        assert!(!callee_holds(heap.as_ptr(), 64), "the heap");
        assert!(!callee_holds(frame.as_ptr(), 8192), "past the top");
        changing((top + 4096) as *const c_void, 4096);
        assert!(callee_holds(frame.as_ptr(), 64), "a change above the top");
        changing((top - 8192) as *const c_void, 4096);
        assert!(
            !callee_holds(frame.as_ptr(), 64),
            "after a change in the room"
        );
    }

    #[inline(never)]
    fn callee_holds(buf: *const u8, n: usize) -> bool {
        holds(buf.cast(), n)
    }
}
