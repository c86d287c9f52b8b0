//! What a hand-over may trust about a socket-pair end without asking the
//! kernel again. Before it waits in the library, a read of a socket end
//! must know that its low-water mark is at most 1 (`SO_RCVLOWAT`), that it
//! has no receive timeout (`SO_RCVTIMEO`) and that it is blocking
//! (`O_NONBLOCK`): three system calls, about 600 ns a read on the Zen 5
//! guest, where a hand-over round trip takes 3-4 us. Before it hands over,
//! a writer must know that the kernel would not fail its `write` with
//! `EPIPE` (an empty `send`, 190 ns). Each can change only through a call
//! of some process holding the socket (or its peer, whose reader the
//! writer holds, so it is open), so a read that found the end plain, and a
//! writer that found it sendable, note the tree's *options generation*
//! beside the descriptor (`table::plain_at`, `table::sendable_at`), and
//! later calls trust the note while the generation is the same. (At
//! descriptors 3 and above the writer's note also stands for the socket's
//! identity: `table` says when it may not.)
//!
//! The generation is one word of the arena, shared by every process of the
//! tree with the library, `exec`'d images included:
//!
//! ```text
//! bit 0      UNSEEN: a socket end may have reached an image or a process
//!            whose calls no wrapper of this arena sees; never cleared, and
//!            while it is set every read asks the kernel, as before
//! bits 1..   the generation: one more after every wrapped `setsockopt` at
//!            SOL_SOCKET, `fcntl(F_SETFL)`, `ioctl(FIONBIO)` and `shutdown`
//!            that succeeded, on any descriptor
//! ```
//!
//! A change bumps the generation *after* the kernel made it, so a read that
//! sees the old generation either asked before the change (and races with
//! it, as any read concurrent with a `setsockopt` does) or will find its
//! note stale. `UNSEEN` is set before an `exec` (the new image may lack the
//! library, or map another arena), a `posix_spawn`, `system` or `popen`,
//! and a `sendmsg` that passes a tracked socket end (`SCM_RIGHTS`), in any
//! process that made a socket pair with hand-over on. A `setsockopt`,
//! `fcntl` or `shutdown` made by the instruction outside the C library is
//! not seen (`syscall(SYS_setsockopt)` goes to the wrapper: docs/run.md
//! lists the calls no wrapper sees).

use core::sync::atomic::{AtomicBool, Ordering};

use crate::{arena, table};

const UNSEEN: u64 = 1;
const ONE_CHANGE: u64 = 2;

/// Whether this image made a socket pair end with hand-over on (a `fork`
/// child inherits it with the memory; an `exec` starts without).
static MADE: AtomicBool = AtomicBool::new(false);

/// A socket pair end was made: its passing on to another image counts.
pub fn made() {
    MADE.store(true, Ordering::Relaxed);
}

/// Whether this image made a socket pair end with hand-over on.
#[inline(always)]
pub fn any_made() -> bool {
    MADE.load(Ordering::Relaxed)
}

/// A wrapped call that may have changed an option or the `O_NONBLOCK`
/// flag of some socket succeeded: every note is stale.
pub fn changed() {
    if arena::on() {
        // SYNC POINT: Release after the kernel's change, paired with the
        // reader's Acquire load in `generation`.
        arena::socket_options_word().fetch_add(ONE_CHANGE, Ordering::Release);
    }
}

/// This process may pass its socket ends to an image or process outside
/// the wrappers' view: no note is trusted in this tree from now on.
pub fn leaving() {
    if arena::on() && MADE.load(Ordering::Relaxed) {
        arena::socket_options_word().fetch_or(UNSEEN, Ordering::Relaxed);
    }
}

/// The generation a note made now would carry, or 0: note nothing, trust
/// nothing (hand-over off, or `UNSEEN`).
pub fn generation() -> u32 {
    if !arena::on() {
        return 0;
    }
    // SYNC POINT: see `changed`.
    let w = arena::socket_options_word().load(Ordering::Acquire);
    if w & UNSEEN != 0 {
        return 0;
    }
    // 0 is "no note" and `NEVER` a note never current: a generation that
    // wraps to either is skipped.
    ((w >> 1) as u32).wrapping_add(1).clamp(1, table::NEVER - 1)
}
