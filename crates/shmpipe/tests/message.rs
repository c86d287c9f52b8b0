//! Message pipes across processes: boundaries, sizes from 0 to the
//! maximum, sequence numbers and checksums, what happens above the
//! maximum, batching, zero-copy, EOF.

mod common;

use std::io::ErrorKind;
use std::time::Duration;

use common::{checksum, fork, serial, watchdog, Rng};

const LIMIT: Duration = Duration::from_secs(120);

/// Fills a message: sequence number, then random bytes; the receiver checks
/// the sequence and recomputes the body from the same seed.
fn make(seq: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    let mut rng = Rng::new(seq.wrapping_mul(31) + 1);
    out.extend((0..len).map(|_| rng.next() as u8));
    if len >= 8 {
        out[..8].copy_from_slice(&seq.to_le_bytes());
    }
}

#[test]
fn random_sizes_zero_to_max_with_sequence_and_checksum() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const COUNT: u64 = 20_000;
    let (mut rx, tx) = shmpipe::Options::new()
        .capacity(16 * 1024)
        .message_pipe()
        .unwrap();
    let max = tx.max_message();
    assert_eq!(max, 16 * 1024 - 8);
    let child = fork(move || {
        let mut tx = tx;
        let mut rng = Rng::new(99);
        let mut msg = Vec::new();
        for seq in 0..COUNT {
            // Mostly small, sometimes the extremes.
            let len = match seq % 10 {
                0 => 0,
                1 => max,
                _ => rng.upto(max),
            };
            make(seq, len, &mut msg);
            // Each message is preceded by its checksum, sent as a message.
            tx.send(&checksum(&msg).to_le_bytes()).unwrap();
            tx.send(&msg).unwrap();
        }
        0
    });
    let mut buf = Vec::new();
    let mut expect = Vec::new();
    let mut sum = [0u8; 8];
    for seq in 0..COUNT {
        assert_eq!(rx.recv(&mut sum).unwrap(), 8);
        rx.recv_vec(&mut buf).unwrap();
        assert_eq!(
            u64::from_le_bytes(sum),
            checksum(&buf),
            "checksum of message {seq}"
        );
        make(seq, buf.len(), &mut expect);
        assert_eq!(buf, expect, "message {seq}");
    }
    assert_eq!(
        rx.recv(&mut sum).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
    child.join();
}

#[test]
fn above_the_maximum_and_too_small_buffers_lose_nothing() {
    let _s = serial();
    let (mut rx, mut tx) = shmpipe::Options::new()
        .capacity(256)
        .message_pipe()
        .unwrap();
    assert_eq!(tx.max_message(), 248);
    assert_eq!(
        tx.send(&[0u8; 249]).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(tx.reserve(249).unwrap_err().kind(), ErrorKind::InvalidInput);
    tx.send(&[5u8; 248]).unwrap();
    let mut small = [0u8; 100];
    assert_eq!(
        rx.recv(&mut small).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    // The message is still there.
    let mut big = [0u8; 248];
    assert_eq!(rx.recv(&mut big).unwrap(), 248);
    assert_eq!(big, [5u8; 248]);
}

#[test]
fn batch_feed_flush_and_zero_copy() {
    let _s = serial();
    let (mut rx, mut tx) = shmpipe::Options::new()
        .capacity(1024)
        .message_pipe()
        .unwrap();
    rx.set_nonblocking(true);
    for i in 0..10u8 {
        tx.feed(&[i; 3]).unwrap();
    }
    // Fed but not published: nothing to read yet.
    assert_eq!(
        rx.recv(&mut [0u8; 8]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    tx.flush();
    for i in 0..10u8 {
        let m = rx.recv_in_place().unwrap();
        assert_eq!(m.bytes().to_vec(), [i; 3]);
    }
    let mut g = tx.reserve(5).unwrap();
    g.copy_from_slice(b"grant");
    g.commit();
    let m = rx.recv_in_place().unwrap();
    assert_eq!(m.len(), 5);
    assert_eq!(m.bytes().to_vec(), b"grant");
    drop(m);
    // An uncommitted grant sends nothing.
    {
        let _uncommitted = tx.reserve(4).unwrap();
    }
    assert_eq!(
        rx.recv(&mut [0u8; 8]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
}

#[test]
fn message_boundaries_survive_wrap_around() {
    let _s = serial();
    let (mut rx, mut tx) = shmpipe::Options::new().capacity(64).message_pipe().unwrap();
    let mut rng = Rng::new(5);
    let mut buf = [0u8; 56];
    for seq in 0..10_000u64 {
        let len = rng.upto(56);
        let msg: Vec<u8> = (0..len)
            .map(|k| (seq as u8).wrapping_add(k as u8))
            .collect();
        tx.send(&msg).unwrap();
        assert_eq!(rx.recv(&mut buf).unwrap(), len);
        assert_eq!(&buf[..len], &msg[..]);
    }
}

#[test]
fn sender_killed_mid_stream_gives_a_prefix_then_eof() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut rx, tx) = shmpipe::Options::new()
        .capacity(4096)
        .message_pipe()
        .unwrap();
    let child = fork(move || {
        let mut tx = tx;
        let mut seq = 0u64;
        loop {
            tx.send(&seq.to_le_bytes()).unwrap();
            seq += 1;
        }
    });
    let mut buf = [0u8; 8];
    for seq in 0..1000u64 {
        assert_eq!(rx.recv(&mut buf).unwrap(), 8);
        assert_eq!(u64::from_le_bytes(buf), seq);
    }
    child.kill();
    let mut seq = 1000u64;
    let err = loop {
        match rx.recv(&mut buf) {
            Ok(8) => {
                assert_eq!(u64::from_le_bytes(buf), seq, "no torn or lost message");
                seq += 1;
            }
            Ok(n) => panic!("message of {n} bytes"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), ErrorKind::UnexpectedEof);
    assert_eq!(child.wait(LIMIT), 128 + libc::SIGKILL);
}

#[test]
fn every_end_is_send() {
    let _s = serial();
    fn send<T: Send>() {}
    send::<shmpipe::Reader>();
    send::<shmpipe::Writer>();
    send::<shmpipe::Receiver>();
    send::<shmpipe::Sender>();
    send::<shmpipe::Connection>();
    send::<shmpipe::Listener>();
}

/// Issue #8, item 4: a message's length is a 32-bit header field, so on a
/// ring of 8 GiB the maximum is `u32::MAX`, not the ring less a header,
/// and a longer message is `InvalidInput` with nothing sent (it used to
/// panic in `encode_header`). Only the control blocks of the 8 GiB ring
/// are touched, and the oversized message is never read.
#[test]
fn max_message_fits_the_frame_header() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut rx, mut tx) = shmpipe::Options::new()
        .capacity(8 << 30)
        .message_pipe()
        .unwrap();
    assert_eq!(tx.max_message(), u32::MAX as usize);
    let huge = vec![0u8; u32::MAX as usize + 1];
    assert_eq!(tx.send(&huge).unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(tx.feed(&huge).unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(
        tx.reserve(huge.len()).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    drop(huge);
    tx.send(b"still fine").unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(rx.recv(&mut buf).unwrap(), 10);
}

/// Issue #8, item 8: `send_over` publishes what was fed first, so the new
/// owner writes after it; and the old copy, dropped after the new owner
/// has sent, does not store its older tail over the new one (that lost,
/// repeated or tore messages, or made the receiver see `InvalidData`).
#[test]
fn handing_a_sender_away_publishes_first_and_the_old_copy_stays_quiet() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (mut rx, mut tx) = shmpipe::Options::new()
        .capacity(256)
        .message_pipe()
        .unwrap();
    tx.send(b"zero").unwrap();
    tx.feed(b"one").unwrap();
    tx.send_over(&a).unwrap();
    let new_owner = std::thread::spawn(move || {
        let mut tx = shmpipe::Sender::recv_from(&b).unwrap();
        tx.send(b"two").unwrap();
        tx.feed(b"three").unwrap();
        tx
    });
    let tx2 = new_owner.join().unwrap();
    drop(tx);
    drop(tx2); // publishes "three"
    let mut got = Vec::new();
    let mut buf = Vec::new();
    loop {
        match rx.recv_vec(&mut buf) {
            Ok(()) => got.push(String::from_utf8(buf.clone()).unwrap()),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
            Err(e) => panic!("after {got:?}: {e}"),
        }
    }
    assert_eq!(got, ["zero", "one", "two", "three"]);
}

/// Issue #8, item 8, after `fork`: a child that drops its copy of a
/// sender with fed, unpublished messages, after the parent (which goes on
/// using the end) has sent, does not move the tail back.
#[test]
fn forked_copy_dropped_late_does_not_publish_a_stale_tail() {
    let _s = serial();
    use std::io::{Read, Write};
    let _w = watchdog(LIMIT);
    let (mut rx, tx) = shmpipe::Options::new()
        .capacity(256)
        .message_pipe()
        .unwrap();
    let mut slot = Some(tx);
    slot.as_mut().unwrap().feed(b"fed before fork").unwrap();
    let (mut go, mut go_child) = std::os::unix::net::UnixStream::pair().unwrap();
    let child = fork(|| {
        // Waits until the parent has sent, then drops its copy.
        let mut b = [0u8; 1];
        go_child.read_exact(&mut b).unwrap();
        drop(slot.take());
        0
    });
    let mut tx = slot.take().unwrap();
    tx.send(b"sent after fork").unwrap();
    go.write_all(b"g").unwrap();
    child.join();
    let mut buf = [0u8; 64];
    let n = rx.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"fed before fork");
    let n = rx.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"sent after fork");
    rx.set_nonblocking(true);
    assert_eq!(
        rx.recv(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "the tail must not have moved back"
    );
    drop(tx);
}
