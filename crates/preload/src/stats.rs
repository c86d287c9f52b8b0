//! Counts of the bytes written to pipes and socket pairs, kept in a file
//! the caller of `shmpipe run` names in `SHMPIPE_RUN_STATS` (the bench
//! does, to report the share of a program's pipe bytes that went through
//! rings). Without the variable nothing is counted and nothing is mapped.
//!
//! The file is exactly [`FILE_LEN`] bytes (a file of any other size is
//! left alone) of [`SLOT_LEN`]-byte slots, made and zeroed by the caller. Slot 0 holds the count of slots handed out; each
//! process that loads the library (and each child of `fork`) takes the
//! next slot, so that processes do not share a cache line on every write,
//! and adds to its words with atomic adds, so a process killed with
//! SIGKILL has already counted all it wrote. Past the last slot processes
//! share slots, which only costs speed. A slot's words, each a
//! little-endian `u64`: the pid, bytes written through rings, bytes written
//! through the kernel, bytes read through the kernel.

use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::sys;

/// The size of the statistics file.
pub const FILE_LEN: usize = 64 * 1024;
/// The size of one process's slot.
pub const SLOT_LEN: usize = 64;
const SLOTS: u64 = (FILE_LEN / SLOT_LEN) as u64;
/// Word indices in a slot.
const PID: usize = 0;
const RING_WRITTEN: usize = 1;
const KERNEL_WRITTEN: usize = 2;
const KERNEL_READ: usize = 3;

/// The mapped file, or null.
static FILE: AtomicPtr<AtomicU64> = AtomicPtr::new(null_mut());
/// This process's slot in it, or null.
static SLOT: AtomicPtr<AtomicU64> = AtomicPtr::new(null_mut());

/// Maps the file `SHMPIPE_RUN_STATS` names, if any, and takes a slot.
/// Called from the constructor only (it reads the environment). Any
/// failure leaves counting off: statistics never stop a program.
pub fn open_from_env() {
    sys::keep_errno(|| {
        // SAFETY: the name is NUL-terminated; getenv returns null or a
        // NUL-terminated string the program does not change while its
        // constructors run.
        let path = unsafe { sys::getenv(c"SHMPIPE_RUN_STATS".as_ptr()) };
        if path.is_null() {
            return;
        }
        // SAFETY: `path` is a NUL-terminated string.
        let fd = unsafe { sys::open(path, sys::O_RDWR | sys::O_CLOEXEC, 0) };
        if fd < 0 {
            return;
        }
        // Only a file of exactly this size is written to: a variable set by
        // mistake to some other file of the user's leaves it untouched.
        // SAFETY: lseek on our own descriptor reads no memory.
        if unsafe { sys::lseek(fd, 0, sys::SEEK_END) } != FILE_LEN as i64 {
            // SAFETY: fd is ours.
            unsafe { sys::close(fd) };
            return;
        }
        // SAFETY: a fresh shared mapping of a file we opened; the kernel
        // picks the address, so it aliases nothing.
        let p = unsafe { sys::mmap(null_mut(), FILE_LEN, sys::PROT_RW, sys::MAP_SHARED, fd, 0) };
        // SAFETY: fd is ours; the mapping keeps the file, so no descriptor
        // is left behind.
        unsafe { sys::close(fd) };
        if p == sys::MAP_FAILED {
            return;
        }
        FILE.store(p.cast(), Ordering::Relaxed);
        take_slot();
    });
}

/// In the child of `fork`: counts go to a slot of its own.
pub fn after_fork_child() {
    if !FILE.load(Ordering::Relaxed).is_null() {
        take_slot();
    }
}

fn take_slot() {
    let file = FILE.load(Ordering::Relaxed);
    // SAFETY: `file` maps FILE_LEN bytes, 8-aligned (page-aligned), shared
    // with other processes only through atomics.
    let next = unsafe { &*file };
    let n = 1 + next.fetch_add(1, Ordering::Relaxed) % (SLOTS - 1);
    // SAFETY: slot n < SLOTS lies inside the mapping.
    let slot = unsafe { file.add(n as usize * SLOT_LEN / 8) };
    // SAFETY: as above.
    unsafe { &*slot.add(PID) }.store(
        u64::from(unsafe { sys::getpid() }.unsigned_abs()),
        Ordering::Relaxed,
    );
    SLOT.store(slot, Ordering::Relaxed);
}

fn add(word: usize, n: isize) {
    let slot = SLOT.load(Ordering::Relaxed);
    if n > 0 && !slot.is_null() {
        // SAFETY: `slot` is a slot of the mapping, which is never unmapped;
        // `word` < SLOT_LEN / 8.
        unsafe { &*slot.add(word) }.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// `n` bytes (a call's result; errors count nothing) were written to a
/// tracked descriptor through the kernel.
pub fn kernel_wrote(n: isize) {
    add(KERNEL_WRITTEN, n);
}

/// `n` bytes were read from a tracked descriptor through the kernel.
pub fn kernel_read(n: isize) {
    add(KERNEL_READ, n);
}

/// `n` bytes were written through shared memory (a hand-over) instead of
/// the kernel.
pub fn ring_wrote(n: isize) {
    add(RING_WRITTEN, n);
}

/// The kernel's own `read`, counted.
///
/// # Safety
///
/// As for read(2).
pub unsafe fn kernel_read_call(
    fd: core::ffi::c_int,
    buf: *mut core::ffi::c_void,
    n: usize,
) -> isize {
    // SAFETY: the caller's contract is read(2)'s.
    let r = unsafe { sys::read(fd, buf, n) };
    kernel_read(r);
    r
}

/// The kernel's own `write`, counted.
///
/// # Safety
///
/// As for write(2).
pub unsafe fn kernel_write_call(
    fd: core::ffi::c_int,
    buf: *const core::ffi::c_void,
    n: usize,
) -> isize {
    // SAFETY: the caller's contract is write(2)'s.
    let r = unsafe { sys::write(fd, buf, n) };
    kernel_wrote(r);
    r
}
