//! The operating-system layer of the pipes: the system calls that make
//! and map shared memory, wake and put to sleep an idle end, pass and
//! check descriptors, and read the CPU and the clock, each behind a small
//! safe wrapper. One file per concern:
//!
//! | file | what it holds |
//! | --- | --- |
//! | `region` | memfd, seals, mmap: a ring's shared memory ([`Mapping`]) |
//! | `bell` | an end's wake and liveness channel ([`Bell`], [`OwedWake`]): wake pipes and sockets, the checks on those a peer sends, the `/proc` reopen |
//! | `sleep` | sleeping on a bell, and the polls behind it; [`nap`] |
//! | `sched` | the CPU and the clock, membarrier, `sched_yield`, the fork hook |
//! | `fdpass` | descriptors over a Unix socket, their identity, credentials |
//! | `exec` | descriptors inherited across `exec` |
//! | `epoll` | epoll and eventfd, for the listener, the waitset and an end's descriptor |
//! | `limits` | the descriptor limit |
//! | `maps` | whether a process still maps an end's memory (its holders, `/proc/PID/maps`) |
//! | `fault` | test fault injection (nothing, outside tests and `test-kit`) |
//!
//! What every file here keeps to:
//!
//! - Each wrapper's doc starts with the C call it makes and a link to its
//!   man page, as rustix's do.
//! - Every descriptor made here is close-on-exec; only `exec` clears the
//!   flag, in the child a `Command` spawns.
//! - A signal does not fail a wait or a transfer: after `EINTR` the call
//!   is made again (a wait with a deadline, with the time left), or
//!   `epoll_wait` returns with no events.
//! - A descriptor from a peer is checked first by calls that never enter
//!   a filesystem (`F_GET_SEALS`, `getsockopt`, `F_GETPIPE_SZ`), since an
//!   `fstat` on a FUSE file the peer serves could block us.
//! - Unsafe code only in `region`, `sched`, `fdpass` and `exec`, the only
//!   files allowed it, each block with the invariant that makes it sound.
//! - The files import one another downward only (`bell` uses `sleep` and
//!   `fault`, `epoll` uses `sleep`), never this file; the rest of the
//!   crate names everything as `sys::NAME` through the re-exports below.
//!
//! Not every system call of shmpipe is here: [`Listener`](crate::Listener)
//! and [`connect`](crate::connect) bind, accept and connect through std's
//! `UnixListener` and `UnixStream`, and set the socket file's mode and
//! remove it through `std::fs` (and, to reclaim a stale one, probe it
//! with a non-blocking `connect` and take turns with `flock`, through
//! rustix: see `net::socket_file`); the listener's accept loop reads
//! `RLIMIT_NOFILE` and opens its spare descriptor itself; tokio ends
//! register with tokio's reactor; the file server of shmpipe-fs opens the
//! files it serves through rustix; and unit tests make calls of their own.

mod bell;
mod epoll;
#[allow(unsafe_code)]
mod exec;
pub mod fault;
#[allow(unsafe_code)]
mod fdpass;
mod limits;
mod maps;
#[allow(unsafe_code)]
mod region;
#[allow(unsafe_code)]
mod sched;
mod sleep;

pub(crate) use bell::{check_wake_in, check_wake_socket, open_waker, pipe_id, socket_pair};
pub(crate) use bell::{Bell, OwedWake};
pub(crate) use epoll::{epoll, epoll_add, epoll_del, epoll_wait, EpollEvent};
pub(crate) use epoll::{eventfd, lower, raise};
pub(crate) use exec::{inherit_across_exec, take_inherited};
pub(crate) use fdpass::{inode, peer_credentials, pid, recv_fds, send_fds, uid};
pub use limits::raise_fd_limit;
pub(crate) use maps::{file_len, maps_writable};
pub(crate) use region::{check_memfd, check_sealed, memfd, seal, seals, Mapping, SIZE_SEALS};
pub(crate) use sched::{current_cpu, global_barrier, light_fences, monotonic_ns};
pub(crate) use sched::{on_fork_child_once, yield_now};
pub(crate) use sleep::{nap, Woke};
