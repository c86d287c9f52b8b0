//! This process's pid, asked of the kernel once per process instead of at
//! every hand-over (a `getpid` is a system call, and a hand-over asked
//! twice).
//!
//! glibc stopped caching the pid (2.25) because a child made by a raw
//! `clone`, which runs no `pthread_atfork` handler, kept its parent's. The
//! cache here lives in a private page marked `MADV_WIPEONFORK`: the kernel
//! gives every child that does not share this memory (`fork`, `clone`
//! without `CLONE_VM`, however it was called) that page zeroed, and a zero
//! means "ask". Only this process (the constructor) and the library's
//! `fork` wrapper in a child store into it, never a reader of it: a
//! `vfork` or `CLONE_VM` child, which shares the page, must not leave its
//! own pid in its parent's memory. Such a child reads its parent's pid;
//! `process_vm_readv` on that pid reaches the memory the child runs in,
//! and a slot it claims is held in its parent's name (one left by such a
//! child killed mid-hand-over stays taken until the parent exits: slower,
//! never wrong). Where the kernel refuses the mark (before Linux 4.14),
//! every call asks.

use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use crate::sys;

/// `MADV_WIPEONFORK`.
const MADV_WIPEONFORK: i32 = 18;
/// `MAP_PRIVATE | MAP_ANONYMOUS`.
const MAP_PRIVATE_ANONYMOUS: i32 = 0x02 | sys::MAP_ANONYMOUS;

/// The page's first word: this process's pid, or 0 (not asked yet, or a
/// child's wiped copy). Null: no page, ask every time.
static CACHE: AtomicPtr<AtomicU32> = AtomicPtr::new(core::ptr::null_mut());

/// Maps the wiped-on-fork page. Called once, from the constructor, when
/// hand-over is on (a process without it pays nothing).
pub fn open() {
    // SAFETY: a fresh private anonymous page, no address hint.
    let page = unsafe {
        sys::mmap(
            core::ptr::null_mut(),
            4096,
            sys::PROT_RW,
            MAP_PRIVATE_ANONYMOUS,
            -1,
            0,
        )
    };
    if page == sys::MAP_FAILED {
        return;
    }
    // SAFETY: `page` is the mapping just made, one page long.
    if unsafe { sys::madvise(page, 4096, MADV_WIPEONFORK) } != 0 {
        // SAFETY: as above; nothing else has seen it.
        unsafe { sys::munmap(page, 4096) };
        return;
    }
    // SAFETY: the page just mapped; zero-filled memory is a valid
    // `AtomicU32`.
    unsafe { (*page.cast::<AtomicU32>()).store(asked(), Ordering::Relaxed) };
    CACHE.store(page.cast(), Ordering::Release);
}

/// In the child of the library's `fork` wrapper: the wiped page gets this
/// process's pid (a child made otherwise asks at every call).
pub fn after_fork_child() {
    let cache = CACHE.load(Ordering::Acquire);
    if !cache.is_null() {
        // SAFETY: a non-null `CACHE` is the page `open` mapped, never
        // unmapped; this child's own copy of it.
        unsafe { (*cache).store(asked(), Ordering::Relaxed) };
    }
}

/// This process's pid (in a `vfork` child: its parent's, whose memory it
/// runs in).
#[inline]
pub fn mine() -> u32 {
    let cache = CACHE.load(Ordering::Acquire);
    if cache.is_null() {
        return asked();
    }
    // SAFETY: a non-null `CACHE` is the page `open` mapped, never
    // unmapped, and zero-filled memory is a valid `AtomicU32`.
    let word = unsafe { &*cache };
    match word.load(Ordering::Relaxed) {
        // A child the `fork` wrapper did not see: ask, store nothing.
        0 => asked(),
        pid => pid,
    }
}

fn asked() -> u32 {
    // SAFETY: getpid(2) has no preconditions.
    unsafe { sys::getpid() as u32 }
}

/// The page's address, for the test that it is wiped in a child.
#[cfg(test)]
fn page() -> *mut core::ffi::c_void {
    CACHE.load(Ordering::Acquire).cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" {
        fn fork() -> i32;
        fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
        fn _exit(code: i32) -> !;
        fn syscall(n: i64, ...) -> i64;
    }

    #[test]
    fn a_child_made_any_way_but_with_shared_memory_asks_again() {
        open();
        assert!(!page().is_null(), "MADV_WIPEONFORK refused");
        let parent = mine();
        assert_eq!(parent, asked());
        // A plain fork runs the atfork handlers; a raw clone (SYS_clone,
        // SIGCHLD only) runs none, the case glibc's old cache got wrong.
        #[cfg(target_arch = "x86_64")]
        const SYS_CLONE: i64 = 56;
        #[cfg(target_arch = "aarch64")]
        const SYS_CLONE: i64 = 220;
        for raw in [false, true] {
            // SAFETY: the child only loads, makes getpid and exits.
            let child = unsafe {
                if raw {
                    syscall(SYS_CLONE, 17i64, 0i64, 0i64, 0i64, 0i64) as i32
                } else {
                    fork()
                }
            };
            assert!(child >= 0);
            if child == 0 {
                let ok = mine() == asked() && mine() != parent;
                // SAFETY: ends the child without running the test harness.
                unsafe { _exit(if ok { 0 } else { 1 }) };
            }
            let mut status = 0;
            // SAFETY: `child` is ours to reap.
            assert_eq!(unsafe { waitpid(child, &mut status, 0) }, child);
            assert_eq!(
                status,
                0,
                "the child of {} saw its parent's pid",
                if raw { "a raw clone" } else { "fork" }
            );
        }
        assert_eq!(mine(), parent);
    }
}
