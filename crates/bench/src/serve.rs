//! `serve-1`, `serve-100`, `serve-1000`: one server thread, pinned to one
//! CPU, serves N connected clients in two client processes on the other
//! CPU; 8 of the clients (or N if fewer) do 8-byte request/response round
//! trips, the rest are connected and idle. The figure is the server's
//! time per message handled (total time / messages).
//!
//! Contestants: `shmpipe` (a [`shmpipe::WaitSet`] over message pipes),
//! `epoll-seqpacket` (one epoll over `AF_UNIX SOCK_SEQPACKET`
//! connections: the kernel's way) and `epoll-pipe` (one epoll over the
//! read ends of pairs of kernel pipes), and behind the `peers` feature
//! `iceoryx2` (its request-response with its own WaitSet, see
//! [`crate::serve_peers`]). Each client process drives its
//! active connections from one thread: a request on each, then each
//! reply, and again. Every message carries its connection and round; the
//! server checks the connection, the client the whole reply.
//!
//! The connections are made before `fork` (each client process keeps its
//! halves) and are not timed; neither is the first round.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::io::Errno;

use crate::check::check_failed;
use crate::figures::{fmt_ns, fmt_ratio};
use crate::job::{Mechanism, Placement, Test, SERVE_CLIENTS};
use crate::stats::Results;
use crate::sys;

/// Active clients (at most).
pub const ACTIVE: usize = 8;
/// Client processes (at most).
pub(crate) const PROCS: usize = 2;
/// Ring capacity of each shmpipe pipe: a message is 16 bytes of frame.
const CAPACITY: usize = 4096;

/// The message of connection `c` in round `r`.
pub(crate) fn message(c: usize, r: u64) -> [u8; 8] {
    ((c as u64) << 40 | r).to_le_bytes()
}

/// The connection a message `m` belongs to.
pub(crate) fn conn_of(m: [u8; 8]) -> usize {
    (u64::from_le_bytes(m) >> 40) as usize
}

/// A client's half of one connection.
trait ClientEnd {
    fn send(&mut self, m: [u8; 8]) -> io::Result<()>;
    fn recv(&mut self) -> io::Result<[u8; 8]>;
}

/// The server's side: waits for requests and answers them.
trait Server {
    /// Waits for ready connections and answers one request on each;
    /// returns how many it answered.
    fn serve_some(&mut self) -> io::Result<u64>;
}

/// Runs `serve-{clients}` once with about `n` timed messages.
pub fn run(
    mechanism: Mechanism,
    placement: Placement,
    clients: usize,
    n: u64,
) -> io::Result<Duration> {
    // Six descriptors per shmpipe connection, two or four per kernel one.
    shmpipe::raise_fd_limit()?;
    match mechanism {
        Mechanism::Shmpipe => run_with(placement, clients, n, shm::make),
        Mechanism::EpollSeqpacket => run_with(placement, clients, n, kernel::seqpacket),
        Mechanism::EpollPipe => run_with(placement, clients, n, kernel::pipes),
        _ => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "serve: not a serve contestant",
        )),
    }
}

type Made<S, C> = (S, Vec<Option<C>>);

fn run_with<S: Server, C: ClientEnd>(
    placement: Placement,
    clients: usize,
    n: u64,
    make: impl FnOnce(usize) -> io::Result<Made<S, C>>,
) -> io::Result<Duration> {
    let active = clients.min(ACTIVE);
    let rounds = n.div_ceil(active as u64).max(1);
    let (server, mut ends) = make(clients)?;
    sys::pin(placement.cpu(0))?;
    let gate = Gate::new()?;
    let procs = clients.min(PROCS);
    let mut children = Vec::new();
    let mut server = Some(server);
    for p in 0..procs {
        // The server's ends stay the parent's alone, as a server's workers
        // drop what they do not use: while a child kept its copies, every
        // server end would take turns with it (docs/shared-ends.md).
        let (child, kept) = sys::spawn_apart(server.take().expect("the server"), || {
            // Ours: connections p, p + procs, ...; the rest are dropped.
            let mut mine: Vec<(usize, C)> = Vec::new();
            for (c, e) in ends.iter_mut().enumerate() {
                if let Some(e) = e.take() {
                    if c % procs == p {
                        mine.push((c, e));
                    }
                }
            }
            sys::pin(placement.cpu(1))?;
            gate.ready_then_wait()?;
            let mine_active: usize = mine.iter().filter(|(c, _)| *c < active).count();
            for r in 0..=rounds {
                for (c, e) in mine.iter_mut().take(mine_active) {
                    e.send(message(*c, r))?;
                }
                for (c, e) in mine.iter_mut().take(mine_active) {
                    let got = e.recv()?;
                    if got != message(*c, r) {
                        return Err(check_failed(format!(
                            "connection {c} round {r}: reply {:#x}",
                            u64::from_le_bytes(got)
                        )));
                    }
                }
            }
            // Stay (with the idle connections) until the timing is over:
            // an exit now would make the server drop them meanwhile.
            gate.wait_done();
            Ok(())
        })?;
        server = Some(kept);
        children.push(child);
    }
    let mut server = server.expect("the server");
    drop(ends);
    gate.start(procs)?;
    let elapsed = timed(active, rounds, || server.serve_some())?;
    gate.finish(procs)?;
    drop(server);
    for mut c in children {
        c.wait(Instant::now() + Duration::from_secs(10))?;
    }
    Ok(elapsed)
}

/// The pipes that start a run's client processes together and keep them
/// until the timing is over.
pub(crate) struct Gate {
    ready: (OwnedFd, OwnedFd),
    go: (OwnedFd, OwnedFd),
    done: (OwnedFd, OwnedFd),
}

impl Gate {
    pub(crate) fn new() -> io::Result<Gate> {
        let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC);
        Ok(Gate {
            ready: pipe()?,
            go: pipe()?,
            done: pipe()?,
        })
    }

    /// In a client process: says it is ready and waits for the start.
    pub(crate) fn ready_then_wait(&self) -> io::Result<()> {
        rustix::io::write(&self.ready.1, b"r")?;
        let mut b = [0u8; 1];
        if rustix::io::read(&self.go.0, &mut b)? != 1 {
            return Err(io::Error::other("parent went away before the start"));
        }
        Ok(())
    }

    /// In a client process: waits until the server says the timing is over
    /// (or is gone).
    pub(crate) fn wait_done(&self) {
        let _ = rustix::io::read(&self.done.0, &mut [0u8; 1]);
    }

    /// In the server: waits until `procs` clients are ready, then starts
    /// them.
    pub(crate) fn start(&self, procs: usize) -> io::Result<()> {
        let mut b = [0u8; 16];
        let mut got = 0;
        while got < procs {
            match rustix::io::read(&self.ready.0, &mut b) {
                Ok(0) => return Err(io::Error::other("clients went away before the start")),
                Ok(k) => got += k,
                Err(Errno::INTR) if !sys::watchdog_fired() => {}
                Err(e) => return Err(e.into()),
            }
        }
        rustix::io::write(&self.go.1, &vec![b'g'; procs])?;
        Ok(())
    }

    /// In the server: lets `procs` clients go.
    pub(crate) fn finish(&self, procs: usize) -> io::Result<()> {
        rustix::io::write(&self.done.1, &vec![b'd'; procs])?;
        Ok(())
    }
}

/// Serves round 0 untimed (it carries the start-up), then times the
/// other `rounds` of `active` messages each; `serve_some` answers what is
/// ready and says how many.
pub(crate) fn timed(
    active: usize,
    rounds: u64,
    mut serve_some: impl FnMut() -> io::Result<u64>,
) -> io::Result<Duration> {
    let mut handled = 0u64;
    while handled < active as u64 {
        handled += serve_some()?;
    }
    let start = Instant::now();
    let total = (rounds + 1) * active as u64;
    while handled < total {
        handled += serve_some()?;
    }
    Ok(start.elapsed())
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "watchdog: the run took too long")
}

mod shm {
    use super::*;
    use shmpipe::{Receiver, Sender, WaitSet};

    /// The server: a waitset of the request receivers; replies go out on
    /// the matching senders.
    pub(super) struct ShmServer {
        set: WaitSet,
        replies: Vec<Sender>,
        ready: Vec<shmpipe::waitset::Token>,
    }

    pub(super) struct ShmClient {
        tx: Sender,
        rx: Receiver,
    }

    pub(super) fn make(clients: usize) -> io::Result<Made<ShmServer, ShmClient>> {
        let mut opts = shmpipe::Options::new();
        opts.capacity(CAPACITY);
        let mut set = WaitSet::new()?;
        let mut replies = Vec::with_capacity(clients);
        let mut ends = Vec::with_capacity(clients);
        for c in 0..clients {
            let (req_rx, req_tx) = opts.message_pipe()?;
            let (rep_rx, rep_tx) = opts.message_pipe()?;
            set.add(c as u64, req_rx)?;
            replies.push(rep_tx);
            ends.push(Some(ShmClient {
                tx: req_tx,
                rx: rep_rx,
            }));
        }
        Ok((
            ShmServer {
                set,
                replies,
                ready: Vec::new(),
            },
            ends,
        ))
    }

    impl Server for ShmServer {
        #[inline]
        fn serve_some(&mut self) -> io::Result<u64> {
            self.set
                .wait(&mut self.ready, Some(Duration::from_millis(50)))?;
            if self.ready.is_empty() && sys::watchdog_fired() {
                return Err(timed_out());
            }
            let mut buf = [0u8; 8];
            let mut k = 0;
            for t in self.ready.iter().map(|t| t.0) {
                let rx = self.set.receiver_mut(t).expect("a receiver");
                match rx.recv(&mut buf) {
                    Ok(8) if conn_of(buf) == t as usize => {}
                    // A client process that is done closed its idle ones.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        self.set.remove(t);
                        continue;
                    }
                    Err(e) => return Err(e),
                    Ok(_) => {
                        return Err(check_failed(format!("request {buf:?} on connection {t}")))
                    }
                }
                self.replies[t as usize].send(&buf)?;
                k += 1;
            }
            Ok(k)
        }
    }

    impl ClientEnd for ShmClient {
        #[inline]
        fn send(&mut self, m: [u8; 8]) -> io::Result<()> {
            self.tx.send(&m)
        }
        #[inline]
        fn recv(&mut self) -> io::Result<[u8; 8]> {
            let mut b = [0u8; 8];
            self.rx.recv(&mut b)?;
            Ok(b)
        }
    }
}

mod kernel {
    use super::*;
    use rustix::event::epoll;

    /// One epoll over the server's descriptors; `fds[c]` reads requests
    /// of connection `c` and `out[c]` writes its replies (the same socket
    /// for seqpacket).
    pub(super) struct EpollServer {
        epoll: OwnedFd,
        fds: Vec<OwnedFd>,
        out: Vec<Option<OwnedFd>>,
    }

    /// A client's descriptors: requests go to `tx`, replies come from `rx`.
    pub(super) struct FdClient {
        tx: OwnedFd,
        rx: Option<OwnedFd>,
    }

    fn server(fds: Vec<OwnedFd>, out: Vec<Option<OwnedFd>>) -> io::Result<EpollServer> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        for (c, fd) in fds.iter().enumerate() {
            epoll::add(
                &ep,
                fd,
                epoll::EventData::new_u64(c as u64),
                epoll::EventFlags::IN,
            )?;
        }
        Ok(EpollServer {
            epoll: ep,
            fds,
            out,
        })
    }

    pub(super) fn seqpacket(clients: usize) -> io::Result<Made<EpollServer, FdClient>> {
        let mut fds = Vec::new();
        let mut ends = Vec::new();
        for _ in 0..clients {
            let (a, b) = rustix::net::socketpair(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::SEQPACKET,
                rustix::net::SocketFlags::CLOEXEC,
                None,
            )?;
            fds.push(a);
            ends.push(Some(FdClient { tx: b, rx: None }));
        }
        let out = (0..clients).map(|_| None).collect();
        Ok((server(fds, out)?, ends))
    }

    pub(super) fn pipes(clients: usize) -> io::Result<Made<EpollServer, FdClient>> {
        let mut fds = Vec::new();
        let mut out = Vec::new();
        let mut ends = Vec::new();
        for _ in 0..clients {
            let flags = rustix::pipe::PipeFlags::CLOEXEC;
            let (req_r, req_w) = rustix::pipe::pipe_with(flags)?;
            let (rep_r, rep_w) = rustix::pipe::pipe_with(flags)?;
            fds.push(req_r);
            out.push(Some(rep_w));
            ends.push(Some(FdClient {
                tx: req_w,
                rx: Some(rep_r),
            }));
        }
        Ok((server(fds, out)?, ends))
    }

    fn read8(fd: &OwnedFd) -> io::Result<[u8; 8]> {
        let mut b = [0u8; 8];
        loop {
            match rustix::io::read(fd, &mut b) {
                Ok(8) => return Ok(b),
                Ok(k) => return Err(check_failed(format!("a read of {k} bytes, not 8"))),
                Err(Errno::INTR) if !sys::watchdog_fired() => {}
                Err(Errno::INTR) => return Err(timed_out()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn read8_or_eof(fd: &OwnedFd) -> io::Result<Option<[u8; 8]>> {
        let mut b = [0u8; 8];
        loop {
            match rustix::io::read(fd, &mut b) {
                Ok(8) => return Ok(Some(b)),
                Ok(0) => return Ok(None),
                Ok(k) => return Err(check_failed(format!("a read of {k} bytes, not 8"))),
                Err(Errno::INTR) if !sys::watchdog_fired() => {}
                Err(Errno::INTR) => return Err(timed_out()),
                Err(Errno::CONNRESET) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn write8(fd: &OwnedFd, m: [u8; 8]) -> io::Result<()> {
        loop {
            match rustix::io::write(fd, &m) {
                Ok(8) => return Ok(()),
                Ok(k) => return Err(check_failed(format!("a write of {k} bytes, not 8"))),
                Err(Errno::INTR) if !sys::watchdog_fired() => {}
                Err(Errno::INTR) => return Err(timed_out()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    impl Server for EpollServer {
        #[inline]
        fn serve_some(&mut self) -> io::Result<u64> {
            let mut space = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 256];
            let events = match epoll::wait(&self.epoll, &mut space[..], None) {
                Ok((events, _)) => events,
                Err(Errno::INTR) if !sys::watchdog_fired() => return Ok(0),
                Err(Errno::INTR) => return Err(timed_out()),
                Err(e) => return Err(e.into()),
            };
            let mut k = 0;
            for ev in events.iter() {
                let c = ev.data.u64() as usize;
                let Some(m) = read8_or_eof(&self.fds[c])? else {
                    // A client process that is done closed its idle ones.
                    epoll::delete(&self.epoll, &self.fds[c])?;
                    continue;
                };
                if conn_of(m) != c {
                    return Err(check_failed(format!("request {m:?} on connection {c}")));
                }
                write8(self.out[c].as_ref().unwrap_or(&self.fds[c]), m)?;
                k += 1;
            }
            Ok(k)
        }
    }

    impl ClientEnd for FdClient {
        #[inline]
        fn send(&mut self, m: [u8; 8]) -> io::Result<()> {
            write8(&self.tx, m)
        }
        #[inline]
        fn recv(&mut self) -> io::Result<[u8; 8]> {
            read8(self.rx.as_ref().unwrap_or(&self.tx))
        }
    }

    impl AsFd for FdClient {
        fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.tx.as_fd()
        }
    }
}

/// The `serve-*` table: ns per message handled by the server, per
/// contestant and client count, with each one's growth from 1 to 1000
/// clients and the kernel's cost against shmpipe's at 1000.
pub fn table(results: &Results) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let p = Placement::CrossCore;
    let mechs: Vec<Mechanism> = Mechanism::ALL
        .into_iter()
        .filter(|&m| {
            SERVE_CLIENTS
                .iter()
                .any(|&c| results.get(m, Test::Serve(c), p).is_some())
        })
        .collect();
    if mechs.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nserve-N (ns per message handled; cross-core: one server thread on CPU 0,\n  \
         N clients in 2 processes on CPU 1, {ACTIVE} of them active)"
    );
    let mut head = format!("{:<17}", "mechanism");
    for c in SERVE_CLIENTS {
        let _ = write!(head, " | {:>10}", format!("serve-{c}"));
    }
    let _ = writeln!(out, "{head} | {:>12}", "1000 / 1");
    for &m in &mechs {
        let mut line = format!("{:<17}", m.name());
        for c in SERVE_CLIENTS {
            let cell = results
                .get(m, Test::Serve(c), p)
                .map_or("-".into(), |s| fmt_ns(s.median_ns));
            let _ = write!(line, " | {cell:>10}");
        }
        let growth = match (
            results.get(m, Test::Serve(1), p),
            results.get(m, Test::Serve(1000), p),
        ) {
            (Some(a), Some(b)) if a.median_ns > 0.0 => fmt_ratio(b.median_ns / a.median_ns),
            _ => "-".into(),
        };
        let _ = writeln!(out, "{line} | {growth:>12}");
    }
    let shm = results.get(Mechanism::Shmpipe, Test::Serve(1000), p);
    for m in [Mechanism::EpollSeqpacket, Mechanism::EpollPipe] {
        if let (Some(s), Some(k)) = (shm, results.get(m, Test::Serve(1000), p)) {
            if s.median_ns > 0.0 {
                let _ = writeln!(
                    out,
                    "  serve-1000: shmpipe handles a message {}x as fast as {}",
                    fmt_ratio(k.median_ns / s.median_ns),
                    m.name()
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "  serve-N: ns per message handled with N clients connected;\n  \
         1000 / 1: serve-1000's time over serve-1's (1.00: no cost for the idle clients)."
    );
    out
}
