//! Every contestant and test, registered in one place: which contestant
//! takes part in which test, the code that runs it, and the tables the
//! scenarios add to the report. This is the only module that names every
//! scenario: [`crate::harness`] runs what [`runner`] gives it and
//! [`crate::report`] prints what [`tables`] gives it. A new contestant is
//! a [`Mechanism`] (with its name), its module, and its lines here.

use std::io;
use std::time::Duration;

use crate::job::{Mechanism, Placement, Test};
use crate::links::{self, Link};
use crate::machine::Machine;
use crate::stats::Results;
use crate::{capi, link_tests, peers, reread, rpc_null, serve, tokio_rt};
#[cfg(feature = "peers")]
use crate::{rpc_peers, serve_peers};

/// One run of a job as registered: given where the processes run and `n`,
/// the operations to time (laps for the token ring), it returns the time
/// the timed part took.
pub type Runner = Box<dyn Fn(Placement, u64) -> io::Result<Duration>>;

impl Mechanism {
    /// Whether this build can run the contestant (peers need the feature).
    pub fn available(self) -> bool {
        match self {
            Mechanism::Iceoryx2 | Mechanism::ShmemIpc => peers::ENABLED,
            _ => true,
        }
    }

    /// Whether the contestant takes part in `test`.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_bench::{Mechanism, Test};
    ///
    /// assert!(Mechanism::Cacheline.runs(Test::Stream8));
    /// assert!(!Mechanism::Cacheline.runs(Test::Bandwidth(65536)));
    /// ```
    pub fn runs(self, test: Test) -> bool {
        runner(self, test).is_some()
    }
}

/// How contestant `m` runs `test`; `None` if it takes no part in it or
/// is not built into this binary.
///
/// # Examples
///
/// ```
/// use shmpipe_bench::{registry, Mechanism, Test};
///
/// assert!(registry::runner(Mechanism::Pipe, Test::RoundTrip(4096)).is_some());
/// // An eventfd carries an 8-byte count, not a message.
/// assert!(registry::runner(Mechanism::Eventfd, Test::RoundTrip(4096)).is_none());
/// ```
pub fn runner(m: Mechanism, test: Test) -> Option<Runner> {
    use Mechanism as M;
    if !m.available() {
        return None;
    }
    match test {
        Test::Stream8 | Test::RoundTrip(_) | Test::Bandwidth(_) | Test::TokenRing => {
            over_link(m, test)
        }
        Test::RpcNull => match m {
            M::ShmpipeRpc | M::UnixRpc => boxed(move |p, n| rpc_null::run(m, p, n)),
            // Its request-response (feature `peers`).
            #[cfg(feature = "peers")]
            M::Iceoryx2 => boxed(rpc_peers::run),
            _ => None,
        },
        Test::Reread(size) => match m {
            M::Pread | M::ShmpipeFileserver | M::UnixFileserver => {
                boxed(move |p, n| reread::run(m, p, size, n))
            }
            _ => None,
        },
        Test::Serve(clients) => match m {
            M::Shmpipe | M::EpollSeqpacket | M::EpollPipe => {
                boxed(move |p, n| serve::run(m, p, clients, n))
            }
            // Its request-response with its own WaitSet (feature `peers`).
            #[cfg(feature = "peers")]
            M::Iceoryx2 => boxed(move |p, n| serve_peers::run(p, clients, n)),
            _ => None,
        },
    }
}

/// The link tests (`stream-8B`, `roundtrip-N`, `bandwidth-N`,
/// `token-ring-8`): each link contestant with the tests it takes.
fn over_link(m: Mechanism, test: Test) -> Option<Runner> {
    use Mechanism as M;
    let every = |_: Test| true;
    // A handshake keeps one item in flight: no stream, no bandwidth.
    let handshake = |t: Test| matches!(t, Test::RoundTrip(_) | Test::TokenRing);
    match m {
        M::Shmpipe => link::<links::ShmpipeLink>(test, every),
        M::ShmpipeBlocking => link::<links::ShmpipeBlockingLink>(test, every),
        // The C API's cost shows in the seeds' stream; elsewhere it is the
        // Rust pipe's.
        M::ShmpipeC => link::<capi::ShmpipeCLink>(test, |t| t == Test::Stream8),
        M::Pipe => link::<links::PipeLink>(test, every),
        M::UnixStream => link::<links::UnixStreamLink>(test, every),
        M::UnixSeqpacket => link::<links::UnixSeqpacketLink>(test, every),
        M::Eventfd => link::<links::EventfdLink>(test, handshake),
        M::Futex => link::<links::FutexLink>(test, handshake),
        M::Signal => link::<links::SignalLink>(test, handshake),
        // The latency limit: no bandwidth.
        M::Cacheline => link::<links::CachelineLink>(test, |t| !matches!(t, Test::Bandwidth(_))),
        // The peers run no token ring; iceoryx2 (a `u64` per sample) no
        // bandwidth either.
        #[cfg(feature = "peers")]
        M::Iceoryx2 => {
            link::<peers::Iceoryx2Link>(test, |t| matches!(t, Test::Stream8 | Test::RoundTrip(_)))
        }
        #[cfg(feature = "peers")]
        M::ShmemIpc => link::<peers::ShmemIpcLink>(test, |t| t != Test::TokenRing),
        // Their own `roundtrip-8B`, each process in a tokio runtime.
        M::ShmpipeTokio | M::TokioUnix if test == Test::RoundTrip(8) => {
            boxed(move |p, n| tokio_rt::run(m, p, n))
        }
        _ => None,
    }
}

/// Link `L` running `test`, if it `takes` the test and carries its
/// messages.
fn link<L: Link + 'static>(test: Test, takes: impl Fn(Test) -> bool) -> Option<Runner> {
    let fits = match test {
        Test::RoundTrip(size) | Test::Bandwidth(size) => size <= L::MAX_MESSAGE,
        _ => true,
    };
    if fits && takes(test) {
        boxed(move |p, n| link_tests::run::<L>(test, p, n))
    } else {
        None
    }
}

fn boxed(run: impl Fn(Placement, u64) -> io::Result<Duration> + 'static) -> Option<Runner> {
    Some(Box::new(run))
}

/// The scenarios' own tables, in report order: `rpc-null`, `serve-*`,
/// `reread-*` (each empty when its test did not run).
///
/// # Examples
///
/// ```
/// use shmpipe_bench::{registry, Machine, Results};
///
/// assert_eq!(registry::tables(&Machine::detect(), &Results::default()), "");
/// ```
pub fn tables(machine: &Machine, results: &Results) -> String {
    let mut out = rpc_null::table(results);
    out.push_str(&serve::table(results));
    out.push_str(&reread::table(machine, results));
    out
}
