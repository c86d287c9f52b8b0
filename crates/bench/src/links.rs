//! One-way links between two processes, one type per contestant.
//!
//! A link is made before `fork`; each process keeps the half it uses and
//! drops the other. The link tests (`stream-8B`, `roundtrip-N`,
//! `bandwidth-N`, `token-ring-8`) are generic over [`Link`], so that every
//! contestant's send and receive are inlined into the same measuring loop,
//! with no dynamic dispatch in the timed path.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use rustix::io::Errno;

use crate::check::check_item;
use crate::sys::{self, SharedMem};

/// The sending half of a link.
///
/// Every implementation marks `send`, `recv_exact` and `recv_some`
/// `#[inline(always)]`: each contestant's fast path is compiled into the
/// test's loop, as it would be in an application's, whatever the number of
/// call sites.
pub trait Tx {
    /// Called in the owning process after `fork`, before the start signal;
    /// children attach first, the parent once they are all ready.
    fn attach(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Sends all of `buf`, as one message where the link keeps boundaries.
    fn send(&mut self, buf: &[u8]) -> io::Result<()>;
    /// The stream test's sender: `first..=last` as 8-byte little-endian
    /// counters, one per send. (A link whose calls are another language's
    /// runs this loop in that language, as its programs would.)
    #[inline(always)]
    fn send_counters(&mut self, first: u64, last: u64) -> io::Result<()> {
        for i in first..=last {
            self.send(&i.to_le_bytes())?;
        }
        Ok(())
    }
}

/// The receiving half of a link.
pub trait Rx {
    /// Called in the owning process after `fork`, before the start signal.
    fn attach(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Fills all of `buf` (one whole message where the link keeps
    /// boundaries; its length must equal `buf.len()`). By default, for a
    /// byte stream: [`recv_some`](Self::recv_some) until it is full.
    #[inline(always)]
    fn recv_exact(&mut self, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.recv_some(buf)?;
            buf = &mut buf[n..];
        }
        Ok(())
    }
    /// Receives what is there, at least one byte, at most `buf.len()`, as
    /// `read(2)` does.
    fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// The stream test's receiver: receives the counters `first..=last`
    /// (see [`Tx::send_counters`]), checking each.
    #[inline(always)]
    fn recv_counters(&mut self, first: u64, last: u64) -> io::Result<()> {
        let mut item = [0u8; 8];
        for i in first..=last {
            self.recv_exact(&mut item)?;
            check_item(item, i)?;
        }
        Ok(())
    }
}

/// What a test needs from a link.
#[derive(Debug, Clone, Copy)]
pub struct LinkParams {
    /// The largest message the test sends.
    pub max_message: usize,
}

/// A kind of link: the contestant's transport.
pub trait Link {
    /// The sending half.
    type Tx: Tx;
    /// The receiving half.
    type Rx: Rx;
    /// The largest message this link carries (`usize::MAX`: a byte stream).
    const MAX_MESSAGE: usize;
    /// Makes one link.
    fn new(params: &LinkParams) -> io::Result<(Self::Tx, Self::Rx)>;
    /// Makes the two links of a round trip (there, then back).
    #[allow(clippy::type_complexity)]
    fn pair(params: &LinkParams) -> io::Result<((Self::Tx, Self::Rx), (Self::Tx, Self::Rx))> {
        Ok((Self::new(params)?, Self::new(params)?))
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "watchdog: the run took too long")
}

/// Maps EINTR to a retry, or to `TimedOut` once the watchdog has fired.
fn retry_or_timeout(e: Errno) -> io::Result<()> {
    if e == Errno::INTR && !sys::watchdog_fired() {
        Ok(())
    } else if e == Errno::INTR {
        Err(timed_out())
    } else {
        Err(e.into())
    }
}

/// The error of a link whose peer closed it.
pub(crate) fn eof() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed the link")
}

/// An 8-byte message as the value it carries.
pub(crate) fn u64_of(buf: &[u8]) -> io::Result<u64> {
    let b: [u8; 8] = buf.try_into().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "this link carries 8-byte messages only",
        )
    })?;
    Ok(u64::from_le_bytes(b))
}

/// Stores `v` as an 8-byte message in `buf`.
pub(crate) fn put_u64(buf: &mut [u8], v: u64) -> io::Result<()> {
    if buf.len() != 8 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "this link carries 8-byte messages only",
        ));
    }
    buf.copy_from_slice(&v.to_le_bytes());
    Ok(())
}

/// Spins until `ready()` holds, with `pause` between loads, yielding the CPU
/// every 128 tries (so that two spinners sharing a core make progress) and
/// giving up when the watchdog fires.
#[inline]
pub fn spin_until(mut ready: impl FnMut() -> bool) -> io::Result<()> {
    let mut tries: u32 = 0;
    loop {
        if ready() {
            return Ok(());
        }
        tries = tries.wrapping_add(1);
        if tries.is_multiple_of(128) {
            if sys::watchdog_fired() {
                return Err(timed_out());
            }
            rustix::thread::sched_yield();
        } else {
            std::hint::spin_loop();
        }
    }
}

// ---------------------------------------------------------------- fd links

/// Writes all of `buf` to `fd`.
fn write_all_fd(fd: &OwnedFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::write(fd, buf) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => buf = &buf[n..],
            Err(e) => retry_or_timeout(e)?,
        }
    }
    Ok(())
}

/// One `read(2)`, retried on EINTR; 0 bytes is EOF, an error here.
fn read_some_fd(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Ok(0) if !buf.is_empty() => return Err(eof()),
            Ok(n) => return Ok(n),
            Err(e) => retry_or_timeout(e)?,
        }
    }
}

fn read_exact_fd(fd: &OwnedFd, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = read_some_fd(fd, buf)?;
        buf = &mut buf[n..];
    }
    Ok(())
}

/// A byte-stream file descriptor (pipe end, stream socket).
#[derive(Debug)]
pub struct StreamFd(OwnedFd);

impl Tx for StreamFd {
    #[inline(always)]
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        write_all_fd(&self.0, buf)
    }
}

impl Rx for StreamFd {
    #[inline(always)]
    fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        read_exact_fd(&self.0, buf)
    }
    #[inline(always)]
    fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_some_fd(&self.0, buf)
    }
}

/// `pipe`: a kernel pipe (`pipe2`), at its default size.
#[derive(Debug)]
pub enum PipeLink {}

impl Link for PipeLink {
    type Tx = StreamFd;
    type Rx = StreamFd;
    const MAX_MESSAGE: usize = usize::MAX;
    fn new(_: &LinkParams) -> io::Result<(StreamFd, StreamFd)> {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        Ok((StreamFd(w), StreamFd(r)))
    }
}

fn socketpair(kind: rustix::net::SocketType) -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        kind,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}

/// `unix-stream`: an `AF_UNIX` `SOCK_STREAM` socketpair, used one way.
#[derive(Debug)]
pub enum UnixStreamLink {}

impl Link for UnixStreamLink {
    type Tx = StreamFd;
    type Rx = StreamFd;
    const MAX_MESSAGE: usize = usize::MAX;
    fn new(_: &LinkParams) -> io::Result<(StreamFd, StreamFd)> {
        let (a, b) = socketpair(rustix::net::SocketType::STREAM)?;
        Ok((StreamFd(a), StreamFd(b)))
    }
}

/// A `SOCK_SEQPACKET` socket: one `send`, one `recv` per message.
#[derive(Debug)]
pub struct PacketFd(OwnedFd);

impl Tx for PacketFd {
    #[inline(always)]
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        loop {
            match rustix::net::send(&self.0, buf, rustix::net::SendFlags::empty()) {
                Ok(n) if n == buf.len() => return Ok(()),
                Ok(n) => {
                    return Err(io::Error::other(format!(
                        "seqpacket sent {n} of {} bytes",
                        buf.len()
                    )))
                }
                Err(e) => retry_or_timeout(e)?,
            }
        }
    }
}

impl Rx for PacketFd {
    #[inline(always)]
    fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let want = buf.len();
        let n = self.recv_some(buf)?;
        if n != want {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("message of {n} bytes, expected {want}"),
            ));
        }
        Ok(())
    }
    #[inline(always)]
    fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match rustix::net::recv(&self.0, &mut *buf, rustix::net::RecvFlags::empty()) {
                Ok((0, _)) if !buf.is_empty() => return Err(eof()),
                Ok((n, _)) => return Ok(n),
                Err(e) => retry_or_timeout(e)?,
            }
        }
    }
}

/// `unix-seqpacket`: an `AF_UNIX` `SOCK_SEQPACKET` socketpair, used one way.
/// A message must fit the socket's send buffer, so the largest is 64 KiB.
#[derive(Debug)]
pub enum UnixSeqpacketLink {}

impl Link for UnixSeqpacketLink {
    type Tx = PacketFd;
    type Rx = PacketFd;
    const MAX_MESSAGE: usize = 64 * 1024;
    fn new(p: &LinkParams) -> io::Result<(PacketFd, PacketFd)> {
        let (a, b) = socketpair(rustix::net::SocketType::SEQPACKET)?;
        if p.max_message > 16 * 1024 {
            // Room for a few messages in flight; capped by net.core.wmem_max.
            rustix::net::sockopt::set_socket_send_buffer_size(&a, 4 * p.max_message)?;
        }
        Ok((PacketFd(a), PacketFd(b)))
    }
}

/// An eventfd end: the 8-byte message is the counter value (never 0).
#[derive(Debug)]
pub struct EventFd(Rc<OwnedFd>);

impl Tx for EventFd {
    #[inline(always)]
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        let v = u64_of(buf)?;
        if v == 0 || v == u64::MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "eventfd cannot carry 0 or u64::MAX",
            ));
        }
        write_all_fd(&self.0, &v.to_ne_bytes())
    }
}

impl Rx for EventFd {
    #[inline(always)]
    fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let mut b = [0u8; 8];
        read_exact_fd(&self.0, &mut b)?;
        put_u64(buf, u64::from_ne_bytes(b))
    }
    #[inline(always)]
    fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_exact(&mut buf[..8])?;
        Ok(8)
    }
}

/// `eventfd`: a blocking eventfd handshake; one message in flight at most.
#[derive(Debug)]
pub enum EventfdLink {}

impl Link for EventfdLink {
    type Tx = EventFd;
    type Rx = EventFd;
    const MAX_MESSAGE: usize = 8;
    fn new(_: &LinkParams) -> io::Result<(EventFd, EventFd)> {
        let fd = Rc::new(rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC,
        )?);
        Ok((EventFd(fd.clone()), EventFd(fd)))
    }
}

// ------------------------------------------------------ shared-memory links

/// A mailbox word pair in shared memory: `count` says how many messages
/// were posted, `value` holds the last one. One message in flight at most.
#[derive(Debug)]
pub struct Mailbox {
    mem: Rc<SharedMem>,
    base: usize,
    seen: u32,
}

impl Mailbox {
    const COUNT: usize = 0; // u32, the futex word
    const PID: usize = 4; // i32, the receiver's pid (signal link)
    const VALUE: usize = 8; // u64

    fn new_pair() -> io::Result<(Self, Self)> {
        let mem = Rc::new(SharedMem::new(128)?);
        Ok((
            Self {
                mem: mem.clone(),
                base: 0,
                seen: 0,
            },
            Self {
                mem,
                base: 0,
                seen: 0,
            },
        ))
    }
    fn post(&mut self, v: u64) -> &std::sync::atomic::AtomicU32 {
        self.mem
            .u64_at(self.base + Self::VALUE)
            .store(v, Ordering::Relaxed);
        self.seen = self.seen.wrapping_add(1);
        let count = self.mem.u32_at(self.base + Self::COUNT);
        // Release: pairs with the Acquire load in `take`, making `value` visible.
        count.store(self.seen, Ordering::Release);
        count
    }
    /// The posted value, if a new one is there.
    fn take(&mut self) -> Option<u64> {
        // Acquire: pairs with the Release store in `post`.
        let c = self
            .mem
            .u32_at(self.base + Self::COUNT)
            .load(Ordering::Acquire);
        if c == self.seen {
            return None;
        }
        self.seen = c;
        Some(
            self.mem
                .u64_at(self.base + Self::VALUE)
                .load(Ordering::Relaxed),
        )
    }
}

/// `futex` sender: posts, then always calls `FUTEX_WAKE` (a bare handshake).
#[derive(Debug)]
pub struct FutexTx(Mailbox);
/// `futex` receiver: `FUTEX_WAIT`s at once whenever nothing is posted.
#[derive(Debug)]
pub struct FutexRx(Mailbox);

impl Tx for FutexTx {
    #[inline(always)]
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        let word = self.0.post(u64_of(buf)?);
        // Shared (not PRIVATE): the waiter is another process.
        rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), 1)?;
        Ok(())
    }
}

impl Rx for FutexRx {
    #[inline(always)]
    fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        loop {
            if let Some(v) = self.0.take() {
                return put_u64(buf, v);
            }
            let word = self.0.mem.u32_at(self.0.base + Mailbox::COUNT);
            match rustix::thread::futex::wait(
                word,
                rustix::thread::futex::Flags::empty(),
                self.0.seen,
                None,
            ) {
                Ok(()) | Err(Errno::AGAIN) => {}
                Err(e) => retry_or_timeout(e)?,
            }
        }
    }
    #[inline(always)]
    fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_exact(&mut buf[..8])?;
        Ok(8)
    }
}

/// `futex`: a bare futex wait/wake handshake on a shared word.
#[derive(Debug)]
pub enum FutexLink {}

impl Link for FutexLink {
    type Tx = FutexTx;
    type Rx = FutexRx;
    const MAX_MESSAGE: usize = 8;
    fn new(_: &LinkParams) -> io::Result<(FutexTx, FutexRx)> {
        let (a, b) = Mailbox::new_pair()?;
        Ok((FutexTx(a), FutexRx(b)))
    }
}

/// `signal` sender: posts to shared memory, then `kill(SIGUSR1)`.
#[derive(Debug)]
pub struct SignalTx(Mailbox, Option<rustix::process::Pid>);
/// `signal` receiver: `sigwaitinfo(SIGUSR1)` whenever nothing is posted.
#[derive(Debug)]
pub struct SignalRx(Mailbox);

impl Tx for SignalTx {
    #[inline(always)]
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        let pid = match self.1 {
            Some(p) => p,
            None => {
                // The receiver published its pid before the start signal.
                let raw = self
                    .0
                    .mem
                    .i32_at(self.0.base + Mailbox::PID)
                    .load(Ordering::Acquire);
                let p = rustix::process::Pid::from_raw(raw)
                    .ok_or_else(|| io::Error::other("signal link: receiver not attached"))?;
                *self.1.insert(p)
            }
        };
        self.0.post(u64_of(buf)?);
        sys::send_usr1(pid)
    }
}

impl Rx for SignalRx {
    fn attach(&mut self) -> io::Result<()> {
        sys::drain_usr1();
        let me = rustix::process::getpid().as_raw_nonzero().get();
        // Release: pairs with the Acquire load in `SignalTx::send`.
        self.0
            .mem
            .i32_at(self.0.base + Mailbox::PID)
            .store(me, Ordering::Release);
        Ok(())
    }
    #[inline(always)]
    fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        loop {
            if let Some(v) = self.0.take() {
                return put_u64(buf, v);
            }
            match sys::wait_usr1() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    if sys::watchdog_fired() {
                        return Err(timed_out());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
    #[inline(always)]
    fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_exact(&mut buf[..8])?;
        Ok(8)
    }
}

/// `signal`: the seeds' signal notification; the 8 bytes travel in shared
/// memory, SIGUSR1 (blocked, taken by `sigwaitinfo`) wakes the receiver.
#[derive(Debug)]
pub enum SignalLink {}

impl Link for SignalLink {
    type Tx = SignalTx;
    type Rx = SignalRx;
    const MAX_MESSAGE: usize = 8;
    fn new(_: &LinkParams) -> io::Result<(SignalTx, SignalRx)> {
        let (a, b) = Mailbox::new_pair()?;
        Ok((SignalTx(a, None), SignalRx(b)))
    }
}

/// Slots in a cache-line ring; 4 slots of 16 bytes fill one 64-byte line.
const CL_SLOTS: usize = 256;
const CL_HEAD: usize = 0; // the receiver's count, on its own 128-byte line
const CL_DATA: usize = 128; // slots: [seq: u64, value: u64]

/// The sending half of a cache-line ring.
#[derive(Debug)]
pub struct CachelineTx {
    mem: Rc<SharedMem>,
    tail: u64,
    head_cache: u64,
}
/// The receiving half of a cache-line ring.
#[derive(Debug)]
pub struct CachelineRx {
    mem: Rc<SharedMem>,
    head: u64,
}

impl Tx for CachelineTx {
    #[inline(always)]
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        let v = u64_of(buf)?;
        if self.tail - self.head_cache == CL_SLOTS as u64 {
            let mem = &self.mem;
            let tail = self.tail;
            let mut head = 0;
            // Acquire: pairs with the receiver's Release store of head, so the
            // slot is free before we overwrite it.
            spin_until(|| {
                head = mem.u64_at(CL_HEAD).load(Ordering::Acquire);
                tail - head < CL_SLOTS as u64
            })?;
            self.head_cache = head;
        }
        let slot = CL_DATA + (self.tail as usize % CL_SLOTS) * 16;
        self.mem.u64_at(slot + 8).store(v, Ordering::Relaxed);
        self.tail += 1;
        // Release: pairs with the receiver's Acquire load of the slot's seq.
        self.mem.u64_at(slot).store(self.tail, Ordering::Release);
        Ok(())
    }
}

impl Rx for CachelineRx {
    #[inline(always)]
    fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let slot = CL_DATA + (self.head as usize % CL_SLOTS) * 16;
        let want = self.head + 1;
        let seq = self.mem.u64_at(slot);
        // Acquire: pairs with the sender's Release store of seq.
        spin_until(|| seq.load(Ordering::Acquire) == want)?;
        let v = self.mem.u64_at(slot + 8).load(Ordering::Relaxed);
        self.head = want;
        // Release: pairs with the sender's Acquire load of head.
        self.mem.u64_at(CL_HEAD).store(want, Ordering::Release);
        put_u64(buf, v)
    }
    #[inline(always)]
    fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_exact(&mut buf[..8])?;
        Ok(8)
    }
}

/// `cacheline`: the physical limit. Each 8-byte message is written with its
/// sequence number into one 16-byte slot, so a message moves exactly one
/// cache line from one core to the other, and the receiver spins on it. In
/// a round trip that is one line there and one back; in a stream four
/// messages share a line. Waiting spins (yielding now and then so that two
/// processes on one core still make progress); it never sleeps.
#[derive(Debug)]
pub enum CachelineLink {}

impl Link for CachelineLink {
    type Tx = CachelineTx;
    type Rx = CachelineRx;
    const MAX_MESSAGE: usize = 8;
    fn new(_: &LinkParams) -> io::Result<(CachelineTx, CachelineRx)> {
        let mem = Rc::new(SharedMem::new(CL_DATA + CL_SLOTS * 16)?);
        Ok((
            CachelineTx {
                mem: mem.clone(),
                tail: 0,
                head_cache: 0,
            },
            CachelineRx { mem, head: 0 },
        ))
    }
}

// ---------------------------------------------------------------- shmpipe

/// A shmpipe writer as a link half.
#[derive(Debug)]
pub struct ShmTx(shmpipe::Writer);
/// A shmpipe reader as a link half.
#[derive(Debug)]
pub struct ShmRx(shmpipe::Reader);

impl Tx for ShmTx {
    #[inline(always)]
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
}

impl Rx for ShmRx {
    #[inline(always)]
    fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_exact(buf)
    }
    #[inline(always)]
    fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.0.read(buf)? {
            0 if !buf.is_empty() => Err(eof()),
            n => Ok(n),
        }
    }
}

/// `shmpipe`: the library's default byte pipe (spins, then sleeps).
#[derive(Debug)]
pub enum ShmpipeLink {}

impl Link for ShmpipeLink {
    type Tx = ShmTx;
    type Rx = ShmRx;
    const MAX_MESSAGE: usize = usize::MAX;
    fn new(_: &LinkParams) -> io::Result<(ShmTx, ShmRx)> {
        let (r, w) = shmpipe::pipe()?;
        Ok((ShmTx(w), ShmRx(r)))
    }
}

/// `shmpipe-blocking`: the same pipe with no spinning: it sleeps at once.
#[derive(Debug)]
pub enum ShmpipeBlockingLink {}

impl Link for ShmpipeBlockingLink {
    type Tx = ShmTx;
    type Rx = ShmRx;
    const MAX_MESSAGE: usize = usize::MAX;
    fn new(_: &LinkParams) -> io::Result<(ShmTx, ShmRx)> {
        let (r, w) = shmpipe::Options::new()
            .spin(std::time::Duration::ZERO)
            .pipe()?;
        Ok((ShmTx(w), ShmRx(r)))
    }
}
