//! The header's inline fast path against the ring's protocol.
//!
//! `include/shmpipe.h` publishes small items by itself (its inline
//! `shmpipe_write`/`shmpipe_read`), following the contract of
//! `shmpipe_ring::Hot`; the protocol's Rust code lives in `shmpipe-ring`
//! only. These tests hold the two together:
//!
//! * the layout: a C compiler's view of `struct shmpipe_fast` and the
//!   `SHMPIPE_FAST_*` constants (`c/fast_layout.c`) against the Rust
//!   struct the library lends and the ring's `PARKED`;
//! * the behaviour: a C program (`c/conformance_peer.c`, built against the
//!   installed library under the sanitizers by `scripts/test-c.sh`, which
//!   names it in `SHMPIPE_C_PEER` and runs the tests marked `ignore` here)
//!   and this process move two streams at once across processes, one each
//!   way: C writes and reads mostly inline, this side through the ring's
//!   `Producer` and `Consumer` (a `shmpipe` `Writer` and `Reader`), both
//!   with naps so that each side parks and is woken. Every byte, the order
//!   and the end of file are checked; the C side also checks that the state
//!   it was lent points where the ring's layout says. A lost wake-up hangs,
//!   and the watchdog turns that into a failure that says which side waited
//!   where; the mutant tests show that it does.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use shmpipe::{Reader, Writer};
use shmpipe_capi::shmpipe_fast;
use shmpipe_ring::layout;

/// The two streams' salts (`c/conformance_peer.c` has the same).
const TO_C_SALT: u64 = 0x746f_2d63;
const FROM_C_SALT: u64 = 0x6672_6f6d;
/// The largest item either side moves in one call.
const MAX_ITEM: usize = 9216;
/// How long a run may take before the watchdog calls it hung: far past
/// what a run needs (a few seconds under the sanitizers), never a
/// measure of speed.
const WATCHDOG: Duration = Duration::from_secs(60);

/// Byte `i` of a stream.
fn pattern(salt: u64, i: u64) -> u8 {
    ((i ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

/// splitmix64, as the C side's.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// As the C side's `item_size`: half small items, some up to the
    /// inline limit and past it, a few larger than a small ring.
    fn item_size(&mut self) -> usize {
        let n = match self.below(100) {
            0..50 => 1 + self.below(16),
            50..80 => 17 + self.below(48),
            80..95 => 65 + self.below(960),
            _ => 1025 + self.below(MAX_ITEM as u64 - 1024),
        };
        n as usize
    }

    /// Naps a millisecond or two, `permille` times in a thousand.
    fn maybe_nap(&mut self, permille: u64) {
        if self.below(1000) < permille {
            thread::sleep(Duration::from_millis(1 + self.below(2)));
        }
    }
}

/// One run: the rings, what moves each way, and how.
#[derive(Debug, Clone)]
struct Case {
    scenario: &'static str,
    capacity: usize,
    /// `None`: the default (adaptive) spin.
    spin: Option<Duration>,
    to_c: u64,
    from_c: u64,
    /// Naps, per mille of steps, on each side.
    sleep: u64,
    /// Whether C closes its writer (or exits with it open).
    close: bool,
    seed: u64,
    c_corrupt_at: Option<u64>,
    rust_corrupt_at: Option<u64>,
    skip_wake: bool,
    /// The C process publishes with hardware fences (its lent `light` is
    /// 0); otherwise as the library decides (light ones where the kernel
    /// has `membarrier`, unless the two ends share a CPU).
    c_full_fences: bool,
    watchdog: Duration,
}

impl Case {
    fn stream(capacity: usize, spin: Option<Duration>, bytes: u64, seed: u64) -> Case {
        Case {
            scenario: "stream",
            capacity,
            spin,
            to_c: bytes,
            from_c: bytes,
            sleep: 3,
            close: true,
            seed,
            c_corrupt_at: None,
            rust_corrupt_at: None,
            skip_wake: false,
            c_full_fences: false,
            watchdog: WATCHDOG,
        }
    }

    /// A wake scenario: a small ring, ends that sleep at once.
    fn wake(scenario: &'static str, skip_wake: bool) -> Case {
        Case {
            scenario,
            skip_wake,
            ..Case::stream(256, Some(Duration::ZERO), 64 << 10, 7)
        }
    }

    /// The C program's arguments: the case and the ring's layout.
    fn c_args(&self) -> Vec<String> {
        let o = |v: usize| v as u64;
        let args: [(&str, u64); 20] = [
            ("seed", self.seed),
            ("capacity", self.capacity as u64),
            ("to_c", self.to_c),
            ("from_c", self.from_c),
            ("sleep", self.sleep),
            ("close", self.close.into()),
            ("corrupt_at", self.c_corrupt_at.unwrap_or(u64::MAX)),
            ("skip_wake", self.skip_wake.into()),
            ("limit", self.watchdog.as_secs() + 30),
            ("data_offset", o(layout::DATA_OFFSET)),
            ("magic_at", o(layout::offset::MAGIC)),
            ("version_at", o(layout::offset::VERSION)),
            ("role_at", o(layout::offset::ROLE)),
            ("capacity_at", o(layout::offset::CAPACITY)),
            ("index_at", o(layout::offset::INDEX)),
            ("parked_at", o(layout::offset::PARKED)),
            ("magic", layout::MAGIC),
            ("version", layout::VERSION.into()),
            ("writer_role", layout::Role::Writer as u64),
            ("reader_role", layout::Role::Reader as u64),
        ];
        let mut v: Vec<String> = args.iter().map(|(k, v)| format!("{k}={v}")).collect();
        v.push(format!("parked_bit={}", layout::PARKED));
        v.push(format!("scenario={}", self.scenario));
        v
    }
}

/// How a run went wrong.
#[derive(Debug)]
enum Failure {
    /// The watchdog fired: someone waits for what never comes.
    Hung(String),
    /// A side saw what it should not have, or exited badly.
    Failed(String),
}

/// What the C side counted (its last line, `c-peer: key=value ...`).
#[derive(Debug)]
struct Report {
    counts: HashMap<String, u64>,
}

impl Report {
    fn get(&self, key: &str) -> u64 {
        *self
            .counts
            .get(key)
            .unwrap_or_else(|| panic!("the C peer did not report {key}: {:?}", self.counts))
    }
}

/// The C program, built by `scripts/test-c.sh`.
fn c_peer() -> String {
    std::env::var("SHMPIPE_C_PEER").unwrap_or_else(|_| {
        panic!(
            "SHMPIPE_C_PEER names the C side of these tests; \
             `bash scripts/test-c.sh` builds it and runs them"
        )
    })
}

/// Writes the `to_c` stream through the ring's `Producer`, in the ways a
/// Rust writer can, and closes it.
fn rust_writer(mut w: Writer, case: &Case, done: &AtomicU64) -> Result<(), String> {
    let mut rng = Rng(case.seed ^ 0x5752);
    let mut buf = vec![0u8; MAX_ITEM];
    let mut at = 0u64;
    while at < case.to_c {
        rng.maybe_nap(case.sleep);
        let n = rng.item_size().min((case.to_c - at) as usize);
        for (i, b) in buf[..n].iter_mut().enumerate() {
            let p = at + i as u64;
            *b = pattern(TO_C_SALT, p)
                ^ if Some(p) == case.rust_corrupt_at {
                    0x5a
                } else {
                    0
                };
        }
        let item = &buf[..n];
        let how = rng.below(4);
        let r = if how == 1 {
            let mut rest = item;
            let mut r = Ok(());
            while !rest.is_empty() && r.is_ok() {
                r = w.write(rest).map(|k| rest = &rest[k..]);
            }
            r
        } else if how >= 2 && n <= case.capacity {
            w.reserve(n).map(|mut g| {
                let (a, b) = g.as_mut_slices();
                let k = a.len();
                a.copy_from_slice(&item[..k]);
                b.copy_from_slice(&item[k..]);
                if how == 2 {
                    g.commit(n);
                } else {
                    g.commit_unpublished(n);
                }
            })
        } else {
            w.write_all(item)
        };
        // A batch of unpublished commits waits for this.
        r.and_then(|()| if how == 3 { w.flush() } else { Ok(()) })
            .map_err(|e| format!("Rust writer: {e} at byte {at}"))?;
        at += n as u64;
        done.store(at, Ordering::Relaxed);
    }
    // Sometimes the C reader sleeps on the empty ring when the end comes.
    rng.maybe_nap(500);
    drop(w);
    Ok(())
}

/// Reads the `from_c` stream through the ring's `Consumer`, in the ways a
/// Rust reader can, checking every byte and the end of file.
fn rust_reader(mut r: Reader, case: &Case, done: &AtomicU64) -> Result<(), String> {
    let mut rng = Rng(case.seed ^ 0x5244);
    let mut buf = vec![0u8; MAX_ITEM];
    let mut at = 0u64;
    loop {
        rng.maybe_nap(case.sleep);
        let want = rng.item_size();
        let n = match rng.below(4) {
            0 | 1 => r.read(&mut buf[..want]),
            2 if at + want as u64 <= case.from_c => r.read_exact(&mut buf[..want]).map(|()| want),
            _ => r.read_chunk().map(|chunk| {
                let k = chunk.len().min(want);
                chunk.bytes().copy_to(&mut buf[..k]);
                chunk.consume(k);
                k
            }),
        }
        .map_err(|e| format!("Rust reader: {e} at byte {at}"))?;
        if n == 0 {
            if at != case.from_c {
                return Err(format!(
                    "Rust reader: end of file after {at} of {} bytes",
                    case.from_c
                ));
            }
            return Ok(());
        }
        if at + n as u64 > case.from_c {
            return Err(format!(
                "Rust reader: more than the {} bytes sent",
                case.from_c
            ));
        }
        for (i, &b) in buf[..n].iter().enumerate() {
            let p = at + i as u64;
            if b != pattern(FROM_C_SALT, p) {
                return Err(format!(
                    "Rust reader: byte {p} is {b:#04x}, expected {:#04x}",
                    pattern(FROM_C_SALT, p)
                ));
            }
        }
        at += n as u64;
        done.store(at, Ordering::Relaxed);
    }
}

/// Reads a child's output to the end on a thread of its own.
fn drain(from: Option<impl Read + Send + 'static>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut from) = from {
            let _ = from.read_to_string(&mut s);
        }
        s
    })
}

/// Runs `case`: the C program on one end of each pipe, this process on
/// the other, under the watchdog.
fn run(case: &Case) -> Result<Report, Failure> {
    let mut options = shmpipe::Options::new();
    options.capacity(case.capacity);
    if let Some(spin) = case.spin {
        options.spin(spin);
    }
    let (mut c_reader, rust_writer_end) = options.pipe().expect("pipe");
    let (rust_reader_end, mut c_writer) = options.pipe().expect("pipe");
    let mut cmd = Command::new(c_peer());
    cmd.args(case.c_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if case.c_full_fences {
        cmd.env("SHMPIPE_FULL_FENCES", "1");
    }
    c_reader.pass_to(&mut cmd, "TO_C").expect("pass_to");
    c_writer.pass_to(&mut cmd, "FROM_C").expect("pass_to");
    // Only the child will hold its ends (their end of file is its): from
    // its first call, C's inline paths may be lent, which an end only is
    // while it has one holder.
    drop((c_reader, c_writer));
    let mut child = cmd.spawn().expect("start the C peer");
    drop(cmd);
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());

    let wrote = Arc::new(AtomicU64::new(0));
    let read = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    {
        let (case, wrote, tx) = (case.clone(), wrote.clone(), tx.clone());
        thread::spawn(move || tx.send(("writer", rust_writer(rust_writer_end, &case, &wrote))));
    }
    {
        let (case, read) = (case.clone(), read.clone());
        thread::spawn(move || tx.send(("reader", rust_reader(rust_reader_end, &case, &read))));
    }

    let deadline = Instant::now() + case.watchdog;
    let mut errors = Vec::new();
    let mut waiting = vec!["writer", "reader"];
    while !waiting.is_empty() {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((who, result)) => {
                waiting.retain(|&w| w != who);
                if let Err(e) = result {
                    errors.push(e);
                    // The other side may wait for a peer that gave up: end it.
                    let _ = child.kill();
                }
            }
            Err(_) => break,
        }
    }
    let mut hung = match waiting[..] {
        [] => None,
        [one] => Some(format!("this process's {one} never finished")),
        _ => Some("this process's writer and reader never finished".to_string()),
    };
    let status = loop {
        match child.try_wait().expect("wait for the C peer") {
            Some(status) => break status,
            None if hung.is_some() || Instant::now() >= deadline => {
                hung.get_or_insert_with(|| "the C peer never exited".into());
                break kill(&mut child);
            }
            None => thread::sleep(Duration::from_millis(5)),
        }
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let story = format!(
        "{}this process wrote {} of {} bytes and read {} of {}; the C peer {status}\n\
         C stdout:\n{out}C stderr:\n{err}",
        errors.iter().map(|e| format!("{e}\n")).collect::<String>(),
        wrote.load(Ordering::Relaxed),
        case.to_c,
        read.load(Ordering::Relaxed),
        case.from_c,
    );
    if let Some(what) = hung {
        return Err(Failure::Hung(format!(
            "watchdog: no end after {:?} ({what}); the C peer was killed\n{story}",
            case.watchdog
        )));
    }
    if !errors.is_empty() || !status.success() {
        return Err(Failure::Failed(story));
    }
    let line = out
        .lines()
        .find(|l| l.starts_with("c-peer: wrote="))
        .ok_or_else(|| Failure::Failed(format!("the C peer reported nothing\n{story}")))?;
    let counts = line["c-peer: ".len()..]
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap_or(u64::MAX)))
        .collect();
    Ok(Report { counts })
}

/// Kills a hung child and reaps it.
fn kill(child: &mut Child) -> std::process::ExitStatus {
    let _ = child.kill();
    child.wait().expect("reap the C peer")
}

/// Runs a case that must pass and checks that both streams went through
/// whole and that C took its inline paths.
fn pass(case: &Case) -> Report {
    let report = match run(case) {
        Ok(report) => report,
        Err(Failure::Hung(s)) | Err(Failure::Failed(s)) => panic!("{case:?}\n{s}"),
    };
    eprintln!("{} {}: {:?}", case.scenario, case.capacity, report.counts);
    assert_eq!(report.get("wrote"), case.from_c);
    assert_eq!(report.get("read"), case.to_c);
    assert_eq!(
        report.get("layout_checks"),
        2,
        "the C side checked both lent states"
    );
    assert!(
        report.get("inline_writes") > 0,
        "no inline write: {report:?}"
    );
    assert!(report.get("inline_reads") > 0, "no inline read: {report:?}");
    report
}

/// As `pass`, for a case whose ends park at every wait: C's inline paths
/// then also meet a sleeping peer, and wake it.
fn pass_waking(case: &Case) -> Report {
    let report = pass(case);
    assert!(
        report.get("inline_write_wakes") > 0,
        "no inline write woke: {report:?}"
    );
    assert!(
        report.get("inline_read_wakes") > 0,
        "no inline read woke: {report:?}"
    );
    report
}

// ------------------------------------------------------------ the layout

/// Compiles and runs `c/fast_layout.c` against the repository's header.
fn c_layout() -> HashMap<String, u64> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let exe = format!(
        "{}/fast_layout-{}",
        env!("CARGO_TARGET_TMPDIR"),
        std::process::id()
    );
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(format!("{root}/include"))
        .arg(format!("{root}/c/fast_layout.c"))
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap_or_else(|e| panic!("run the C compiler {cc}: {e}"));
    assert!(built.success(), "{cc} could not build c/fast_layout.c");
    let out = Command::new(&exe).output().expect("run fast_layout");
    let _ = std::fs::remove_file(&exe);
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').expect("name value");
            (k.to_string(), v.parse().expect("a number"))
        })
        .collect()
}

/// The size of a field, through a projection (`offset_of!` has no twin
/// for sizes).
fn size_of_field<S, F>(_: fn(&S) -> &F) -> usize {
    size_of::<F>()
}

/// The header's inline functions read `struct shmpipe_fast` by a C
/// compiler's offsets, at the start of a stream handle; the library
/// writes it by Rust's, from the ring's `Hot`. Every offset and size, the
/// kinds, the step and the parked bit must agree.
#[test]
fn header_layout_matches_the_lent_state() {
    use std::mem::{align_of, offset_of};
    let c = c_layout();
    let mut rust: Vec<(String, u64)> = vec![
        ("size".into(), size_of::<shmpipe_fast>() as u64),
        ("align".into(), align_of::<shmpipe_fast>() as u64),
    ];
    macro_rules! field {
        ($($f:ident),*) => {$(
            rust.push((concat!("offset.", stringify!($f)).into(), offset_of!(shmpipe_fast, $f) as u64));
            rust.push((
                concat!("size.", stringify!($f)).into(),
                size_of_field(|s: &shmpipe_fast| &s.$f) as u64,
            ));
        )*};
    }
    field!(
        kind,
        step,
        data,
        mask,
        pos,
        limit,
        index,
        peer_parked,
        woken,
        light,
        noted,
        lent_pos
    );
    rust.extend([
        (
            "SHMPIPE_FAST_WRITER".into(),
            shmpipe_capi::SHMPIPE_FAST_WRITER.into(),
        ),
        (
            "SHMPIPE_FAST_READER".into(),
            shmpipe_capi::SHMPIPE_FAST_READER.into(),
        ),
        (
            "SHMPIPE_FAST_STEP".into(),
            shmpipe_capi::SHMPIPE_FAST_STEP.into(),
        ),
        // The header's parked bit is the ring's.
        ("SHMPIPE_FAST_PARKED".into(), layout::PARKED),
    ]);
    for (name, value) in &rust {
        assert_eq!(
            c.get(name),
            Some(value),
            "{name}: C says {:?}, Rust {value}",
            c.get(name)
        );
    }
    assert_eq!(
        c.len(),
        rust.len(),
        "C prints what this test does not check: {c:?}"
    );
    // `kind` is the first word of every stream handle.
    let (mut r, mut w) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: writable out-pointers; the handles are read at their start,
    // where the library keeps a `shmpipe_fast`, and closed once.
    unsafe {
        assert_eq!(shmpipe_capi::shmpipe_pipe(&mut r, &mut w), 0);
        assert_eq!(
            (*w.cast::<shmpipe_fast>()).kind,
            shmpipe_capi::SHMPIPE_FAST_WRITER
        );
        assert_eq!(
            (*r.cast::<shmpipe_fast>()).kind,
            shmpipe_capi::SHMPIPE_FAST_READER
        );
        shmpipe_capi::shmpipe_reader_close(r);
        shmpipe_capi::shmpipe_writer_close(w);
    }
}

// ------------------------------------------------------- the behaviour

/// A ring smaller than some items, ends that sleep at once: the inline
/// paths meet full and empty rings, wrap-around (an item that crosses the
/// end goes to the library) and a parked peer all the time.
#[test]
#[ignore = "needs the C peer: bash scripts/test-c.sh builds it and runs this"]
fn small_ring_every_wait_parks() {
    pass_waking(&Case::stream(256, Some(Duration::ZERO), 1 << 20, 1));
}

/// As `small_ring_every_wait_parks`, with the C side publishing with
/// hardware fences: the other branch of the inline publish, and of the
/// Rust side's parking (no `membarrier` for such a peer).
#[test]
#[ignore = "needs the C peer: bash scripts/test-c.sh builds it and runs this"]
fn small_ring_c_full_fences() {
    let case = Case {
        c_full_fences: true,
        ..Case::stream(256, Some(Duration::ZERO), 1 << 20, 6)
    };
    let report = pass_waking(&case);
    assert_eq!(report.get("light_publishes"), 0);
}

/// A page-sized ring with the default (adaptive) spin: the peer is more
/// often caught spinning, and parks after its spin in the naps.
#[test]
#[ignore = "needs the C peer: bash scripts/test-c.sh builds it and runs this"]
fn page_ring_default_spin() {
    pass(&Case::stream(4096, None, 2 << 20, 2));
}

/// The default ring, more bytes, and a C writer that exits without
/// closing: what it published inline (and never told the library) is all
/// there, then the end of file.
#[test]
#[ignore = "needs the C peer: bash scripts/test-c.sh builds it and runs this"]
fn default_ring_writer_exits_without_closing() {
    let case = Case {
        close: false,
        ..Case::stream(shmpipe::DEFAULT_CAPACITY, Some(Duration::ZERO), 4 << 20, 3)
    };
    pass_waking(&case);
}

/// The Rust reader sleeps on an empty ring; C's next inline write wakes it.
#[test]
#[ignore = "needs the C peer: bash scripts/test-c.sh builds it and runs this"]
fn inline_write_wakes_a_parked_rust_reader() {
    let report = pass(&Case::wake("wake_reader", false));
    assert_eq!(report.get("scenario_wakes"), 1);
}

/// The Rust writer sleeps on a full ring; C's next inline read wakes it.
#[test]
#[ignore = "needs the C peer: bash scripts/test-c.sh builds it and runs this"]
fn inline_read_wakes_a_parked_rust_writer() {
    let report = pass(&Case::wake("wake_writer", false));
    assert_eq!(report.get("scenario_wakes"), 1);
}

/// Mutants: the same scenarios with the lent state saying the peer's
/// parking was woken already, so the header skips the wake. The peer then
/// sleeps with data (or room) it never sees: the watchdog must call it a
/// hang. (The C side's wait for the parking to last can, rarely, lose a
/// race with the peer's last look, which then sees the data: that run
/// ends well and is tried again.)
#[test]
#[ignore = "needs the C peer: bash scripts/test-c.sh builds it and runs this"]
fn a_skipped_wake_hangs_and_the_watchdog_says_so() {
    for scenario in ["wake_reader", "wake_writer"] {
        let case = Case {
            watchdog: Duration::from_secs(3),
            ..Case::wake(scenario, true)
        };
        let mut tries = 0;
        loop {
            tries += 1;
            match run(&case) {
                Err(Failure::Hung(s)) if s.contains("c-peer: armed") => break,
                Err(Failure::Hung(s)) if tries < 3 => {
                    eprintln!("{scenario}: hung before arming\n{s}")
                }
                Ok(_) if tries < 3 => {
                    eprintln!("{scenario}: the peer saw the data in its last look")
                }
                other => panic!("{scenario}: expected a hang after arming, got {other:?}"),
            }
        }
    }
}

/// A wrong byte from C is named by the Rust reader.
#[test]
#[ignore = "needs the C peer: bash scripts/test-c.sh builds it and runs this"]
fn a_wrong_byte_from_c_is_named() {
    let case = Case {
        c_corrupt_at: Some(100_003),
        ..Case::stream(256, Some(Duration::ZERO), 200_000, 4)
    };
    match run(&case) {
        Err(Failure::Failed(s)) => assert!(s.contains("Rust reader: byte 100003 is"), "{s}"),
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// A wrong byte from Rust is named by the C reader.
#[test]
#[ignore = "needs the C peer: bash scripts/test-c.sh builds it and runs this"]
fn a_wrong_byte_from_rust_is_named() {
    let case = Case {
        rust_corrupt_at: Some(100_003),
        ..Case::stream(256, Some(Duration::ZERO), 200_000, 5)
    };
    match run(&case) {
        Err(Failure::Failed(s)) => assert!(s.contains("C reader: byte 100003 is"), "{s}"),
        other => panic!("expected a failure, got {other:?}"),
    }
}
