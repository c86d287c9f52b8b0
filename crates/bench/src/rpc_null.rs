//! `rpc-null`: the round trip of a call with no arguments through the
//! stubs `#[shmpipe::service]` generates, over shmpipe (`shmpipe-rpc`) and
//! over a Unix socket (`unix-rpc`, the same stubs on kernel IPC); and the
//! probe that counts the instructions of a client stub (`rpc-stub`).
//!
//! The server is a forked process serving one connection; the client, in
//! the parent, times `n` calls after one untimed call.

use std::io;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use shmpipe::rpc::{self, Transport, UnixTransport};

use crate::check::check_failed;
use crate::job::{Mechanism, Placement};
use crate::sys;

/// The interface measured: SawMill's shapes.
#[shmpipe::service]
pub trait Bench {
    /// No arguments, no result: the `rpc-null` call.
    fn null(&self);
    /// Two words in, one out: the stub whose instructions are counted.
    fn add(&self, a: u32, b: u32) -> u32;
}

/// The server's implementation.
#[derive(Debug, Clone, Copy)]
pub struct Impl;

impl Bench for Impl {
    fn null(&self) {}
    fn add(&self, a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }
}

/// A fresh socket path in the temporary directory.
pub(crate) fn sock_path(what: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "shmpipe-bench-{what}-{}-{}.sock",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

fn timed<T: Transport>(client: &BenchClient<T>, n: u64) -> io::Result<Duration> {
    // The first call is untimed: it carries the server's start-up.
    client.null()?;
    if client.add(1, 2)? != 3 {
        return Err(check_failed("rpc add(1, 2) != 3".into()));
    }
    let start = Instant::now();
    for _ in 0..n {
        client.null()?;
    }
    let elapsed = start.elapsed();
    if client.add(40, 2)? != 42 {
        return Err(check_failed("rpc add(40, 2) != 42".into()));
    }
    Ok(elapsed)
}

/// Runs `rpc-null` once with `n` timed calls.
pub fn run(mechanism: Mechanism, placement: Placement, n: u64) -> io::Result<Duration> {
    sys::pin(placement.cpu(0))?;
    let path = sock_path("rpc");
    let cpu = placement.cpu(1);
    let deadline = || Instant::now() + Duration::from_secs(10);
    match mechanism {
        Mechanism::ShmpipeRpc => {
            let listener = shmpipe::Listener::bind(&path)?;
            let mut child = sys::spawn(|| {
                sys::pin(cpu)?;
                let mut conn = rpc::Conn::new(BenchServer(Impl), listener.accept()?);
                conn.serve()
            })?;
            let client = BenchClient::connect(&path)?;
            drop(listener);
            let t = timed(&client, n)?;
            drop(client);
            child.wait(deadline())?;
            Ok(t)
        }
        Mechanism::UnixRpc => {
            let listener = UnixListener::bind(&path)?;
            let mut child = sys::spawn(|| {
                sys::pin(cpu)?;
                let (stream, _) = listener.accept()?;
                rpc::Conn::unix(BenchServer(Impl), stream)?.serve()
            })?;
            let client = BenchClient::with_transport(UnixTransport::connect(&path)?)?;
            drop(listener);
            let _ = std::fs::remove_file(&path);
            let t = timed(&client, n)?;
            drop(client);
            child.wait(deadline())?;
            Ok(t)
        }
        _ => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "rpc-null: not an RPC contestant",
        )),
    }
}

/// The stub under count: one call of `add`, the method users call, kept
/// out of line so that callgrind can start counting at its entry. Within
/// it, `ShmTransport::wait_reply` (the waiting for the reply) and
/// `ShmTransport::wake_server` (the system call that wakes a sleeping
/// server) are left out by two more toggles (see
/// [`crate::instructions::rpc_stub`]): what remains is the stub from its
/// entry to the request's publish, and from the reply's arrival to its
/// return.
///
/// The stub returns an `io::Result<u32>`; this function hands the caller
/// the `u32` and sends an error out of line (to [`PROBE_ERROR`]), as a
/// caller's `?` does once the stub is inlined into it. Returning the
/// `io::Result` itself from a function kept out of line would count the
/// ABI's return through memory (16 bytes: six more instructions), which
/// no inlined call pays.
#[inline(never)]
pub fn stub_probe<T: Transport>(client: &BenchClient<T>, a: u32, b: u32) -> u32 {
    match client.add(a, b) {
        Ok(v) => v,
        Err(e) => probe_failed(e),
    }
}

/// The error of a call of [`stub_probe`] that failed, for [`probe`].
static PROBE_ERROR: Mutex<Option<io::Error>> = Mutex::new(None);

#[cold]
#[inline(never)]
fn probe_failed(e: io::Error) -> u32 {
    *PROBE_ERROR.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    0
}

/// The probe run under callgrind: a server thread, and `n` calls of
/// [`stub_probe`] from this one.
pub fn probe(n: u64) -> io::Result<()> {
    let path = sock_path("rpc-probe");
    let mut listener = shmpipe::Listener::bind(&path)?;
    let mut quiet = shmpipe::Options::new();
    quiet.spin(Duration::ZERO);
    listener.set_options(quiet.clone());
    let server = std::thread::spawn(move || -> io::Result<()> {
        let mut conn = rpc::Conn::new(BenchServer(Impl), listener.accept()?);
        conn.serve()
    });
    // Under valgrind the two threads take turns: sleep at once instead of
    // spinning (the waiting is not counted anyway).
    let conn = quiet.connect(&path)?;
    let client = BenchClient::new(conn)?;
    let mut sum = 0u32;
    for i in 0..n as u32 {
        sum = sum.wrapping_add(stub_probe(&client, i, 1));
    }
    if let Some(e) = PROBE_ERROR.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    drop(client);
    server
        .join()
        .map_err(|_| io::Error::other("probe server panicked"))??;
    let want = (0..n as u32).fold(0u32, |s, i| s.wrapping_add(i.wrapping_add(1)));
    if sum != want {
        return Err(check_failed("rpc-stub probe: wrong sums".into()));
    }
    Ok(())
}

/// The stub's instruction count, for the notes.
pub fn stub_note(count: Option<f64>) -> String {
    match count {
        Some(c) => format!(
            "  rpc-stub: {c:.1} per call of a generated stub, add(a, b) \
             (entry to publish, reply to return)\n"
        ),
        None => "  rpc-stub: not counted (the callgrind probe failed)\n".into(),
    }
}

/// The `rpc-null` table: ns per call, and the ratio to shmpipe's
/// `roundtrip-8B` in the same run.
pub fn table(results: &crate::Results) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let places: Vec<Placement> = Placement::ALL
        .into_iter()
        .filter(|&p| {
            [
                Mechanism::ShmpipeRpc,
                Mechanism::UnixRpc,
                Mechanism::Iceoryx2,
            ]
            .iter()
            .any(|&m| results.get(m, crate::Test::RpcNull, p).is_some())
        })
        .collect();
    if places.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nrpc-null (ns per call of a generated stub with no arguments)"
    );
    let mut head = format!("{:<17}", "mechanism");
    for p in &places {
        let _ = write!(head, " | {:>15} {:>6}", format!("{} ns", p.name()), "x rt8");
    }
    let _ = writeln!(out, "{head}");
    for m in [
        Mechanism::ShmpipeRpc,
        Mechanism::UnixRpc,
        Mechanism::Iceoryx2,
    ] {
        let mut line = format!("{:<17}", m.name());
        let mut any = false;
        for &p in &places {
            let cell = results.get(m, crate::Test::RpcNull, p);
            let rt = results.get(Mechanism::Shmpipe, crate::Test::RoundTrip(8), p);
            let ratio = match (cell, rt) {
                (Some(c), Some(r)) if r.median_ns > 0.0 => {
                    format!("{:.2}", c.median_ns / r.median_ns)
                }
                _ => "-".into(),
            };
            any |= cell.is_some();
            let _ = write!(
                line,
                " | {:>15} {:>6}",
                cell.map_or("-".into(), |c| crate::figures::fmt_ns(c.median_ns)),
                ratio
            );
        }
        if any {
            let _ = writeln!(out, "{line}");
        }
    }
    let _ = writeln!(
        out,
        "  x rt8: this call's time over shmpipe's roundtrip-8B at the same placement."
    );
    out
}
