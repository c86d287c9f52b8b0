//! When a side whose peer shares its CPU may wait for it by one
//! `sched_yield` (`resident`'s `YieldOnce`): not for a while
//! after a yield gave a time slice to some other task.
//!
//! A yielder is not asleep, so the peer's write sends it no wake: with a
//! third task on the CPU (a busy loop, a build), each yield waits out
//! that task's slice (about 0.7 ms), where a sleeper would have been woken
//! at once, whether or not the peer then ran and ended the wait. So a
//! yield that lasted a slice is a loss, and the process then sleeps at
//! once instead, for a back-off of 1 ms that doubles (up to a second)
//! while losses keep coming, as the shmpipe library's own `pace` gate
//! does (docs/pace.md); this one is per process, the library keeps no
//! per-CPU state here. (Counting only the yields after which the wait
//! went on, as this did first, missed that case: with `yes` on the CPU a
//! same-CPU `lat_pipe` round trip took 1.41 ms against 11 us natively.)

use core::sync::atomic::{AtomicI64, Ordering};

use crate::sys;

/// A yield longer than this gave a slice away (a hand-off to the peer
/// and back takes microseconds).
const SLICE_GIVEN_NS: i64 = 500_000;
/// Least time yields stay off after a loss.
const MIN_BACKOFF_NS: i64 = 1_000_000;
/// Most time yields stay off after a loss.
const MAX_BACKOFF_NS: i64 = 1_000_000_000;

/// When a yield was last lost (monotonic ns; 0: never), and how long
/// yields stay off after it. Plain loads and stores: a racing loss may be
/// forgotten, which only makes the next back-off shorter.
static LOST_AT: AtomicI64 = AtomicI64::new(0);
static BACKOFF: AtomicI64 = AtomicI64::new(0);

/// Gives the CPU to the tasks that wait for it (the peer among them),
/// unless a recent yield was lost: whether it yielded. A yield that
/// lasted a slice closes the gate for a while.
pub fn yield_cpu() -> bool {
    let before = sys::now_ns();
    if closed_at(before) {
        return false;
    }
    // SAFETY: no preconditions.
    unsafe { sys::sched_yield() };
    judge(before, sys::now_ns());
    true
}

/// Whether a yield was lost within the back-off before `now`.
fn closed_at(now: i64) -> bool {
    let lost_at = LOST_AT.load(Ordering::Relaxed);
    lost_at != 0 && now.saturating_sub(lost_at) < BACKOFF.load(Ordering::Relaxed)
}

/// After a yield from `began` to `ended` (monotonic ns): if it lasted a
/// slice, that slice went to some other task, and yields stay off for a
/// while.
fn judge(began: i64, ended: i64) {
    if ended.saturating_sub(began) <= SLICE_GIVEN_NS {
        return;
    }
    let at = LOST_AT.load(Ordering::Relaxed);
    let (at, backoff) = lost(at, BACKOFF.load(Ordering::Relaxed), began, ended);
    BACKOFF.store(backoff, Ordering::Relaxed);
    LOST_AT.store(at, Ordering::Relaxed);
}

/// The gate after a yield from `started` to `ended` was lost, given the
/// last loss and its back-off: losses that keep coming (the next one
/// starting within four back-offs) double it, a lone one starts over.
fn lost(lost_at: i64, backoff: i64, started: i64, ended: i64) -> (i64, i64) {
    let recent = lost_at != 0 && started.saturating_sub(lost_at) < 4 * backoff;
    let backoff = if recent {
        (2 * backoff).min(MAX_BACKOFF_NS)
    } else {
        MIN_BACKOFF_NS
    };
    (ended.max(1), backoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// A neighbour that takes every probe: off 1, 2, 4 ... ms, at most a
    /// second; one that passes now and then keeps the least back-off.
    #[test]
    fn back_off_doubles_while_losses_keep_coming() {
        let (mut at, mut off) = (0, 0);
        let mut now = 1000 * MS;
        let mut offs = Vec::new();
        for _ in 0..14 {
            (at, off) = lost(at, off, now, now + 8 * MS);
            offs.push(off / MS);
            now = at + off;
        }
        assert_eq!(offs[..4], [1, 2, 4, 8]);
        assert_eq!(*offs.last().unwrap(), 1000);
        now += 4 * off;
        (at, off) = lost(at, off, now, now + 8 * MS);
        assert_eq!(off, MS);
        for _ in 0..5 {
            now = at + 20 * MS;
            (at, off) = lost(at, off, now, now + 8 * MS);
            assert_eq!(off, MS);
        }
    }

    /// The gate is open at first, a short yield leaves it open, and a
    /// long one closes it, whether or not its wait then ended (judged on
    /// spans of its own: a real yield on a busy machine may last a slice).
    #[test]
    fn a_long_yield_closes_the_gate() {
        LOST_AT.store(0, Ordering::Relaxed);
        let now = sys::now_ns();
        assert!(!closed_at(now), "the gate is open at first");
        judge(now - 1000, now);
        assert!(!closed_at(now));
        judge(now - 2 * SLICE_GIVEN_NS, now);
        assert!(closed_at(now) && !yield_cpu());
        LOST_AT.store(0, Ordering::Relaxed);
    }
}
