//! Loom models of one end held by several processes (docs/shared-ends.md):
//! copies of an end (as `fork` leaves them) taking turns under a lock, and
//! a `fork` closing an end's gate while its owner reopens it.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p shmpipe-ring --test loom_turns --release`.
//!
//! The end's lock (a process-shared mutex in the shmpipe crate) is a loom
//! `Mutex` here: what is checked is the ring's part, that a turn starts
//! from the shared index and ends published, so that no byte is lost or
//! repeated whichever copy goes first; and that a gate closed by a fork is
//! never left open by a racing reopen.

#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;

use shmpipe_ring::{Consumer, Producer, ProtocolError};

#[path = "support/loom_model.rs"]
mod loom_model;
use loom_model::model;

const BOUND: Option<usize> = Some(3);

fn channel(capacity: usize) -> Result<(Producer, Consumer), ProtocolError> {
    let (mut tx, rx) = shmpipe_ring::local::channel(capacity)?;
    tx.set_inline_copy(false);
    Ok((tx, rx))
}

/// Reads `n` bytes, spinning (no sleep: the copies' turns never wait).
fn spin_read(rx: &mut Consumer, n: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < n {
        let avail = rx.available(1).unwrap();
        if avail == 0 {
            thread::yield_now();
            continue;
        }
        let mut buf = vec![0; avail.min(n - got.len())];
        rx.pop(&mut buf);
        let _ = rx.publish();
        got.extend_from_slice(&buf);
    }
    got
}

/// Two copies of the writing end, each writes its bytes in one turn; the
/// reader gets both writes, each whole, each once, in some order.
#[test]
fn writer_copies_taking_turns_deliver_every_byte_once() {
    model(BOUND, || {
        let (mut tx, mut rx) = channel(8).unwrap();
        // SAFETY: neither copy lends slices.
        let mut copy = unsafe { shmpipe_ring::local::fork_copy_producer(&tx) };
        tx.gate().close();
        copy.gate().close();
        let lock = Arc::new(Mutex::new(()));
        let write = |tx: &mut Producer, lock: &Mutex<()>, bytes: &[u8], me: u32| {
            let _held = lock.lock().unwrap();
            tx.begin_turn().unwrap();
            assert!(tx.free(bytes.len()).unwrap() >= bytes.len());
            tx.push(bytes);
            let _ = tx.publish();
            tx.end_turn(me);
        };
        let l2 = lock.clone();
        let child = thread::spawn(move || write(&mut copy, &l2, &[1, 2, 3], 2));
        write(&mut tx, &lock, &[4, 5], 1);
        let got = spin_read(&mut rx, 5);
        child.join().unwrap();
        assert!(
            got == [1, 2, 3, 4, 5] || got == [4, 5, 1, 2, 3],
            "lost, repeated or torn: {got:?}"
        );
    });
}

/// Two copies of the reading end, each reads 2 bytes in one turn: between
/// them every byte, each once, in order per turn.
#[test]
fn reader_copies_taking_turns_read_every_byte_once() {
    model(BOUND, || {
        let (mut tx, mut rx) = channel(8).unwrap();
        tx.push(&[1, 2, 3, 4]);
        let _ = tx.publish();
        let mut copy = shmpipe_ring::local::fork_copy(&rx);
        rx.gate().close();
        copy.gate().close();
        let lock = Arc::new(Mutex::new(()));
        let read = |rx: &mut Consumer, lock: &Mutex<()>, me: u32| {
            let _held = lock.lock().unwrap();
            rx.begin_turn().unwrap();
            let mut buf = [0u8; 2];
            assert!(rx.available(2).unwrap() >= 2, "a turn sees what is left");
            rx.pop(&mut buf);
            let _ = rx.publish();
            rx.end_turn(me);
            buf
        };
        let l2 = lock.clone();
        let child = thread::spawn(move || read(&mut copy, &l2, 2));
        let mine = read(&mut rx, &lock, 1);
        let theirs = child.join().unwrap();
        let mut all = [mine, theirs];
        all.sort();
        assert_eq!(all, [[1, 2], [3, 4]], "a byte read twice or lost");
    });
}

/// A turn that ends as the only holder reopens the gate while a `fork`
/// (another thread) counts a new copy and closes it: afterwards the gate
/// is closed, whichever came first.
#[test]
fn a_fork_closes_a_gate_its_owner_reopens() {
    model(None, || {
        let (mut tx, _rx) = channel(8).unwrap();
        tx.gate().claim(1);
        tx.gate().close();
        let gate = tx.gate().clone();
        let fork = thread::spawn(move || gate.fork_prepare());
        tx.begin_turn().unwrap();
        let _ = tx.end_turn(1);
        fork.join().unwrap();
        assert!(tx.gate().is_shared(), "a forked copy, an open gate");
        assert_eq!(tx.push_publish(b"x"), None, "the fast path stayed open");
    });
}
