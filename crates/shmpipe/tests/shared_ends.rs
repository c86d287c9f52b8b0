//! One end used by several processes, as a kernel pipe's end can be: a
//! copy left by `fork` and the original take turns, and every byte is
//! delivered exactly once (docs/shared-ends.md). Every test forks, under
//! a watchdog, and asserts what arrived, never how long it took.

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use common::{fork, role, serial, spawn_role, watchdog};

fn limit() -> Duration {
    Duration::from_secs(60)
}

/// A kernel pipe, for children to report to the parent.
fn report_pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both are fresh descriptors we own.
    unsafe {
        (
            std::fs::File::from(OwnedFd::from_raw_fd(fds[0])),
            std::fs::File::from(OwnedFd::from_raw_fd(fds[1])),
        )
    }
}

#[test]
fn child_writes_then_parent_writes_stream() {
    let _s = serial();
    let _w = watchdog(limit());
    let (mut r, mut w) = shmpipe::pipe().unwrap();
    let child = fork(|| {
        w.write_all(b"child ").unwrap();
        0
    });
    child.join();
    w.write_all(b"parent").unwrap();
    let mut got = [0u8; 12];
    r.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"child parent");
}

#[test]
fn child_writes_then_parent_writes_messages() {
    let _s = serial();
    let _w = watchdog(limit());
    let (mut rx, mut tx) = shmpipe::message_pipe().unwrap();
    let child = fork(|| {
        tx.send(b"child").unwrap();
        0
    });
    child.join();
    tx.send(b"parent").unwrap();
    let mut buf = Vec::new();
    rx.recv_vec(&mut buf).unwrap();
    assert_eq!(buf, b"child");
    rx.recv_vec(&mut buf).unwrap();
    assert_eq!(buf, b"parent");
}

#[test]
fn child_reads_then_parent_reads_stream() {
    let _s = serial();
    let _w = watchdog(limit());
    let (mut r, mut w) = shmpipe::pipe().unwrap();
    w.write_all(b"firstsecond").unwrap();
    let child = fork(|| {
        let mut got = [0u8; 5];
        r.read_exact(&mut got).unwrap();
        i32::from(&got != b"first")
    });
    child.join();
    let mut got = [0u8; 6];
    r.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"second");
}

#[test]
fn child_reads_then_parent_reads_messages() {
    let _s = serial();
    let _w = watchdog(limit());
    let (mut rx, mut tx) = shmpipe::message_pipe().unwrap();
    tx.send(b"first").unwrap();
    tx.send(b"second").unwrap();
    let child = fork(|| {
        let mut buf = Vec::new();
        rx.recv_vec(&mut buf).unwrap();
        i32::from(buf != b"first")
    });
    child.join();
    let mut buf = Vec::new();
    rx.recv_vec(&mut buf).unwrap();
    assert_eq!(buf, b"second");
}

/// A PIPE_BUF-sized record: writer, sequence number, then a pattern of both.
fn record(writer: u64, seq: u64) -> Vec<u8> {
    let mut rec = vec![0u8; 4096];
    rec[..8].copy_from_slice(&writer.to_le_bytes());
    rec[8..16].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in rec[16..].iter_mut().enumerate() {
        *b = (writer as usize * 31 + seq as usize * 7 + i) as u8;
    }
    rec
}

#[test]
fn writers_at_once_each_pipe_buf_write_arrives_whole_and_once() {
    let _s = serial();
    let _w = watchdog(limit());
    const WRITERS: u64 = 4;
    const EACH: u64 = 200;
    let (mut r, mut w) = shmpipe::Options::new().capacity(1 << 15).pipe().unwrap();
    let children: Vec<_> = (0..WRITERS)
        .map(|id| {
            fork(|| {
                for seq in 0..EACH {
                    // One write call each: no lock of our own.
                    let n = w.write(&record(id, seq)).unwrap();
                    assert_eq!(n, 4096, "a PIPE_BUF write is never short");
                }
                0
            })
        })
        .collect();
    let mut seen = HashSet::new();
    let mut rec = vec![0u8; 4096];
    for _ in 0..WRITERS * EACH {
        r.read_exact(&mut rec).unwrap();
        let writer = u64::from_le_bytes(rec[..8].try_into().unwrap());
        let seq = u64::from_le_bytes(rec[8..16].try_into().unwrap());
        assert!(writer < WRITERS && seq < EACH, "a torn record");
        assert_eq!(rec, record(writer, seq), "a record mixed with another");
        assert!(seen.insert((writer, seq)), "a record twice");
    }
    for c in children {
        c.join();
    }
    assert_eq!(seen.len() as u64, WRITERS * EACH);
    drop(w);
}

#[test]
fn readers_taking_turns_get_every_message_once() {
    let _s = serial();
    let _w = watchdog(limit());
    const READERS: u64 = 3;
    const MESSAGES: u64 = 600;
    let (mut rx, mut tx) = shmpipe::Options::new()
        .capacity(1 << 12)
        .message_pipe()
        .unwrap();
    let (mut report_r, mut report_w) = report_pipe();
    let children: Vec<_> = (0..READERS)
        .map(|_| {
            fork(|| {
                let mut buf = [0u8; 8];
                loop {
                    let n = rx.recv(&mut buf).unwrap();
                    assert_eq!(n, 8);
                    // 8 bytes to a kernel pipe: one atomic write each.
                    report_w.write_all(&buf).unwrap();
                    if u64::from_le_bytes(buf) == u64::MAX {
                        return 0;
                    }
                }
            })
        })
        .collect();
    drop(report_w);
    for i in 0..MESSAGES {
        tx.send(&i.to_le_bytes()).unwrap();
    }
    for _ in 0..READERS {
        tx.send(&u64::MAX.to_le_bytes()).unwrap();
    }
    for c in children {
        c.join();
    }
    let mut all = Vec::new();
    report_r.read_to_end(&mut all).unwrap();
    let mut seen = HashSet::new();
    for item in all.chunks(8) {
        let v = u64::from_le_bytes(item.try_into().unwrap());
        if v != u64::MAX {
            assert!(seen.insert(v), "message {v} received twice");
        }
    }
    assert_eq!(seen.len() as u64, MESSAGES, "messages lost");
}

#[test]
fn a_holder_killed_inside_its_turn_leaves_the_end_usable() {
    let _s = serial();
    let _w = watchdog(limit());
    let (mut rx, mut tx) = shmpipe::message_pipe().unwrap();
    let (mut ready_r, mut ready_w) = report_pipe();
    let child = fork(|| {
        // A grant holds the end's turn: the child dies inside it, after
        // writing a message it never sends.
        let mut grant = tx.reserve(4).unwrap();
        grant.copy_from_slice(b"lost");
        ready_w.write_all(b"r").unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let mut b = [0u8; 1];
    ready_r.read_exact(&mut b).unwrap();
    child.kill();
    assert_eq!(child.wait(limit()), 128 + libc::SIGKILL);
    tx.send(b"after").unwrap();
    let mut buf = Vec::new();
    rx.recv_vec(&mut buf).unwrap();
    assert_eq!(
        buf, b"after",
        "the dead holder's unsent message is not there"
    );
    rx.set_nonblocking(true);
    let err = rx.recv_vec(&mut buf).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
}

#[test]
fn fork_then_the_child_drops_its_copy_puts_the_parent_back_on_its_fast_path() {
    let _s = serial();
    let _w = watchdog(limit());
    let (mut r, w) = shmpipe::pipe().unwrap();
    let mut w = Some(w);
    assert!(!w.as_ref().unwrap().takes_turns());
    let child = fork(|| {
        drop(w.take()); // the child's copy, unused
        0
    });
    child.join();
    let w = w.as_mut().unwrap();
    assert!(w.takes_turns(), "a fork makes a copy");
    w.write_all(b"one").unwrap(); // a turn, which finds the copy gone
    assert!(!w.takes_turns(), "the only copy left");
    w.write_all(b"two").unwrap();
    let mut got = [0u8; 6];
    r.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"onetwo");
}

#[test]
fn a_copy_left_in_a_child_that_ended_is_forgotten() {
    let _s = serial();
    let _w = watchdog(limit());
    let (mut r, mut w) = shmpipe::pipe().unwrap();
    // The child ends without dropping its copies (`_exit`).
    fork(|| 0).join();
    assert!(w.takes_turns());
    let mut got = [0u8; 1];
    let mut turns = 0;
    while w.takes_turns() {
        turns += 1;
        assert!(turns < 1000, "the dead child's copy is never forgotten");
        w.write_all(b"x").unwrap();
        r.read_exact(&mut got).unwrap();
    }
    assert!(
        !r.takes_turns() || {
            for _ in 0..200 {
                w.write_all(b"x").unwrap();
                r.read_exact(&mut got).unwrap();
            }
            !r.takes_turns()
        }
    );
}

#[test]
fn a_hand_off_by_descriptors_takes_turns_with_the_sender() {
    let _s = serial();
    let _w = watchdog(limit());
    let (mut rx, mut tx) = shmpipe::message_pipe().unwrap();
    let dups = tx.as_fds().map(|fd| fd.try_clone_to_owned().unwrap());
    let mut copy = shmpipe::Sender::from_fds(dups).unwrap();
    tx.send(b"a").unwrap();
    copy.send(b"b").unwrap();
    tx.send(b"c").unwrap();
    let mut buf = Vec::new();
    for want in [b"a", b"b", b"c"] {
        rx.recv_vec(&mut buf).unwrap();
        assert_eq!(buf, want);
    }
    drop(copy);
    tx.send(b"d").unwrap();
    assert!(!tx.takes_turns(), "the copy is gone");
    let _ = rx.as_raw_fd();
}

/// A program spawned with ends handed to it (`pass_to`: `Command` forks,
/// then execs) ends up the only holder of those ends, and its parent of
/// the others, so both are back on their fast paths. The fork's handler
/// gave the child a slot on every end; the exec'd image adopts that slot
/// for the ends it attaches (not a second one of the same pid), and the
/// parent forgets it for the ends the new image never mapped.
#[test]
fn a_spawned_program_and_its_parent_are_back_on_their_fast_paths() {
    const ROUNDS: u32 = 2000;
    if role().as_deref() == Some("echo") {
        let mut r = shmpipe::Reader::from_env("data").unwrap();
        let mut w = shmpipe::Writer::from_env("back").unwrap();
        let mut byte = [0u8; 1];
        // Echo each byte, saying whether our ends still take turns, until
        // the parent closes.
        while r.read(&mut byte).unwrap() == 1 {
            let turns = r.takes_turns() || w.takes_turns();
            w.write_all(if turns { b"t" } else { b"f" }).unwrap();
        }
        return;
    }
    let _s = serial();
    let _w = watchdog(limit());
    let (mut r, mut w) = shmpipe::pipe().unwrap();
    let (mut back_r, mut back_w) = shmpipe::pipe().unwrap();
    let (mut other_r, mut other_w) = shmpipe::pipe().unwrap();
    let child = spawn_role(
        "a_spawned_program_and_its_parent_are_back_on_their_fast_paths",
        "echo",
        |cmd| {
            r.pass_to(cmd, "data").unwrap();
            back_w.pass_to(cmd, "back").unwrap();
        },
    );
    drop((r, back_w));
    let mut got = [0u8; 1];
    let mut rounds = 0;
    loop {
        w.write_all(b"x").unwrap();
        back_r.read_exact(&mut got).unwrap();
        if &got == b"f" && !w.takes_turns() && !back_r.takes_turns() {
            break;
        }
        rounds += 1;
        assert!(
            rounds < ROUNDS,
            "still taking turns after {ROUNDS} rounds: child {:?}, parent {} {}",
            got,
            w.takes_turns(),
            back_r.takes_turns()
        );
    }
    // An end the child never had, while the child lives.
    let mut rounds = 0;
    while other_w.takes_turns() || other_r.takes_turns() {
        other_w.write_all(b"y").unwrap();
        other_r.read_exact(&mut got).unwrap();
        rounds += 1;
        assert!(rounds < ROUNDS, "an end the child never had stays shared");
    }
    drop(w);
    child.join();
}

/// A spawned program that attached the reader of a pipe maps the writer's
/// ring writable (its writable view, see SECURITY.md; not the mark page
/// only holders map), yet is no
/// holder of the writer: the slot the fork gave it on the parent's writer
/// is forgotten, and the writer is back on its fast path. The child says
/// it attached before the parent's first look at it, so the look sees the
/// view (a look before the exec'd image attached would see no mapping).
#[test]
fn a_spawned_reader_is_no_holder_of_the_writer() {
    const ROUNDS: u32 = 2000;
    if role().as_deref() == Some("reader") {
        let mut r = shmpipe::Reader::from_env("data").unwrap();
        let mut w = shmpipe::Writer::from_env("back").unwrap();
        w.write_all(b"r").unwrap(); // attached
        let mut byte = [0u8; 1];
        while r.read(&mut byte).unwrap() == 1 {
            w.write_all(&byte).unwrap();
        }
        return;
    }
    let _s = serial();
    let _w = watchdog(limit());
    let (mut r, mut w) = shmpipe::pipe().unwrap();
    let (mut back_r, mut back_w) = shmpipe::pipe().unwrap();
    let child = spawn_role(
        "a_spawned_reader_is_no_holder_of_the_writer",
        "reader",
        |cmd| {
            r.pass_to(cmd, "data").unwrap();
            back_w.pass_to(cmd, "back").unwrap();
        },
    );
    drop((r, back_w));
    let mut got = [0u8; 1];
    back_r.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"r");
    let mut rounds = 0;
    while w.takes_turns() {
        w.write_all(b"x").unwrap();
        back_r.read_exact(&mut got).unwrap();
        rounds += 1;
        assert!(
            rounds < ROUNDS,
            "the writer still takes turns after {ROUNDS} rounds"
        );
    }
    drop(w);
    child.join();
}

/// A copy dropped with a turn left open (an in-place message forgotten,
/// as a peek does) releases the end's lock: the other holder goes on while
/// the process that dropped it still lives. (Before, the lock stayed
/// held, and once that process unmapped the end and exited, its robust
/// hand-over could not reach the lock: the others waited for ever.)
#[test]
fn a_copy_dropped_inside_its_turn_releases_the_lock() {
    let _s = serial();
    let _w = watchdog(limit());
    let (mut rx, mut tx) = shmpipe::message_pipe().unwrap();
    tx.send(b"peeked").unwrap();
    let dups = rx.as_fds().map(|fd| fd.try_clone_to_owned().unwrap());
    let mut copy = shmpipe::Receiver::from_fds(dups).unwrap();
    let (mut report_r, mut report_w) = report_pipe();
    let (mut hold_r, mut hold_w) = report_pipe();
    let child = fork(|| {
        std::mem::forget(copy.recv_in_place().unwrap()); // the turn stays open
        drop(copy);
        report_w.write_all(b"d").unwrap();
        let mut done = [0u8; 1];
        hold_r.read_exact(&mut done).unwrap(); // alive until the parent is done
        0
    });
    let mut got = [0u8; 1];
    report_r.read_exact(&mut got).unwrap();
    let mut msg = Vec::new();
    rx.recv_vec(&mut msg).unwrap(); // waited for ever on a lock left held
    assert_eq!(msg, b"peeked");
    hold_w.write_all(b"k").unwrap();
    child.join();
}

/// A server that forks a worker with its ends still open shares every
/// end with it, and each end's turns look now and then (one in 64)
/// whether the worker still holds it. One read of the worker's maps file
/// answers those looks for every end while the worker's mappings stay
/// as they were: a read per look, of a file as long as the worker has
/// mappings, made a server with 1000 such ends spend 500 us a message.
/// Once the worker is gone, every end is soon its own again, whatever
/// the order the server takes its turns in.
#[test]
fn many_ends_shared_with_a_living_child_read_its_maps_rarely() {
    const PIPES: usize = 100;
    const ROUNDS: usize = 4 * 64;
    let _s = serial();
    let _w = watchdog(limit());
    let mut pipes: Vec<_> = (0..PIPES).map(|_| shmpipe::pipe().unwrap()).collect();
    let (mut ready_r, mut ready_w) = report_pipe();
    let (mut stop_r, stop_w) = report_pipe();
    // The child keeps every copy until the parent closes `stop_w`.
    let stop_fd = stop_w.as_raw_fd();
    let child = fork(move || {
        // SAFETY: the child's inherited copy of `stop_w`, closed once;
        // the child never uses `stop_w` itself.
        unsafe { libc::close(stop_fd) };
        ready_w.write_all(b"r").unwrap();
        let mut b = [0u8; 1];
        let _ = stop_r.read(&mut b);
        0
    });
    let mut b = [0u8; 1];
    ready_r.read_exact(&mut b).unwrap();
    let round = |pipes: &mut Vec<(shmpipe::Reader, shmpipe::Writer)>| {
        let mut got = [0u8; 1];
        for (r, w) in pipes.iter_mut() {
            w.write_all(b"x").unwrap();
            r.read_exact(&mut got).unwrap();
        }
    };
    let before = shmpipe_core::fault::maps_reads();
    for _ in 0..ROUNDS {
        round(&mut pipes);
    }
    let reads = shmpipe_core::fault::maps_reads() - before;
    // One read per look: 2 * PIPES * ROUNDS / 64 = 800.
    assert!(reads <= 40, "{reads} reads of the child's maps");
    assert!(pipes
        .iter()
        .all(|(r, w)| r.takes_turns() && w.takes_turns()));
    drop(stop_w);
    assert_eq!(child.wait(limit()), 0);
    let mut rounds = 0;
    while pipes
        .iter()
        .any(|(r, w)| r.takes_turns() || w.takes_turns())
    {
        rounds += 1;
        assert!(
            rounds <= 2 * 64,
            "an end still shared with a child that ended"
        );
        round(&mut pipes);
    }
}
