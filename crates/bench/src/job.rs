//! What one measurement is: a contestant ([`Mechanism`]), a test
//! ([`Test`]) and where its processes run ([`Placement`]), with the names
//! that tables, JSON and `--filter` use for them. A plain vocabulary that
//! every other module shares; which contestant takes part in which test,
//! and how it runs, is registered in [`crate::registry`].

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
    /// handled (see [`crate::serve`]).
    Serve(usize),
}

/// Processes in the token ring.
pub const RING: usize = 8;

/// The message sizes of the sweep: 8 B to 1 MiB.
pub const SWEEP: [usize; 8] = [8, 64, 512, 4096, 16384, 65536, 262_144, 1_048_576];

/// The client counts of `serve-*`.
pub const SERVE_CLIENTS: [usize; 3] = [1, 100, 1000];

/// The file sizes of `reread-4KiB-*`.
pub const REREAD_SIZES: [usize; 3] = [64 << 10, 1 << 20, 16 << 20];

/// Bytes per record of `reread-4KiB-*`.
pub const REREAD_RECORD: usize = 4096;

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
                .filter(|c| SERVE_CLIENTS.contains(c))
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
            Test::Reread(_) => Some(REREAD_RECORD),
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
    pub(crate) fn initial_count(self) -> u64 {
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

    /// The CPU that process `i` (0 = the parent) is pinned to, counted
    /// among the CPUs the bench may use (see `sys::pin`).
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
