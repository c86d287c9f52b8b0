//! Instructions per message for shmpipe's `stream-8B` and `roundtrip-8B`,
//! counted with valgrind's callgrind: it needs no hardware counters, which
//! virtual machines often lack.
//!
//! Each count runs `shmpipe probe TEST N` (see [`crate::probe`]) under
//! callgrind for two values of N and divides the difference by the
//! difference of N, which cancels start-up and set-up. User space only:
//! callgrind does not see the kernel (the data path makes no system call).

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Which counts to make: each a probe run twice under callgrind, so
/// `shmpipe bench --filter` counts (and prints) only those of the tests it
/// selected.
///
/// # Examples
///
/// ```
/// use shmpipe_bench::instructions::Which;
///
/// // What `shmpipe bench --filter roundtrip-8B` counts.
/// let which = Which { roundtrip_8b: true, ..Which::default() };
/// assert!(!which.stream_8b && !which.none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Which {
    /// shmpipe's `stream-8B`.
    pub stream_8b: bool,
    /// The C API's `stream-8B` (`shmpipe-c`).
    pub stream_8b_c: bool,
    /// shmpipe's `roundtrip-8B`.
    pub roundtrip_8b: bool,
    /// The generated RPC client stub (`shmpipe-rpc`).
    pub rpc_stub: bool,
}

impl Which {
    /// Every count (what `shmpipe instructions` prints).
    pub const ALL: Which = Which {
        stream_8b: true,
        stream_8b_c: true,
        roundtrip_8b: true,
        rpc_stub: true,
    };

    /// Whether no count is asked for.
    ///
    /// # Examples
    ///
    /// ```
    /// use shmpipe_bench::instructions::Which;
    ///
    /// assert!(Which::default().none());
    /// assert!(!Which::ALL.none());
    /// ```
    pub fn none(self) -> bool {
        self == Which::default()
    }
}

/// Instructions per message, as counted; a count not asked for is `None`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counts {
    /// What was asked for: a count asked for but `None` failed.
    pub asked: Which,
    /// Per 8-byte item of `stream-8B`: one write plus one read.
    pub stream_8b: Option<f64>,
    /// The same through the C API (`shmpipe-c`: the header's inline
    /// calls, one call each from the harness).
    pub stream_8b_c: Option<f64>,
    /// Per `roundtrip-8B` round trip: two writes plus two reads.
    pub roundtrip_8b: Option<f64>,
    /// Per call of a generated client stub `add(a: u32, b: u32) -> u32`:
    /// from its entry to the request's publish and from the reply's
    /// arrival to its return (see [`rpc_stub`]).
    pub rpc_stub: Option<f64>,
}

/// The two probe counts whose difference is measured.
const FEW: u64 = 10_000;
const MANY: u64 = 60_000;

/// Whether `valgrind` can be run.
pub fn valgrind_available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Counts instructions per message for the probes `which` names, running
/// the probes of `exe` (the `shmpipe` program) under callgrind. A failed
/// Rust probe is an error; a failed C or stub probe leaves its count
/// `None` (the others stand).
pub fn count(exe: &Path, which: Which) -> io::Result<Counts> {
    let per = |test: &str| -> io::Result<f64> {
        let few = total(exe, test, FEW)?;
        let many = total(exe, test, MANY)?;
        Ok(many.saturating_sub(few) as f64 / (MANY - FEW) as f64)
    };
    Ok(Counts {
        asked: which,
        stream_8b: which.stream_8b.then(|| per("stream-8B")).transpose()?,
        stream_8b_c: which.stream_8b_c.then(|| per("stream-8B-c").ok()).flatten(),
        roundtrip_8b: which
            .roundtrip_8b
            .then(|| per("roundtrip-8B"))
            .transpose()?,
        rpc_stub: which.rpc_stub.then(|| rpc_stub(exe).ok()).flatten(),
    })
}

/// Instructions of one client stub call, `add(a, b)` over shmpipe, as
/// SawMill counted its stubs: callgrind collects only inside
/// `rpc_null::stub_probe` (the stub, inlined into a function of its
/// own), and two more toggles stop it inside the stub's two out-of-line
/// calls that are not stub work: `ShmTransport::wait_reply`, the waiting
/// for the reply (from the look at the server's tail to its arrival,
/// sleeping included), and `ShmTransport::wake_server`, the system call
/// that wakes a server asleep on the request ring (a kernel IPC's part,
/// taken only when the server sleeps: under callgrind the threads take
/// turns, so it always does). Counted: the entry, the reserve in the
/// request ring, the argument stores, the request's publish (the tail's
/// store, the fence, the look at the server's parked word), the reply's
/// header check and load, its release and the return; cold paths (the
/// frame that would cross the ring's end) are counted where they run.
/// The difference of two call counts cancels the rest.
pub fn rpc_stub(exe: &Path) -> io::Result<f64> {
    let few = total_with(exe, "rpc-stub", FEW, &STUB_TOGGLES)?;
    let many = total_with(exe, "rpc-stub", MANY, &STUB_TOGGLES)?;
    Ok(many.saturating_sub(few) as f64 / (MANY - FEW) as f64)
}

/// The callgrind options of [`rpc_stub`].
pub const STUB_TOGGLES: [&str; 4] = [
    "--collect-atstart=no",
    "--toggle-collect=shmpipe_bench::rpc_null::stub_probe*",
    "--toggle-collect=*ShmTransport::wait_reply*",
    "--toggle-collect=*ShmTransport::wake_server",
];

/// Total instructions (callgrind's `Ir`) of one probe run.
fn total(exe: &Path, test: &str, n: u64) -> io::Result<u64> {
    total_with(exe, test, n, &[])
}

/// [`total`] with more callgrind options.
fn total_with(exe: &Path, test: &str, n: u64, options: &[&str]) -> io::Result<u64> {
    let out = OutFile::new(test, n);
    let run = Command::new("valgrind")
        .arg("--tool=callgrind")
        .args(options)
        .arg(format!("--callgrind-out-file={}", out.0.display()))
        .arg(exe)
        .args(["probe", test, &n.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    if !run.status.success() {
        return Err(io::Error::other(format!(
            "valgrind on `probe {test} {n}` failed: {}",
            String::from_utf8_lossy(&run.stderr).trim()
        )));
    }
    parse_summary(&std::fs::read_to_string(&out.0)?).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "callgrind output has no `summary:` line",
        )
    })
}

/// The total from a callgrind output file's `summary: N` line.
pub fn parse_summary(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A callgrind output file in the temporary directory, removed on drop.
struct OutFile(PathBuf);

impl OutFile {
    fn new(test: &str, n: u64) -> OutFile {
        OutFile(std::env::temp_dir().join(format!(
            "shmpipe-callgrind-{}-{test}-{n}.out",
            std::process::id()
        )))
    }
}

impl Drop for OutFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
