//! The tests, the contestants, and the runner that forks the processes,
//! pins them, checks every item and times the runs.

use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use crate::links::{self, Link, LinkParams, Rx, Tx};
use crate::sys;

/// A contestant: one way to move data between two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// shmpipe's default pipe: spins, then sleeps.
    Shmpipe,
    /// shmpipe with no spinning: sleeps at once.
    ShmpipeBlocking,
    /// shmpipe's default pipe through its C API.
    ShmpipeC,
    /// A kernel pipe.
    Pipe,
    /// An `AF_UNIX` `SOCK_STREAM` socketpair.
    UnixStream,
    /// An `AF_UNIX` `SOCK_SEQPACKET` socketpair.
    UnixSeqpacket,
    /// An eventfd handshake.
    Eventfd,
    /// A bare futex wait/wake handshake.
    Futex,
    /// The seeds' signal notification.
    Signal,
    /// Two processes bounce one cache line: the physical limit.
    Cacheline,
    /// iceoryx2 publish-subscribe (feature `peers`).
    Iceoryx2,
    /// The shmem-ipc crate (feature `peers`).
    ShmemIpc,
    /// `#[shmpipe::service]` stubs over shmpipe (`rpc-null`).
    ShmpipeRpc,
    /// The same stubs over a Unix socket (`rpc-null`).
    UnixRpc,
    /// `pread(2)` from the page cache (`reread-*`).
    Pread,
    /// `shmpipe::fs`'s file server over shmpipe (`reread-*`).
    ShmpipeFileserver,
    /// The same file server over a Unix socket (`reread-*`).
    UnixFileserver,
    /// One epoll over `AF_UNIX SOCK_SEQPACKET` connections (`serve-*`).
    EpollSeqpacket,
    /// One epoll over pairs of kernel pipes (`serve-*`).
    EpollPipe,
    /// shmpipe's byte pipes through `shmpipe::tokio` (`roundtrip-8B`).
    ShmpipeTokio,
    /// A `tokio::net::UnixStream` pair (`roundtrip-8B`).
    TokioUnix,
}

impl Mechanism {
    /// Every contestant, in table order.
    pub const ALL: [Mechanism; 21] = [
        Mechanism::Shmpipe,
        Mechanism::ShmpipeBlocking,
        Mechanism::ShmpipeC,
        Mechanism::Pipe,
        Mechanism::UnixStream,
        Mechanism::UnixSeqpacket,
        Mechanism::Eventfd,
        Mechanism::Futex,
        Mechanism::Signal,
        Mechanism::Cacheline,
        Mechanism::Iceoryx2,
        Mechanism::ShmemIpc,
        Mechanism::ShmpipeRpc,
        Mechanism::UnixRpc,
        Mechanism::Pread,
        Mechanism::ShmpipeFileserver,
        Mechanism::UnixFileserver,
        Mechanism::EpollSeqpacket,
        Mechanism::EpollPipe,
        Mechanism::ShmpipeTokio,
        Mechanism::TokioUnix,
    ];

    /// The name used in tables, JSON and `--filter`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Shmpipe => "shmpipe",
            Mechanism::ShmpipeBlocking => "shmpipe-blocking",
            Mechanism::ShmpipeC => "shmpipe-c",
            Mechanism::Pipe => "pipe",
            Mechanism::UnixStream => "unix-stream",
            Mechanism::UnixSeqpacket => "unix-seqpacket",
            Mechanism::Eventfd => "eventfd",
            Mechanism::Futex => "futex",
            Mechanism::Signal => "signal",
            Mechanism::Cacheline => "cacheline",
            Mechanism::Iceoryx2 => "iceoryx2",
            Mechanism::ShmemIpc => "shmem-ipc",
            Mechanism::ShmpipeRpc => "shmpipe-rpc",
            Mechanism::UnixRpc => "unix-rpc",
            Mechanism::Pread => "pread",
            Mechanism::ShmpipeFileserver => "shmpipe-fileserver",
            Mechanism::UnixFileserver => "unix-fileserver",
            Mechanism::EpollSeqpacket => "epoll-seqpacket",
            Mechanism::EpollPipe => "epoll-pipe",
            Mechanism::ShmpipeTokio => "shmpipe-tokio",
            Mechanism::TokioUnix => "tokio-unix",
        }
    }

    /// Looks a contestant up by its name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether this build can run the contestant (peers need the feature).
    pub fn available(self) -> bool {
        match self {
            Mechanism::Iceoryx2 | Mechanism::ShmemIpc => crate::peers::ENABLED,
            _ => true,
        }
    }

    /// The largest message this contestant carries.
    fn max_message(self) -> usize {
        match self {
            Mechanism::Shmpipe | Mechanism::ShmpipeBlocking => links::ShmpipeLink::MAX_MESSAGE,
            Mechanism::ShmpipeC => crate::capi::ShmpipeCLink::MAX_MESSAGE,
            Mechanism::Pipe | Mechanism::UnixStream => usize::MAX,
            Mechanism::UnixSeqpacket => links::UnixSeqpacketLink::MAX_MESSAGE,
            Mechanism::Eventfd | Mechanism::Futex | Mechanism::Signal | Mechanism::Cacheline => 8,
            Mechanism::Iceoryx2 => 8,
            // A ring of bytes: a stream, as a pipe.
            Mechanism::ShmemIpc => usize::MAX,
            // They run only their own tests (see `runs`).
            Mechanism::ShmpipeRpc
            | Mechanism::UnixRpc
            | Mechanism::Pread
            | Mechanism::ShmpipeFileserver
            | Mechanism::UnixFileserver
            | Mechanism::EpollSeqpacket
            | Mechanism::EpollPipe => 0,
            Mechanism::ShmpipeTokio | Mechanism::TokioUnix => 8,
        }
    }

    /// Whether the contestant takes part in `test`.
    pub fn runs(self, test: Test) -> bool {
        if !self.available() {
            return false;
        }
        let notify_only = matches!(
            self,
            Mechanism::Eventfd | Mechanism::Futex | Mechanism::Signal
        );
        let peer = matches!(self, Mechanism::Iceoryx2 | Mechanism::ShmemIpc);
        if self == Mechanism::ShmpipeC {
            // The C API's cost shows in the seeds' stream; elsewhere it
            // is the Rust pipe's.
            return test == Test::Stream8;
        }
        let rpc = matches!(self, Mechanism::ShmpipeRpc | Mechanism::UnixRpc);
        let files = matches!(
            self,
            Mechanism::Pread | Mechanism::ShmpipeFileserver | Mechanism::UnixFileserver
        );
        if matches!(self, Mechanism::ShmpipeTokio | Mechanism::TokioUnix) {
            return test == Test::RoundTrip(8);
        }
        if let Test::Serve(_) = test {
            return crate::serve::runs(self);
        }
        if matches!(self, Mechanism::EpollSeqpacket | Mechanism::EpollPipe) {
            return false;
        }
        match test {
            // iceoryx2's request-response (feature `peers`).
            Test::RpcNull => rpc || self == Mechanism::Iceoryx2,
            Test::Reread(_) => files,
            _ if rpc || files => false,
            // A handshake keeps one item in flight: no stream.
            Test::Stream8 => !notify_only,
            Test::RoundTrip(size) => size <= self.max_message(),
            Test::Bandwidth(size) => {
                !notify_only
                    && !matches!(self, Mechanism::Cacheline | Mechanism::Iceoryx2)
                    && size <= self.max_message()
            }
            Test::TokenRing => !peer,
            Test::Serve(_) => false, // decided above
        }
    }
}

/// A test: what moves, and what one operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Test {
    /// 8-byte items, one per write call; ns per item.
    Stream8,
    /// Ping-pong of one message of this many bytes; ns per round trip.
    RoundTrip(usize),
    /// Writes of this many bytes, read into a buffer of the same size as
    /// lmbench `bw_pipe` does; ns per write.
    Bandwidth(usize),
    /// A token around 8 processes, as lmbench `lat_ctx`; ns per hop.
    TokenRing,
    /// A call with no arguments through generated RPC stubs; ns per call.
    RpcNull,
    /// Iozone's reread of a file of this many bytes in 4 KiB records; ns
    /// per record.
    Reread(usize),
    /// One server thread, this many clients, 8 active; ns per message
    /// handled (see `serve`).
    Serve(usize),
}

/// Processes in the token ring.
pub const RING: usize = 8;

/// The message sizes of the sweep: 8 B to 1 MiB.
pub const SWEEP: [usize; 8] = [8, 64, 512, 4096, 16384, 65536, 262_144, 1_048_576];

/// `8B`, `4KiB`, `1MiB`.
pub fn size_label(size: usize) -> String {
    if size >= 1 << 20 && size.is_multiple_of(1 << 20) {
        format!("{}MiB", size >> 20)
    } else if size >= 1024 && size.is_multiple_of(1024) {
        format!("{}KiB", size >> 10)
    } else {
        format!("{size}B")
    }
}

fn parse_size(s: &str) -> Option<usize> {
    let (num, mul) = if let Some(n) = s.strip_suffix("MiB") {
        (n, 1 << 20)
    } else if let Some(n) = s.strip_suffix("KiB") {
        (n, 1 << 10)
    } else {
        (s.strip_suffix('B')?, 1)
    };
    num.parse::<usize>().ok().map(|n| n * mul)
}

impl Test {
    /// The name used in tables, JSON and `--filter`: `stream-8B`,
    /// `roundtrip-8B`, `bandwidth-64KiB`, `token-ring-8`, and the sweep's
    /// `roundtrip-4KiB`, `bandwidth-1MiB`, ...
    pub fn name(self) -> String {
        match self {
            Test::Stream8 => "stream-8B".into(),
            Test::RoundTrip(s) => format!("roundtrip-{}", size_label(s)),
            Test::Bandwidth(s) => format!("bandwidth-{}", size_label(s)),
            Test::TokenRing => format!("token-ring-{RING}"),
            Test::RpcNull => "rpc-null".into(),
            Test::Reread(s) => format!("reread-4KiB-{}", size_label(s)),
            Test::Serve(c) => format!("serve-{c}"),
        }
    }

    /// Parses a test name.
    pub fn from_name(name: &str) -> Option<Self> {
        if name == "stream-8B" {
            Some(Test::Stream8)
        } else if name == format!("token-ring-{RING}") {
            Some(Test::TokenRing)
        } else if let Some(c) = name.strip_prefix("serve-") {
            c.parse()
                .ok()
                .filter(|c| crate::serve::CLIENTS.contains(c))
                .map(Test::Serve)
        } else if name == "rpc-null" {
            Some(Test::RpcNull)
        } else if let Some(s) = name.strip_prefix("reread-4KiB-") {
            parse_size(s).map(Test::Reread)
        } else if let Some(s) = name.strip_prefix("roundtrip-") {
            parse_size(s).map(Test::RoundTrip)
        } else if let Some(s) = name.strip_prefix("bandwidth-") {
            parse_size(s).map(Test::Bandwidth)
        } else {
            None
        }
    }

    /// Bytes moved by one operation (for GB/s), where that makes sense.
    pub fn bytes_per_op(self) -> Option<usize> {
        match self {
            Test::Bandwidth(s) => Some(s),
            Test::Reread(_) => Some(crate::reread::RECORD),
            _ => None,
        }
    }

    /// What one operation is, for table headers.
    pub fn unit(self) -> &'static str {
        match self {
            Test::Stream8 => "ns per item",
            Test::RoundTrip(_) => "ns per round trip",
            Test::Bandwidth(_) => "ns per write",
            Test::TokenRing => "ns per hop",
            Test::RpcNull => "ns per call",
            Test::Reread(_) => "ns per 4 KiB record",
            Test::Serve(_) => "ns per message handled",
        }
    }

    /// A starting iteration count for calibration.
    fn initial_count(self) -> u64 {
        match self {
            Test::Stream8 => 1000,
            Test::RoundTrip(s) | Test::Bandwidth(s) if s >= 65536 => 2,
            Test::RoundTrip(_) | Test::Bandwidth(_) => 20,
            Test::TokenRing => 4,
            Test::RpcNull => 100,
            Test::Reread(_) => 256,
            Test::Serve(_) => 1000,
        }
    }
}

/// Where the processes run: the seeds' affinity axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Placement {
    /// Every process pinned to CPU 0.
    SameCore,
    /// Pinned to CPU 0 and CPU 1 (in the ring, alternately), so every
    /// message crosses cores.
    CrossCore,
    /// No affinity: the scheduler decides.
    Unpinned,
}

impl Placement {
    /// Every placement, in table order.
    pub const ALL: [Placement; 3] = [
        Placement::CrossCore,
        Placement::SameCore,
        Placement::Unpinned,
    ];

    /// The name used in tables, JSON and `--placement`.
    pub fn name(self) -> &'static str {
        match self {
            Placement::SameCore => "same-core",
            Placement::CrossCore => "cross-core",
            Placement::Unpinned => "unpinned",
        }
    }

    /// Looks a placement up by its name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The CPU that process `i` (0 = the parent) is pinned to.
    pub fn cpu(self, i: usize) -> Option<usize> {
        match self {
            Placement::SameCore => Some(0),
            Placement::CrossCore => Some(i % 2),
            Placement::Unpinned => None,
        }
    }
}

/// One thing to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Job {
    /// The contestant.
    pub mechanism: Mechanism,
    /// The test.
    pub test: Test,
    /// Where the processes run.
    pub placement: Placement,
}

// ------------------------------------------------------------ checking

/// Words are stamped every `stride` bytes: one per 4 KiB page at most, so
/// that checking costs little next to the copy, but every message is
/// checked.
fn stride(size: usize) -> usize {
    size.clamp(8, 4096) & !7
}

/// Stamps `seq` into every checked word of a round-trip message.
fn stamp_message(buf: &mut [u8], seq: u64) {
    let s = stride(buf.len());
    let mut k = 0;
    while k + 8 <= buf.len() {
        buf[k..k + 8].copy_from_slice(&(seq ^ (k as u64) << 32).to_le_bytes());
        k += s;
    }
}

fn check_message(buf: &[u8], seq: u64) -> io::Result<()> {
    let s = stride(buf.len());
    let mut k = 0;
    while k + 8 <= buf.len() {
        let got = u64::from_le_bytes(buf[k..k + 8].try_into().expect("8 bytes"));
        let want = seq ^ (k as u64) << 32;
        if got != want {
            return Err(check_failed(format!(
                "message {seq}: word at {k} is {got:#x}, expected {want:#x}"
            )));
        }
        k += s;
    }
    Ok(())
}

/// The error a failed consistency check gives; it aborts the bench.
pub fn check_failed(what: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("consistency check failed: {what}"),
    )
}

/// In a bandwidth stream the word at stream offset `o` (a multiple of the
/// stride) holds `o / 8 + 1`.
fn stamp_chunk(buf: &mut [u8], offset: u64) {
    let s = stride(buf.len());
    let mut k = 0;
    while k + 8 <= buf.len() {
        buf[k..k + 8].copy_from_slice(&((offset + k as u64) / 8 + 1).to_le_bytes());
        k += s;
    }
}

/// Checks the stamped words that lie wholly in `buf`, which holds the
/// stream's bytes from `offset` on. Returns how many words it checked.
fn check_chunk(buf: &[u8], offset: u64, stride: u64) -> io::Result<u64> {
    let end = offset + buf.len() as u64;
    let mut o = offset.next_multiple_of(stride);
    let mut checked = 0;
    while o + 8 <= end {
        let k = (o - offset) as usize;
        let got = u64::from_le_bytes(buf[k..k + 8].try_into().expect("8 bytes"));
        if got != o / 8 + 1 {
            return Err(check_failed(format!(
                "stream offset {o}: {got:#x}, expected {:#x}",
                o / 8 + 1
            )));
        }
        checked += 1;
        o += stride;
    }
    Ok(checked)
}

// ------------------------------------------------------------ processes

/// The processes of one run: control pipes for "ready" and "go", and the
/// forked children, killed and reaped if anything fails.
struct Team {
    ready_r: OwnedFd,
    ready_w: OwnedFd,
    go_r: OwnedFd,
    go_w: OwnedFd,
    children: Vec<sys::Child>,
}

impl Team {
    fn new() -> io::Result<Self> {
        let flags = rustix::pipe::PipeFlags::CLOEXEC;
        let (ready_r, ready_w) = rustix::pipe::pipe_with(flags)?;
        let (go_r, go_w) = rustix::pipe::pipe_with(flags)?;
        Ok(Self {
            ready_r,
            ready_w,
            go_r,
            go_w,
            children: Vec::new(),
        })
    }

    /// Forks a child that runs `body`; `body` calls the barrier it is given
    /// once it is set up, and returns when its part is done.
    fn spawn(
        &mut self,
        body: impl FnOnce(&dyn Fn() -> io::Result<()>) -> io::Result<()>,
    ) -> io::Result<()> {
        let (ready_w, go_r) = (&self.ready_w, &self.go_r);
        let barrier = || -> io::Result<()> {
            rustix::io::write(ready_w, b"r")?;
            let mut b = [0u8; 1];
            match rustix::io::read(go_r, &mut b)? {
                1 => Ok(()),
                _ => Err(io::Error::other("parent went away before the start")),
            }
        };
        let child = sys::spawn(|| body(&barrier))?;
        self.children.push(child);
        Ok(())
    }

    /// Waits until every child is set up and at its barrier.
    fn wait_ready(&mut self) -> io::Result<()> {
        let mut got = 0;
        let mut b = [0u8; 16];
        while got < self.children.len() {
            match rustix::io::read(&self.ready_r, &mut b) {
                Ok(0) => return Err(io::Error::other("children went away before the start")),
                Ok(n) => got += n,
                Err(e) if e == rustix::io::Errno::INTR && !sys::watchdog_fired() => {}
                Err(e) if e == rustix::io::Errno::INTR => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "children not ready in time",
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Starts the children waiting at their barriers.
    fn go(&mut self) -> io::Result<()> {
        let go = vec![b'g'; self.children.len()];
        rustix::io::write(&self.go_w, &go)?;
        Ok(())
    }

    /// Reaps every child; an error if any failed.
    fn join(mut self, deadline: Instant) -> io::Result<()> {
        let mut first_err = None;
        for c in &mut self.children {
            if let Err(e) = c.wait(deadline) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Runs `f` with the watchdog armed for `limit`, disarming it after.
fn watched<T>(limit: Duration, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    sys::arm_watchdog(limit)?;
    let r = f();
    sys::disarm_watchdog()?;
    r
}

// ------------------------------------------------------------ the tests

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
    team.spawn(|ready| {
        let mut tx = tx.take().expect("the child's half");
        sys::pin(placement.cpu(1))?;
        tx.attach()?;
        send(tx, ready)
    })?;
    drop(tx);
    Ok((team, rx))
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

/// Checks that a stream item carries its sequence number: a compare in
/// the loop, the error built out of line.
#[inline(always)]
pub(crate) fn check_item(item: [u8; 8], i: u64) -> io::Result<()> {
    let got = u64::from_le_bytes(item);
    if got == i {
        Ok(())
    } else {
        Err(item_failed(i, got))
    }
}

#[cold]
#[inline(never)]
pub(crate) fn item_failed(i: u64, got: u64) -> io::Error {
    check_failed(format!("item {i} arrived as {got}"))
}

fn run_roundtrip<L: Link>(placement: Placement, size: usize, n: u64) -> io::Result<Duration> {
    let ((tx_a, rx_a), (tx_b, rx_b)) = L::pair(&LinkParams { max_message: size })?;
    sys::pin(placement.cpu(0))?;
    let mut team = Team::new()?;
    let mut child_halves = Some((rx_a, tx_b));
    team.spawn(|ready| {
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
    let (mut tx, mut rx) = (tx_a, rx_b);
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

pub(crate) fn run_with<L: Link>(test: Test, placement: Placement, n: u64) -> io::Result<Duration> {
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

/// Operations timed by a run of count `n` (the token ring counts laps).
pub fn ops(test: Test, n: u64) -> u64 {
    match test {
        Test::TokenRing => n * RING as u64,
        _ => n,
    }
}

/// Runs `job` once with `n` timed operations (laps for the token ring),
/// under a watchdog of `limit`. Returns the time the timed part took.
pub fn run_once(job: Job, n: u64, limit: Duration) -> io::Result<Duration> {
    if !job.mechanism.runs(job.test) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this contestant does not run this test",
        ));
    }
    if let Test::Serve(clients) = job.test {
        let r = watched(limit, || {
            crate::serve::run(job.mechanism, job.placement, clients, n)
        });
        let _ = sys::pin(None);
        return r;
    }
    let r = watched(limit, || match job.mechanism {
        Mechanism::Shmpipe => run_with::<links::ShmpipeLink>(job.test, job.placement, n),
        Mechanism::ShmpipeBlocking => {
            run_with::<links::ShmpipeBlockingLink>(job.test, job.placement, n)
        }
        Mechanism::ShmpipeC => run_with::<crate::capi::ShmpipeCLink>(job.test, job.placement, n),
        Mechanism::Pipe => run_with::<links::PipeLink>(job.test, job.placement, n),
        Mechanism::UnixStream => run_with::<links::UnixStreamLink>(job.test, job.placement, n),
        Mechanism::UnixSeqpacket => {
            run_with::<links::UnixSeqpacketLink>(job.test, job.placement, n)
        }
        Mechanism::Eventfd => run_with::<links::EventfdLink>(job.test, job.placement, n),
        Mechanism::Futex => run_with::<links::FutexLink>(job.test, job.placement, n),
        Mechanism::Signal => run_with::<links::SignalLink>(job.test, job.placement, n),
        Mechanism::Cacheline => run_with::<links::CachelineLink>(job.test, job.placement, n),
        Mechanism::ShmpipeTokio | Mechanism::TokioUnix => {
            crate::tokio_rt::run(job.mechanism, job.placement, n)
        }
        Mechanism::EpollSeqpacket | Mechanism::EpollPipe => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "serve-* contestants only",
        )),
        Mechanism::Iceoryx2 | Mechanism::ShmemIpc => crate::peers::run(job, n),
        Mechanism::ShmpipeRpc | Mechanism::UnixRpc => {
            crate::rpc_null::run(job.mechanism, job.placement, n)
        }
        Mechanism::Pread | Mechanism::ShmpipeFileserver | Mechanism::UnixFileserver => {
            match job.test {
                Test::Reread(size) => crate::reread::run(job.mechanism, job.placement, size, n),
                _ => Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "not a reread test",
                )),
            }
        }
    });
    // Leave the parent free to run anywhere between runs.
    let _ = sys::pin(None);
    r
}

/// Finds how many operations fill about `budget`: grows the count tenfold
/// until a run takes a tenth of the budget, then scales.
pub fn calibrate(job: Job, budget: Duration, limit: Duration) -> io::Result<u64> {
    let mut n = job.test.initial_count();
    loop {
        let mut t = run_once(job, n, limit)?;
        if t >= budget / 10 || n >= 1 << 32 {
            // A one-off delay (the first fork of the process, a preempted
            // child) can make a short run look slow, and the count then
            // stays too small for every run after: the faster of two looks
            // decides (seen here as single runs at 1000x the median).
            t = t.min(run_once(job, n, limit)?);
            let per = t.as_secs_f64() / n as f64;
            let want = (budget.as_secs_f64() / per.max(1e-12)).ceil() as u64;
            return Ok(want.clamp(1, 1 << 34));
        }
        let grow = if t.is_zero() {
            100.0
        } else {
            (budget.as_secs_f64() / 10.0 / t.as_secs_f64()).clamp(2.0, 100.0)
        };
        n = ((n as f64) * grow).ceil() as u64;
    }
}

/// Sets the process up for running jobs: blocks SIGUSR1 (for the signal
/// contestant) and installs the watchdog's handler. Call once, before any
/// job, while the process has a single thread.
pub fn prepare_process() -> io::Result<()> {
    sys::block_usr1()?;
    sys::install_watchdog()
}
