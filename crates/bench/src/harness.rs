//! The runner: runs one job once under a watchdog, as the
//! [`crate::registry`] says the job runs, and calibrates how many
//! operations fill a run.

use std::io;
use std::time::Duration;

use crate::job::{Job, Test, RING};
use crate::registry;
use crate::sys;

/// Operations timed by a run of count `n` (the token ring counts laps).
pub fn ops(test: Test, n: u64) -> u64 {
    match test {
        Test::TokenRing => n * RING as u64,
        _ => n,
    }
}

/// Runs `job` once with `n` timed operations (laps for the token ring),
/// under a watchdog of `limit`. Returns the time the timed part took.
pub fn run_once(job: Job, n: u64, limit: Duration) -> io::Result<Duration> {
    let Some(run) = registry::runner(job.mechanism, job.test) else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this contestant does not run this test",
        ));
    };
    let r = watched(limit, || run(job.placement, n));
    // Leave the parent free to run anywhere between runs.
    let _ = sys::pin(None);
    r
}

/// Runs `f` with the watchdog armed for `limit`, disarming it after.
fn watched<T>(limit: Duration, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    sys::arm_watchdog(limit)?;
    let r = f();
    sys::disarm_watchdog()?;
    r
}

/// Finds how many operations fill about `budget`: grows the count tenfold
/// until a run takes a tenth of the budget, then scales.
pub fn calibrate(job: Job, budget: Duration, limit: Duration) -> io::Result<u64> {
    let mut n = job.test.initial_count();
    loop {
        let mut t = run_once(job, n, limit)?;
        if t >= budget / 10 || n >= 1 << 32 {
            // A one-off delay (the first fork of the process, a preempted
            // child) can make a short run look slow, and the count then
            // stays too small for every run after: the faster of two looks
            // decides (seen here as single runs at 1000x the median).
            t = t.min(run_once(job, n, limit)?);
            let per = t.as_secs_f64() / n as f64;
            let want = (budget.as_secs_f64() / per.max(1e-12)).ceil() as u64;
            return Ok(want.clamp(1, 1 << 34));
        }
        let grow = if t.is_zero() {
            100.0
        } else {
            (budget.as_secs_f64() / 10.0 / t.as_secs_f64()).clamp(2.0, 100.0)
        };
        n = ((n as f64) * grow).ceil() as u64;
    }
}

/// Sets the process up for running jobs: blocks SIGUSR1 (for the signal
/// contestant) and installs the watchdog's handler. Call once, before any
/// job, while the process has a single thread.
pub fn prepare_process() -> io::Result<()> {
    sys::block_usr1()?;
    sys::install_watchdog()
}
