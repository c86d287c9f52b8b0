//! Test fault injection: failures a test makes this layer report, for
//! the calling thread only, where the kernel would rarely or never give
//! them on the test's machine (no `/proc`; a wake lost to memory
//! pressure; a `membarrier` that fails); and one count a test reads
//! (`maps_reads`).
//!
//! Two halves. The probes (`proc_hidden`, `wake_fails`, `barrier_fails`)
//! are what the
//! production paths call; they are constant `false`, and the whole module
//! compiles to nothing, unless this crate's unit tests build it or the
//! `test-kit` feature is on. The switches (`hide_proc`,
//! `fail_next_wakes`, `wakes_to_fail`, `fail_barriers`) exist only then; with
//! `test-kit` they are `shmpipe_core::fault`, for tests of other crates.
//!
//! # Examples
//!
//! ```
//! use std::io::{Read, Write};
//! use shmpipe_core::fault;
//! // With wakes failing, nothing is lost: a failed wake is owed, sent later.
//! fault::fail_next_wakes(1);
//! let (mut reader, mut writer) = shmpipe_core::pipe()?;
//! writer.write_all(b"owed")?;
//! drop(writer);
//! fault::fail_next_wakes(0);
//! let mut text = String::new();
//! reader.read_to_string(&mut text)?;
//! assert_eq!(text, "owed");
//! # Ok::<(), std::io::Error>(())
//! ```

#[cfg(any(test, feature = "test-kit"))]
use std::cell::Cell;

#[cfg(any(test, feature = "test-kit"))]
thread_local! {
    /// `/proc` is missing for this thread: see `hide_proc`.
    static NO_PROC: Cell<bool> = const { Cell::new(false) };
    /// This thread's next this many wakes fail: see `fail_next_wakes`.
    static WAKES_FAIL: Cell<u32> = const { Cell::new(0) };
    /// Every barrier of this thread counts as failed: see `fail_barriers`.
    static BARRIERS_FAIL: Cell<bool> = const { Cell::new(false) };
    /// Reads of a maps file this thread made: see `maps_reads`.
    static MAPS_READS: Cell<u64> = const { Cell::new(0) };
}

/// Whether a test hid `/proc` from this thread (see `hide_proc`): the
/// reopen through it that makes a waker must then fail with `ENOENT`.
#[inline]
pub(crate) fn proc_hidden() -> bool {
    #[cfg(any(test, feature = "test-kit"))]
    return NO_PROC.with(Cell::get);
    #[cfg(not(any(test, feature = "test-kit")))]
    false
}

/// Whether the wake this thread is about to send must fail as `ENOMEM`
/// would, sending nothing (see `fail_next_wakes`); uses up one of the
/// failures asked for.
#[inline]
pub(crate) fn wake_fails() -> bool {
    #[cfg(any(test, feature = "test-kit"))]
    return WAKES_FAIL.with(|n| n.replace(n.get().saturating_sub(1))) > 0;
    #[cfg(not(any(test, feature = "test-kit")))]
    false
}

/// Whether a test made the barriers of this thread count as failed (see
/// `fail_barriers`): a park after a failed `membarrier` must not sleep
/// for good, since the peer's wake may be lost.
#[inline(always)]
pub(crate) fn barrier_fails() -> bool {
    #[cfg(any(test, feature = "test-kit"))]
    return BARRIERS_FAIL.with(Cell::get);
    #[cfg(not(any(test, feature = "test-kit")))]
    false
}

/// Counts one read of a `/proc/PID/maps` file by this thread (see
/// `maps_reads`).
#[inline]
pub(crate) fn count_maps_read() {
    #[cfg(any(test, feature = "test-kit"))]
    MAPS_READS.with(|n| n.set(n.get() + 1));
}

/// How many `/proc/PID/maps` files this thread has read to learn whether
/// another process still holds an end: a count, not a fault, for tests
/// of what a shared end's turns cost.
///
/// # Examples
///
/// ```
/// let before = shmpipe_core::fault::maps_reads();
/// let (_r, _w) = shmpipe_core::pipe()?; // one holder: nothing to read
/// assert_eq!(shmpipe_core::fault::maps_reads(), before);
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg(any(test, feature = "test-kit"))]
pub fn maps_reads() -> u64 {
    MAPS_READS.with(Cell::get)
}

/// Makes every `membarrier` a park of this thread issues count as failed
/// (`true`), or real again: the park then sleeps only briefly before it
/// looks again, as after a real failure.
///
/// # Examples
///
/// ```
/// use shmpipe_core::fault;
/// fault::fail_barriers(true);
/// // Every end of this thread still gets what it waits for.
/// let (mut rx, mut tx) = shmpipe_core::message_pipe()?;
/// tx.send(b"looked at again")?;
/// let mut buf = [0u8; 32];
/// assert_eq!(rx.recv(&mut buf)?, 15);
/// fault::fail_barriers(false);
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg(any(test, feature = "test-kit"))]
pub fn fail_barriers(fail: bool) {
    BARRIERS_FAIL.with(|b| b.set(fail));
}

/// Hides `/proc` from this thread (`true`), or shows it again: every
/// reopen of a wake pipe through `/proc` then fails with `ENOENT`, as
/// where `/proc` is not mounted, so pipes this thread makes wake through
/// a socketpair instead.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// shmpipe_core::fault::hide_proc(true);
/// // Made without /proc, the pipe still carries data and EOF.
/// let (mut reader, mut writer) = shmpipe_core::pipe()?;
/// shmpipe_core::fault::hide_proc(false);
/// writer.write_all(b"no /proc")?;
/// drop(writer);
/// let mut text = String::new();
/// reader.read_to_string(&mut text)?;
/// assert_eq!(text, "no /proc");
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg(any(test, feature = "test-kit"))]
pub fn hide_proc(hidden: bool) {
    NO_PROC.with(|n| n.set(hidden));
}

/// Makes the next `n` wakes this thread sends fail as `ENOMEM` would:
/// nothing is sent, and the wake is owed (sent again later) as after a
/// real transient failure. Zero ends the failures at once.
///
/// # Examples
///
/// ```
/// use shmpipe_core::fault;
/// fault::fail_next_wakes(2);
/// assert_eq!(fault::wakes_to_fail(), 2);
/// fault::fail_next_wakes(0);
/// assert_eq!(fault::wakes_to_fail(), 0);
/// ```
#[cfg(any(test, feature = "test-kit"))]
pub fn fail_next_wakes(n: u32) {
    WAKES_FAIL.with(|w| w.set(n));
}

/// How many of the failures [`fail_next_wakes`] asked for are still to
/// come on this thread.
///
/// # Examples
///
/// ```
/// use shmpipe_core::fault;
/// assert_eq!(fault::wakes_to_fail(), 0);
/// ```
#[cfg(any(test, feature = "test-kit"))]
pub fn wakes_to_fail() -> u32 {
    WAKES_FAIL.with(Cell::get)
}
