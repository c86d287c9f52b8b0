//! Loom models of the ring: data transfer, the park/wake handshake in both
//! directions, and hang-up (EOF and broken pipe).
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p shmpipe-ring --test loom --release`.
//!
//! Under loom, `local::channel` builds the ring from loom atomics and its
//! data bytes from loom-checked cells (see `src/data.rs`), so a missing
//! Release/Acquire shows up as a stale byte (every byte written is
//! distinct and checked), and a missing fence as a lost wake-up.
//!
//! The kernel's part (a wake byte over a socket, `poll`, the socket's
//! hang-up when the peer's last descriptor closes) is modelled by
//! [`WakeChannel`]: a loom `Mutex` + `Condvar` around a count of pending
//! wakes and a hung-up flag. A sleeper waits on it with no timeout, so a lost
//! wake-up is a deadlock, which loom reports as a failure.
//!
//! Each model is small (rings of 8 or 16 bytes, a handful of items) and runs
//! under a preemption bound (`LOOM_MAX_PREEMPTIONS`; the data models run
//! unbounded, the sleep models with a bound of 4 unless told otherwise).

#![cfg(loom)]

use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

use shmpipe_ring::frame::{frame_len, HEADER};
use shmpipe_ring::{Consumer, Producer, ProtocolError};

#[path = "support/loom_model.rs"]
mod loom_model;
use loom_model::model;

/// Preemption bound for the sleep/wake models unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise (5 takes about a minute).
const SLEEP_PREEMPTIONS: Option<usize> = Some(4);
/// The inline copy's model: its writer and reader make many more atomic
/// accesses than the plain data protocol's.
const INLINE_PREEMPTIONS: Option<usize> = Some(3);
/// The data models are explored exhaustively: no bound.
const EXHAUSTIVE: Option<usize> = None;

/// A ring without the inline copy beside the tail, for the models that
/// explore every interleaving of the data protocol and of sleeping: the
/// copy's extra words put those out of reach. The copy has a model of its
/// own (`small_publishes_through_the_inline_copy`), under a bound.
fn channel(capacity: usize) -> Result<(Producer, Consumer), ProtocolError> {
    let (mut tx, rx) = shmpipe_ring::local::channel(capacity)?;
    tx.set_inline_copy(false);
    Ok((tx, rx))
}

/// The `i`th byte of a stream: distinct and non-zero for `i < 255`, so
/// neither a zeroed slot nor a previous lap's byte passes for it.
fn byte(i: usize) -> u8 {
    (i % 255) as u8 + 1
}

fn stream(n: usize) -> Vec<u8> {
    (0..n).map(byte).collect()
}

/// What a sleeper was woken by.
#[derive(Debug, PartialEq, Eq)]
enum Woke {
    /// The peer asked (one or more wake bytes were pending).
    Wake,
    /// The peer's last descriptor closed.
    HangUp,
}

/// The kernel's wake channel towards one side: wake bytes queued on a
/// socket, and the socket's hang-up.
#[derive(Default)]
struct WakeChannel {
    state: Mutex<WakeState>,
    cond: Condvar,
}

#[derive(Default)]
struct WakeState {
    pending: usize,
    hung_up: bool,
}

impl WakeChannel {
    /// The peer's wake: a byte sent after `publish` returned true.
    fn wake(&self) {
        let mut s = self.state.lock().unwrap();
        s.pending += 1;
        self.cond.notify_one();
    }

    /// The peer's last descriptor closes (exit, SIGKILL or drop).
    fn hang_up(&self) {
        let mut s = self.state.lock().unwrap();
        s.hung_up = true;
        self.cond.notify_one();
    }

    /// `poll` with no timeout: returns once the peer has hung up or a wake
    /// is pending (consuming them all). A hang-up wins over pending wakes,
    /// as `POLLHUP` may be acted on before the bytes are read, so a reader
    /// that does not re-check the ring after a hang-up loses data here.
    fn sleep(&self) -> Woke {
        let mut s = self.state.lock().unwrap();
        loop {
            if s.hung_up {
                return Woke::HangUp;
            }
            if s.pending > 0 {
                s.pending = 0;
                return Woke::Wake;
            }
            s = self.cond.wait(s).unwrap();
        }
    }
}

/// How the writer learnt that it must stop.
#[derive(Debug, PartialEq, Eq)]
struct BrokenPipe;

/// Writes all of `data` in pushes of at most `chunk` bytes, sleeping on
/// `me` while the ring is full and waking `peer` when `publish` says so.
/// Fails with `BrokenPipe` if the reader hangs up first.
fn write_all(
    tx: &mut Producer,
    data: &[u8],
    chunk: usize,
    me: &WakeChannel,
    peer: &WakeChannel,
) -> Result<(), BrokenPipe> {
    let mut off = 0;
    let mut fused = false;
    while off < data.len() {
        let want = chunk.min(data.len() - off);
        if tx.free(want).unwrap() >= want {
            let piece = &data[off..off + want];
            off += want;
            // Every other write as a stream's `write_all` makes it (copy,
            // tail and wake check in one call), the others in two steps.
            fused = !fused;
            let woke = if fused {
                tx.push_publish(piece).expect("room, nothing pending")
            } else {
                tx.push(piece);
                tx.publish()
            };
            if woke {
                peer.wake();
            }
            continue;
        }
        if tx.park(want).unwrap() {
            continue; // space appeared during the re-check
        }
        let woke = me.sleep();
        tx.unpark();
        if woke == Woke::HangUp {
            return Err(BrokenPipe);
        }
    }
    Ok(())
}

/// Writes `msgs` as messages, sleeping while full (no hang-up expected).
fn write_messages(tx: &mut Producer, msgs: &[Vec<u8>], me: &WakeChannel, peer: &WakeChannel) {
    for msg in msgs {
        let want = frame_len(msg.len());
        while tx.free(want).unwrap() < want {
            if !tx.park(want).unwrap() {
                assert_eq!(me.sleep(), Woke::Wake);
                tx.unpark();
            }
        }
        tx.push_message(msg);
        if tx.publish() {
            peer.wake();
        }
    }
}

/// Copies out the readable bytes (until `got` holds `limit`), frees them
/// and wakes the writer if it waits for space. Returns how many were read.
fn drain(rx: &mut Consumer, got: &mut Vec<u8>, limit: usize, peer: &WakeChannel) -> usize {
    let n = rx.available(1).unwrap().min(limit - got.len());
    if n > 0 {
        let mut buf = vec![0u8; n];
        // Both ways a reader frees bytes: `pop` then `publish`, and
        // `pop_publish` in one step (a stream's fast path), in turn.
        let wake = if got.len() % 2 == 0 {
            // The fast path reads up to the gate's copy of the tail,
            // which a look leaves behind (see `refresh_gate`).
            rx.refresh_gate();
            rx.pop_publish(&mut buf).expect("n bytes are cached")
        } else {
            assert_eq!(rx.pop(&mut buf), n);
            rx.publish()
        };
        got.extend_from_slice(&buf);
        if wake {
            peer.wake();
        }
    }
    n
}

/// Reads `limit` bytes (no more) or until EOF, sleeping on `me` while the
/// ring is empty. EOF is reported only after the hang-up was seen *and*
/// the ring re-checked afterwards, so bytes published before the hang-up
/// are never lost.
fn read_to_end(rx: &mut Consumer, limit: usize, me: &WakeChannel, peer: &WakeChannel) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < limit {
        if drain(rx, &mut got, limit, peer) > 0 {
            continue;
        }
        if rx.park().unwrap() {
            continue; // data appeared during the re-check
        }
        let woke = me.sleep();
        rx.unpark();
        if woke == Woke::HangUp {
            // The hang-up is ordered after the peer's last publish; look
            // once more, then it is EOF.
            while drain(rx, &mut got, limit, peer) > 0 {}
            break;
        }
    }
    got
}

/// Spins (with loom yields) until the consumer has read `n` bytes; no
/// sleeping, so only the ring's orderings are under test.
fn spin_read(rx: &mut Consumer, n: usize) -> Vec<u8> {
    let nobody = WakeChannel::default();
    let mut got = Vec::new();
    while got.len() < n {
        if drain(rx, &mut got, n, &nobody) == 0 {
            thread::yield_now();
        }
    }
    got
}

#[test]
fn bytes_through_a_full_ring() {
    // 12 bytes through 8: the producer fills the ring, waits for space and
    // wraps around; every byte read must be the one written.
    model(EXHAUSTIVE, || {
        let (mut tx, mut rx) = channel(8).unwrap();
        let producer = thread::spawn(move || {
            let data = stream(12);
            let mut off = 0;
            while off < data.len() {
                let n = tx.free(1).unwrap().min(5).min(data.len() - off);
                if n == 0 {
                    thread::yield_now();
                    continue;
                }
                // Through `push_publish`, as a stream's `write_all` writes
                // (the data model of `push` and `publish` in two steps is
                // `stream_with_sleeping`'s, which alternates them).
                let _ = tx.push_publish(&data[off..off + n]).expect("room");
                off += n;
            }
        });
        assert_eq!(spin_read(&mut rx, 12), stream(12));
        producer.join().unwrap();
    });
}

#[test]
fn small_publishes_through_the_inline_copy() {
    // Publishes of 8, 3 and 9 bytes (one word, part of one, two words),
    // each small enough to travel in the copy beside the tail: a reader
    // that takes a copy while the writer rewrites it for the next publish
    // must notice (the sequence check on `at`) and read the data, so every
    // byte read is the one written. Published one at a time, never a
    // batch, so each look can find a copy: the first and last through
    // `push_publish_copy` (the copy taken from the bytes written, as a
    // reply is sent), the middle one by `push` and `publish` (the copy
    // read back from the data).
    model(INLINE_PREEMPTIONS, || {
        let (mut tx, mut rx) = shmpipe_ring::local::channel(32).unwrap();
        let data = stream(20);
        let producer = thread::spawn(move || {
            let mut off = 0;
            for n in [8, 3, 9] {
                while tx.free(n).unwrap() < n {
                    thread::yield_now();
                }
                let piece = &data[off..off + n];
                off += n;
                if n == 3 {
                    tx.push(piece);
                    let _ = tx.publish();
                } else {
                    let _ = tx.push_publish_copy(piece, true).expect("room");
                }
            }
        });
        assert_eq!(spin_read(&mut rx, 20), stream(20));
        producer.join().unwrap();
    });
}

#[test]
fn replies_taken_at_the_first_look() {
    // The publishes of `small_publishes_through_the_inline_copy`, read as
    // a requester reads replies: each piece first by `take_reply` (the
    // copy beside the tail straight into the reader's buffer, and the
    // head's publish), which must take a copy torn by the next publish's
    // rewrite for nothing and read the data instead; when it declines
    // (nothing yet, or two publishes seen at once), the usual way.
    model(INLINE_PREEMPTIONS, || {
        let (mut tx, mut rx) = shmpipe_ring::local::channel(32).unwrap();
        let data = stream(20);
        let producer = thread::spawn(move || {
            let mut off = 0;
            for n in [8, 3, 9] {
                let piece = &data[off..off + n];
                off += n;
                if n == 3 {
                    tx.push(piece);
                    let _ = tx.publish();
                } else {
                    let _ = tx.push_publish_copy(piece, true).expect("room");
                }
            }
        });
        let mut got = Vec::new();
        for n in [8, 3, 9] {
            let mut piece = vec![0u8; n];
            loop {
                if rx.take_reply(&mut piece).is_some() {
                    break;
                }
                if rx.available(n).unwrap() >= n {
                    rx.pop(&mut piece);
                    let _ = rx.publish();
                    break;
                }
                thread::yield_now();
            }
            got.extend_from_slice(&piece);
        }
        assert_eq!(got, stream(20));
        producer.join().unwrap();
    });
}

#[test]
fn messages_through_a_full_ring() {
    // Messages of 0, 5 and 8 bytes (frames of 8, 16 and 16) through a
    // 16-byte ring: headers and payloads must arrive intact and in order.
    model(EXHAUSTIVE, || {
        let (mut tx, mut rx) = channel(16).unwrap();
        let msgs: Vec<Vec<u8>> = [0usize, 5, 8]
            .iter()
            .enumerate()
            .map(|(k, &len)| (0..len).map(|i| byte(10 * k + i)).collect())
            .collect();
        let sent = msgs.clone();
        let producer = thread::spawn(move || {
            for msg in &sent {
                let want = frame_len(msg.len());
                while tx.free(want).unwrap() < want {
                    thread::yield_now();
                }
                tx.push_message(msg);
                let _ = tx.publish();
            }
        });
        for msg in &msgs {
            let len = loop {
                match rx.next_message().unwrap() {
                    Some(len) => break len,
                    None => thread::yield_now(),
                }
            };
            assert_eq!(len, msg.len());
            let mut got = vec![0u8; len];
            rx.peek(HEADER, &mut got);
            assert_eq!(&got, msg);
            rx.consume_message(len);
            let _ = rx.publish();
        }
        producer.join().unwrap();
    });
}

/// `total` bytes in pushes of `push` through an 8-byte ring, both sides
/// sleeping whenever they must wait. Nobody hangs up, so EOF cannot mask a
/// lost wake-up: loom reports the deadlock.
fn stream_with_sleeping(total: usize, push: usize) {
    model(SLEEP_PREEMPTIONS, move || {
        let (mut tx, mut rx) = channel(8).unwrap();
        let to_consumer = Arc::new(WakeChannel::default());
        let to_producer = Arc::new(WakeChannel::default());
        let (tc, tp) = (to_consumer.clone(), to_producer.clone());
        let producer = thread::spawn(move || {
            write_all(&mut tx, &stream(total), push, &tp, &tc).unwrap();
            tx // keep the ring open: no hang-up
        });
        assert_eq!(
            read_to_end(&mut rx, total, &to_consumer, &to_producer),
            stream(total)
        );
        drop(producer.join().unwrap());
    });
}

#[test]
fn consumer_sleeps_on_empty_and_is_woken() {
    // The producer never waits (6 bytes fit in 8); the consumer sleeps
    // whenever the ring is empty.
    stream_with_sleeping(6, 2);
}

#[test]
fn producer_sleeps_on_full_and_is_woken() {
    // 16 bytes in pushes of 4 through 8: the producer sleeps while the ring
    // is full. The consumer only spins (never sleeps), so this checks the
    // producer-side handshake: Producer::park against Consumer::publish.
    model(SLEEP_PREEMPTIONS, || {
        let (mut tx, mut rx) = channel(8).unwrap();
        let to_producer = Arc::new(WakeChannel::default());
        let tp = to_producer.clone();
        let producer = thread::spawn(move || {
            let nobody = WakeChannel::default();
            write_all(&mut tx, &stream(16), 4, &tp, &nobody).unwrap();
        });
        let mut got = Vec::new();
        while got.len() < 16 {
            if drain(&mut rx, &mut got, usize::MAX, &to_producer) == 0 {
                thread::yield_now();
            }
        }
        assert_eq!(got, stream(16));
        producer.join().unwrap();
    });
}

#[test]
fn both_sides_sleep() {
    // Both sides sleep: the consumer on empty, the producer on full (12
    // bytes in pushes of 4 through 8). Any lost wake-up in either
    // direction deadlocks.
    stream_with_sleeping(12, 4);
}

#[test]
fn messages_with_sleeping() {
    // Messages with both sides sleeping: 3 messages of 4 bytes (frames of
    // 16) through a 16-byte ring, so the producer waits for each to be read.
    model(SLEEP_PREEMPTIONS, || {
        let (mut tx, mut rx) = channel(16).unwrap();
        let to_consumer = Arc::new(WakeChannel::default());
        let to_producer = Arc::new(WakeChannel::default());
        let (tc, tp) = (to_consumer.clone(), to_producer.clone());
        let msgs: Vec<Vec<u8>> = (0..3)
            .map(|k| (0..4).map(|i| byte(4 * k + i)).collect())
            .collect();
        let sent = msgs.clone();
        let producer = thread::spawn(move || {
            write_messages(&mut tx, &sent, &tp, &tc);
            tx
        });
        for msg in &msgs {
            let len = loop {
                if let Some(len) = rx.next_message().unwrap() {
                    break len;
                }
                if !rx.park().unwrap() {
                    assert_eq!(to_consumer.sleep(), Woke::Wake);
                    rx.unpark();
                }
            };
            let mut got = vec![0u8; len];
            rx.peek(HEADER, &mut got);
            assert_eq!(&got, msg);
            rx.consume_message(len);
            if rx.publish() {
                to_producer.wake();
            }
        }
        drop(producer.join().unwrap());
    });
}

#[test]
fn writer_hang_up_is_eof_after_the_last_byte() {
    // The producer writes 10 bytes through 8 and exits ("hangs up" after
    // its last publish, as the kernel closing its last descriptor would).
    // The consumer must read every byte before it reports EOF, and must
    // see EOF rather than sleep forever.
    model(SLEEP_PREEMPTIONS, || {
        let (mut tx, mut rx) = channel(8).unwrap();
        let to_consumer = Arc::new(WakeChannel::default());
        let to_producer = Arc::new(WakeChannel::default());
        let (tc, tp) = (to_consumer.clone(), to_producer.clone());
        let producer = thread::spawn(move || {
            write_all(&mut tx, &stream(10), 4, &tp, &tc).unwrap();
            drop(tx);
            tc.hang_up();
        });
        // No byte limit: only EOF ends the read.
        assert_eq!(
            read_to_end(&mut rx, usize::MAX, &to_consumer, &to_producer),
            stream(10)
        );
        producer.join().unwrap();
    });
}

#[test]
fn reader_hang_up_is_broken_pipe() {
    // The consumer reads 4 bytes and exits while the producer still has
    // more than a ring's worth to write. The producer must get BrokenPipe,
    // never sleep forever.
    model(SLEEP_PREEMPTIONS, || {
        let (mut tx, mut rx) = channel(8).unwrap();
        let to_consumer = Arc::new(WakeChannel::default());
        let to_producer = Arc::new(WakeChannel::default());
        let (tc, tp) = (to_consumer.clone(), to_producer.clone());
        let producer = thread::spawn(move || write_all(&mut tx, &stream(16), 4, &tp, &tc));
        assert_eq!(
            read_to_end(&mut rx, 4, &to_consumer, &to_producer),
            stream(4)
        );
        drop(rx);
        to_producer.hang_up();
        assert_eq!(producer.join().unwrap(), Err(BrokenPipe));
    });
}

/// An end handed from an owner that publishes with light fences to one
/// that does not (issue #8, item 9). The old owner's publish has no
/// hardware fence, so it may miss the consumer's parked word; the consumer
/// covers that with a membarrier, but only if it reads the light-fence
/// flag as set. When it reads the new owner's cleared flag instead and
/// skips the barrier, the flag's Release/Acquire must make the old owner's
/// tail visible to its re-check: with Relaxed, loom finds the consumer
/// asleep for ever. (A membarrier is a fence on another CPU, which loom
/// cannot express: a consumer that ran it is not followed further.)
#[test]
fn light_fence_hand_over() {
    model(SLEEP_PREEMPTIONS, || {
        let (mut tx, mut rx) = channel(8).unwrap();
        tx.use_light_fences(true);
        let to_consumer = Arc::new(WakeChannel::default());
        let tc = to_consumer.clone();
        let old_owner = thread::spawn(move || {
            tx.push(&[byte(0)]);
            if tx.publish() {
                tc.wake();
            }
            // The hand-over: a new owner, in its own thread, attaches
            // with full fences.
            let new_owner = thread::spawn(move || {
                tx.use_light_fences(false);
                tx
            });
            new_owner.join().unwrap()
        });
        let mut barrier = false;
        let ready = rx.park_with(|| barrier = true).unwrap();
        if !ready && !barrier {
            // No barrier ran: only a wake from the old owner can end this.
            assert_eq!(to_consumer.sleep(), Woke::Wake);
        }
        rx.unpark();
        if ready || !barrier {
            assert_eq!(rx.available(1).unwrap(), 1);
        }
        drop(old_owner.join().unwrap());
    });
}

/// Reads `n` bytes, sleeping on `me` while the ring is empty, until a park
/// reads the peer's light-fence flag as set: a membarrier would run there
/// (a fence on another CPU, which loom cannot express), so the model
/// follows such a consumer no further. Returns the bytes read.
fn read_until_barrier(rx: &mut Consumer, n: usize, me: &WakeChannel) -> Vec<u8> {
    let nobody = WakeChannel::default();
    let mut got = Vec::new();
    while got.len() < n {
        if drain(rx, &mut got, n, &nobody) > 0 {
            continue;
        }
        let mut barrier = false;
        if rx.park_with(|| barrier = true).unwrap() {
            continue; // data appeared during the re-check
        }
        if barrier {
            rx.unpark();
            break;
        }
        // No barrier: only a wake can end this sleep.
        assert_eq!(me.sleep(), Woke::Wake);
        rx.unpark();
    }
    got
}

/// The producer's fences follow where its peer runs (issue #11, item 3):
/// `peer_shares_cpu(true)` switches a light-fenced producer to full fences
/// and clears its flag, so a consumer on its CPU parks without a
/// membarrier; `false` switches back. Here it switches between two
/// publishes, from `light_first`, while the consumer parks and sleeps.
/// A consumer that reads the cleared flag skips the barrier, so a switch
/// at a bad moment (a light publish it cannot see, a full-fence flag
/// cleared without the fence after it) would leave it asleep for ever.
fn fence_switch_while_parking(light_first: bool) {
    model(SLEEP_PREEMPTIONS, move || {
        let (mut tx, mut rx) = channel(8).unwrap();
        tx.use_light_fences(true);
        tx.peer_shares_cpu(!light_first);
        let to_consumer = Arc::new(WakeChannel::default());
        let tc = to_consumer.clone();
        let producer = thread::spawn(move || {
            tx.push(&[byte(0)]);
            if tx.publish() {
                tc.wake();
            }
            tx.peer_shares_cpu(light_first);
            tx.push(&[byte(1)]);
            if tx.publish() {
                tc.wake();
            }
            tx
        });
        let got = read_until_barrier(&mut rx, 2, &to_consumer);
        assert_eq!(got, stream(2)[..got.len()]);
        drop(producer.join().unwrap());
    });
}

#[test]
fn fence_switch_light_to_full() {
    fence_switch_while_parking(true);
}

#[test]
fn fence_switch_full_to_light() {
    fence_switch_while_parking(false);
}

/// A switch to full fences right after the last publish, a light one: no
/// later publish looks at the consumer's parked word, so a consumer that
/// reads the cleared flag and skips the barrier must see that publish in
/// its re-check through the flag alone (its Release/Acquire); with either
/// side Relaxed, loom finds it asleep for ever.
#[test]
fn fence_switch_after_last_publish() {
    model(SLEEP_PREEMPTIONS, || {
        let (mut tx, mut rx) = channel(8).unwrap();
        tx.use_light_fences(true);
        let to_consumer = Arc::new(WakeChannel::default());
        let tc = to_consumer.clone();
        let producer = thread::spawn(move || {
            tx.push(&[byte(0)]);
            if tx.publish() {
                tc.wake();
            }
            tx.peer_shares_cpu(true);
            tx
        });
        let got = read_until_barrier(&mut rx, 1, &to_consumer);
        assert_eq!(got, stream(1)[..got.len()]);
        drop(producer.join().unwrap());
    });
}

/// Two copies of a reading end, as `fork` leaves them (review finding on
/// issue #11): both share the header's light-fence flag, but each keeps
/// its own idea of how it publishes. The parent's copy publishes with
/// light fences and has consumed what the child's has not published; the
/// child's copy switches to full fences (its peer now shares its CPU),
/// clearing the flag, and the parent drops its copy, which publishes
/// (`publish_if_current`). A producer waiting for room that reads the
/// cleared flag skips its membarrier; a light publish from the stale
/// copy would then miss its parked word, and loom finds it asleep for
/// ever. `publish_if_current` therefore always fences fully.
#[test]
fn forked_copy_publishes_with_a_stale_fence_mode() {
    model(SLEEP_PREEMPTIONS, || {
        let (mut tx, mut rx) = channel(8).unwrap();
        rx.use_light_fences(true);
        tx.push(&stream(8));
        assert!(!tx.publish());
        assert_eq!(rx.available(1).unwrap(), 8);
        rx.consume(8);
        let mut child = shmpipe_ring::local::fork_copy(&rx);
        let to_producer = Arc::new(WakeChannel::default());
        let tp = to_producer.clone();
        let child = thread::spawn(move || {
            child.peer_shares_cpu(true);
            child
        });
        let parent = thread::spawn(move || {
            if rx.publish_if_current() {
                tp.wake();
            }
        });
        let mut barrier = false;
        let ready = tx.park_with(1, || barrier = true).unwrap();
        if !ready && !barrier {
            // No barrier ran: only the parent's wake can end this.
            assert_eq!(to_producer.sleep(), Woke::Wake);
        }
        tx.unpark();
        if ready || !barrier {
            assert_eq!(tx.free(1).unwrap(), 8);
        }
        parent.join().unwrap();
        drop(child.join().unwrap());
    });
}

/// A wake owed by a thread to one peer while it sleeps on another (review
/// finding F6, and shmpipe's `owed` module). A client sends a request on
/// one ring and waits for the reply on another; the server, parked on the
/// request ring, answers one request. The client's wake for the request
/// fails `fails` times (a transient `ENOMEM` or `ENOBUFS`; the ring is
/// told, `wake_failed`), so the wake is owed. With `retry`, the client
/// sends its owed wake again before each sleep on the reply ring, and
/// while it stays owed it does not sleep there but looks again (shmpipe's
/// brief sleep, a yield here). Without the retry, a server that parked
/// before the request's publish sleeps for ever, and so does the client:
/// loom reports the deadlock (`owed_wake_across_rings(false, 1)`: both
/// threads blocked). No `should_panic` test shows that: a loom deadlock
/// aborts the test process.
fn owed_wake_across_rings(retry: bool, fails: usize) {
    model(SLEEP_PREEMPTIONS, move || {
        let (mut request_tx, mut request_rx) = channel(8).unwrap();
        let (mut reply_tx, mut reply_rx) = channel(8).unwrap();
        let to_server = Arc::new(WakeChannel::default());
        let to_client = Arc::new(WakeChannel::default());
        let (ts, tc) = (to_server.clone(), to_client.clone());
        let server = thread::spawn(move || {
            let mut got = Vec::new();
            while drain(&mut request_rx, &mut got, 1, &WakeChannel::default()) == 0 {
                if !request_rx.park().unwrap() {
                    assert_eq!(ts.sleep(), Woke::Wake);
                }
                request_rx.unpark();
            }
            reply_tx.push(&got);
            if reply_tx.publish() {
                tc.wake();
            }
            (request_rx, reply_tx)
        });
        // The client: a request whose wake fails, then a wait for the reply.
        let mut failures = fails;
        request_tx.push(&[byte(0)]);
        let mut owed = false;
        if request_tx.publish() {
            // The wake fails: owed.
            failures -= 1;
            request_tx.wake_failed();
            owed = true;
        }
        let mut reply = Vec::new();
        while drain(&mut reply_rx, &mut reply, 1, &WakeChannel::default()) == 0 {
            if reply_rx.park().unwrap() {
                reply_rx.unpark();
                continue; // the reply came during the re-check
            }
            if retry && owed {
                if failures > 0 {
                    // Failed again: still owed, so no sleep; look again.
                    failures -= 1;
                    reply_rx.unpark();
                    thread::yield_now();
                    continue;
                }
                to_server.wake();
                owed = false;
            }
            assert_eq!(to_client.sleep(), Woke::Wake);
            reply_rx.unpark();
        }
        assert_eq!(reply, stream(1));
        drop(server.join().unwrap());
    });
}

#[test]
fn an_owed_wake_is_sent_before_sleeping_on_another_ring() {
    owed_wake_across_rings(true, 1);
}

#[test]
fn an_owed_wake_that_fails_again_is_tried_again_before_sleeping() {
    owed_wake_across_rings(true, 3);
}

/// A reader's copies going (the ring's `Consumer::drop`, as after `fork`):
/// the writer must look at the kernel's count at a publish after the last
/// copy went, whatever the interleaving. Each copy closes its descriptor
/// (modelled by `alive`) and then says so in the shared parked word, as
/// a new parking; a publish that finds a parking it has not seen returns
/// true, and the writer then looks (`peer_left_fence`, then the count, as
/// `poll` would). The copies share the word but each counts its own park
/// epoch: announced with a plain store of that epoch, the two copies
/// would store the same parking, the writer would take the second for the
/// first it already looked at (after the first copy went, with the second
/// still there), and never look again: loom finds `gone` false. The
/// announcement is therefore a read-modify-write past the word's epoch.
#[test]
fn the_last_copy_of_a_reader_going_is_always_seen() {
    use loom::sync::atomic::{AtomicUsize, Ordering};
    model(SLEEP_PREEMPTIONS, || {
        let (mut tx, rx) = channel(8).unwrap();
        let copy = shmpipe_ring::local::fork_copy(&rx);
        let alive = Arc::new(AtomicUsize::new(2));
        let go = |end: Consumer, alive: Arc<AtomicUsize>| {
            thread::spawn(move || {
                alive.fetch_sub(1, Ordering::Relaxed);
                drop(end);
            })
        };
        let a = go(rx, alive.clone());
        let b = go(copy, alive.clone());
        let mut gone = false;
        let mut publish = |tx: &mut Producer, byte: u8| {
            tx.push(&[byte]);
            if tx.publish() {
                tx.peer_left_fence();
                gone |= alive.load(Ordering::Relaxed) == 0;
            }
        };
        publish(&mut tx, 1);
        a.join().unwrap();
        b.join().unwrap();
        publish(&mut tx, 2);
        assert!(gone, "the writer never saw the last copy go");
    });
}

/// A copy of the reader going while another parks: the parking must
/// still be woken. The announcement and the parking both move the word
/// past its epoch, so the parking is never one the writer already woke
/// (with each copy storing its own epoch, the going copy's announcement
/// and the other's parking could be the same word, and the writer, having
/// woken the first, would skip the second: loom finds the reader asleep
/// for ever).
#[test]
fn a_copy_going_while_another_parks_loses_no_wake() {
    model(SLEEP_PREEMPTIONS, || {
        let (mut tx, mut rx) = channel(8).unwrap();
        let copy = shmpipe_ring::local::fork_copy(&rx);
        let to_consumer = Arc::new(WakeChannel::default());
        let tc = to_consumer.clone();
        let going = thread::spawn(move || drop(copy));
        let producer = thread::spawn(move || {
            for byte in [1u8, 2] {
                tx.push(&[byte]);
                if tx.publish() {
                    tc.wake();
                }
            }
            tx
        });
        // Reads both bytes, sleeping whenever there is nothing (the
        // producer never waits: the ring holds both).
        let mut got = 0;
        while got < 2 {
            let n = rx.available(1).unwrap();
            if n > 0 {
                rx.consume(n);
                let _ = rx.publish();
                got += n;
            } else if !rx.park().unwrap() {
                assert_eq!(to_consumer.sleep(), Woke::Wake);
                rx.unpark();
            }
        }
        going.join().unwrap();
        drop(producer.join().unwrap());
    });
}
