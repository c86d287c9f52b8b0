//! The main thread's stack: the one memory of the program's that the
//! library knows to be mapped, readable and writable without asking the
//! kernel, so that a hand-over of a buffer there (lmbench's `char c`)
//! skips `checked`'s system call (about 0.65 µs each on the Zen 3 guest of
//! docs/run.md, where a `process_vm_readv` takes the mm's lock and walks
//! the page tables; a hand-over made two).
//!
//! Why it holds: the stack is one growing-down mapping, read-write, from
//! the lowest address it has grown to up past `__libc_stack_end` (the
//! stack pointer the kernel started the process with). The bytes between
//! the current stack pointer and that top are the frames of the running
//! code's callers, so they are mapped and writable. What could make that
//! false, and how each is ruled out:
//!
//! - A stack pointer that is not on this stack (another thread's stack, a
//!   `sigaltstack`, a coroutine's): only one in the room below the top
//!   counts, and the room holds nothing but the stack. It reaches at most
//!   `RLIMIT_STACK` and 128 MiB below the end of the stack's mapping,
//!   which is within the gap the kernel keeps between that end and the
//!   mmap base, with address randomisation on or off (the limit and the
//!   guard gap, or at least 128 MiB), and it stops above every mapping
//!   that `/proc/self/maps` shows below the stack at start-up (a
//!   library's
//!   constructor, run before this one, may have mapped there). A stack in
//!   the room is then a local array of the main stack itself, and the
//!   frames above it are the main stack's.
//! - The program changing its stack's mappings (`mprotect`,
//!   `pkey_mprotect`, `munmap`, `mremap`, `madvise`, `shmat` at an
//!   address, an `mmap` that lands there): the hooks of those calls
//!   (`mapping_hooks`) turn this off for good when the range touches the
//!   room, and a change made before start-up shows in the maps (the
//!   stack's mapping must be one, read-write, from the stack pointer to
//!   the top). Not seen: the system call made by the instruction outside
//!   the C library (`syscall(2)` goes to the hooks), and a guard
//!   region (`MADV_GUARD_INSTALL`, which leaves the maps as they were)
//!   installed in the stack by a constructor that ran before this one. A
//!   program that makes the frames of its own callers inaccessible while
//!   they run in one of those ways is the case left.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::sys;

/// The most of the room below the stack's end that counts as the stack.
const MOST: usize = 128 << 20;
/// `RLIMIT_STACK`.
const RLIMIT_STACK: c_int = 3;
/// `AT_PAGESZ`.
const AT_PAGESZ: core::ffi::c_ulong = 6;

/// The stack's top (`__libc_stack_end`), 0 when not known.
static TOP: AtomicUsize = AtomicUsize::new(0);
/// The lowest address counted as the stack (a page's start).
static FLOOR: AtomicUsize = AtomicUsize::new(0);
/// The page size less one.
static PAGE_MASK: AtomicUsize = AtomicUsize::new(4095);
/// Set once the room is known: until then `holds` is false, and every
/// change below the top counts (`FLOOR` is 0 while the maps are read, so
/// a change by a thread an earlier constructor started is not missed).
static READY: AtomicBool = AtomicBool::new(false);
/// Set for good once the program changed a mapping in `FLOOR..TOP`.
static CHANGED: AtomicBool = AtomicBool::new(false);

/// Whether `open` ran: the hand-over and the rings both ask for it, and it
/// reads `/proc/self/maps` (about 100 000 instructions).
static OPENED: AtomicBool = AtomicBool::new(false);

/// Finds the stack's top and room. Called from the constructor, when
/// hand-over or rings are on (it runs on the main thread before `main`);
/// a second call does nothing.
pub fn open() {
    if OPENED.swap(true, Ordering::Relaxed) {
        return;
    }
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
    // SAFETY: getauxval(3) has no preconditions.
    let page = unsafe { sys::getauxval(AT_PAGESZ) } as usize;
    if !page.is_power_of_two() {
        return;
    }
    PAGE_MASK.store(page - 1, Ordering::Relaxed);
    TOP.store(top, Ordering::Release); // From here on changes count.
    let here = stack_pointer();
    let Some((stack_end, below)) = stack_in_maps(here, top) else {
        return;
    };
    let room = usize::try_from(limit[0]).unwrap_or(MOST).min(MOST);
    let floor = stack_end.saturating_sub(room).max(below) & !(page - 1);
    if here < floor || here >= top {
        return; // Not on the main stack after all: never count it.
    }
    FLOOR.store(floor, Ordering::Relaxed);
    READY.store(true, Ordering::Release);
}

/// From `/proc/self/maps`: if the mapping holding `here` is readable and
/// writable and reaches `top`, its end and the end of the highest mapping
/// below it (the room cannot reach further down); else (or without the
/// file) None.
fn stack_in_maps(here: usize, top: usize) -> Option<(usize, usize)> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        sys::open(
            c"/proc/self/maps".as_ptr(),
            sys::O_RDONLY | sys::O_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return None;
    }
    let mut lines = Lines::default();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: `buf` has room for its length.
        let n = unsafe { sys::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        lines.push_all(&buf[..n as usize], here);
    }
    // SAFETY: the descriptor just opened.
    unsafe { sys::close(fd) };
    match lines.stack {
        Some((_, end, true)) if end >= top => Some((end, lines.end_below_stack)),
        _ => None,
    }
}

/// A reader of `/proc/self/maps`, a byte at a time: each line begins
/// `start-end perms ` in hexadecimal.
#[derive(Default)]
struct Lines {
    /// 0: start, 1: end, 2: perms, 3: the rest of the line.
    field: u8,
    start: usize,
    end: usize,
    /// 1: readable, 2: writable.
    perms: u8,
    /// The mapping holding the stack pointer: start, end, read-write.
    stack: Option<(usize, usize, bool)>,
    /// The end of the last mapping before the stack's (the file is in
    /// address order, so the highest below it).
    end_below_stack: usize,
}

impl Lines {
    /// Pushes `bytes`, skipping each line's rest (offset, device, inode
    /// and path: most of its bytes) to its newline in one search.
    fn push_all(&mut self, mut bytes: &[u8], here: usize) {
        while !bytes.is_empty() {
            let next = if self.field == 3 {
                match bytes.iter().position(|&c| c == b'\n') {
                    Some(i) => i,
                    None => return,
                }
            } else {
                0
            };
            self.push(bytes[next], here);
            bytes = &bytes[next + 1..];
        }
    }

    fn push(&mut self, b: u8, here: usize) {
        match (self.field, b) {
            (_, b'\n') => {
                if self.field >= 2 {
                    if (self.start..self.end).contains(&here) {
                        self.stack = Some((self.start, self.end, self.perms == 0b11));
                    } else if self.stack.is_none() && self.end <= here {
                        self.end_below_stack = self.end;
                    }
                }
                *self = Lines {
                    stack: self.stack,
                    end_below_stack: self.end_below_stack,
                    ..Lines::default()
                };
            }
            (0, b'-') => self.field = 1,
            (1, b' ') => self.field = 2,
            (0 | 1, _) => {
                let digit = (b as char).to_digit(16).unwrap_or(0) as usize;
                let v = if self.field == 0 {
                    &mut self.start
                } else {
                    &mut self.end
                };
                *v = v.wrapping_shl(4) | digit;
            }
            (2, b' ') => self.field = 3,
            (2, b'r') => self.perms |= 1,
            (2, b'w') => self.perms |= 2,
            _ => {}
        }
    }
}

/// Whether `buf[..n]` lies between the current stack pointer and the main
/// stack's top, with the stack pointer on the main stack: memory that is
/// mapped, readable and writable.
#[inline]
pub fn holds(buf: *const c_void, n: usize) -> bool {
    READY.load(Ordering::Acquire)
        && room().holds(stack_pointer(), buf as usize, n)
        && !CHANGED.load(Ordering::Relaxed)
}

/// One more at every change of a mapping a hook sees (`changing`): what
/// `checked` found mapped stays so while this stays the same.
static GENERATION: AtomicUsize = AtomicUsize::new(0);

/// The count of mapping changes seen so far.
#[inline]
pub fn generation() -> usize {
    GENERATION.load(Ordering::Acquire)
}

/// Called by the hooks of calls that change mappings, before the change:
/// one over the stack's room turns `holds` off for good.
#[inline]
pub fn changing(addr: *const c_void, len: usize) {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    if room().touched_by(PAGE_MASK.load(Ordering::Relaxed), addr as usize, len) {
        CHANGED.store(true, Ordering::Relaxed);
    }
}

fn room() -> Room {
    let top = TOP.load(Ordering::Acquire);
    Room {
        floor: FLOOR.load(Ordering::Relaxed),
        top,
    }
}

/// The addresses counted as the main stack: `floor..top` (top 0: none).
#[derive(Clone, Copy)]
struct Room {
    floor: usize,
    top: usize,
}

impl Room {
    /// Whether a stack pointer `here` is in the room and `start..start+n`
    /// lies between it and the top.
    fn holds(self, here: usize, start: usize, n: usize) -> bool {
        self.floor <= here
            && here <= start
            && start.checked_add(n).is_some_and(|end| end <= self.top)
    }

    /// Whether a change of `addr..addr+len` touches the room. The kernel
    /// works in whole pages: the range's first page counts from its start,
    /// and `floor` is a page's start, so a range that ends below it touches
    /// no page of the room, however its length is rounded.
    fn touched_by(self, page_mask: usize, addr: usize, len: usize) -> bool {
        let start = addr & !page_mask;
        self.top != 0 && start < self.top && start.saturating_add(len) > self.floor
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
    fn open_off_the_main_thread_counts_nothing() {
        // The test harness runs tests on threads of its own, whose stacks
        // are not the main one.
        let frame = [7u8; 64];
        open();
        assert!(!READY.load(Ordering::Acquire));
        assert!(!holds(frame.as_ptr().cast(), 64));
    }

    /// A room of 1 MiB for the tests below.
    const ROOM: Room = Room {
        floor: 0x7000_0000,
        top: 0x7010_0000,
    };

    #[test]
    fn the_room_holds_the_frames_above_the_stack_pointer() {
        let room = ROOM;
        let here = 0x700f_0000;
        assert!(room.holds(here, here, 64), "at the stack pointer");
        assert!(room.holds(here, 0x7010_0000 - 64, 64), "up to the top");
        assert!(!room.holds(here, 0x7010_0000 - 63, 64), "past the top");
        assert!(!room.holds(here, here - 1, 64), "below the stack pointer");
        assert!(
            !room.holds(0x6fff_f000, 0x7000_0000, 64),
            "a stack pointer below the room"
        );
        assert!(
            !room.holds(here, usize::MAX - 8, 64),
            "an end past the address space"
        );
    }

    #[test]
    fn a_change_counts_if_a_page_of_it_is_in_the_room() {
        let room = ROOM;
        let mask = 4095;
        assert!(room.touched_by(mask, 0x7000_0000, 4096));
        assert!(room.touched_by(mask, 0x6fff_f000, 4097), "its last page");
        assert!(
            !room.touched_by(mask, 0x6fff_f000, 4096),
            "ends at the floor"
        );
        assert!(
            room.touched_by(mask, 0x700f_ffff, 1),
            "its first page, rounded down"
        );
        assert!(!room.touched_by(mask, 0x7010_0000, 4096), "at the top");
        assert!(room.touched_by(mask, 0, usize::MAX), "everything");
        assert!(
            !Room { floor: 0, top: 0 }.touched_by(mask, 0, usize::MAX),
            "no room yet"
        );
    }

    #[test]
    fn the_maps_give_the_stack_and_the_mapping_below_it() {
        let maps = "555555554000-555555556000 r--p 00000000 08:01 42 /bin/x\n\
                    7ffff7fc3000-7ffff7fc5000 rw-p 00000000 00:00 0 \n\
                    7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]\n\
                    ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n";
        // Read in pieces of every size from 1 byte up, as `read` may cut
        // the file anywhere: every cut gives the same answer.
        let scan = |here: usize, maps: &str| {
            let answers: Vec<_> = (1..=maps.len())
                .map(|piece| {
                    let mut lines = Lines::default();
                    for chunk in maps.as_bytes().chunks(piece) {
                        lines.push_all(chunk, here);
                    }
                    (lines.stack, lines.end_below_stack)
                })
                .collect();
            assert!(answers.iter().all(|a| *a == answers[0]));
            answers[0]
        };
        assert_eq!(
            scan(0x7ffffffe0000, maps),
            (Some((0x7ffffffde000, 0x7ffffffff000, true)), 0x7ffff7fc5000)
        );
        // A stack made read-only (by a constructor before this library's).
        let read_only = maps.replace(
            "rw-p 00000000 00:00 0                          [stack]",
            "r--p 0 0 0 [stack]",
        );
        assert_eq!(
            scan(0x7ffffffe0000, &read_only).0,
            Some((0x7ffffffde000, 0x7ffffffff000, false))
        );
        // A stack pointer in no mapping.
        assert_eq!(scan(0x7ffff0000000, maps).0, None);
    }
}
