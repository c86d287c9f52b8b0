//! How long a waiter spins before it sleeps in the kernel: the [`Spin`]
//! setting, the process's estimate of what a sleep and wake cost (what
//! `Spin::Adaptive` spins), the pure spin before a spinner starts to
//! yield, and the [`SpinClock`] that counts a spin's own time against its
//! budget. Design and measurements: docs/pace.md.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::cpu;
use super::look::CLOCK_EVERY;

/// The longest a waiting end spins by default before it sleeps in the
/// kernel: the bound of the adaptive spin ([`Spin::Adaptive`]), which
/// spins about as long as a sleep and wake cost on this machine (measured
/// as the process's ends sleep), and starts from
/// this bound until it has measured one. Waking a sleeper on another CPU
/// of a KVM guest costs 40-80 us; on bare metal a few.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// assert_eq!(shmpipe::DEFAULT_SPIN, Duration::from_micros(50));
/// // The spin of a fixed 50 us, as this crate's versions before the
/// // adaptive spin had it by default:
/// let (rx, tx) = shmpipe::Options::new().spin(shmpipe::DEFAULT_SPIN).pipe()?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// How long a blocking call spins, looking at the ring, before it sleeps
/// in the kernel (for an end: `set_spin`, [`Options::spin`](crate::Options::spin);
/// for a [`WaitSet`](crate::WaitSet): its `set_spin`). A [`Duration`]
/// converts into [`Spin::Fixed`], so `set_spin(Duration::ZERO)` still
/// sleeps at once.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use shmpipe::Spin;
/// let (mut rx, _tx) = shmpipe::pipe()?;
/// rx.set_spin(Duration::from_micros(20)); // 20 us: Spin::Fixed
/// rx.set_spin(Duration::ZERO); // sleep at once
/// rx.set_spin(Spin::Adaptive); // back to the default
/// assert_eq!(Spin::default(), Spin::Adaptive);
/// assert_eq!(Spin::from(Duration::ZERO), Spin::Fixed(Duration::ZERO));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Spin {
    /// The default: about as long as a sleep and wake cost on this
    /// machine (measured at run time from the process's own sleeps, at
    /// most [`DEFAULT_SPIN`]). A peer that runs on the waiter's own CPU
    /// cannot run while it spins: then the waiter yields the CPU to it
    /// once instead, and sleeps if that did not bring what it waits for.
    #[default]
    Adaptive,
    /// This long (a peer on the waiter's own CPU: one yield, as for
    /// `Adaptive`), counted as the spin's own time: while other tasks run
    /// in its yields the spin lasts longer in wall time, up to 8 times
    /// this. Zero sleeps at once.
    Fixed(Duration),
}

impl From<Duration> for Spin {
    fn from(d: Duration) -> Spin {
        Spin::Fixed(d)
    }
}

impl Spin {
    /// Whether a waiter with this setting spins at least one
    /// `CLOCK_EVERY`, the looks a wait makes before the spin's set-up.
    #[inline]
    pub(crate) fn spins_first(self) -> bool {
        match self {
            Spin::Fixed(d) => d >= CLOCK_EVERY,
            Spin::Adaptive => true,
        }
    }

    /// How long a waiter with this setting spins.
    pub(crate) fn budget(self) -> Duration {
        match self {
            Spin::Fixed(d) => d,
            Spin::Adaptive => wake_cost(),
        }
    }
}

/// The process's estimate of the wake cost in ns; 0: none measured yet.
/// Plain loads and stores (not a read-modify-write): two racing samples
/// lose one, harmlessly.
static WAKE_NS: AtomicU32 = AtomicU32::new(0);

/// The running mean of a series of samples: an eighth of the way towards
/// each (about the last eight count).
pub(crate) fn average(est: u32, sample: u32) -> u32 {
    if sample < est {
        est - (est - sample) / 8
    } else {
        est + (sample - est) / 8
    }
}

fn ns(d: Duration) -> u32 {
    d.as_nanos().min(u128::from(u32::MAX)) as u32
}

/// What a sleep and wake cost here, as the estimate stands: the running
/// mean of the measured sleeps (see `note_sleep`; why the mean:
/// docs/pace.md), [`DEFAULT_SPIN`] until measured, never more.
pub(crate) fn wake_cost() -> Duration {
    match WAKE_NS.load(Ordering::Relaxed) {
        0 => DEFAULT_SPIN,
        n => Duration::from_nanos(u64::from(n)),
    }
}

/// A sleeper whose peer runs on another CPU was woken by it and found the
/// ring ready `asleep` after it parked.
pub(crate) fn note_sleep(asleep: Duration) {
    let sample = ns(asleep.min(DEFAULT_SPIN)).max(1);
    let est = match WAKE_NS.load(Ordering::Relaxed) {
        0 => sample,
        est => average(est, sample),
    };
    WAKE_NS.store(est.max(1), Ordering::Relaxed);
}

/// How long a waiter spins before it yields on every round, for a spin of
/// `limit`: twice the cheapest yield seen (a thread that shares our CPU is
/// held up no longer than handing it the CPU and back would take), at
/// least one `CLOCK_EVERY`, at most a quarter of the spin, so that a long
/// spin yields, and its yields correct a disturbed measurement.
pub(crate) fn pure_spin(limit: Duration) -> Duration {
    pure_spin_for(cpu::cheapest_yield_ns(), limit)
}

fn pure_spin_for(yield_ns: u32, limit: Duration) -> Duration {
    Duration::from_nanos(2 * u64::from(yield_ns))
        .max(CLOCK_EVERY)
        .min(limit / 4)
}

/// How many times its budget a spin may last in wall time while other
/// tasks run in its yields (see [`SpinClock`]).
pub(crate) const SHARED_SPIN: u32 = 8;

/// What a spin has spent of its budget: its own time, not the time other
/// tasks ran in its yields: a waiter that takes turns with others on its
/// CPU spends only its turns, and competitive spinning bounds what the
/// spinner spends (see docs/pace.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpinClock {
    budget: Duration,
    /// The wall time no spin outlasts: [`SHARED_SPIN`] budgets, or the
    /// caller's limit if shorter.
    wall_limit: Duration,
    /// Time other tasks ran in our yields.
    given: Duration,
}

impl SpinClock {
    /// A spin of `budget`, lasting no longer in wall time than `limit`
    /// (a timeout, say) if given.
    pub(crate) fn new(budget: Duration, limit: Option<Duration>) -> SpinClock {
        SpinClock {
            budget,
            wall_limit: budget
                .saturating_mul(SHARED_SPIN)
                .min(limit.unwrap_or(Duration::MAX)),
            given: Duration::ZERO,
        }
    }

    /// Other tasks ran for `others` in one of our yields.
    pub(crate) fn gave(&mut self, others: Duration) {
        self.given = self.given.saturating_add(others);
    }

    /// Whether a spin that began `spent` ago is over.
    pub(crate) fn over(&self, spent: Duration) -> bool {
        spent.saturating_sub(self.given) >= self.budget || spent >= self.wall_limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::cpu::{measure_yield_once, note_yield};

    #[test]
    fn a_spin_counts_its_own_time_not_its_neighbours() {
        let us = Duration::from_micros;
        // Alone on its CPU: yields give nothing away, the wall time counts.
        let alone = SpinClock::new(us(50), None);
        assert!(!alone.over(us(49)));
        assert!(alone.over(us(50)));
        // One of four waiters that take turns through their yields: three
        // quarters of the wall time ran the others, so the spin lasts
        // four budgets of wall time.
        let mut shared = SpinClock::new(us(50), None);
        for _ in 0..100 {
            shared.gave(Duration::from_nanos(1500)); // three turns of 500 ns
        }
        assert!(!shared.over(us(199)));
        assert!(shared.over(us(200)));
        // A neighbour that took a slice: bounded by SHARED_SPIN budgets.
        let mut hogged = SpinClock::new(us(50), None);
        hogged.gave(Duration::from_millis(4));
        assert!(!hogged.over(us(50) * SHARED_SPIN - us(1)));
        assert!(hogged.over(us(50) * SHARED_SPIN));
        // Never past a timeout.
        let mut timed = SpinClock::new(us(50), Some(us(60)));
        timed.gave(us(100));
        assert!(!timed.over(us(59)));
        assert!(timed.over(us(60)));
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A machine whose wakes take `wake` and peers that keep the waits
    /// waiting `waits`, through the estimate as `Side::sleep_parked` feeds
    /// it (starting unmeasured): a wait that outlasts the spin sleeps and
    /// the sleeper sees its sleep last the rest of the wait plus the wake.
    /// Returns the spin before each wait, and the estimate at the end.
    fn drive(wake: Duration, waits: &[Duration]) -> (Vec<Duration>, u32) {
        let mut est = 0u32;
        let mut seen = Vec::new();
        for &wait in waits {
            let spin = match est {
                0 => DEFAULT_SPIN,
                n => Duration::from_nanos(u64::from(n)),
            };
            seen.push(spin);
            if wait <= spin {
                continue; // caught while spinning: nothing learnt, nothing paid
            }
            let asleep = wait - spin + wake;
            let sample = ns(asleep.min(DEFAULT_SPIN)).max(1);
            est = if est == 0 {
                sample
            } else {
                average(est, sample)
            };
        }
        (seen, est)
    }

    /// What a wait costs with a spin of `spin` (the time spun, plus a
    /// wake if it slept), against the best choice in hindsight (spin for
    /// all of it, or sleep at once and pay the wake).
    fn cost_and_best(spin: Duration, wake: Duration, wait: Duration) -> (Duration, Duration) {
        let cost = if wait <= spin { wait } else { spin + wake };
        (cost, wait.min(wake))
    }

    #[test]
    fn the_estimate_is_the_running_mean_of_the_sleeps() {
        // Sleeps of 40 us from the bound: within 1 us in 40 sleeps.
        let mut est = ns(DEFAULT_SPIN);
        for _ in 0..40 {
            est = average(est, 40_000);
        }
        assert!((40_000..41_000).contains(&est), "{est}");
        // One accidental sleep moves it by an eighth, either way.
        assert_eq!(average(40_000, 0), 35_000);
        assert_eq!(average(40_000, 48_000), 41_000);
        // Alternating sleeps: between them.
        for i in 0..200 {
            est = average(est, if i % 2 == 0 { 10_000 } else { 30_000 });
        }
        assert!((18_000..22_000).contains(&est), "{est}");
    }

    #[test]
    fn the_wake_cost_is_bounded_and_starts_at_the_bound() {
        // (The process-wide estimate: other tests' ends may sleep in
        // parallel, so only what holds whatever they feed it.)
        assert!(wake_cost() <= DEFAULT_SPIN);
        note_sleep(Duration::from_secs(5));
        assert!(wake_cost() <= DEFAULT_SPIN);
        note_sleep(Duration::ZERO);
        assert!(wake_cost() > Duration::ZERO);
    }

    #[test]
    fn the_pure_spin_is_twice_the_cheapest_yield_within_bounds() {
        assert_eq!(pure_spin_for(0, DEFAULT_SPIN), CLOCK_EVERY); // unmeasured
        assert_eq!(pure_spin_for(621, DEFAULT_SPIN), Duration::from_nanos(1242));
        assert_eq!(pure_spin_for(100, DEFAULT_SPIN), CLOCK_EVERY);
        // A quarter of the spin at most, so that a spin that lasts yields
        // (and its yields correct a disturbed measurement).
        assert_eq!(
            pure_spin_for(u32::MAX, us(50)),
            Duration::from_nanos(12_500)
        );
        assert_eq!(pure_spin_for(5_000, us(8)), us(2));
        measure_yield_once();
        assert!(cpu::cheapest_yield_ns() > 0);
        note_yield(Duration::from_secs(1));
        note_yield(Duration::from_nanos(700));
        note_yield(Duration::from_micros(9)); // another thread ran: ignored
        assert!(cpu::cheapest_yield_ns() <= 700);
        assert!(pure_spin(DEFAULT_SPIN) <= Duration::from_nanos(1400));
    }

    /// `n` waits of varied length around `mean` (exponentially
    /// distributed, from a fixed seed: the same every run).
    fn varied(mean: Duration, n: usize) -> Vec<Duration> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                mean.mul_f64(-(1.0 - u).ln())
            })
            .collect()
    }

    #[test]
    fn a_fast_peer_is_caught_by_spinning_and_teaches_nothing() {
        // Replies within the bound never sleep: the spin stays at the
        // bound (nothing measured), whatever the machine.
        let (seen, est) = drive(us(5), &[Duration::from_nanos(300); 100]);
        assert!(seen.iter().all(|&s| s == DEFAULT_SPIN));
        assert_eq!(est, 0);
    }

    #[test]
    fn the_spin_settles_on_the_mean_sleep() {
        // Peers whose waits vary (exponentially: what is left of a wait
        // after the spin lasts as long on average as a whole wait) around
        // `mean`: a sleep lasts the wake plus that, and the spin settles
        // on it on average, or on the bound.
        for wake in [us(5), us(20), us(45)] {
            for mean in [us(10), us(30), us(100)] {
                let (seen, _) = drive(wake, &varied(mean, 3000));
                let settled = &seen[1000..];
                let avg = settled.iter().sum::<Duration>() / settled.len() as u32;
                let goal = (wake + mean).min(DEFAULT_SPIN);
                assert!(
                    avg >= goal.mul_f64(0.75) && avg <= goal.mul_f64(1.15),
                    "wake {wake:?}, waits of {mean:?}: {avg:?} for {goal:?}"
                );
                assert!(settled.iter().all(|&s| s <= DEFAULT_SPIN));
            }
        }
    }

    #[test]
    fn spinning_costs_at_most_twice_the_best_choice_where_wakes_are_slow() {
        // The competitive bound (and 5% for the estimate's noise), once
        // the estimate settled: on a KVM guest (wakes of 45 us) for peers
        // whose waits vary around 0.3 us to 1 ms; where wakes are faster,
        // for waits up to about the wake (see the known weakness in
        // docs/pace.md: longer ones make it spin too long).
        for (wake, means) in [
            (
                us(45),
                &[300, 3_000, 10_000, 30_000, 100_000, 1_000_000][..],
            ),
            (us(20), &[300, 3_000, 10_000, 30_000][..]),
            (us(5), &[300, 3_000][..]),
        ] {
            for &mean_ns in means {
                let mean = Duration::from_nanos(mean_ns);
                let waits = varied(mean, 3000);
                let (seen, _) = drive(wake, &waits);
                let (mut cost, mut best) = (Duration::ZERO, Duration::ZERO);
                for (&spin, &wait) in seen.iter().zip(&waits).skip(1000) {
                    let (c, b) = cost_and_best(spin, wake, wait);
                    cost += c;
                    best += b;
                }
                assert!(
                    cost <= best.mul_f64(2.1),
                    "wake {wake:?}, waits of {mean:?}: {cost:?} against {best:?}"
                );
            }
        }
    }

    #[test]
    fn an_explicit_spin_is_the_budget() {
        note_sleep(us(3));
        assert_eq!(Spin::Fixed(us(20)).budget(), us(20));
        assert_eq!(Spin::Fixed(Duration::ZERO).budget(), Duration::ZERO);
        assert_eq!(Spin::from(us(7)), Spin::Fixed(us(7)));
        let adaptive = Spin::Adaptive.budget();
        assert!(adaptive > Duration::ZERO && adaptive <= DEFAULT_SPIN);
    }
}
