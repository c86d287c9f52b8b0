//! The human tables (shmpipe against a kernel pipe in seconds per item,
//! an lmbench-style table, the size sweeps) and the `--json` object.
//! Each fits 100 columns and explains its column heads under it.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::figures::{fmt_ns, fmt_ratio};
use crate::instructions::Counts;
use crate::job::{size_label, Mechanism, Placement, Test, SWEEP};
use crate::machine::Machine;
use crate::registry;
use crate::rpc_null::stub_note;
use crate::stats::{Results, Summary};

/// `text` as lines of at most `width` columns, broken after commas (a
/// piece longer than `width` stands alone), continued lines indented.
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for piece in text.split_inclusive(", ") {
        if !line.trim().is_empty()
            && line.chars().count() + piece.trim_end().chars().count() > width
        {
            out.push_str(line.trim_end());
            out.push('\n');
            line = "  ".into();
        }
        line.push_str(piece);
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// The `--json` object: `{"machine": {...}, "results": [...],
/// "instructions_per_message": {...} or null}`.
///
/// `instructions`: the callgrind counts, the reason there are none, or
/// `None` if they were not asked for (`null` in the last two cases).
pub fn to_json(
    machine: &Machine,
    results: &Results,
    instructions: Option<&Result<Counts, String>>,
) -> Value {
    let rows: Vec<Value> = results
        .summaries
        .iter()
        .map(|s| {
            json!({
                "mechanism": s.job.mechanism.name(),
                "test": s.job.test.name(),
                "placement": s.job.placement.name(),
                "median_ns": s.median_ns,
                "min_ns": s.min_ns,
                "max_ns": s.max_ns,
                "runs": s.runs,
            })
        })
        .collect();
    let instructions = match instructions {
        Some(Ok(c)) => json!({
            "stream-8B": c.stream_8b,
            "stream-8B-c": c.stream_8b_c,
            "roundtrip-8B": c.roundtrip_8b,
            "rpc-stub": c.rpc_stub,
            "counted_with": "valgrind --tool=callgrind (user space, both ends in one thread)",
        }),
        _ => Value::Null,
    };
    json!({
        "machine": machine.to_json(),
        "results": rows,
        "instructions_per_message": instructions,
    })
}

/// The instruction counts asked for, a line each (empty if none was).
pub fn instructions_note(instructions: Option<&Result<Counts, String>>) -> String {
    let c = match instructions {
        None => return String::new(),
        Some(Err(why)) => return format!("Instructions per message: not counted ({why}).\n\n"),
        Some(Ok(c)) => c,
    };
    let mut out =
        "Instructions per message (valgrind callgrind, user space, both ends in one thread):\n"
            .to_owned();
    let mut line = |asked: bool, count: Option<f64>, name: &str, per: &str| {
        if asked {
            let _ = match count {
                Some(n) => writeln!(out, "  {name}: {n:.1} {per}"),
                None => writeln!(out, "  {name}: not counted (the callgrind probe failed)"),
            };
        }
    };
    line(
        c.asked.stream_8b,
        c.stream_8b,
        "stream-8B",
        "per item (one write + one read)",
    );
    line(
        c.asked.stream_8b_c,
        c.stream_8b_c,
        "stream-8B-c",
        "per item, through the C API",
    );
    line(
        c.asked.roundtrip_8b,
        c.roundtrip_8b,
        "roundtrip-8B",
        "per round trip (two writes + two reads)",
    );
    if c.asked.rpc_stub {
        out.push_str(&stub_note(c.rpc_stub));
    }
    out.push('\n');
    out
}

fn seeds_secs(s: Option<&Summary>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{:.12}", s.median_ns * 1e-9))
}

/// SHMEM (shmpipe) against KERNEL (pipe), 8-byte items one per write, in
/// seconds per item as `c/seed.c` prints them, without and with affinity.
pub fn seeds_table(results: &Results) -> String {
    let mut out = String::new();
    let rows = [
        ("", Placement::Unpinned, "no affinity"),
        (
            "AFFINITY ",
            Placement::CrossCore,
            "pinned to CPU 0 and CPU 1",
        ),
        ("SAME-CORE ", Placement::SameCore, "both pinned to CPU 0"),
    ];
    let any = rows.iter().any(|&(_, p, _)| {
        results.get(Mechanism::Shmpipe, Test::Stream8, p).is_some()
            || results.get(Mechanism::Pipe, Test::Stream8, p).is_some()
    });
    if !any {
        return out; // filtered out: no heading over an empty table
    }
    let _ = writeln!(
        out,
        "stream-8B, seconds per 8-byte item: shmpipe (SHMEM) against a kernel pipe (KERNEL)"
    );
    for (prefix, p, note) in rows {
        let shm = results.get(Mechanism::Shmpipe, Test::Stream8, p);
        let ker = results.get(Mechanism::Pipe, Test::Stream8, p);
        if shm.is_none() && ker.is_none() {
            continue;
        }
        let _ = writeln!(
            out,
            "{:<24}{}   ({note})",
            format!("{prefix}SHMEM:"),
            seeds_secs(shm)
        );
        let _ = writeln!(out, "{:<24}{}", format!("{prefix}KERNEL:"), seeds_secs(ker));
        if let (Some(s), Some(k)) = (shm, ker) {
            let _ = writeln!(
                out,
                "{:<24}{}x faster",
                format!("{prefix}SHMEM/KERNEL:"),
                fmt_ratio(k.median_ns / s.median_ns)
            );
        }
    }
    out
}

/// The lines under the tables that set the C API's stream-8B beside the
/// Rust one: `shmpipe-c / shmpipe` per placement. Empty when either is
/// missing.
pub fn capi_ratio_line(results: &Results) -> String {
    let parts: Vec<String> = Placement::ALL
        .into_iter()
        .filter_map(|p| {
            let c = results.get(Mechanism::ShmpipeC, Test::Stream8, p)?;
            let rust = results.get(Mechanism::Shmpipe, Test::Stream8, p)?;
            Some(format!(
                "  {:<10} {:.2}x ({:.1} ns / {:.1} ns)\n",
                p.name(),
                c.median_ns / rust.median_ns,
                c.median_ns,
                rust.median_ns
            ))
        })
        .collect();
    if parts.is_empty() {
        return String::new();
    }
    format!(
        "The C API against Rust, stream-8B (shmpipe-c / shmpipe):\n{}\n",
        parts.concat()
    )
}

fn placements_in(results: &Results) -> Vec<Placement> {
    Placement::ALL
        .into_iter()
        .filter(|p| results.summaries.iter().any(|s| s.job.placement == *p))
        .collect()
}

fn mechanisms_in(results: &Results, test: impl Fn(Test) -> bool) -> Vec<Mechanism> {
    Mechanism::ALL
        .into_iter()
        .filter(|m| {
            results
                .summaries
                .iter()
                .any(|s| s.job.mechanism == *m && test(s.job.test))
        })
        .collect()
}

/// The lmbench-style tables, one per main test: every contestant and
/// placement, with the median, `pipe/x` (times faster than pipe) and
/// `x/cl` (times the cacheline limit), or GB/s for bandwidth; the column
/// heads explained once, under the last table.
pub fn lmbench_table(results: &Results) -> String {
    let mut out = String::new();
    let places = placements_in(results);
    let main_tests = [
        Test::Stream8,
        Test::RoundTrip(8),
        Test::Bandwidth(65536),
        Test::TokenRing,
    ];
    let mut any_bw = false;
    for test in main_tests {
        let mechs = mechanisms_in(results, |t| t == test);
        if mechs.is_empty() {
            continue;
        }
        let bw = test.bytes_per_op().is_some();
        any_bw |= bw;
        let _ = writeln!(out, "\n{} ({}; median of runs)", test.name(), test.unit());
        // Two header lines: the placement over its three columns, then the
        // columns (17 + 26 per placement: 95 columns for all three).
        let mut over = format!("{:<17}", "");
        let mut head = format!("{:<17}", "mechanism");
        for p in &places {
            let _ = write!(over, " | {:^23}", p.name());
            let third = if bw { "GB/s" } else { "x/cl" };
            let _ = write!(head, " | {:>9} {:>6} {:>6}", "ns", "pipe/x", third);
        }
        let _ = writeln!(out, "{}", over.trim_end());
        let _ = writeln!(out, "{head}");
        for m in mechs {
            let mut line = format!("{:<17}", m.name());
            for &p in &places {
                match results.get(m, test, p) {
                    Some(s) => {
                        let third = if bw {
                            opt(s.gbps(), |g| format!("{g:.2}"))
                        } else {
                            opt(results.times_cacheline(s), fmt_ratio)
                        };
                        let _ = write!(
                            line,
                            " | {:>9} {:>6} {:>6}",
                            fmt_ns(s.median_ns),
                            opt(results.speedup_vs_pipe(s), fmt_ratio),
                            third
                        );
                    }
                    None => {
                        let _ = write!(line, " | {:>9} {:>6} {:>6}", "-", "", "");
                    }
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    if !out.is_empty() {
        out.push_str(LMBENCH_LEGEND);
        if any_bw {
            out.push_str("  GB/s: bytes moved per second, in 10^9 (bandwidth).\n");
        }
        out.push('\n');
    }
    out
}

/// The lmbench tables' column heads, explained once.
const LMBENCH_LEGEND: &str =
    "  ns: the median time of one item, round trip, write or hop (lower is better).
  pipe/x: pipe's time over this one's: how many times faster than a kernel pipe.
  x/cl: this time over cacheline's (one cache line bounced between the two
        processes, the floor for any shared-memory handshake).
  cross-core: the two processes on CPU 0 and CPU 1; same-core: both on CPU 0
  (counted among the CPUs the bench may use: under `taskset -c 2,3`, CPU 0
  is CPU 2); unpinned: where the scheduler puts them.
";

/// The size sweeps: round trip in ns, bandwidth in GB/s, per placement.
pub fn sweep_tables(results: &Results) -> String {
    let mut out = String::new();
    for p in placements_in(results) {
        for (kind, is_rt) in [("roundtrip", true), ("bandwidth", false)] {
            let make = |s: usize| {
                if is_rt {
                    Test::RoundTrip(s)
                } else {
                    Test::Bandwidth(s)
                }
            };
            let sizes: Vec<usize> = SWEEP
                .into_iter()
                .filter(|&s| {
                    results
                        .summaries
                        .iter()
                        .any(|x| x.job.test == make(s) && x.job.placement == p)
                })
                .collect();
            if sizes.len() < 3 {
                continue;
            }
            let unit = if is_rt { "ns per round trip" } else { "GB/s" };
            let _ = writeln!(out, "\n{kind} sweep, {} ({unit})", p.name());
            let mut head = format!("{:<17}", "mechanism");
            for &s in &sizes {
                let _ = write!(head, " {:>9}", size_label(s));
            }
            let _ = writeln!(out, "{head}");
            for m in mechanisms_in(results, |t| sizes.iter().any(|&s| t == make(s))) {
                let mut line = format!("{:<17}", m.name());
                for &s in &sizes {
                    let cell = results.get(m, make(s), p).map_or_else(
                        || "-".to_owned(),
                        |x| {
                            if is_rt {
                                fmt_ns(x.median_ns)
                            } else {
                                opt(x.gbps(), |g| format!("{g:.2}"))
                            }
                        },
                    );
                    let _ = write!(line, " {cell:>9}");
                }
                let _ = writeln!(out, "{line}");
            }
        }
    }
    out
}

/// How far apart a figure's slowest and fastest runs may be before the
/// figure is named as noisy.
const NOISY_SPREAD: f64 = 2.0;

/// The figures whose slowest run took over [`NOISY_SPREAD`] times the
/// fastest: on a shared machine a run can lose the CPU or its caches for a
/// while. The medians in the tables stand; this says which to read with
/// care (and that a rerun may be worth it). Empty if none.
pub fn noise_notes(results: &Results) -> String {
    let noisy: Vec<&Summary> = results
        .summaries
        .iter()
        .filter(|s| s.min_ns > 0.0 && s.max_ns > NOISY_SPREAD * s.min_ns)
        .collect();
    if noisy.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "Noisy figures (slowest run over {NOISY_SPREAD}x the fastest; the median stands):\n"
    );
    for s in noisy {
        let _ = writeln!(
            out,
            "  {} {} {}: median {} ns, runs {}-{} ns",
            s.job.mechanism.name(),
            s.job.test.name(),
            s.job.placement.name(),
            fmt_ns(s.median_ns),
            fmt_ns(s.min_ns),
            fmt_ns(s.max_ns)
        );
    }
    out.push('\n');
    out
}

/// Every human table, headed by the machine.
pub fn human(
    machine: &Machine,
    results: &Results,
    runs: usize,
    instructions: Option<&Result<Counts, String>>,
) -> String {
    let mut out = String::new();
    out.push_str(&wrap(&format!("shmpipe bench on {}", machine.line()), 100));
    let _ = writeln!(
        out,
        "medians of {runs} runs, contestants interleaved; ratios from this run. Figures depend on the machine.\n"
    );
    out.push_str(&seeds_table(results));
    out.push_str(&lmbench_table(results));
    out.push_str(&capi_ratio_line(results));
    out.push_str(&sweep_tables(results));
    out.push_str(&registry::tables(machine, results));
    out.push_str(&instructions_note(instructions));
    out.push_str(&noise_notes(results));
    out
}
