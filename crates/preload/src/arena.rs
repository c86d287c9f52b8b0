//! The hand-over arena: the shared memory where a writer hands its bytes
//! to a waiting reader (`handover`), one per process tree, and where it
//! comes from.
//!
//! Layout, version 2 (all words native-endian; a slot's control line is
//! [`Slot`]):
//!
//! ```text
//! offset                     size
//! 0                          SLOTS x 64 B    slot i's control line (Slot)
//! HEADERS = SLOTS * 64       SLOTS x MAX     slot i's buffer
//! HEADERS + SLOTS * MAX      64 B            trailer: MAGIC (u64),
//!                                            socket options word (u64,
//!                                            `socket_options`), zeros
//! ```
//!
//! A pipe's slot is its inode number modulo [`SLOTS`]. Zero pages are
//! all-IDLE slots, so a fresh arena needs no set-up.
//!
//! Where it comes from: `shmpipe run`, with the switch on, leaves a memfd
//! named `shmpipe-arena` at descriptor [`FD`] (not close-on-exec) before
//! it `exec`s the program. The first image with the library sizes and
//! seals it and writes the magic; every image after it, `exec`'d or not,
//! maps the same memory, so the stages of a shell pipeline meet. A
//! descriptor there that is not that memfd, or an arena of another size,
//! seals or magic, is left alone, and the process makes an anonymous
//! shared mapping of its own, shared only with the processes it forks:
//! their pipes with processes of the other arena go through the kernel.

use core::ffi::c_int;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use crate::{checked, slot_protocol, sys};

/// Slots in the arena: pipes whose inodes share one wait for each other
/// (the later goes through the kernel).
pub const SLOTS: usize = 64;
/// The most one hand-over carries: larger writes go through the kernel.
pub const MAX: usize = 64 * 1024;
const _: () = assert!(
    MAX <= checked::MAX_LEN,
    "a reader's buffer is checked up to MAX"
);
/// The descriptor `shmpipe run` leaves the arena's memfd at: the one the
/// library keeps for itself (README, SECURITY.md).
pub const FD: c_int = 1000;
/// The trailer's first word: "shmpar" and the layout's version.
const MAGIC: u64 = 0x7368_6d70_6172_0002;

/// One slot's control words, a cache line of their own.
#[repr(C, align(64))]
pub struct Slot {
    /// `seq << 40 | pid << 8 | phase` (`slot_protocol`'s phases).
    pub state: AtomicU64,
    /// The inode of the pipe whose reader waits.
    pub ino: AtomicU64,
    /// How many bytes the waiting reader takes at most.
    pub request: AtomicU64,
    /// How many bytes the writer put in the buffer.
    pub len: AtomicU64,
    /// The waiting reader's process.
    pub reader: AtomicU32,
    /// The CPU (plus one) the waiting reader announced from: a writer on
    /// it yields at once while it waits for the reader to take its bytes.
    pub reader_cpu: AtomicU32,
    /// The CPU (plus one; 0: not known) the pipe's writer last wrote
    /// from. A reader on that CPU does not wait: the writer needs the CPU
    /// the reader would spin on.
    pub writer_cpu: AtomicU32,
    /// Reads of the slot's pipe that did not get a hand-over since its
    /// last one (`handover::MISSES`): many, and its readers stop waiting
    /// and looking. Pipes
    /// whose inodes share the slot share the count (speed only).
    pub misses: AtomicU32,
    /// When the pipe's writer last began a kernel write (monotonic ns): a
    /// reader asleep in the kernel that it wakes measures the wake-up.
    pub kernel_write_ns: AtomicU64,
    /// The cost of a kernel wake-up on this pipe (ns, a moving average of
    /// those measurements; 0: none yet): how long a reader waits.
    pub wake_ns: AtomicU64,
}

/// The words the slot protocol moves.
impl slot_protocol::Words for Slot {
    fn state(&self) -> &AtomicU64 {
        &self.state
    }
    fn ino(&self) -> &AtomicU64 {
        &self.ino
    }
    fn request(&self) -> &AtomicU64 {
        &self.request
    }
    fn len(&self) -> &AtomicU64 {
        &self.len
    }
    fn reader(&self) -> &AtomicU32 {
        &self.reader
    }
}

const _: () = assert!(
    core::mem::size_of::<Slot>() == 64,
    "a slot's control words are one line"
);
const HEADERS: usize = SLOTS * core::mem::size_of::<Slot>();
const TRAILER: usize = HEADERS + SLOTS * MAX;
const ARENA_LEN: usize = TRAILER + 64;

/// The arena, or null while hand-over is off.
static ARENA: AtomicPtr<u8> = AtomicPtr::new(null_mut());

/// Whether hand-over is on: the one load a tracked call pays for it.
#[inline(always)]
pub fn on() -> bool {
    !ARENA.load(Ordering::Relaxed).is_null()
}

/// Maps the arena: `shmpipe run`'s at [`FD`] if it is there, else one of
/// this process's own. Called from the constructor only.
pub fn open() {
    if let Some(p) = attach().or_else(anonymous) {
        ARENA.store(p, Ordering::Relaxed);
    }
}

const F_ADD_SEALS: c_int = 1033;
const F_GET_SEALS: c_int = 1034;
const F_SEAL_SEAL: usize = 1;
const F_SEAL_SHRINK: usize = 2;
const F_SEAL_GROW: usize = 4;

/// Maps the arena's memfd at [`FD`], sizing and sealing it first if no
/// image has yet; `None` if [`FD`] holds anything else.
fn attach() -> Option<*mut u8> {
    let fd = FD;
    if !is_arena_memfd() {
        return None;
    }
    let mut st = sys::Stat([0; 256]);
    // SAFETY: fstat writes at most 144 bytes into `st`.
    if unsafe { sys::fstat(fd, &mut st) } != 0 {
        return None;
    }
    if st.size() == 0 {
        // Two images may race here: both set the same size, and the
        // second's sealing finds it done.
        // SAFETY: changes the size of the memfd only.
        unsafe { sys::ftruncate(fd, ARENA_LEN as i64) };
    }
    let seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    // Sealed, no process of the tree can shrink the memory under another's
    // mapping (which would be SIGBUS there).
    // SAFETY: fcntl on a descriptor with an integer argument.
    unsafe { sys::fcntl(fd, F_ADD_SEALS, seals) };
    // SAFETY: as above.
    let have = unsafe { sys::fcntl(fd, F_GET_SEALS, 0) };
    if have < 0 || (have as usize) & (F_SEAL_SHRINK | F_SEAL_GROW) != F_SEAL_SHRINK | F_SEAL_GROW {
        return None;
    }
    // SAFETY: as for the fstat above.
    if unsafe { sys::fstat(fd, &mut st) } != 0 || st.size() != ARENA_LEN as u64 {
        return None;
    }
    // The seals keep the memfd's size.
    let p = map_shared(sys::MAP_SHARED, fd)?;
    // SAFETY: the trailer's first word lies inside the mapping, 8-aligned,
    // and is shared with other processes only through this atomic.
    let magic = unsafe { &*p.add(TRAILER).cast::<AtomicU64>() };
    match magic.compare_exchange(0, MAGIC, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => Some(p),
        Err(m) if m == MAGIC => Some(p),
        Err(_) => {
            // SAFETY: the mapping just made, used by nothing else.
            unsafe { sys::munmap(p.cast(), ARENA_LEN) };
            None
        }
    }
}

/// Whether [`FD`] is a memfd named `shmpipe-arena` (only memfds take
/// seals, and the name says whose it is: the library never sizes a memfd
/// of the program's).
fn is_arena_memfd() -> bool {
    // SAFETY: fcntl with an integer argument; fails on a closed descriptor.
    if unsafe { sys::fcntl(FD, F_GET_SEALS, 0) } < 0 {
        return false;
    }
    let want = b"/memfd:shmpipe-arena (deleted)";
    let mut link = [0u8; 40];
    // SAFETY: a NUL-terminated path (FD's); readlink writes at most 40 bytes.
    let n = unsafe {
        sys::readlink(
            c"/proc/self/fd/1000".as_ptr(),
            link.as_mut_ptr().cast(),
            link.len(),
        )
    };
    n == want.len() as isize && link[..want.len()] == want[..]
}

/// A fresh arena of this process's own: an anonymous shared mapping;
/// `None` if the kernel refuses it.
fn anonymous() -> Option<*mut u8> {
    map_shared(sys::MAP_SHARED | sys::MAP_ANONYMOUS, -1)
}

/// An arena's worth of memory mapped read-write with `flags` from `fd`
/// (-1: anonymous); `None` if the kernel refuses it.
fn map_shared(flags: c_int, fd: c_int) -> Option<*mut u8> {
    // SAFETY: a new mapping at an address the kernel picks, so it aliases
    // nothing; `fd`, if any, is at least ARENA_LEN long (the caller
    // checked, and its seals keep it so).
    let p = unsafe { sys::mmap(null_mut(), ARENA_LEN, sys::PROT_RW, flags, fd, 0) };
    (p != sys::MAP_FAILED).then_some(p.cast())
}

/// Maps an arena whatever the environment says (the tests' way in).
#[cfg(test)]
pub fn map() {
    if on() {
        return;
    }
    ARENA.store(anonymous().expect("mmap of the arena"), Ordering::Relaxed);
}

/// The trailer's second word, `socket_options`' (the arena must be on).
pub fn socket_options_word() -> &'static AtomicU64 {
    let arena = ARENA.load(Ordering::Relaxed);
    // SAFETY: callers checked `on()`; the arena is never unmapped, and the
    // trailer's second word lies inside it, 8-aligned. It is shared with
    // other processes only through this atomic.
    unsafe { &*arena.add(TRAILER + 8).cast::<AtomicU64>() }
}

/// The slot of inode `ino` and its buffer.
pub fn slot(ino: u64) -> (&'static Slot, *mut u8) {
    let arena = ARENA.load(Ordering::Relaxed);
    let i = (ino % SLOTS as u64) as usize;
    // SAFETY: callers checked `on()`; the arena is never unmapped, and
    // slot `i < SLOTS` and its buffer lie inside it. The control words are
    // shared with other processes only through atomics.
    unsafe { (&*arena.cast::<Slot>().add(i), arena.add(HEADERS + i * MAX)) }
}
