//! Which CPU this thread runs on, and when a waiter may give its CPU
//! away: the per-thread CPU cache the ends' CPU hints use (`wait`), what
//! a `sched_yield` costs here, and the per-CPU yield gate that stops
//! yielding where a yield lost a time slice to another task.
//!
//! A leaf of the waiting code: it uses `sys` only, and both `wait` and
//! the rest of `pace` use it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sys;

thread_local! {
    /// The CPU this thread ran on when it last began to spin (`u32::MAX`:
    /// unknown, or it may have moved since: it yielded, slept or armed).
    static THREAD_CPU: Cell<u32> = const { Cell::new(u32::MAX) };
}

/// The CPU this thread runs on, for the hint a publish refreshes: as its
/// last spin found it, if it has not yielded, slept or armed since. A
/// reply is published right after such a spin, and asking the kernel
/// again there (13 ns here) would delay it by as much; a thread moved
/// without sleeping (a rare preemption) is seen at its next spin. Only a
/// hint: a stale one costs at most some spinning.
#[inline]
pub(crate) fn thread_cpu() -> u32 {
    match THREAD_CPU.with(|c| c.get()) {
        u32::MAX => fresh_cpu(),
        cpu => cpu,
    }
}

/// The CPU this thread's last spin found it on, without asking the
/// kernel: `u32::MAX` if unknown, or it may have moved since (see
/// `thread_cpu`).
#[inline(always)]
pub(crate) fn cached_cpu() -> u32 {
    THREAD_CPU.with(|c| c.get())
}

/// Asks the kernel which CPU this thread runs on, and remembers it.
pub(crate) fn fresh_cpu() -> u32 {
    // A forked child inherits the memory but may run elsewhere (a bench
    // pins it to the other CPU): it forgets, or a writer forked from its
    // reader's thread would publish the reader's CPU as its own, and the
    // reader would sleep where it should spin (docs/pace.md).
    static FORGET_ON_FORK: AtomicBool = AtomicBool::new(false);
    sys::on_fork_child_once(&FORGET_ON_FORK, forget_cpu_after_fork);
    let cpu = sys::current_cpu();
    THREAD_CPU.with(|c| c.set(cpu));
    cpu
}

/// This thread may run elsewhere after what it does next (yield, sleep).
pub(crate) fn forget_cpu() {
    THREAD_CPU.with(|c| c.set(u32::MAX));
}

/// `forget_cpu` in a forked child (see `fresh_cpu`).
extern "C" fn forget_cpu_after_fork() {
    forget_cpu();
}

/// The cheapest `sched_yield` seen, in ns; 0: none yet.
static YIELD_NS: AtomicU32 = AtomicU32::new(0);

/// The cheapest `sched_yield` seen, in ns; 0 if none was measured.
pub(crate) fn cheapest_yield_ns() -> u32 {
    YIELD_NS.load(Ordering::Relaxed)
}

/// Measures what a `sched_yield` costs, once per process: eight of them
/// (a few microseconds), the cheapest counts (see `note_yield`).
pub(crate) fn measure_yield_once() {
    if YIELD_NS.load(Ordering::Relaxed) != 0 {
        return;
    }
    for _ in 0..8 {
        let t = Instant::now();
        sys::yield_now();
        note_yield(t.elapsed());
    }
}

/// A `sched_yield` took `d` (including whatever ran meanwhile: only the
/// cheapest counts).
pub(crate) fn note_yield(d: Duration) {
    let d = d.as_nanos().clamp(1, u128::from(u32::MAX)) as u32;
    if YIELD_NS.load(Ordering::Relaxed).wrapping_sub(1) >= d {
        YIELD_NS.store(d, Ordering::Relaxed);
    }
}

/// A yield that lasted longer than this (in ns) most likely gave some
/// task a time slice of the scheduler (EEVDF's base slice is 0.7 ms or
/// more): the yield lost. Not "longer than a wake": a ring of processes
/// on one CPU hands the CPU round all of them in one yield, a few
/// microseconds a hop.
pub(crate) const SLICE_GIVEN: u64 = 500_000;
/// Least time yielding stays off after a lost yield.
pub(crate) const MIN_YIELD_BACKOFF: Duration = Duration::from_millis(1);
/// Most time yielding stays off after a lost yield.
pub(crate) const MAX_YIELD_BACKOFF: Duration = Duration::from_secs(1);

/// When a waiter on one CPU may yield it: off for a back-off after a
/// yield lost a time slice to another task, the back-off doubling while
/// losses keep coming and back to the least once they stop (see
/// docs/pace.md). Times in nanoseconds of the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct YieldGate {
    /// When a yield was last lost; 0: never.
    lost_at: u64,
    /// How long yielding stays off after that loss.
    backoff: u64,
}

impl YieldGate {
    /// Whether a yield may be tried at `now`.
    pub(crate) fn allowed(self, now: u64) -> bool {
        self.lost_at == 0 || now.saturating_sub(self.lost_at) >= self.backoff
    }

    /// A yield from `started` to `ended` was lost to another task.
    /// Whether the loss is recent is told from when that yield started:
    /// the slice it lost (a few milliseconds) must not count.
    #[must_use]
    pub(crate) fn lost(self, started: u64, ended: u64) -> YieldGate {
        let min = MIN_YIELD_BACKOFF.as_nanos() as u64;
        let max = MAX_YIELD_BACKOFF.as_nanos() as u64;
        let recent = self.lost_at != 0 && started.saturating_sub(self.lost_at) < 4 * self.backoff;
        let backoff = if recent {
            (2 * self.backoff).min(max)
        } else {
            min
        };
        YieldGate {
            lost_at: ended.max(1),
            backoff,
        }
    }
}

/// The gates of this process, one per CPU: the task that took a lost
/// yield's slice runs on that CPU, and a thread waiting on another one is
/// not held up by it. CPUs beyond the table share slots (a loss then
/// closes the gate of a few more CPUs for its back-off, no worse than one
/// gate for the process).
const GATES: usize = 64;

/// One CPU's `YieldGate`, in two words (plain loads and stores: a racing
/// loss may be forgotten, which only makes the next back-off shorter).
struct GateSlot {
    lost_at: AtomicU64,
    backoff: AtomicU64,
}

static GATE_SLOTS: [GateSlot; GATES] = [const {
    GateSlot {
        lost_at: AtomicU64::new(0),
        backoff: AtomicU64::new(0),
    }
}; GATES];

impl GateSlot {
    fn of(cpu: u32) -> &'static GateSlot {
        &GATE_SLOTS[cpu as usize % GATES]
    }

    fn get(&self) -> YieldGate {
        YieldGate {
            lost_at: self.lost_at.load(Ordering::Relaxed),
            backoff: self.backoff.load(Ordering::Relaxed),
        }
    }

    fn set(&self, gate: YieldGate) {
        self.backoff.store(gate.backoff, Ordering::Relaxed);
        self.lost_at.store(gate.lost_at, Ordering::Relaxed);
    }

    /// A yield on this slot's CPU ran from `before` to `now`: one longer
    /// than [`SLICE_GIVEN`] gave a slice away, and closes the gate.
    fn record(&self, before: u64, now: u64) {
        if now.saturating_sub(before) > SLICE_GIVEN {
            self.set(self.get().lost(before, now));
        }
    }
}

/// Every yield of a waiting thread: `sched_yield`, unless a recent yield
/// of this process on this CPU gave some other task a time slice (see
/// `YieldGate`). A spinner that yields is not parked, so the peer's
/// publish sends it no wake: a neighbour that takes the CPU keeps it
/// until its slice or the next tick (a busy loop on a WaitSet server's
/// CPU made the median request wait ~4 ms), where spinning on or
/// sleeping would have seen the request at once.
///
/// Returns `None` if it did not yield, else how long other tasks ran in
/// the yield: its time beyond the cheapest yield seen (see `note_yield`).
pub(crate) fn yield_cpu() -> Option<Duration> {
    let before = sys::monotonic_ns();
    // Asked afresh (13 ns against a yield's 600): a cached hint may be
    // stale after a sleep.
    let gate = GateSlot::of(sys::current_cpu());
    if !gate.get().allowed(before) {
        return None;
    }
    sys::yield_now();
    // We may run on another CPU now.
    forget_cpu();
    let now = sys::monotonic_ns();
    let took = now.saturating_sub(before);
    // Charged to the CPU we yielded, where the slice was given.
    gate.record(before, now);
    note_yield(Duration::from_nanos(took));
    let cheapest = u64::from(YIELD_NS.load(Ordering::Relaxed));
    Some(Duration::from_nanos(took.saturating_sub(cheapest)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_yield_gate_backs_off_from_a_lasting_neighbour_and_forgets_a_passing_one() {
        const MS: u64 = 1_000_000;
        let mut h = YieldGate {
            lost_at: 0,
            backoff: 0,
        };
        assert!(h.allowed(5));
        // A neighbour that takes every probe: off 1, 2, 4 ... ms, then
        // at most a second, probing again as soon as each back-off ends.
        let mut now = 1000 * MS;
        let mut offs = Vec::new();
        for _ in 0..14 {
            let ended = now + 8 * MS; // the probe loses a slice
            h = h.lost(now, ended);
            assert!(!h.allowed(ended + h.backoff - 1));
            assert!(h.allowed(ended + h.backoff));
            offs.push(h.backoff / MS);
            now = ended + h.backoff;
        }
        assert_eq!(offs[..4], [1, 2, 4, 8]);
        assert_eq!(*offs.last().unwrap(), 1000);
        // Gone for longer than four back-offs: the next loss starts over.
        now += 4 * h.backoff;
        h = h.lost(now, now + 8 * MS);
        assert_eq!(h.backoff, MS);
        // Losses a while apart (a neighbour passing now and then) stay
        // at the least back-off.
        for _ in 0..5 {
            now += 20 * MS;
            h = h.lost(now, now + 8 * MS);
            assert_eq!(h.backoff, MS);
        }
    }

    #[test]
    fn gates_are_per_cpu_and_only_a_lost_slice_closes_one() {
        const MS: u64 = 1_000_000;
        // Each CPU has its own slot; CPUs past the table share one.
        assert!(!std::ptr::eq(GateSlot::of(0), GateSlot::of(1)));
        assert!(std::ptr::eq(
            GateSlot::of(3),
            GateSlot::of(3 + GATES as u32)
        ));
        // (A local slot: the table is the process's, and other tests yield.)
        let slot = GateSlot {
            lost_at: AtomicU64::new(0),
            backoff: AtomicU64::new(0),
        };
        let now = 1000 * MS;
        // A yield that took less than a slice leaves the gate open.
        slot.record(now, now + SLICE_GIVEN);
        assert!(slot.get().allowed(now + SLICE_GIVEN));
        // One that took a slice closes it for the least back-off.
        slot.record(now, now + 8 * MS);
        assert!(!slot.get().allowed(now + 8 * MS));
        assert!(slot.get().allowed(now + 9 * MS));
    }
}
