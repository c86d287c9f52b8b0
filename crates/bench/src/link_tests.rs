//! The four tests every link contestant runs, generic over its
//! [`Link`]: `stream-8B`, `roundtrip-N`, `bandwidth-N` and
//! `token-ring-8`. Each contestant's send and receive are inlined into the
//! same measuring loop; the first operation of a run is untimed, as it
//! carries the children's start-up.

use std::io;
use std::time::{Duration, Instant};

use crate::check::{
    check_chunk, check_failed, check_item, check_message, stamp_chunk, stamp_message, stride,
};
use crate::job::{Placement, Test, RING};
use crate::links::{Link, LinkParams, Rx, Tx};
use crate::sys;
use crate::team::Team;

/// The start of a one-way test: a link for messages of `max_message`
/// bytes, this process (the receiver) pinned to the placement's first
/// CPU, and a child on the second that takes the sending half, attaches
/// it and runs `send` (which calls `ready` once set up). Returns the team
/// and the receiving half, not yet attached.
fn spawn_sender<L: Link>(
    placement: Placement,
    max_message: usize,
    send: impl FnOnce(L::Tx, &dyn Fn() -> io::Result<()>) -> io::Result<()>,
) -> io::Result<(Team, L::Rx)> {
    let (tx, rx) = L::new(&LinkParams { max_message })?;
    sys::pin(placement.cpu(0))?;
    let mut team = Team::new()?;
    let mut tx = Some(tx);
    let mut rx = Some(rx);
    team.spawn(|ready| {
        // Closes the parent's half in the child, as the fork idiom does:
        // a copy left open would make the parent's end take turns with it.
        drop(rx.take());
        let mut tx = tx.take().expect("the child's half");
        sys::pin(placement.cpu(1))?;
        tx.attach()?;
        send(tx, ready)
    })?;
    drop(tx);
    Ok((team, rx.expect("the parent's half")))
}

fn run_stream<L: Link>(placement: Placement, n: u64) -> io::Result<Duration> {
    let (mut team, mut rx) = spawn_sender::<L>(placement, 8, |mut tx, ready| {
        ready()?;
        tx.send_counters(1, n + 1)
    })?;
    team.wait_ready()?;
    rx.attach()?;
    team.go()?;
    let mut item = [0u8; 8];
    // The first item is untimed: it carries the child's start-up.
    rx.recv_exact(&mut item)?;
    check_item(item, 1)?;
    let start = Instant::now();
    rx.recv_counters(2, n + 1)?;
    let elapsed = start.elapsed();
    team.join(Instant::now() + Duration::from_secs(5))?;
    Ok(elapsed)
}

fn run_roundtrip<L: Link>(placement: Placement, size: usize, n: u64) -> io::Result<Duration> {
    let ((tx_a, rx_a), (tx_b, rx_b)) = L::pair(&LinkParams { max_message: size })?;
    sys::pin(placement.cpu(0))?;
    let mut team = Team::new()?;
    let mut child_halves = Some((rx_a, tx_b));
    let mut parent_halves = Some((tx_a, rx_b));
    team.spawn(|ready| {
        // The parent's halves, closed in the child (see `spawn_sender`).
        drop(parent_halves.take());
        let (mut rx, mut tx) = child_halves.take().expect("the child's halves");
        sys::pin(placement.cpu(1))?;
        rx.attach()?;
        tx.attach()?;
        ready()?;
        let mut buf = vec![0u8; size];
        for i in 0..=n {
            rx.recv_exact(&mut buf)?;
            check_message(&buf, i + 1)?;
            tx.send(&buf)?;
        }
        Ok(())
    })?;
    drop(child_halves);
    let (mut tx, mut rx) = parent_halves.take().expect("the parent's halves");
    team.wait_ready()?;
    tx.attach()?;
    rx.attach()?;
    team.go()?;
    let mut out = vec![0u8; size];
    let mut back = vec![0u8; size];
    let mut start = Instant::now();
    for i in 0..=n {
        if i == 1 {
            // Round trip 0 is untimed: it carries the child's start-up.
            start = Instant::now();
        }
        stamp_message(&mut out, i + 1);
        tx.send(&out)?;
        rx.recv_exact(&mut back)?;
        check_message(&back, i + 1)?;
    }
    let elapsed = start.elapsed();
    team.join(Instant::now() + Duration::from_secs(5))?;
    Ok(elapsed)
}

fn run_bandwidth<L: Link>(placement: Placement, size: usize, n: u64) -> io::Result<Duration> {
    let (mut team, mut rx) = spawn_sender::<L>(placement, size, |mut tx, ready| {
        let mut chunk = vec![0u8; size];
        // Touch the buffer before the start, as bw_pipe does.
        chunk.fill(1);
        ready()?;
        for i in 0..=n {
            stamp_chunk(&mut chunk, i * size as u64);
            tx.send(&chunk)?;
        }
        Ok(())
    })?;
    let mut buf = vec![0u8; size];
    buf.fill(1);
    team.wait_ready()?;
    rx.attach()?;
    team.go()?;
    let total = (n + 1) * size as u64;
    let stride = stride(size) as u64;
    let mut offset = 0u64;
    let mut checked = 0u64;
    // The first write is untimed: it carries the child's start-up.
    while offset < size as u64 {
        let want = (size as u64 - offset) as usize;
        let got = rx.recv_some(&mut buf[..want])?;
        checked += check_chunk(&buf[..got], offset, stride)?;
        offset += got as u64;
    }
    let start = Instant::now();
    while offset < total {
        let got = rx.recv_some(&mut buf)?;
        checked += check_chunk(&buf[..got], offset, stride)?;
        offset += got as u64;
    }
    let elapsed = start.elapsed();
    team.join(Instant::now() + Duration::from_secs(5))?;
    // Words that straddle two reads go unchecked; nearly all are checked.
    let words = total / stride;
    if checked * 2 < words {
        return Err(check_failed(format!(
            "only {checked} of {words} stamps checked"
        )));
    }
    Ok(elapsed)
}

fn run_token_ring<L: Link>(placement: Placement, laps: u64) -> io::Result<Duration> {
    let params = LinkParams { max_message: 8 };
    let mut txs = Vec::with_capacity(RING);
    let mut rxs = Vec::with_capacity(RING);
    for _ in 0..RING {
        let (t, r) = L::new(&params)?;
        txs.push(Some(t));
        rxs.push(Some(r));
    }
    sys::pin(placement.cpu(0))?;
    let mut team = Team::new()?;
    // Process i receives on link i and sends on link i + 1.
    for i in 1..RING {
        team.spawn(|ready| {
            let mut rx = rxs[i].take().expect("the child's receiver");
            let mut tx = txs[(i + 1) % RING].take().expect("the child's sender");
            txs.clear();
            rxs.clear();
            sys::pin(placement.cpu(i))?;
            rx.attach()?;
            tx.attach()?;
            ready()?;
            let mut token = [0u8; 8];
            for lap in 0..=laps {
                rx.recv_exact(&mut token)?;
                let want = lap * RING as u64 + i as u64;
                let got = u64::from_le_bytes(token);
                if got != want {
                    return Err(check_failed(format!("token {got} at hop {want}")));
                }
                tx.send(&(got + 1).to_le_bytes())?;
            }
            Ok(())
        })?;
    }
    let mut rx = rxs[0].take().expect("the parent's receiver");
    let mut tx = txs[1].take().expect("the parent's sender");
    drop(txs);
    drop(rxs);
    team.wait_ready()?;
    rx.attach()?;
    tx.attach()?;
    team.go()?;
    let mut token = [0u8; 8];
    let mut start = Instant::now();
    for lap in 0..=laps {
        if lap == 1 {
            // Lap 0 is untimed: it carries the children's start-up.
            start = Instant::now();
        }
        tx.send(&(lap * RING as u64 + 1).to_le_bytes())?;
        rx.recv_exact(&mut token)?;
        let got = u64::from_le_bytes(token);
        let want = (lap + 1) * RING as u64;
        if got != want {
            return Err(check_failed(format!(
                "token {got} back at the parent, expected {want}"
            )));
        }
    }
    let elapsed = start.elapsed();
    team.join(Instant::now() + Duration::from_secs(5))?;
    Ok(elapsed)
}

/// Runs `test` once over link `L` with `n` timed operations (laps for the
/// token ring). Returns the time the timed part took.
pub(crate) fn run<L: Link>(test: Test, placement: Placement, n: u64) -> io::Result<Duration> {
    match test {
        Test::Stream8 => run_stream::<L>(placement, n),
        Test::RoundTrip(size) => run_roundtrip::<L>(placement, size, n),
        Test::Bandwidth(size) => run_bandwidth::<L>(placement, size, n),
        Test::TokenRing => run_token_ring::<L>(placement, n),
        Test::RpcNull | Test::Reread(_) | Test::Serve(_) => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "not a link test",
        )),
    }
}
