//! The ring over heap memory: two threads moving bytes and messages, the
//! wrap-around at the end of the buffer and of the `u64` positions, the
//! park/wake answers of `publish`, and a hostile peer's bad indices, message
//! headers and control-block headers.
//!
//! Also run under Miri (`cargo +nightly miri test -p shmpipe-ring`), with
//! smaller loop counts.

#![cfg(not(loom))] // these use std threads and the heap ring directly

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use shmpipe_ring::frame::{self, frame_len, max_payload, HEADER};
use shmpipe_ring::layout::{Role, MAGIC, VERSION};
use shmpipe_ring::local::{channel, hostile, Field, Hostile};
use shmpipe_ring::{Consumer, Producer, ProtocolError};

#[path = "support/rng.rs"]
mod rng;
use rng::Rng;

/// The `i`th byte of the test stream.
fn byte(i: u64) -> u8 {
    (i ^ (i >> 8) ^ (i >> 16)).wrapping_mul(31) as u8
}

// ---- the sleep/wake side, as the shmpipe crate does it ----

/// The kernel's part of a wake-up towards one side (a byte on a socket in
/// the real crate): a flag and a condition variable.
#[derive(Default)]
struct Wake {
    pending: Mutex<bool>,
    cond: Condvar,
}

/// Not a time limit on the test: only a guard so that a lost wake-up fails
/// the test instead of hanging the suite.
const LOST_WAKEUP_GUARD: Duration = Duration::from_secs(120);

impl Wake {
    fn wake(&self) {
        *self.pending.lock().unwrap() = true;
        self.cond.notify_one();
    }

    fn sleep(&self) {
        let guard = self.pending.lock().unwrap();
        let (mut pending, t) = self
            .cond
            .wait_timeout_while(guard, LOST_WAKEUP_GUARD, |p| !*p)
            .unwrap();
        assert!(!t.timed_out(), "asleep with no wake-up: lost wake-up");
        *pending = false;
    }
}

/// Waits until `want` bytes are free, sleeping if need be; publishes
/// first, as a producer must before it sleeps.
fn wait_free(tx: &mut Producer, want: usize, me: &Wake, peer: &Wake) {
    while tx.free(want).unwrap() < want {
        if tx.publish() {
            peer.wake();
        }
        if !tx.park(want).unwrap() {
            me.sleep();
            tx.unpark();
        }
    }
}

/// Waits until `want` bytes are readable, sleeping if need be.
fn wait_available(rx: &mut Consumer, want: usize, me: &Wake) {
    while rx.available(want).unwrap() < want {
        if !rx.park().unwrap() {
            me.sleep();
            rx.unpark();
        }
    }
}

/// Copies `len` readable bytes from `offset` through the raw ranges.
fn read_ranges(rx: &Consumer, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut at = 0;
    for (p, n) in rx.ranges(offset, len) {
        // SAFETY: `ranges` returns ranges inside the ring's buffer, `n`
        // bytes each, holding published bytes that the producer (honest,
        // in this process) does not overwrite before we publish our head;
        // `out` has room for `len` = the sum of the `n`s. A raw copy, as
        // `ranges` asks.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr().add(at), n) };
        at += n;
    }
    out
}

// ---- two threads ----

#[test]
fn bytes_in_random_chunks_between_threads() {
    let (total, capacity) = if cfg!(miri) {
        (3_000u64, 32)
    } else {
        (300_000, 256)
    };
    let (mut tx, mut rx) = channel(capacity).unwrap();
    let (to_producer, to_consumer) = (Wake::default(), Wake::default());
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = Rng(1);
            let mut pos = 0u64;
            while pos < total {
                let n = (1 + rng.upto(capacity + capacity / 2)).min((total - pos) as usize);
                let n = n.min(capacity);
                wait_free(&mut tx, 1, &to_producer, &to_consumer);
                let n = n.min(tx.free_cached());
                let chunk: Vec<u8> = (pos..pos + n as u64).map(byte).collect();
                if rng.next() % 2 == 0 {
                    tx.push(&chunk);
                } else {
                    let (a, b) = tx.slices_mut(0, n);
                    let k = a.len();
                    a.copy_from_slice(&chunk[..k]);
                    b.copy_from_slice(&chunk[k..]);
                    tx.commit(n);
                }
                pos += n as u64;
                if rng.next() % 4 != 0 && tx.publish() {
                    to_consumer.wake();
                }
            }
            if tx.publish() {
                to_consumer.wake();
            }
        });
        let mut rng = Rng(2);
        let mut pos = 0u64;
        while pos < total {
            wait_available(&mut rx, 1, &to_consumer);
            let n = (1 + rng.upto(capacity)).min(rx.available_cached());
            let got = match rng.next() % 3 {
                0 => {
                    let mut buf = vec![0u8; n];
                    assert_eq!(rx.pop(&mut buf), n);
                    buf
                }
                1 => {
                    let mut buf = vec![0u8; n];
                    rx.peek(0, &mut buf);
                    rx.consume(n);
                    buf
                }
                _ => {
                    let buf = read_ranges(&rx, 0, n);
                    rx.consume(n);
                    buf
                }
            };
            for (i, b) in got.iter().enumerate() {
                assert_eq!(*b, byte(pos + i as u64), "byte {}", pos + i as u64);
            }
            pos += n as u64;
            if rx.publish() {
                to_producer.wake();
            }
        }
        assert_eq!(rx.available(1).unwrap(), 0);
    });
}

/// The payload of message `seq`, `len` bytes: the sequence number first
/// and a checksum of the rest last, where they fit.
fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|i| byte(u64::from(seq) * 7919 + i as u64))
        .collect();
    if len >= 8 {
        p[..4].copy_from_slice(&seq.to_le_bytes());
        let sum = checksum(&p[..len - 4]);
        p[len - 4..].copy_from_slice(&sum.to_le_bytes());
    }
    p
}

/// FNV-1a.
fn checksum(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[test]
fn messages_of_random_sizes_between_threads() {
    let (count, capacity) = if cfg!(miri) {
        (150u32, 64)
    } else {
        (30_000, 256)
    };
    let max = max_payload(capacity);
    let (mut tx, mut rx) = channel(capacity).unwrap();
    let (to_producer, to_consumer) = (Wake::default(), Wake::default());
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut sizes = Rng(3);
            let mut rng = Rng(4);
            for seq in 0..count {
                let msg = payload(seq, sizes.upto(max));
                wait_free(&mut tx, frame_len(msg.len()), &to_producer, &to_consumer);
                if rng.next() % 2 == 0 {
                    tx.push_message(&msg);
                } else {
                    tx.write_message_header(msg.len());
                    let (a, b) = tx.slices_mut(HEADER, msg.len());
                    let k = a.len();
                    a.copy_from_slice(&msg[..k]);
                    b.copy_from_slice(&msg[k..]);
                    tx.commit(frame_len(msg.len()));
                }
                if rng.next() % 3 != 0 && tx.publish() {
                    to_consumer.wake();
                }
            }
            if tx.publish() {
                to_consumer.wake();
            }
        });
        let mut sizes = Rng(3);
        let mut rng = Rng(5);
        for seq in 0..count {
            let len = loop {
                if let Some(len) = rx.next_message().unwrap() {
                    break len;
                }
                wait_available(&mut rx, 1, &to_consumer);
            };
            assert_eq!(len, sizes.upto(max), "length of message {seq}");
            let got = if rng.next() % 2 == 0 {
                let mut buf = vec![0u8; len];
                rx.peek(HEADER, &mut buf);
                buf
            } else {
                read_ranges(&rx, HEADER, len)
            };
            if len >= 8 {
                assert_eq!(u32::from_le_bytes(got[..4].try_into().unwrap()), seq);
                let sum = u32::from_le_bytes(got[len - 4..].try_into().unwrap());
                assert_eq!(sum, checksum(&got[..len - 4]), "checksum of message {seq}");
            }
            assert_eq!(got, payload(seq, len), "message {seq}");
            rx.consume_message(len);
            if rx.publish() {
                to_producer.wake();
            }
        }
        assert_eq!(rx.next_message().unwrap(), None);
    });
}

// ---- wrap-around ----

#[test]
fn push_wraps_around_the_end_of_the_buffer() {
    let (mut tx, mut rx) = channel(16).unwrap();
    tx.push(&[0; 10]);
    let _ = tx.publish();
    assert_eq!(rx.available(1).unwrap(), 10);
    rx.consume(10);
    let _ = rx.publish();
    // Positions 10..22: slots 10..16, then 0..6.
    let data: Vec<u8> = (1..=12).collect();
    assert!(tx.free(12).unwrap() >= 12);
    tx.push(&data);
    let _ = tx.publish();
    assert_eq!(rx.available(1).unwrap(), 12);
    let [(a, alen), (b, blen)] = rx.ranges(0, 12);
    assert_eq!((alen, blen), (6, 6));
    assert_eq!(
        a as usize - b as usize,
        10,
        "the first range starts at slot 10"
    );
    assert_eq!(read_ranges(&rx, 0, 12), data);
    let mut buf = [0u8; 12];
    rx.peek(0, &mut buf);
    assert_eq!(buf.to_vec(), data);
    // A peek that starts past the end of the buffer is not split.
    let mut tail = [0u8; 4];
    rx.peek(7, &mut tail);
    assert_eq!(tail, [8, 9, 10, 11]);
    assert_eq!(rx.ranges(7, 4)[1].1, 0);
}

/// `push_publish` writes and publishes in one step, around the end of the
/// buffer too; it refuses (writing nothing) while a batch waits to be
/// published or the cached view has no room, and a batch published after
/// it comes out in order.
#[test]
fn push_publish_writes_and_publishes_in_one_step() {
    let (mut tx, mut rx) = channel(16).unwrap();
    assert_eq!(tx.push_publish(&[1; 10]), Some(false));
    assert!(!tx.has_unpublished());
    assert_eq!(rx.available(1).unwrap(), 10);
    rx.consume(10);
    let _ = rx.publish();
    assert_eq!(tx.push_publish(&[2; 7]), None); // cached view: 6 free
    assert!(tx.free(12).unwrap() >= 12);
    let data: Vec<u8> = (1..=12).collect();
    assert_eq!(tx.push_publish(&data), Some(false)); // slots 10..16, 0..6
    assert_eq!(rx.available(1).unwrap(), 12);
    assert_eq!(read_ranges(&rx, 0, 12), data);
    rx.consume(12);
    let _ = rx.publish();
    assert!(tx.free(4).unwrap() >= 4);
    tx.push(b"ab");
    assert_eq!(tx.push_publish(b"cd"), None); // "ab" waits: in order
    tx.push(b"cd");
    let _ = tx.publish();
    let mut buf = [0; 4];
    rx.available(1).unwrap();
    assert_eq!(rx.pop(&mut buf), 4);
    assert_eq!(&buf, b"abcd");
}

/// `pop_publish` reads and publishes in one step, around the end of the
/// buffer too; it refuses (reading nothing) when the cached view holds
/// less than asked (by the gate's copy of the tail, which
/// `refresh_gate` brings up to a look's), takes bytes from the stash (the producer's inline
/// copy, seen by a look) and from the data after it, and answers whether
/// the producer sleeps.
#[test]
fn pop_publish_reads_and_publishes_in_one_step() {
    let (mut tx, mut rx) = channel(16).unwrap();
    assert_eq!(tx.push_publish(&[1; 10]), Some(false));
    let mut ten = [0; 10];
    assert_eq!(rx.pop_publish(&mut ten), None, "not seen yet");
    assert_eq!(rx.available(1).unwrap(), 10);
    rx.refresh_gate();
    assert_eq!(rx.pop_publish(&mut ten), Some(false));
    assert_eq!(ten, [1; 10]);
    assert_eq!(tx.free(16).unwrap(), 16, "published");
    // Positions 10..22: slots 10..16, then 0..6.
    let data: Vec<u8> = (1..=12).collect();
    assert_eq!(tx.push_publish(&data), Some(false));
    assert_eq!(rx.available(1).unwrap(), 12);
    rx.refresh_gate();
    let mut twelve = [0; 12];
    assert_eq!(rx.pop_publish(&mut twelve), Some(false));
    assert_eq!(twelve.to_vec(), data);
    // A publish with its inline copy fills the stash at the look; then
    // a plain one, whose bytes only the data holds.
    assert!(tx.free(10).unwrap() >= 10);
    assert_eq!(tx.push_publish_copy(b"abcdef", true), Some(false));
    assert_eq!(rx.available(1).unwrap(), 6);
    rx.refresh_gate();
    assert_eq!(tx.push_publish(b"ghij"), Some(false));
    let mut four = [0; 4];
    assert_eq!(rx.pop_publish(&mut four), Some(false));
    assert_eq!(&four, b"abcd");
    assert_eq!(rx.available(7).unwrap(), 6);
    rx.refresh_gate();
    assert_eq!(rx.pop_publish(&mut four), Some(false), "stash, then data");
    assert_eq!(&four, b"efgh");
    let mut three = [0; 3];
    assert_eq!(rx.pop_publish(&mut three), None, "only 2 left");
    assert_eq!(rx.pop(&mut three), 2);
    assert_eq!(&three[..2], b"ij");
    let _ = rx.publish();
    // A producer asleep on a full ring is woken, once per parking; an
    // empty read publishes nothing and wakes nobody.
    assert_eq!(tx.free(16).unwrap(), 16);
    tx.push(&[3; 16]);
    let _ = tx.publish();
    assert!(!tx.park(1).unwrap(), "full: sleep");
    assert_eq!(rx.available(1).unwrap(), 16);
    rx.refresh_gate();
    assert_eq!(rx.pop_publish(&mut []), Some(false), "nothing read");
    assert_eq!(rx.pop_publish(&mut four), Some(true), "wake it");
    assert_eq!(rx.pop_publish(&mut four), Some(false), "already woken");
    assert_eq!(four, [3; 4]);
}

/// `pop_publish` takes a stash's bytes and then the data's, when a look
/// found more bytes after the stash (the stash stays where it was, and is
/// emptied once the head passes it).
#[test]
fn pop_publish_reads_past_a_stash() {
    let (mut tx, mut rx) = channel(64).unwrap();
    assert_eq!(tx.push_publish_copy(&[5; 8], true), Some(false));
    assert_eq!(rx.available(1).unwrap(), 8);
    rx.refresh_gate();
    tx.push(&[6; 32]);
    let _ = tx.publish();
    assert_eq!(rx.available(9).unwrap(), 40, "the copy is of older bytes");
    rx.refresh_gate();
    let mut eight = [0; 8];
    for want in [5, 6, 6, 6, 6] {
        assert_eq!(rx.pop_publish(&mut eight), Some(false));
        assert_eq!(eight, [want; 8]);
    }
}

#[test]
fn take_reply_gives_every_length_whole() {
    // Every reply length the copy beside the tail holds, from the copy and
    // (without one) from the data, at every offset of a word, across the
    // end of the buffer: each byte lands where it belongs, none beyond.
    let (mut tx, mut rx) = channel(64).unwrap();
    let mut seq = 0u64;
    for copy in [true, false] {
        for n in 1..=40usize {
            let reply: Vec<u8> = (0..n as u64).map(|i| byte(seq + i)).collect();
            seq += n as u64;
            assert!(tx.free(n).unwrap() >= n);
            assert_eq!(tx.push_publish_copy(&reply, copy), Some(false));
            let mut buf = vec![0xAA; n + 8];
            assert_eq!(rx.take_reply(&mut buf[..n]), Some(false), "{n} bytes");
            assert_eq!(&buf[..n], &reply[..], "{n} bytes, copy {copy}");
            assert_eq!(&buf[n..], &[0xAA; 8], "{n} bytes: past the reply");
        }
    }
}

#[test]
fn slices_mut_and_messages_wrap_around_the_end_of_the_buffer() {
    let (mut tx, mut rx) = channel(32).unwrap();
    tx.push_message(&[7; 12]); // frame of 24
    let _ = tx.publish();
    let len = rx.next_message().unwrap().unwrap();
    rx.consume_message(len);
    let _ = rx.publish();
    // The next frame starts at slot 24: header in 24..32, payload from
    // slot 0 (position 32), so in the first slice alone.
    assert!(tx.free(24).unwrap() >= 24);
    tx.write_message_header(13);
    let (a, b) = tx.slices_mut(HEADER, 13);
    assert_eq!((a.len(), b.len()), (13, 0), "the payload starts at slot 0");
    a.copy_from_slice(b"hello, world!");
    tx.commit(frame_len(13));
    let _ = tx.publish();
    assert_eq!(rx.next_message().unwrap(), Some(13));
    assert_eq!(read_ranges(&rx, HEADER, 13), b"hello, world!");
    rx.consume_message(13);
    // Free space from position 48 (slot 16) splits at the end.
    let _ = rx.publish();
    assert!(tx.free(24).unwrap() >= 24);
    let (a, b) = tx.slices_mut(0, 24);
    assert_eq!((a.len(), b.len()), (16, 8));
    // A frame at 48..72 (slots 16..32, 0..8): header whole, payload split.
    let msg: Vec<u8> = (0..16).collect();
    tx.push_message(&msg[..15]);
    let _ = tx.publish();
    assert_eq!(rx.next_message().unwrap(), Some(15));
    let [(_, alen), (_, blen)] = rx.ranges(HEADER, 15);
    assert_eq!((alen, blen), (8, 7));
    assert_eq!(read_ranges(&rx, HEADER, 15), &msg[..15]);
}

/// Moves both indices to `start` (as a ring that ran that long would have
/// them) and re-attaches both ends.
fn ring_at(capacity: usize, start: u64) -> Hostile {
    let mut h = hostile(capacity).unwrap();
    h.store(Role::Writer, Field::Index, start);
    h.store(Role::Reader, Field::Index, start);
    h.attach_producer().unwrap();
    h.attach_consumer().unwrap();
    h
}

#[test]
fn positions_wrap_around_u64() {
    let mut h = ring_at(16, u64::MAX - 5);
    let (mut tx, mut rx) = h.ends();
    for round in 0..8u8 {
        let data: Vec<u8> = (0..11).map(|i| round * 16 + i).collect();
        assert!(tx.free(11).unwrap() >= 11);
        tx.push(&data);
        let _ = tx.publish();
        assert_eq!(rx.available(1).unwrap(), 11);
        let mut buf = [0u8; 11];
        assert_eq!(rx.pop(&mut buf), 11);
        assert_eq!(buf.to_vec(), data);
        let _ = rx.publish();
    }
    let end = (u64::MAX - 5).wrapping_add(8 * 11);
    assert_eq!(h.load(Role::Writer, Field::Index), end);
    assert_eq!(h.load(Role::Reader, Field::Index), end);
}

// ---- park and wake ----

#[test]
fn publish_wakes_only_a_parked_consumer() {
    let (mut tx, mut rx) = channel(64).unwrap();
    tx.push(b"a");
    assert!(!tx.publish(), "the consumer is not parked");
    assert!(rx.park().unwrap(), "data is there: no need to sleep");
    assert!(!tx.publish(), "nothing new to publish");
    tx.push(b"b");
    assert!(!tx.publish(), "park found data, so the consumer unparked");
    let mut buf = [0u8; 2];
    assert_eq!(rx.available(2).unwrap(), 2);
    assert_eq!(rx.pop(&mut buf), 2);

    assert!(!rx.park().unwrap(), "empty: sleep");
    assert!(!tx.publish(), "nothing committed, nothing published");
    tx.push(b"c");
    assert!(tx.publish(), "the consumer sleeps: wake it");
    tx.push(b"d");
    assert!(!tx.publish(), "already woken for this parking");
    rx.unpark();
    tx.push(b"e");
    assert!(!tx.publish(), "awake again");
    assert_eq!(rx.available(3).unwrap(), 3);
    assert_eq!(rx.pop(&mut [0u8; 8]), 3);

    assert!(!rx.park().unwrap());
    tx.push(b"f");
    assert!(tx.publish(), "a new parking is woken again");
}

#[test]
fn publish_wakes_only_a_parked_producer() {
    let (mut tx, mut rx) = channel(16).unwrap();
    tx.push(&[1; 16]);
    let _ = tx.publish();
    assert_eq!(rx.available(1).unwrap(), 16);
    assert!(!tx.park(1).unwrap(), "full: sleep");
    assert!(!rx.publish(), "nothing consumed");
    rx.consume(4);
    assert!(rx.publish(), "the producer sleeps: wake it");
    rx.consume(4);
    assert!(!rx.publish(), "already woken for this parking");
    tx.unpark();
    assert!(tx.park(8).unwrap(), "8 bytes are free: no need to sleep");
    rx.consume(4);
    assert!(!rx.publish(), "park found space, so the producer unparked");
    assert!(!tx.park(16).unwrap(), "waits for the whole ring");
    rx.consume(4);
    assert!(rx.publish());
    assert_eq!(tx.free(16).unwrap(), 16);
}

// ---- a hostile peer: indices ----

const TAIL: &str = "tail";
const HEAD: &str = "head";

fn out_of_range(which: &'static str, value: u64) -> ProtocolError {
    ProtocolError::IndexOutOfRange { which, value }
}

#[test]
fn bad_tail_is_a_protocol_error() {
    let mut h = hostile(16).unwrap();
    h.producer().push(&[1; 10]);
    let _ = h.producer().publish();
    assert_eq!(h.consumer().available(1).unwrap(), 10);
    h.consumer().consume(4);

    for bad in [9, 0, u64::MAX, 4 + 17, 100, 1 << 63] {
        h.store(Role::Writer, Field::Index, bad);
        // Want more than cached, so the tail is reloaded.
        assert_eq!(h.consumer().available(7), Err(out_of_range(TAIL, bad)));
        assert_eq!(h.consumer().park(), Err(out_of_range(TAIL, bad)));
        assert_eq!(
            h.consumer().available_cached(),
            6,
            "the cached view is kept"
        );
    }
    // A failed park leaves the consumer unparked: nobody asks to wake it.
    h.producer().push(b"z");
    assert!(!h.producer().publish(), "a failed park unparks");
    // Exactly a ring past our head is the most an honest producer can do;
    // the consumer accepts it (the bytes are garbage, but in bounds).
    h.store(Role::Writer, Field::Index, 4 + 16);
    assert_eq!(h.consumer().available(7), Ok(16));
    let mut buf = [0u8; 16];
    h.consumer().peek(0, &mut buf);
    // Going back below what we already saw is refused.
    h.store(Role::Writer, Field::Index, 10);
    h.consumer().consume(16);
    assert_eq!(h.consumer().available(1), Err(out_of_range(TAIL, 10)));
}

#[test]
fn a_consumer_recovers_when_the_tail_is_put_right() {
    let mut h = hostile(16).unwrap();
    h.producer().push(b"0123456789");
    let _ = h.producer().publish();
    h.store(Role::Writer, Field::Index, 99);
    assert!(h.consumer().available(1).is_err());
    h.store(Role::Writer, Field::Index, 10);
    assert_eq!(h.consumer().available(1), Ok(10));
    let mut buf = [0u8; 10];
    assert_eq!(h.consumer().pop(&mut buf), 10);
    assert_eq!(&buf, b"0123456789");
}

#[test]
fn bad_head_is_a_protocol_error() {
    let mut h = hostile(16).unwrap();
    h.producer().push(&[1; 12]);
    let _ = h.producer().publish();
    h.producer().push(&[2; 4]); // committed, not published: tail 16, published 12
    assert_eq!(h.consumer().available(1).unwrap(), 12);
    h.consumer().consume(8);
    let _ = h.consumer().publish();
    assert_eq!(h.producer().free_cached(), 0);
    assert_eq!(h.producer().free(1).unwrap(), 8);

    // Backwards, past what we published (even if not past our tail), a
    // ring ahead, garbage.
    for bad in [7, 0, 13, 16, 8 + 16, u64::MAX, 1 << 63] {
        h.store(Role::Reader, Field::Index, bad);
        assert_eq!(h.producer().free(16), Err(out_of_range(HEAD, bad)));
        assert_eq!(h.producer().park(16), Err(out_of_range(HEAD, bad)));
        assert_eq!(h.producer().free_cached(), 8, "the cached view is kept");
    }
    h.consumer().consume(1);
    assert!(!h.consumer().publish(), "a failed park unparks");
    // Anything from the cached head up to the published tail is fine.
    for good in [8, 10, 12] {
        h.store(Role::Reader, Field::Index, good);
        assert_eq!(h.producer().free(16), Ok(good as usize));
    }
}

#[test]
fn bad_indices_on_attach_are_protocol_errors() {
    let mut h = hostile(16).unwrap();
    // The producer's head must be within a ring behind its tail.
    h.store(Role::Writer, Field::Index, 100);
    h.store(Role::Reader, Field::Index, 83);
    assert_eq!(h.attach_producer(), Err(out_of_range(HEAD, 83)));
    assert!(!h.has_producer());
    h.store(Role::Reader, Field::Index, 101);
    assert_eq!(h.attach_producer(), Err(out_of_range(HEAD, 101)));
    h.store(Role::Reader, Field::Index, 84);
    assert_eq!(h.attach_producer(), Ok(()));
    assert_eq!(h.producer().free_cached(), 0);
    // The consumer's tail must be within a ring ahead of its head.
    h.store(Role::Reader, Field::Index, 50);
    assert_eq!(h.attach_consumer(), Err(out_of_range(TAIL, 100)));
    assert!(!h.has_consumer());
    h.store(Role::Writer, Field::Index, 49);
    assert_eq!(h.attach_consumer(), Err(out_of_range(TAIL, 49)));
    h.store(Role::Writer, Field::Index, 66);
    assert_eq!(h.attach_consumer(), Ok(()));
    assert_eq!(h.consumer().available_cached(), 16);
}

#[test]
fn a_lying_parked_word_costs_only_a_wake_up() {
    let mut h = hostile(16).unwrap();
    // Whatever the peer leaves in its parked word, the most it gets is a
    // wake-up it did not need; a zero word is never woken.
    for parked in [1, 2, u64::MAX, 0, 7, 1 << 63] {
        h.store(Role::Reader, Field::Parked, parked);
        h.producer().push(b"x");
        let wake = h.producer().publish();
        assert!(parked != 0 || !wake);
        h.store(Role::Writer, Field::Parked, parked);
        assert_eq!(h.consumer().pop(&mut [0u8; 4]), 0, "nothing reloaded yet");
        assert_eq!(h.consumer().available(1), Ok(1));
        h.consumer().consume(1);
        let wake = h.consumer().publish();
        assert!(parked != 0 || !wake);
    }
    // Garbage in the header's flags word changes nothing either (at most
    // it makes a parking side run its barrier).
    for flags in [1, u64::from(u32::MAX), 0x8000_0000] {
        h.store(Role::Writer, Field::Flags, flags);
        h.store(Role::Reader, Field::Flags, flags);
        assert_eq!(h.consumer().park(), Ok(false));
        h.producer().push(b"y");
        assert!(h.producer().publish());
        h.consumer().unpark();
        assert_eq!(h.consumer().available(1), Ok(1));
        h.consumer().consume(1);
        assert_eq!(h.producer().park(16), Ok(false));
        assert!(h.consumer().publish());
        h.producer().unpark();
    }
    h.store(Role::Writer, Field::Cpu, 12345);
    assert_eq!(h.consumer().exchange_cpu_hint(3), 12345);
    assert_eq!(h.load(Role::Reader, Field::Cpu), 3);
}

// ---- the inline copy beside the tail ----

/// A small publish reaches a reader that caught up through the copy beside
/// the tail: bytes changed in the data after the publish are not the ones
/// it reads (that is how the test sees the copy was used).
#[test]
fn a_small_publish_is_read_from_the_inline_copy() {
    let mut h = hostile(64).unwrap();
    for round in 0..20u64 {
        let msg = (round * 0x0101_0101_0101_0101).to_le_bytes();
        let pos = round * 8;
        assert!(h.producer().free(8).unwrap() >= 8);
        h.producer().push(&msg);
        let _ = h.producer().publish();
        h.write_data(pos, &[0xEE; 8]);
        assert_eq!(h.consumer().available(1), Ok(8));
        let mut got = [0; 8];
        assert_eq!(h.consumer().pop(&mut got), 8);
        assert_eq!(got, msg, "round {round}");
        let _ = h.consumer().publish();
        assert_eq!(h.load(Role::Writer, Field::InlineAt), pos);
        assert_eq!(h.load(Role::Writer, Field::InlineLen), 8);
    }
    // Larger than the copy holds: read from the data.
    assert!(h.producer().free(48).unwrap() >= 48);
    h.producer().push(&[7; 48]);
    let _ = h.producer().publish();
    assert_eq!(h.consumer().available(1), Ok(48));
    let mut got = [0; 48];
    assert_eq!(h.consumer().pop(&mut got), 48);
    assert_eq!(got, [7; 48]);
}

/// Whatever the writer says in its inline copy, the reader takes no more
/// than the tail says is there and no copy that does not start where its
/// cached tail ended: else it reads the data. Never a panic, never bytes
/// from outside the copy or the ring.
#[test]
fn a_lying_inline_copy_is_read_from_the_data() {
    let lies: [(Field, u64); 7] = [
        (Field::InlineLen, 0),
        (Field::InlineLen, 9),
        (Field::InlineLen, 41),
        (Field::InlineLen, u64::MAX),
        (Field::InlineAt, 1),
        (Field::InlineAt, u64::MAX),
        (Field::InlineAt, 8),
    ];
    let mut h = hostile(64).unwrap();
    let mut pos = 0u64;
    for (field, value) in lies {
        assert!(h.producer().free(8).unwrap() >= 8);
        h.producer().push(b"honest!!");
        let _ = h.producer().publish();
        h.write_data(pos, b"fromdata");
        h.store(
            Role::Writer,
            field,
            value.wrapping_add(if field == Field::InlineAt && value == 8 {
                pos
            } else {
                0
            }),
        );
        assert_eq!(h.consumer().available(1), Ok(8));
        let mut got = [0; 8];
        assert_eq!(h.consumer().pop(&mut got), 8);
        assert_eq!(&got, b"fromdata", "{field:?} = {value}");
        let _ = h.consumer().publish();
        pos += 8;
    }
    // A shorter length than the publish is believed for those bytes only;
    // the rest comes from the data.
    assert!(h.producer().free(8).unwrap() >= 8);
    h.producer().push(b"honest!!");
    let _ = h.producer().publish();
    h.write_data(pos, b"fromdata");
    h.store(Role::Writer, Field::InlineLen, 4);
    assert_eq!(h.consumer().available(1), Ok(8));
    let mut got = [0; 8];
    assert_eq!(h.consumer().pop(&mut got[..4]), 4);
    assert_eq!(h.consumer().pop(&mut got[4..]), 4);
    assert_eq!(&got, b"honedata");
}

// ---- a hostile peer: message headers ----

/// A ring whose producer published `frame_bytes` bytes at position 0, then
/// the peer overwrote the first header with `header`.
fn ring_with_header(capacity: usize, frame_bytes: usize, header: [u8; 8]) -> Hostile {
    let mut h = hostile(capacity).unwrap();
    h.producer().push(&vec![0xaa; frame_bytes]);
    let _ = h.producer().publish();
    h.write_data(0, &header);
    // The reader would take the inline copy instead of the data.
    h.store(Role::Writer, Field::InlineAt, u64::MAX);
    h
}

fn header(len: u32, check: u32) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[..4].copy_from_slice(&len.to_le_bytes());
    h[4..].copy_from_slice(&check.to_le_bytes());
    h
}

fn bad_message(len: u64) -> Result<Option<usize>, ProtocolError> {
    Err(ProtocolError::BadMessage { len })
}

#[test]
fn bad_message_headers_are_protocol_errors() {
    let cap = 64;
    let max = max_payload(cap) as u32; // 56
                                       // Longer than any message the ring can carry.
    for len in [max + 1, 64, u32::MAX, 1 << 31] {
        let mut h = ring_with_header(cap, cap, header(len, !len));
        assert_eq!(h.consumer().next_message(), bad_message(u64::from(len)));
    }
    // The check word does not match.
    for (len, check) in [(4, 4), (0, 0), (8, !9), (max, u32::MAX)] {
        let mut h = ring_with_header(cap, cap, header(len, check));
        assert_eq!(h.consumer().next_message(), bad_message(u64::from(len)));
    }
    // A partial frame: the header claims more than was published.
    for (published, len) in [(16, 9), (16, 56), (24, 17), (8, 1)] {
        let mut h = ring_with_header(cap, published, header(len, !len));
        assert_eq!(h.consumer().next_message(), bad_message(u64::from(len)));
    }
    // Fewer bytes than a header.
    for published in 1..HEADER {
        let mut h = ring_with_header(cap, published, [0; 8]);
        assert_eq!(h.consumer().next_message(), bad_message(published as u64));
    }
    // The largest message and the empty one are fine.
    let mut h = ring_with_header(cap, cap, header(max, !max));
    assert_eq!(h.consumer().next_message(), Ok(Some(max as usize)));
    let mut h = ring_with_header(cap, 8, header(0, !0));
    assert_eq!(h.consumer().next_message(), Ok(Some(0)));
    assert_eq!(frame::decode_header(header(0, !0), 8), Ok(0));
}

#[test]
fn a_header_that_wraps_is_read_whole() {
    // The hostile header straddles the end of the buffer: 4 bytes at slots
    // 12..16 and 4 at 0..4.
    let mut h = hostile(16).unwrap();
    h.producer().push(&[0; 12]);
    let _ = h.producer().publish();
    assert_eq!(h.consumer().available(1), Ok(12));
    h.consumer().consume(12);
    let _ = h.consumer().publish();
    assert_eq!(h.producer().free(16), Ok(16));
    h.producer().push(&[0; 16]);
    let _ = h.producer().publish();
    h.write_data(12, &header(7, !7));
    h.store(Role::Writer, Field::InlineAt, u64::MAX);
    assert_eq!(h.consumer().next_message(), Ok(Some(7)));
    h.write_data(12, &header(9, !7));
    assert_eq!(h.consumer().next_message(), bad_message(9));
}

// ---- a hostile peer: control-block headers on attach ----

#[test]
fn bad_control_headers_are_protocol_errors_on_attach() {
    type Case = (Field, u64, fn(u64) -> ProtocolError);
    let cases: [Case; 12] = [
        (Field::Magic, 0, ProtocolError::BadMagic),
        (Field::Magic, MAGIC ^ 1, ProtocolError::BadMagic),
        (Field::Magic, u64::MAX, ProtocolError::BadMagic),
        (Field::Version, 0, |v| ProtocolError::BadVersion(v as u32)),
        (Field::Version, u64::from(VERSION) + 1, |v| {
            ProtocolError::BadVersion(v as u32)
        }),
        (Field::Role, 0, |v| ProtocolError::BadRole(v as u32)),
        (Field::Role, u64::from(u32::MAX), |v| {
            ProtocolError::BadRole(v as u32)
        }),
        (Field::Capacity, 0, ProtocolError::BadCapacity),
        (Field::Capacity, 4, ProtocolError::BadCapacity),
        (Field::Capacity, 48, ProtocolError::BadCapacity),
        (Field::Capacity, 1 << 41, ProtocolError::BadCapacity),
        (Field::Capacity, u64::MAX, ProtocolError::BadCapacity),
    ];
    for (field, value, err) in cases {
        for block in [Role::Writer, Role::Reader] {
            let mut h = hostile(64).unwrap();
            h.store(block, field, value);
            assert_eq!(
                h.attach_producer(),
                Err(err(value)),
                "{block:?} {field:?} {value}"
            );
            assert_eq!(
                h.attach_consumer(),
                Err(err(value)),
                "{block:?} {field:?} {value}"
            );
            assert!(!h.has_producer() && !h.has_consumer());
        }
    }
    // Roles swapped: each end finds the other's role in a block.
    let mut h = hostile(64).unwrap();
    h.store(Role::Writer, Field::Role, Role::Reader as u64);
    h.store(Role::Reader, Field::Role, Role::Writer as u64);
    assert_eq!(
        h.attach_producer(),
        Err(ProtocolError::BadRole(Role::Reader as u32))
    );
    assert_eq!(
        h.attach_consumer(),
        Err(ProtocolError::BadRole(Role::Writer as u32))
    );
}

#[test]
fn capacities_that_disagree_are_protocol_errors_on_attach() {
    // Valid capacities, but not the same in both blocks, or not the size
    // of the data area: the ring must not index past its buffer.
    for (writer, reader) in [(32, 64), (64, 32), (128, 128), (8, 8), (1 << 40, 1 << 40)] {
        let mut h = hostile(64).unwrap();
        h.store(Role::Writer, Field::Capacity, writer);
        h.store(Role::Reader, Field::Capacity, reader);
        // The producer indexes by its own capacity alone, which must be the
        // data area's; the consumer needs all three to agree.
        if writer != 64 {
            assert!(matches!(
                h.attach_producer(),
                Err(ProtocolError::BadCapacity(_))
            ));
        } else {
            assert_eq!(h.attach_producer(), Ok(()));
        }
        assert!(matches!(
            h.attach_consumer(),
            Err(ProtocolError::BadCapacity(_))
        ));
    }
    // Put right, both attach again.
    let mut h = hostile(64).unwrap();
    h.store(Role::Writer, Field::Magic, 0);
    assert!(h.attach_producer().is_err());
    h.store(Role::Writer, Field::Magic, MAGIC);
    assert_eq!(h.attach_producer(), Ok(()));
    assert_eq!(h.attach_consumer(), Ok(()));
}

#[test]
fn a_scribbler_thread_cannot_make_a_consumer_misbehave() {
    // Control fields change under a consumer running on another thread.
    let rounds = if cfg!(miri) { 30 } else { 20_000 };
    let mut h = hostile(32).unwrap();
    let scribbler = h.scribbler();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut rng = Rng(9);
            for _ in 0..rounds {
                let block = if rng.next() % 2 == 0 {
                    Role::Writer
                } else {
                    Role::Reader
                };
                let field = Field::ALL[rng.upto(Field::ALL.len() - 1)];
                let value = match rng.next() % 3 {
                    0 => rng.next() % 80,
                    1 => rng.next(),
                    _ => scribbler.load(block, field).wrapping_add(rng.next() % 40),
                };
                scribbler.store(block, field, value);
            }
        });
        let mut rng = Rng(10);
        for _ in 0..rounds {
            let _ = h.consumer().available(rng.upto(33));
            let avail = h.consumer().available_cached();
            assert!(avail <= 32);
            if let Ok(Some(len)) = h.consumer().next_message() {
                assert!(frame_len(len) <= h.consumer().available_cached());
                let mut buf = vec![0u8; len];
                h.consumer().peek(HEADER, &mut buf);
                h.consumer().consume_message(len);
            } else {
                let n = rng.upto(h.consumer().available_cached());
                h.consumer().consume(n);
            }
            let _ = h.consumer().publish();
            if h.consumer().park() == Ok(false) {
                h.consumer().unpark();
            }
            let _ = h.producer().free(rng.upto(33));
            assert!(h.producer().free_cached() <= 32);
        }
    });
}

/// An end rebuilt on the same ring (as `shmpipe`'s handoff does, in another
/// process) starts its park epochs again at 1. If the peer last woke epoch
/// 1 of the old end, it takes the new end's first parking for one it
/// already woke and does not wake it: a lost wake-up.
#[test]
fn a_reattached_consumer_is_woken() {
    let mut h = hostile(16).unwrap();
    // The old consumer parks once and is woken once: the producer
    // remembers epoch 1 as woken.
    assert_eq!(h.consumer().park(), Ok(false));
    h.producer().push(b"a");
    assert!(h.producer().publish());
    h.consumer().unpark();
    assert_eq!(h.consumer().available(1), Ok(1));
    h.consumer().consume(1);
    let _ = h.consumer().publish();
    // The reader is handed over: a new consumer on the same blocks.
    h.attach_consumer().unwrap();
    assert_eq!(h.consumer().park(), Ok(false), "empty: it sleeps");
    h.producer().push(b"b");
    assert!(h.producer().publish(), "the new consumer sleeps: wake it");
}

/// The same for a producer rebuilt on the same ring.
#[test]
fn a_reattached_producer_is_woken() {
    let mut h = hostile(16).unwrap();
    h.producer().push(&[0; 16]);
    let _ = h.producer().publish();
    assert_eq!(h.producer().park(1), Ok(false));
    assert_eq!(h.consumer().available(1), Ok(16));
    h.consumer().consume(1);
    assert!(h.consumer().publish());
    h.producer().unpark();
    assert_eq!(h.producer().free(1), Ok(1));
    h.producer().push(&[0; 1]);
    let _ = h.producer().publish();
    h.attach_producer().unwrap();
    assert_eq!(h.producer().park(1), Ok(false), "full: it sleeps");
    h.consumer().consume(1);
    assert!(h.consumer().publish(), "the new producer sleeps: wake it");
}

/// Issue #8, item 10: a wake that could not be sent is not counted. After
/// `wake_failed`, the next publish asks for the wake again (before, the
/// parking counted as woken and the sleeper was never woken).
#[test]
fn a_failed_wake_is_asked_for_again() {
    let (mut tx, mut rx) = channel(64).unwrap();
    assert!(!rx.park().unwrap(), "the consumer parks on an empty ring");
    tx.push(b"a");
    assert!(tx.publish(), "a parked consumer must be woken");
    tx.wake_failed();
    tx.push(b"b");
    assert!(tx.publish(), "the failed wake is asked for again");
    tx.push(b"c");
    assert!(!tx.publish(), "a sent wake is asked for once per parking");
    rx.unpark();

    // The same for a producer parked on a full ring.
    let (mut tx, mut rx) = channel(8).unwrap();
    tx.push(&[1; 8]);
    let _ = tx.publish();
    assert!(!tx.park(1).unwrap(), "the producer parks on a full ring");
    assert_eq!(rx.available(1).unwrap(), 8);
    rx.consume(1);
    assert!(rx.publish(), "a parked producer must be woken");
    rx.wake_failed();
    rx.consume(1);
    assert!(rx.publish(), "the failed wake is asked for again");
    tx.unpark();
}

/// Issue #8, item 4: a message's length is a 32-bit field, so no ring
/// promises more than `u32::MAX` bytes per message.
#[test]
fn max_payload_fits_the_header() {
    assert_eq!(max_payload(1 << 32), (1 << 32) - HEADER);
    assert_eq!(max_payload(1 << 33), u32::MAX as usize);
    assert_eq!(max_payload(1 << 40), u32::MAX as usize);
    frame::encode_header(max_payload(1 << 40));
}

/// Copies of a few pages (which go by vectors on some CPUs, see
/// `shmpipe_ring::bulk`) arrive whole, across the ring's wrap too.
#[test]
fn pages_through_the_ring_arrive_whole_across_the_wrap() {
    let (mut tx, mut rx) = channel(32 * 1024).unwrap();
    // Under Miri (which copies with `memcpy` only) each size once.
    let rounds = if cfg!(miri) { 7 } else { 200 };
    let mut seed = 1u32;
    for round in 0..rounds {
        let len = [2048, 3000, 4096, 5000, 8192, 16_384, 16_385][round as usize % 7];
        let msg: Vec<u8> = (0..len as u32).map(|i| (i ^ round ^ seed) as u8).collect();
        seed = seed.wrapping_mul(31).wrapping_add(7);
        assert!(tx.free(len).unwrap() >= len);
        tx.push(&msg);
        let _ = tx.publish();
        rx.available(len).unwrap();
        let mut got = vec![0u8; len];
        assert_eq!(rx.pop(&mut got), len);
        let _ = rx.publish();
        assert_eq!(got, msg, "round {round}");
    }
}
