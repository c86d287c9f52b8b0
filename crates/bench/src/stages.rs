//! Where a cross-core round trip's time goes, stage by stage, timed with
//! the time-stamp counter: `shmpipe probe roundtrip-8B-stages N` (see
//! docs/roundtrip.md).
//!
//! This process (pinned to the first CPU) sends an 8-byte request and
//! waits for the reply; a forked echo (pinned to the second CPU) waits for
//! the request and sends it back. Each side stamps the counter around its
//! calls, so a round trip splits into four stages: the request's write,
//! the request's way to the echo's read returning, the reply's write, and
//! the reply's way to our read returning. Run for shmpipe and for the
//! links it is compared with in the bench, in one run.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::links::{CachelineLink, Link, LinkParams, Rx, ShmpipeLink, Tx};
use crate::sys::{self, tsc, SharedMem};

/// The median of each stage over a run's round trips, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stages {
    /// The request's write (`send` returning).
    pub request_write: f64,
    /// From the request's write returning to the echo's read returning:
    /// the line's way across and the echo's wait and read.
    pub request_seen: f64,
    /// The echo's write of the reply.
    pub reply_write: f64,
    /// From the reply's write returning to our read returning.
    pub reply_seen: f64,
    /// The whole round trip.
    pub round_trip: f64,
}

/// Counter ticks per nanosecond, measured against the monotonic clock
/// over about 20 ms.
fn ticks_per_ns() -> f64 {
    let (t0, c0) = (Instant::now(), tsc());
    std::thread::sleep(Duration::from_millis(20));
    let (t1, c1) = (Instant::now(), tsc());
    (c1.wrapping_sub(c0)) as f64 / (t1 - t0).as_nanos().max(1) as f64
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Times `n` round trips of `L` (after `n / 10` not timed) between this
/// process and a forked echo, each pinned to a CPU of its own if there
/// are two; `per_ns`: counter ticks per nanosecond. Forks, so the
/// process must have one thread.
///
/// # Examples
///
/// ```
/// use shmpipe_bench::links::CachelineLink;
/// let s = shmpipe_bench::stages::run::<CachelineLink>(100, 1.0)?;
/// assert!(s.round_trip >= s.request_write);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn run<L: Link>(n: u64, per_ns: f64) -> io::Result<Stages> {
    let warm = n / 10;
    let total = (n + warm) as usize;
    let params = LinkParams { max_message: 8 };
    let ((tx, rx_echo), (tx_echo, rx)) = L::pair(&params)?;
    // The echo's stamps: after its read, after its write, per round trip.
    let stamps = SharedMem::new(total * 16)?;
    let two = sys::online_cpus() >= 2;
    let stamps_of_echo = &stamps;
    // Our halves closed in the echo: held by two processes, they would
    // take turns, which is not the path timed here.
    let (mut echo, (mut tx, mut rx)) = sys::spawn_apart((tx, rx), move || {
        let (mut rx_echo, mut tx_echo) = (rx_echo, tx_echo);
        sys::pin(two.then_some(1))?;
        rx_echo.attach()?;
        tx_echo.attach()?;
        let mut item = [0u8; 8];
        for i in 0..total {
            rx_echo.recv_exact(&mut item)?;
            let seen = tsc();
            tx_echo.send(&item)?;
            let sent = tsc();
            stamps_of_echo.u64_at(i * 16).store(seen, Relaxed);
            stamps_of_echo.u64_at(i * 16 + 8).store(sent, Relaxed);
        }
        Ok(())
    })?;
    sys::pin(two.then_some(0))?;
    tx.attach()?;
    rx.attach()?;
    let mut ours = Vec::with_capacity(total);
    let mut item = [0u8; 8];
    for i in 0..total as u64 {
        let start = tsc();
        tx.send(&i.to_le_bytes())?;
        let sent = tsc();
        rx.recv_exact(&mut item)?;
        let back = tsc();
        if u64::from_le_bytes(item) != i {
            return Err(crate::check::check_failed(format!("round trip {i}")));
        }
        ours.push((start, sent, back));
    }
    echo.wait(Instant::now() + Duration::from_secs(60))?;
    sys::pin(None)?;
    let stage = |f: &dyn Fn(usize, (u64, u64, u64), u64, u64) -> u64| {
        let v = (warm as usize..total)
            .map(|i| {
                let seen = stamps.u64_at(i * 16).load(Relaxed);
                let sent = stamps.u64_at(i * 16 + 8).load(Relaxed);
                f(i, ours[i], seen, sent)
            })
            .collect();
        median(v) as f64 / per_ns
    };
    Ok(Stages {
        request_write: stage(&|_, (a, b, _), _, _| b.wrapping_sub(a)),
        request_seen: stage(&|_, (_, b, _), d, _| d.wrapping_sub(b)),
        reply_write: stage(&|_, _, d, e| e.wrapping_sub(d)),
        reply_seen: stage(&|_, (_, _, c), _, e| c.wrapping_sub(e)),
        round_trip: stage(&|_, (a, _, c), _, _| c.wrapping_sub(a)),
    })
}

/// Runs [`run`] for shmpipe, the cacheline limit and (with the `peers`
/// feature) shmem-ipc, `rounds` times interleaved, and prints each run.
///
/// # Examples
///
/// ```
/// shmpipe_bench::stages::print(100, 1)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn print(n: u64, rounds: u32) -> io::Result<()> {
    let per_ns = ticks_per_ns();
    println!(
        "roundtrip-8B by stage, median ns over {n} round trips ({per_ns:.3} counter ticks per ns)"
    );
    println!(
        "{:<10} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "link", "req.wr", "req.seen", "rep.wr", "rep.seen", "total"
    );
    let line = |name: &str, s: Stages| {
        println!(
            "{name:<10} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
            s.request_write, s.request_seen, s.reply_write, s.reply_seen, s.round_trip
        );
    };
    for _ in 0..rounds {
        line("shmpipe", run::<ShmpipeLink>(n, per_ns)?);
        line("cacheline", run::<CachelineLink>(n, per_ns)?);
        #[cfg(feature = "peers")]
        line("shmem-ipc", run::<crate::peers::ShmemIpcLink>(n, per_ns)?);
    }
    Ok(())
}
