//! What each descriptor of this process is, as far as the library knows:
//! nothing (0, every descriptor it did not see made), or one end of a pipe
//! or a Unix stream socket pair.
//!
//! One byte per descriptor below [`TRACKED_FDS`], in static memory, so that
//! the test a hook makes on every call is one compare and one load, and
//! every update is async-signal-safe. A descriptor at or above the bound is
//! never tracked: it stays an ordinary kernel descriptor, which is always
//! correct.
//!
//! The table may miss a change the library cannot see (glibc closing a
//! descriptor inside `fclose`, an io_uring's close): an entry is a
//! hint about the descriptor, and hand-over checks that the descriptor is
//! still its pipe or socket before it relies on an entry, with one
//! exception, as the resident rings trust their entries: a hand-over's
//! writer takes a socket-pair end at 3 or above whose `sendable_at` note
//! is current to be that socket without an `fstat`. Every wrapped change
//! of the descriptor clears the note; `fdopen`, after which glibc's
//! `fclose` closes it unseen, makes it [`NEVER`] current. (0, 1 and 2 are
//! left out: glibc closes and reopens them in `freopen` and in `fclose`
//! of its own streams.)

use core::ffi::c_int;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::sys;

/// Descriptors below this are tracked (64 Ki: more than the default
/// `RLIMIT_NOFILE` of 1024 or the usual hard limit of 524288 a program
/// rarely reaches; the table is 64 KiB of zero pages until used).
pub const TRACKED_FDS: usize = 1 << 16;

/// The read end of an anonymous pipe.
pub const PIPE_READ: u8 = 1;
/// The write end of an anonymous pipe.
pub const PIPE_WRITE: u8 = 2;
/// One end of a `socketpair(AF_UNIX, SOCK_STREAM)`.
pub const STREAM_SOCKET: u8 = 3;

static KINDS: [AtomicU8; TRACKED_FDS] = [const { AtomicU8::new(0) }; TRACKED_FDS];

/// The inode of each tracked pipe end, once hand-over has asked for it
/// (0: not known). Zero pages until used; cleared and copied with the
/// kind. A hint like the kind: hand-over checks it before it relies on it.
static INODES: [AtomicU64; TRACKED_FDS] = [const { AtomicU64::new(0) }; TRACKED_FDS];

/// The inode of the other end of each socket-pair end this process made
/// with hand-over on (0: not known; the kernel tells no one cheaply).
/// Zero pages until used; cleared and copied with the kind.
static PEERS: [AtomicU64; TRACKED_FDS] = [const { AtomicU64::new(0) }; TRACKED_FDS];

/// For each socket-pair end, the options generation at which a read last
/// found it plain (`socket_options`; 0: not found so). Zero pages until
/// used; cleared with the kind, and not copied: a copy asks once again.
static PLAIN: [AtomicU32; TRACKED_FDS] = [const { AtomicU32::new(0) }; TRACKED_FDS];

/// For each socket-pair end, the options generation at which a writer last
/// found that the kernel would take its bytes (no `EPIPE`), or 0; kept as
/// [`PLAIN`] is.
static SENDABLE: [AtomicU32; TRACKED_FDS] = [const { AtomicU32::new(0) }; TRACKED_FDS];

/// The process this memory belongs to. A child of `vfork` (or of a raw
/// `clone` with shared memory) runs in its parent's memory with its own
/// descriptors: its closes and dups must not change the parent's table, so
/// every change first checks `getpid()` against this.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// The kind of `fd`: 0 if the library does not track it.
#[inline(always)]
pub fn kind(fd: c_int) -> u8 {
    // A negative fd becomes a large index and is not tracked.
    match KINDS.get(fd as u32 as usize) {
        Some(k) => k.load(Ordering::Relaxed),
        None => 0,
    }
}

/// Whether `fd` is a tracked pipe or socket end: the one test a hook makes
/// on every call.
#[inline(always)]
pub fn is_tracked(fd: c_int) -> bool {
    kind(fd) != 0
}

/// Whether this memory is this process's own (not a `vfork` child's view
/// of its parent's).
pub fn owns_memory() -> bool {
    // SAFETY: getpid(2) has no preconditions.
    unsafe { sys::getpid() == OWNER.load(Ordering::Relaxed) }
}

fn store(fd: c_int, kind: u8) {
    store_with_inodes(fd, kind, 0, 0);
}

fn store_with_inodes(fd: c_int, kind: u8, ino: u64, peer: u64) {
    if let Some(k) = KINDS.get(fd as u32 as usize) {
        k.store(kind, Ordering::Relaxed);
        INODES[fd as u32 as usize].store(ino, Ordering::Relaxed);
        PEERS[fd as u32 as usize].store(peer, Ordering::Relaxed);
        for note in [&PLAIN[fd as u32 as usize], &SENDABLE[fd as u32 as usize]] {
            if note.load(Ordering::Relaxed) != 0 {
                note.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// A note that is never current: the descriptor may be closed unseen.
pub const NEVER: u32 = u32::MAX;

/// Whether a current `sendable_at` note also vouches for what `fd` is
/// (see the top).
pub fn note_vouches(fd: c_int) -> bool {
    fd >= 3
}

/// `fd` went to a call after which glibc may close it unseen (`fdopen`):
/// its notes are never current again, until a wrapped call remakes it.
pub fn distrust(fd: c_int) {
    note(&PLAIN, fd, NEVER);
    note(&SENDABLE, fd, NEVER);
}

/// The options generation at which a read last found the socket end `fd`
/// plain, or 0.
pub fn plain_at(fd: c_int) -> u32 {
    noted(&PLAIN, fd)
}

/// Notes that a read found the socket end `fd` plain at `generation` (in
/// this process's own memory only).
pub fn note_plain(fd: c_int, generation: u32) {
    note(&PLAIN, fd, generation);
}

/// The options generation at which a writer last found that the kernel
/// would take bytes written to the socket end `fd`, or 0.
pub fn sendable_at(fd: c_int) -> u32 {
    noted(&SENDABLE, fd)
}

/// Notes that a writer found the kernel would take bytes written to the
/// socket end `fd` at `generation` (in this process's own memory only).
pub fn note_sendable(fd: c_int, generation: u32) {
    note(&SENDABLE, fd, generation);
}

fn noted(notes: &[AtomicU32; TRACKED_FDS], fd: c_int) -> u32 {
    match notes.get(fd as u32 as usize) {
        Some(g) => g.load(Ordering::Relaxed),
        None => 0,
    }
}

fn note(notes: &[AtomicU32; TRACKED_FDS], fd: c_int, generation: u32) {
    if owns_memory() {
        if let Some(g) = notes.get(fd as u32 as usize) {
            g.store(generation, Ordering::Relaxed);
        }
    }
}

/// The inode hand-over noted for `fd`, or 0.
pub fn inode(fd: c_int) -> u64 {
    match INODES.get(fd as u32 as usize) {
        Some(i) => i.load(Ordering::Relaxed),
        None => 0,
    }
}

/// The inode of the other end of the socket pair `fd` is one end of, or 0.
pub fn peer(fd: c_int) -> u64 {
    match PEERS.get(fd as u32 as usize) {
        Some(i) => i.load(Ordering::Relaxed),
        None => 0,
    }
}

/// Notes `fd`'s inode (in this process's own memory only).
pub fn set_inode(fd: c_int, ino: u64) {
    if owns_memory() {
        if let Some(i) = INODES.get(fd as u32 as usize) {
            i.store(ino, Ordering::Relaxed);
        }
    }
}

/// Records the two descriptors of a new pipe (`fds[0]` reads).
pub fn made_pipe(read: c_int, write: c_int) {
    if owns_memory() {
        store(read, PIPE_READ);
        store(write, PIPE_WRITE);
    }
}

/// Records the two descriptors of a new Unix stream socket pair and,
/// when known (else 0), their inodes: a writer on one end hands over to a
/// reader waiting on the other, which waits under its own inode.
pub fn made_socket_pair(a: c_int, b: c_int, ino_a: u64, ino_b: u64) {
    if owns_memory() {
        store_with_inodes(a, STREAM_SOCKET, ino_a, ino_b);
        store_with_inodes(b, STREAM_SOCKET, ino_b, ino_a);
    }
}

/// Forgets `fd`, which is being closed. Called before the close, so that a
/// descriptor another thread gets from the kernel right after is not
/// forgotten instead.
pub fn forget(fd: c_int) {
    if owns_memory() {
        store(fd, 0);
    }
}

/// Forgets the descriptors `first..=last`, which are being closed.
pub fn forget_range(first: u32, last: u32) {
    if first as usize >= TRACKED_FDS || !owns_memory() {
        return;
    }
    let last = (last as usize).min(TRACKED_FDS - 1);
    // Only entries in use are written: a store would give each untouched
    // page of the tables memory of its own.
    for k in &KINDS[first as usize..=last] {
        if k.load(Ordering::Relaxed) != 0 {
            k.store(0, Ordering::Relaxed);
        }
    }
    for i in INODES[first as usize..=last]
        .iter()
        .chain(&PEERS[first as usize..=last])
    {
        if i.load(Ordering::Relaxed) != 0 {
            i.store(0, Ordering::Relaxed);
        }
    }
    for g in PLAIN[first as usize..=last]
        .iter()
        .chain(&SENDABLE[first as usize..=last])
    {
        if g.load(Ordering::Relaxed) != 0 {
            g.store(0, Ordering::Relaxed);
        }
    }
}

/// `to` is now a copy of `from` (dup, dup2, dup3, `F_DUPFD`): it gets
/// `from`'s kind, or none.
pub fn copied(from: c_int, to: c_int) {
    if owns_memory() {
        store_with_inodes(to, kind(from), inode(from), peer(from));
    }
}

/// In the child of `fork`: the memory is now this process's own.
pub fn after_fork_child() {
    // SAFETY: getpid(2) has no preconditions.
    OWNER.store(unsafe { sys::getpid() }, Ordering::Relaxed);
}

/// At start-up (the library was just loaded, so the table is empty): notes
/// whether 0, 1 and 2 are pipes or Unix stream sockets, as they are in a
/// shell pipeline, so their bytes are counted. Other inherited descriptors
/// stay untracked: finding out would cost a system call each at start-up.
pub fn after_exec() {
    after_fork_child();
    for fd in 0..3 {
        let kind = sys::keep_errno(|| classify(fd));
        store(fd, kind);
    }
}

/// What an inherited descriptor is, found by asking the kernel.
fn classify(fd: c_int) -> u8 {
    // SAFETY: fcntl with F_GETPIPE_SZ and F_GETFL reads no memory.
    if unsafe { sys::fcntl(fd, sys::F_GETPIPE_SZ, 0) } >= 0 {
        // SAFETY: as above.
        return match unsafe { sys::fcntl(fd, sys::F_GETFL, 0) } & sys::O_ACCMODE {
            sys::O_RDONLY => PIPE_READ,
            sys::O_WRONLY => PIPE_WRITE,
            // A FIFO opened for both: not one end of an anonymous pipe.
            _ => 0,
        };
    }
    let is_unix_stream = sys::socket_int(fd, sys::SO_DOMAIN) == Some(sys::AF_UNIX)
        && sys::socket_int(fd, sys::SO_TYPE) == Some(sys::SOCK_STREAM);
    if is_unix_stream {
        STREAM_SOCKET
    } else {
        0
    }
}
