//! Processes that share one CPU: a waiter hands the CPU to its peer with
//! one `sched_yield` before it sleeps (see `wait.rs`). These tests pin
//! every process to one CPU and check that data still flows, in order,
//! whether the peer answers within the yield, later, or never while a
//! busy neighbour shares the CPU. Every test runs under a watchdog.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{fork, serial, watchdog};
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

const LIMIT: Duration = Duration::from_secs(120);

/// Pins the calling thread (and the children it forks next) to one CPU it
/// may run on; gives back the set it had, to restore.
fn pin_to_one_cpu() -> CpuSet {
    let old = sched_getaffinity(None).unwrap();
    let cpu = (0..CpuSet::MAX_CPU).find(|&c| old.is_set(c)).unwrap();
    let mut one = CpuSet::new();
    one.set(cpu);
    sched_setaffinity(None, &one).unwrap();
    old
}

/// Sends `n` counters and checks each comes back plus one.
fn ping(tx: &mut shmpipe::Writer, rx: &mut shmpipe::Reader, n: u64) {
    let mut buf = [0u8; 8];
    for i in 0..n {
        tx.write_all(&i.to_le_bytes()).unwrap();
        rx.read_exact(&mut buf).unwrap();
        assert_eq!(u64::from_le_bytes(buf), i + 1);
    }
}

/// Answers `n` counters with the counter plus one, `pause` before each.
fn pong(tx: &mut shmpipe::Writer, rx: &mut shmpipe::Reader, n: u64, pause: Duration) -> i32 {
    let mut buf = [0u8; 8];
    for i in 0..n {
        rx.read_exact(&mut buf).unwrap();
        if u64::from_le_bytes(buf) != i {
            return 1;
        }
        std::thread::sleep(pause);
        tx.write_all(&(i + 1).to_le_bytes()).unwrap();
    }
    0
}

#[test]
fn ping_pong_on_one_cpu() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let old = pin_to_one_cpu();
    let (mut rx, c_tx) = shmpipe::pipe().unwrap();
    let (c_rx, mut tx) = shmpipe::pipe().unwrap();
    let child = fork(move || pong(&mut { c_tx }, &mut { c_rx }, 20_000, Duration::ZERO));
    ping(&mut tx, &mut rx, 20_000);
    sched_setaffinity(None, &old).unwrap();
    child.join();
}

/// Ends that never spin (`spin(ZERO)`): each wait sleeps at once, and
/// publishes its CPU first, so that the peer, on the same CPU, switches to
/// full fences and the sleeper's parkings need no `membarrier`. Data
/// flows, in order, through every switch.
#[test]
fn blocking_ping_pong_on_one_cpu() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let old = pin_to_one_cpu();
    let blocking = || shmpipe::Options::new().spin(Duration::ZERO).pipe().unwrap();
    let (mut rx, c_tx) = blocking();
    let (c_rx, mut tx) = blocking();
    let child = fork(move || pong(&mut { c_tx }, &mut { c_rx }, 5_000, Duration::ZERO));
    ping(&mut tx, &mut rx, 5_000);
    sched_setaffinity(None, &old).unwrap();
    child.join();
}

/// A peer that sleeps before each answer: the yield finds nothing, and the
/// waiter must fall back to sleeping and be woken.
#[test]
fn a_peer_that_answers_late_still_wakes_us() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let old = pin_to_one_cpu();
    let (mut rx, c_tx) = shmpipe::pipe().unwrap();
    let (c_rx, mut tx) = shmpipe::pipe().unwrap();
    let child = fork(move || pong(&mut { c_tx }, &mut { c_rx }, 50, Duration::from_millis(2)));
    ping(&mut tx, &mut rx, 50);
    sched_setaffinity(None, &old).unwrap();
    child.join();
}

/// A busy loop on the same CPU: a yield may hand it a whole time slice,
/// after which the process stops yielding for a while; data flows all
/// the same.
#[test]
fn ping_pong_beside_a_busy_neighbour() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let old = pin_to_one_cpu();
    let hog = fork(|| loop {
        std::hint::spin_loop();
    });
    let (mut rx, c_tx) = shmpipe::pipe().unwrap();
    let (c_rx, mut tx) = shmpipe::pipe().unwrap();
    let child = fork(move || pong(&mut { c_tx }, &mut { c_rx }, 2_000, Duration::ZERO));
    ping(&mut tx, &mut rx, 2_000);
    sched_setaffinity(None, &old).unwrap();
    child.join();
    drop(hog); // killed and reaped
}

/// Four processes in a ring on one CPU, each passing a counter on: the
/// yields must hand the CPU round in ring order or fall back to sleeps,
/// and no token may be lost or doubled.
#[test]
fn token_ring_on_one_cpu() {
    let _s = serial();
    const RING: usize = 4;
    const LAPS: u64 = 3_000;
    let _w = watchdog(LIMIT);
    let old = pin_to_one_cpu();
    let (mut readers, mut writers): (Vec<_>, Vec<_>) = (0..RING)
        .map(|_| {
            let (r, w) = shmpipe::pipe().unwrap();
            (Some(r), Some(w))
        })
        .unzip();
    // Process k reads link k and writes link k + 1 (the parent is 0).
    let mut children = Vec::new();
    for k in 1..RING {
        let mut rx: shmpipe::Reader = readers[k].take().unwrap();
        let mut tx: shmpipe::Writer = writers[(k + 1) % RING].take().unwrap();
        children.push(fork(move || {
            let mut buf = [0u8; 8];
            for lap in 0..LAPS {
                rx.read_exact(&mut buf).unwrap();
                let token = u64::from_le_bytes(buf);
                if token != lap * RING as u64 + k as u64 {
                    return 1;
                }
                tx.write_all(&(token + 1).to_le_bytes()).unwrap();
            }
            0
        }));
    }
    let mut rx = readers[0].take().unwrap();
    let mut tx = writers[1].take().unwrap();
    let mut buf = [0u8; 8];
    for lap in 0..LAPS {
        tx.write_all(&(lap * RING as u64 + 1).to_le_bytes())
            .unwrap();
        rx.read_exact(&mut buf).unwrap();
        assert_eq!(u64::from_le_bytes(buf), (lap + 1) * RING as u64);
    }
    sched_setaffinity(None, &old).unwrap();
    for child in children {
        child.join();
    }
}
