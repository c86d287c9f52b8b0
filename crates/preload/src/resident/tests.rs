//! The resident ring between two processes over real pipes, driven as the
//! hooks will drive it: a write is `resident_protocol::write` and, for
//! what it leaves, a kernel `write`; a read is `resident_protocol::read`
//! and, when it says so, a kernel `read`. Each test's child is killed by
//! a watchdog if the test fails to finish, and its pipes then end every
//! wait (EOF, `EPIPE`).

use super::*;
use crate::resident_protocol::{self as protocol, Taken, Written};
use core::ffi::c_void;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

extern "C" {
    fn _exit(code: c_int) -> !;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn sched_setaffinity(pid: c_int, len: usize, set: *const u64) -> c_int;
}

/// Pins the calling thread to `cpu` if the machine has it (lmbench's
/// harness pins its processes the same way); false if it could not.
fn pin(cpu: usize) -> bool {
    let set = 1u64 << cpu;
    // SAFETY: one word of CPU mask.
    unsafe { sched_setaffinity(0, 8, &set) == 0 }
}

/// How long a reader waits for a writer, and a writer for room, before
/// sleeping: a wake-up across CPUs costs about this on the project's
/// machines (the hooks will use the pipe's measured cost).
const WAIT_NS: i64 = 50_000;

/// `n` zeroed rings in memory a forked child shares.
fn shared_rings(n: usize) -> &'static [Ring] {
    let len = n * core::mem::size_of::<Ring>();
    // SAFETY: a fresh shared anonymous mapping.
    let p = unsafe {
        sys::mmap(
            core::ptr::null_mut(),
            len,
            sys::PROT_RW,
            sys::MAP_SHARED | sys::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, sys::MAP_FAILED);
    // SAFETY: zeroed memory is n empty rings (atomics of 0), never unmapped.
    unsafe { core::slice::from_raw_parts(p.cast::<Ring>(), n) }
}

fn new_pipe() -> [c_int; 2] {
    let mut fds = [0; 2];
    // SAFETY: two ints to fill.
    assert_eq!(unsafe { sys::pipe(fds.as_mut_ptr()) }, 0);
    fds
}

fn errno() -> c_int {
    // SAFETY: the thread's errno.
    unsafe { *sys::__errno_location() }
}

/// A whole `write` of `bytes`, as the hook will make it: the count, or -1.
fn write_via(ring: &Ring, fd: c_int, bytes: &[u8], me: u32) -> isize {
    // SAFETY: `bytes` is readable for its length.
    let mut w = unsafe { WriteSide::new(ring, fd, bytes.as_ptr(), me, WAIT_NS) };
    match protocol::write(ring, &mut w, bytes.len()) {
        Written::Ring => bytes.len() as isize,
        Written::Signalled { done } => done as isize,
        Written::Kernel { done, counted } => {
            let mut at = done;
            let mut failed = false;
            while at < bytes.len() {
                // SAFETY: writes from the caller's slice.
                let r = unsafe { sys::write(fd, bytes[at..].as_ptr().cast(), bytes.len() - at) };
                if r < 0 && errno() == sys::EINTR {
                    continue;
                }
                if r <= 0 {
                    failed = true;
                    break;
                }
                at += r as usize;
            }
            if counted {
                protocol::kernel_write_done(ring);
            }
            if failed && at == 0 {
                -1
            } else {
                at as isize
            }
        }
    }
}

/// Reads that went to the kernel (this process's).
static KERNEL_READS: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// One `read` into `buf`, as the hook will make it.
fn read_via(ring: &Ring, fd: c_int, buf: &mut [u8]) -> isize {
    // SAFETY: `buf` is writable for its length.
    let mut r = unsafe { ReadSide::<Budget>::new(ring, fd, buf.as_mut_ptr(), WAIT_NS) };
    match protocol::read(ring, &mut r, buf.len(), true) {
        Taken::Ring(k) => k as isize,
        Taken::Kernel { counted } => {
            KERNEL_READS.fetch_add(1, Ordering::Relaxed);
            let n = loop {
                // SAFETY: reads into the caller's slice.
                let n = unsafe { sys::read(fd, buf.as_mut_ptr().cast::<c_void>(), buf.len()) };
                if n >= 0 || errno() != sys::EINTR {
                    break n;
                }
            };
            if counted {
                protocol::kernel_read_done(ring);
            }
            n
        }
    }
}

/// Forks a child that runs `f` and exits with its status; returns its
/// pid, with a watchdog that kills it after a minute unless `done` is set.
fn child(f: impl FnOnce() -> c_int) -> (c_int, Arc<AtomicBool>) {
    // SAFETY: the child only runs `f` (system calls and the protocol) and
    // exits without unwinding.
    let pid = unsafe { sys::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = f();
        // SAFETY: ends the child without running the test harness's exit.
        unsafe { _exit(code) };
    }
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        while !flag.load(Ordering::Relaxed) {
            if start.elapsed() > Duration::from_secs(60) {
                // SAFETY: kills the test's own child.
                unsafe { sys::kill(pid, 9) };
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    (pid, done)
}

fn reap(pid: c_int, done: &AtomicBool) -> c_int {
    let mut status = 0;
    // SAFETY: waits for the test's own child.
    assert_eq!(unsafe { waitpid(pid, &mut status, 0) }, pid);
    done.store(true, Ordering::Relaxed);
    status
}

fn close(fd: c_int) {
    // SAFETY: closes a descriptor the test made.
    unsafe { sys::close(fd) };
}

/// Two processes on two CPUs if there are two, passing one byte back and
/// forth `n` times, through the rings (`rings`) or plain pipes: the time
/// of a round trip.
fn ping_pong(n: usize, rings: bool) -> RoundTrips {
    let ring = shared_rings(2);
    let [to_child, from_parent] = {
        let [r, w] = new_pipe();
        [w, r]
    };
    let [from_child, to_parent] = new_pipe();
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let (pid, done) = child(|| {
        if two {
            pin(1);
        }
        close(to_child);
        close(from_child);
        let mut b = [0u8; 1];
        for _ in 0..n {
            let got = if rings {
                read_via(&ring[0], from_parent, &mut b)
            } else {
                // SAFETY: one byte into a local.
                unsafe { sys::read(from_parent, b.as_mut_ptr().cast(), 1) }
            };
            if got != 1 {
                return 2;
            }
            b[0] = b[0].wrapping_add(1);
            let sent = if rings {
                write_via(&ring[1], to_parent, &b, 2)
            } else {
                // SAFETY: one byte from a local.
                unsafe { sys::write(to_parent, b.as_ptr().cast(), 1) }
            };
            if sent != 1 {
                return 3;
            }
        }
        0
    });
    close(from_parent);
    close(to_parent);
    if two {
        pin(0);
    }
    let kernel_before = KERNEL_READS.load(Ordering::Relaxed);
    let mut times = Vec::with_capacity(n);
    let start = Instant::now();
    let mut b = [0u8; 1];
    for i in 0..n {
        let one = Instant::now();
        let v = (i % 251) as u8;
        b[0] = v;
        let sent = if rings {
            write_via(&ring[0], to_child, &b, 1)
        } else {
            // SAFETY: one byte from a local.
            unsafe { sys::write(to_child, b.as_ptr().cast(), 1) }
        };
        assert_eq!(sent, 1, "round trip {i}: the write");
        let got = if rings {
            read_via(&ring[1], from_child, &mut b)
        } else {
            // SAFETY: one byte into a local.
            unsafe { sys::read(from_child, b.as_mut_ptr().cast(), 1) }
        };
        assert_eq!((got, b[0]), (1, v + 1), "round trip {i}: the reply");
        times.push(one.elapsed());
    }
    let took = start.elapsed();
    let through_kernel = KERNEL_READS.load(Ordering::Relaxed) - kernel_before;
    // The child has exited: EOF, through the ring's path too.
    let eof = if rings {
        read_via(&ring[1], from_child, &mut b)
    } else {
        // SAFETY: one byte into a local.
        unsafe { sys::read(from_child, b.as_mut_ptr().cast(), 1) }
    };
    assert_eq!(eof, 0, "EOF once the child is gone");
    assert_eq!(reap(pid, &done), 0, "the child saw every byte");
    close(to_child);
    close(from_child);
    times.sort_unstable();
    RoundTrips {
        mean: took / n as u32,
        median: times[n / 2],
        through_kernel,
    }
}

/// What `ping_pong` measured: the mean and median round trip, and how
/// many of the parent's reads went to the kernel pipe.
#[derive(Debug)]
#[allow(dead_code)]
struct RoundTrips {
    mean: Duration,
    median: Duration,
    through_kernel: usize,
}

#[test]
fn a_round_trip_between_two_processes_sees_every_byte_and_eof() {
    let n = 20_000;
    let ring = ping_pong(n, true);
    let kernel = ping_pong(n, false);
    // A figure, not a test: the machine is shared (docs/run.md, "2b").
    println!("round trip: rings {ring:?}, kernel pipes {kernel:?}");
}

/// Byte `i` of the bulk tests' stream.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(7) ^ (i >> 9)) as u8
}

#[test]
fn bulk_writes_of_every_size_arrive_whole_and_in_order_then_eof() {
    const TOTAL: usize = 3 << 20;
    let ring = shared_rings(1);
    let [r, w] = new_pipe();
    let (pid, done) = child(|| {
        close(r);
        let sizes = [1usize, 7, 4096, 4097, 65536, 70_000, 13, 200_000];
        let stream: Vec<u8> = (0..TOTAL).map(pattern).collect();
        let (mut at, mut k) = (0, 0);
        while at < TOTAL {
            let len = sizes[k % sizes.len()].min(TOTAL - at);
            if write_via(&ring[0], w, &stream[at..at + len], 7) != len as isize {
                return 4;
            }
            at += len;
            k += 1;
        }
        close(w);
        0
    });
    close(w);
    let reads = [1usize, 100, 4096, 65536, 100_000];
    let mut buf = vec![0u8; 100_000];
    let (mut got, mut k, mut start) = (0usize, 0, Instant::now());
    loop {
        let len = reads[k % reads.len()];
        let n = read_via(&ring[0], r, &mut buf[..len]);
        assert!(n >= 0, "read failed: errno {}", errno());
        if n == 0 {
            break;
        }
        if got == 0 {
            start = Instant::now();
        }
        for (i, &b) in buf[..n as usize].iter().enumerate() {
            assert_eq!(b, pattern(got + i), "byte {} of the stream", got + i);
        }
        got += n as usize;
        k += 1;
    }
    let took = start.elapsed();
    assert_eq!(got, TOTAL, "every byte, then EOF");
    assert_eq!(reap(pid, &done), 0);
    close(r);
    println!(
        "bulk: {} MB/s through the ring",
        TOTAL as f64 / took.as_secs_f64() / 1e6
    );
}

/// Everything `r` gives until EOF, read as a reader the library does not
/// see: plain kernel reads.
fn plain_reads_to_eof(r: c_int) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: reads into a local.
        let n = unsafe { sys::read(r, buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n >= 0);
        if n == 0 {
            return all;
        }
        all.extend_from_slice(&buf[..n as usize]);
    }
}

#[test]
fn a_spill_hands_the_rings_bytes_to_a_plain_reader_first() {
    let ring = &shared_rings(1)[0];
    let [r, w] = new_pipe();
    // Nobody reads: the ring keeps them.
    assert_eq!(write_via(ring, w, b"ring ", 1), 5);
    assert_eq!(write_via(ring, w, b"bytes, ", 1), 7);
    protocol::spill(ring, &mut SpillSide::new(ring, w));
    assert_eq!(
        protocol::mode(ring.state().load(Ordering::SeqCst)),
        protocol::FOREVER
    );
    // After the spill every write goes to the kernel, behind them.
    assert_eq!(write_via(ring, w, b"then kernel", 1), 11);
    close(w);
    let all = plain_reads_to_eof(r);
    close(r);
    assert_eq!(all, b"ring bytes, then kernel");
}

/// The ring and write end the SIGUSR1 handler of
/// `a_handler_that_writes_during_a_spill_waits_for_it_to_end` writes to.
static HANDLER_RING: core::sync::atomic::AtomicPtr<Ring> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
static HANDLER_FD: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(-1);

extern "C" fn write_from_handler(_: c_int) {
    let ring = HANDLER_RING.load(Ordering::SeqCst);
    // SAFETY: set to a ring that is never unmapped before the signal.
    let ring = unsafe { &*ring };
    write_via(ring, HANDLER_FD.load(Ordering::SeqCst), b", handler", 1);
}

/// A spill that raises SIGUSR1 as it starts writing to the kernel.
struct Interrupted<'a>(SpillSide<'a>);

impl Spiller for Interrupted<'_> {
    unsafe fn to_kernel(&mut self, at: u32, len: usize) {
        // SAFETY: signals this process.
        unsafe { sys::kill(sys::getpid(), 10) };
        // SAFETY: the caller's claim.
        unsafe { self.0.to_kernel(at, len) };
    }
    fn wait_for_spill(&mut self) {
        self.0.wait_for_spill();
    }
    fn wake_writer(&mut self) {
        self.0.wake_writer();
    }
    fn spill_over(&mut self) {
        self.0.spill_over();
    }
    fn handlers_out(&mut self) {
        self.0.handlers_out();
    }
    fn handlers_back(&mut self) {
        self.0.handlers_back();
    }
}

/// A signal handler that writes to the pipe a spill is moving (the
/// program's, on the spilling thread) runs after the spill: it once
/// waited, inside the spill, for the spill to end.
#[test]
fn a_handler_that_writes_during_a_spill_waits_for_it_to_end() {
    let ring = &shared_rings(1)[0];
    let [r, w] = new_pipe();
    let (pid, done) = child(|| {
        HANDLER_RING.store(ring as *const Ring as *mut Ring, Ordering::SeqCst);
        HANDLER_FD.store(w, Ordering::SeqCst);
        let act = sys::SigAction {
            handler: write_from_handler as *const () as usize,
            mask: sys::SigSet([0; 16]),
            flags: 0,
            restorer: 0,
        };
        // SAFETY: a handler for SIGUSR1, no old one wanted.
        if unsafe { sys::sigaction(10, &act, core::ptr::null_mut()) } != 0 {
            return 2;
        }
        if write_via(ring, w, b"ring bytes", 1) != 10 {
            return 3;
        }
        protocol::spill(ring, &mut Interrupted(SpillSide::new(ring, w)));
        if write_via(ring, w, b", then kernel", 1) != 13 {
            return 4;
        }
        0
    });
    close(w);
    let all = plain_reads_to_eof(r);
    close(r);
    assert_eq!(reap(pid, &done), 0);
    assert_eq!(
        String::from_utf8_lossy(&all),
        "ring bytes, handler, then kernel"
    );
}

#[test]
fn a_short_write_is_read_from_its_copy_and_a_damaged_tag_is_not_believed() {
    let ring = &shared_rings(1)[0];
    let [r, w] = new_pipe();
    let bytes: Vec<u8> = (1..=40).collect();
    let mut buf = [0u8; 40];
    // Read in parts (13 bytes, then the rest from the copy's middle), with
    // the ring's own bytes spoiled: the reads come from the copy.
    assert_eq!(write_via(ring, w, &bytes, 7), 40);
    for word in &ring.words[..8] {
        word.store(u64::MAX, Ordering::Relaxed);
    }
    assert_eq!(read_via(ring, r, &mut buf[..13]), 13);
    assert_eq!(read_via(ring, r, &mut buf[13..]), 27);
    assert_eq!(buf[..], bytes[..]);
    // A tag a peer damaged, claiming more bytes than its line holds: not
    // believed, so the reader takes the ring's bytes, and reads nothing
    // past the line.
    assert_eq!(write_via(ring, w, &bytes[..20], 7), 20);
    let tail = protocol::tail(ring.state.0.state.load(Ordering::Relaxed));
    let damaged = 255 << 24 | u64::from(tail) | 1 << 40;
    ring.state.0.tag.store(damaged, Ordering::Relaxed);
    assert_eq!(read_via(ring, r, &mut buf[..20]), 20);
    assert_eq!(buf[..20], bytes[..20]);
    // A write longer than the copy leaves none behind.
    let long: Vec<u8> = (0..100).collect();
    assert_eq!(write_via(ring, w, &long, 7), 100);
    assert_eq!(ring.state.0.tag.load(Ordering::Relaxed) & 0xff << 24, 0);
    let mut back = [0u8; 100];
    assert_eq!(read_via(ring, r, &mut back), 100);
    assert_eq!(back[..], long[..]);
    close(r);
    close(w);
}

#[test]
fn a_tail_that_comes_round_to_an_old_copys_end_does_not_take_it() {
    // One short write's copy, then long writes (which leave none) until
    // the tail, counted modulo 2^24, ends where that copy did; a read of
    // the last byte then finds the tag's end equal to the tail and must
    // still take the ring's byte, not the old copy's.
    let ring = &shared_rings(1)[0];
    let [r, w] = new_pipe();
    let mut buf = vec![0u8; 4096];
    assert_eq!(write_via(ring, w, &[0xaa], 7), 1);
    assert_eq!(read_via(ring, r, &mut buf[..1]), 1);
    let long = vec![0x55u8; 4096];
    for _ in 0..(1 << 24) / long.len() {
        assert_eq!(write_via(ring, w, &long, 7), 4096);
        assert_eq!(read_via(ring, r, &mut buf[..4095]), 4095);
        assert_eq!(read_via(ring, r, &mut buf[..1]), 1);
        assert_eq!(buf[0], 0x55);
    }
    let tail = protocol::tail(ring.state.0.state.load(Ordering::Relaxed));
    assert_eq!(tail, 1, "the tail came round to the old copy's end");
    close(r);
    close(w);
}
