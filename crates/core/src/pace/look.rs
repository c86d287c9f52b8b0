//! The pause a waiter makes before it looks at the peer's index
//! ([`LookDelay`]), in spin-loop hints of this machine: a duration turned
//! into a hint count with the hint's cost, measured once per process
//! ([`hint_cost_ps`]).
//!
//! A waiter whose cached view of the peer's index ran out pauses before it
//! looks, so that a streaming peer's cache line is not pulled away item by
//! item; the pause adapts to how much each look finds (see [`LookDelay`];
//! the design and its measurements: docs/pace.md).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Shortest pause before a look: under half the fastest cross-core
/// cache-line round trip measured (121 ns on the AMD guest, 266 ns on the
/// Intel one), so a reply is not waited for longer than it takes.
pub(crate) const MIN_LOOK: Duration = Duration::from_nanos(50);
/// Longest pause before a look.
pub(crate) const MAX_LOOK: Duration = Duration::from_nanos(2500);
/// Bytes a look should find for the pause to stop growing.
pub(crate) const BATCH_GOAL: usize = 1024;
/// How often a spinning waiter looks at the clock.
pub(crate) const CLOCK_EVERY: Duration = Duration::from_nanos(500);

/// Bounds on a measured hint cost, in picoseconds: a hint that costs
/// nothing (or a clock too coarse to see it) counts as 0.1 ns, and no
/// disturbed measurement makes one count as more than 1 us.
const MIN_HINT_PS: u64 = 100;
const MAX_HINT_PS: u64 = 1_000_000;

/// The cost of one hint in picoseconds; 0 until measured. Not a
/// `OnceLock`: a fork while another thread held its lock would leave the
/// child waiting; racing first callers both measure, harmlessly.
static HINT_PS: AtomicU32 = AtomicU32::new(0);

/// What one spin-loop hint costs on this machine, in picoseconds: measured
/// at the first call in the process (a few microseconds), then remembered.
pub(crate) fn hint_cost_ps() -> u32 {
    match HINT_PS.load(Ordering::Relaxed) {
        0 => {
            let ps = measure();
            HINT_PS.store(ps, Ordering::Relaxed);
            ps
        }
        ps => ps,
    }
}

/// Times batches of hints with the monotonic clock. A batch is made long
/// enough (at least 200 ns) for the clock's own cost and resolution not to
/// matter; the fastest of eight counts (see [`cost_from_samples`]).
fn measure() -> u32 {
    const SAMPLES: usize = 8;
    let mut hints = 32u32;
    loop {
        let mut samples = [Duration::MAX; SAMPLES];
        for s in &mut samples {
            let t = Instant::now();
            for _ in 0..hints {
                std::hint::spin_loop();
            }
            *s = t.elapsed();
        }
        let best = samples.iter().min().copied().unwrap_or_default();
        if best >= Duration::from_nanos(200) || hints >= 1 << 16 {
            return cost_from_samples(&samples, hints);
        }
        hints *= 4;
    }
}

/// The cost of one hint from the durations of batches of `hints` hints:
/// the fastest batch is the least disturbed (preemption and exits to the
/// hypervisor only ever add time), bounded to a sane range.
pub(crate) fn cost_from_samples(samples: &[Duration], hints: u32) -> u32 {
    let best = samples.iter().min().copied().unwrap_or_default();
    let ps = best.as_nanos().saturating_mul(1000) / u128::from(hints.max(1));
    ps.clamp(u128::from(MIN_HINT_PS), u128::from(MAX_HINT_PS)) as u32
}

/// Hints that last about `d`, at `hint_ps` picoseconds each: at least one.
pub(crate) fn hints_for(d: Duration, hint_ps: u32) -> u32 {
    let n = d.as_nanos().saturating_mul(1000) / u128::from(hint_ps.max(1));
    n.clamp(1, u128::from(u32::MAX / 4)) as u32
}

/// The adaptive pause before a look at the peer's index (see the module
/// documentation), in hints of this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LookDelay {
    hints: u32,
    min: u32,
    max: u32,
    per_clock: u32,
}

impl LookDelay {
    /// A controller for hints of `hint_ps` picoseconds, at its minimum.
    pub(crate) fn new(hint_ps: u32) -> LookDelay {
        let min = hints_for(MIN_LOOK, hint_ps);
        LookDelay {
            hints: min,
            min,
            max: hints_for(MAX_LOOK, hint_ps).max(min),
            per_clock: hints_for(CLOCK_EVERY, hint_ps),
        }
    }

    /// A controller for this machine.
    pub(crate) fn calibrated() -> LookDelay {
        LookDelay::new(hint_cost_ps())
    }

    /// The current pause, in hints.
    #[cfg(test)]
    pub(crate) fn hints(&self) -> u32 {
        self.hints
    }

    /// Looks between two looks at the clock, for a waiter that makes one
    /// hint between looks.
    #[inline]
    pub(crate) fn looks_per_clock(&self) -> u32 {
        self.per_clock
    }

    /// Makes the current pause.
    #[inline]
    pub(crate) fn pause(&self) {
        for _ in 0..self.hints {
            std::hint::spin_loop();
        }
    }

    /// A reply is awaited: look as soon as a reply can be there.
    #[inline]
    pub(crate) fn reset(&mut self) {
        self.hints = self.min;
    }

    /// A look after the pause found `found` bytes (readable or free, more
    /// than zero): too few, and the next pause is twice as long.
    #[inline]
    pub(crate) fn found(&mut self, found: usize) {
        if found < BATCH_GOAL {
            self.hints = self.hints.saturating_mul(2).min(self.max);
        }
    }

    /// A look after the pause found nothing: the next pause is half as long.
    #[inline]
    pub(crate) fn found_nothing(&mut self) {
        self.hints = (self.hints / 2).max(self.min);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AMD_PS: u32 = 24_000; // measured: 59 cycles at 2.45 GHz
    const INTEL_PS: u32 = 60_000; // 140 cycles at 2.3 GHz

    #[test]
    fn the_fastest_sample_counts() {
        let ns = Duration::from_nanos;
        let samples = [ns(9000), ns(768), ns(800), ns(50_000)];
        assert_eq!(cost_from_samples(&samples, 32), 24_000);
    }

    #[test]
    fn measured_costs_are_bounded() {
        assert_eq!(cost_from_samples(&[Duration::ZERO], 32), 100);
        assert_eq!(cost_from_samples(&[], 32), 100);
        assert_eq!(cost_from_samples(&[Duration::from_secs(1)], 1), 1_000_000);
        assert_eq!(cost_from_samples(&[Duration::from_nanos(10)], 0), 10_000);
    }

    #[test]
    fn pauses_last_the_same_time_on_either_cpu() {
        for ps in [AMD_PS, INTEL_PS] {
            let d = LookDelay::new(ps);
            let ns = |hints: u32| u64::from(hints) * u64::from(ps) / 1000;
            // Within one hint of the durations asked for.
            assert!(ns(d.min).abs_diff(50) <= u64::from(ps) / 1000);
            assert!(ns(d.max).abs_diff(2500) <= u64::from(ps) / 1000);
        }
        assert_eq!(hints_for(MIN_LOOK, AMD_PS), 2);
        assert_eq!(hints_for(MAX_LOOK, INTEL_PS), 41);
        // Never zero hints, never an overflow.
        assert_eq!(hints_for(Duration::ZERO, 1), 1);
        assert_eq!(hints_for(Duration::MAX, 0), u32::MAX / 4);
    }

    /// Feeds `d` what a look after each pause would find from a synthetic
    /// peer making `bytes_per_us` bytes per microsecond; returns the pause
    /// (in ns) after each of `waits` waits.
    fn run(mut d: LookDelay, ps: u32, bytes_per_us: u64, waits: usize) -> Vec<u64> {
        let ns = |hints: u32| u64::from(hints) * u64::from(ps) / 1000;
        let mut seen = Vec::new();
        for _ in 0..waits {
            let found = (bytes_per_us * ns(d.hints) / 1000) as usize;
            if found == 0 {
                d.found_nothing();
            } else {
                d.found(found);
            }
            seen.push(ns(d.hints));
        }
        seen
    }

    #[test]
    fn converges_to_the_pause_that_finds_a_batch() {
        let steps = (MAX_LOOK.as_nanos() / MIN_LOOK.as_nanos()).ilog2() as usize + 2;
        let goal = BATCH_GOAL as u64;
        for ps in [AMD_PS, INTEL_PS] {
            let (min, max) = {
                let d = LookDelay::new(ps);
                let ns = |hints: u32| u64::from(hints) * u64::from(ps) / 1000;
                (ns(d.min), ns(d.max))
            };
            let settled = |seen: &[u64]| {
                let last = seen[steps];
                assert!(seen[steps..].iter().all(|&ns| ns == last), "{seen:?}");
                last
            };
            // A peer making 1 byte per ns: the shortest pause whose look
            // finds a batch (about 1 us).
            let pause = settled(&run(LookDelay::new(ps), ps, 1000, steps + 10));
            assert!(pause >= goal && pause / 2 < goal, "{pause}");
            // Too slow to fill a batch within the longest pause: the longest.
            let pause = settled(&run(LookDelay::new(ps), ps, 100, steps + 10));
            assert_eq!(pause, max);
            // Nothing within the shortest pause (a reply, an idle peer):
            // the shortest, and the waiter spins after it.
            assert_eq!(settled(&run(LookDelay::new(ps), ps, 8, steps + 10)), min);
            // A batch within the shortest pause: the shortest.
            assert_eq!(
                settled(&run(LookDelay::new(ps), ps, 100_000, steps + 10)),
                min
            );
        }
    }

    #[test]
    fn a_silent_peer_or_a_reply_brings_the_pause_down() {
        let mut d = LookDelay::new(AMD_PS);
        for _ in 0..20 {
            d.found(8);
        }
        assert_eq!(d.hints(), d.max);
        let steps = (d.max / d.min).ilog2() + 1;
        for _ in 0..steps {
            d.found_nothing();
        }
        assert_eq!(d.hints(), d.min);
        for _ in 0..20 {
            d.found(8);
        }
        d.reset();
        assert_eq!(d.hints(), d.min);
    }

    #[test]
    fn the_measurement_is_sane_and_remembered() {
        let ps = hint_cost_ps();
        assert!((MIN_HINT_PS..=MAX_HINT_PS).contains(&u64::from(ps)));
        assert_eq!(hint_cost_ps(), ps);
    }
}
