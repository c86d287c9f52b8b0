//! Whether a cache line costs more to fetch from the other CPU's cache
//! when it is read through a read-only mapping than through a writable
//! one: `shmpipe probe line-permission N` (see docs/roundtrip.md). A
//! pipe's reader polls the writer's tail through its own mapping of the
//! writer's page, and the library maps that page writable where the seals
//! allow (`setup::open_control_page` in shmpipe-core) because of what
//! this measures.
//!
//! This process and a forked echo, a CPU each, bounce one line each way
//! `n` times, as `cacheline` does; each reads the other's line through
//! its own mapping of a shared page, left writable or made read-only in
//! the reader alone.

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::links::spin_until;
use crate::stats::median;
use crate::sys::{self, SharedMem};

/// Nanoseconds per round trip of `n` round trips, each side reading the
/// other's line through a read-only mapping if `read_only`, else through
/// a writable one. Forks, so the process must have one thread.
///
/// # Examples
///
/// ```
/// let rw = shmpipe_bench::permission::run(1000, false)?;
/// let ro = shmpipe_bench::permission::run(1000, true)?;
/// assert!(rw > 0.0 && ro > 0.0);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn run(n: u64, read_only: bool) -> io::Result<f64> {
    // The request's line on the first page, the reply's on the second.
    const REQUEST: usize = 0;
    const REPLY: usize = 4096;
    let mem = SharedMem::new(2 * 4096)?;
    let two = sys::online_cpus() >= 2;
    let mut echo = sys::spawn(|| {
        sys::pin(two.then_some(1))?;
        if read_only {
            mem.make_read_only(REQUEST)?;
        }
        for i in 1..=n {
            spin_until(|| mem.u64_at(REQUEST).load(Ordering::Acquire) == i)?;
            mem.u64_at(REPLY).store(i, Ordering::Release);
        }
        Ok(())
    })?;
    sys::pin(two.then_some(0))?;
    if read_only {
        mem.make_read_only(REPLY)?;
    }
    let start = Instant::now();
    for i in 1..=n {
        mem.u64_at(REQUEST).store(i, Ordering::Release);
        spin_until(|| mem.u64_at(REPLY).load(Ordering::Acquire) == i)?;
    }
    let took = start.elapsed();
    echo.wait(Instant::now() + Duration::from_secs(60))?;
    sys::pin(None)?;
    Ok(took.as_nanos() as f64 / n.max(1) as f64)
}

/// Prints the median round trip through writable and through read-only
/// mappings, from `runs` interleaved runs of `n` round trips each.
///
/// # Examples
///
/// ```
/// shmpipe_bench::permission::print(1000, 3)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn print(n: u64, runs: usize) -> io::Result<()> {
    let (mut writable, mut read_only) = (Vec::new(), Vec::new());
    for _ in 0..runs.max(1) {
        writable.push(run(n, false)?);
        read_only.push(run(n, true)?);
    }
    let w = median(&writable).unwrap_or(f64::NAN);
    let r = median(&read_only).unwrap_or(f64::NAN);
    println!(
        "line-permission, one line each way, {n} round trips, medians of {} runs:\n  \
         through writable mappings {w:.0} ns, through read-only ones {r:.0} ns ({:.2}x)",
        writable.len(),
        r / w
    );
    Ok(())
}
