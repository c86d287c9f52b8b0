//! The "unmodified programs" table (`shmpipe bench --unmodified`): small C
//! programs that call only libc, in lmbench's manner (`c/unmodified.c`),
//! each run natively, under `shmpipe run` with its fast paths off
//! (`SHMPIPE_RUN_RINGS=0`: the hooks alone, every byte through the kernel)
//! and under `shmpipe run` as it comes (stage 2b's resident rings for
//! pipes, 2a's hand-over for socket pairs; docs/run.md), cross-core and
//! same-core, with the share of their pipe bytes that went through rings
//! under the default; the wall
//! time of a 4-stage coreutils pipeline moving 1 GiB; and the instructions
//! the preload library adds to a `write` on a regular file.
//!
//! The programs are compiled at run time with the system's `cc`, as a C
//! user would build them, and started as separate processes: the library
//! can only be judged on a program it is preloaded into.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::stats::median;
use crate::Machine;

const SOURCE: &str = include_str!("../c/unmodified.c");

/// The size of the statistics file the preload library counts bytes in
/// (`SHMPIPE_RUN_STATS`; crates/preload/src/stats.rs has the layout):
/// 64-byte slots, slot 0's first word the number of slots taken, then per
/// slot the pid, bytes written through rings and through the kernel.
const STATS_LEN: usize = 64 * 1024;

/// One program of the table.
struct Program {
    name: &'static str,
    args: &'static [&'static str],
    /// Bandwidth (MB/s, higher is better) rather than time (ns, lower is).
    bandwidth: bool,
}

const PROGRAMS: &[Program] = &[
    Program {
        name: "lat_pipe",
        args: &["lat_pipe"],
        bandwidth: false,
    },
    Program {
        name: "lat_unix",
        args: &["lat_unix"],
        bandwidth: false,
    },
    Program {
        name: "bw_pipe",
        args: &["bw_pipe"],
        bandwidth: true,
    },
    Program {
        name: "bw_unix",
        args: &["bw_unix"],
        bandwidth: true,
    },
    // Not lmbench's: bw_pipe whose writer has a second thread, as in a
    // program with threads (docs/run.md, "Threaded writers").
    Program {
        name: "bw_pipe thr",
        args: &["bw_pipe_thread"],
        bandwidth: true,
    },
    Program {
        name: "lat_ctx -P 2",
        args: &["lat_ctx"],
        bandwidth: false,
    },
    Program {
        name: "lat_ctx -P 8",
        args: &["lat_ctx"],
        bandwidth: false,
    },
];

/// Runs the table, `runs` runs of about `budget_ms` each per figure, and
/// returns it as text. `shmpipe` is the program whose `run` is measured.
pub fn run(machine: &Machine, shmpipe: &Path, runs: usize, budget_ms: u64) -> io::Result<String> {
    let dir = std::env::temp_dir().join(format!("shmpipe-bench-unmodified-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let result = table(machine, shmpipe, &dir, runs.max(1), budget_ms.max(1));
    let _ = fs::remove_dir_all(&dir);
    result
}

fn table(
    machine: &Machine,
    shmpipe: &Path,
    dir: &Path,
    runs: usize,
    budget_ms: u64,
) -> io::Result<String> {
    let prog = compile(dir)?;
    let stats = dir.join("stats");
    let mut out = String::new();
    let _ = writeln!(out, "UNMODIFIED PROGRAMS: lmbench's tests as C programs that call only libc, natively and under `shmpipe run`, its rings off and on (the default)");
    let _ = writeln!(out, "on {}", machine.line());
    let _ = writeln!(out, "medians of {runs} runs of {budget_ms} ms, interleaved; speed-up = native time / run time (bandwidth: run / native);");
    let _ = writeln!(out, "\"rings off\": `shmpipe run` with SHMPIPE_RUN_RINGS=0 (the hooks alone); \"shmpipe run\": as it comes (resident rings for pipes and socket pairs, hand-over for socket pairs without rings); ring bytes: the share written through rings then\n");
    let _ = writeln!(
        out,
        "{:<14} {:<10} {:>14} {:>14} {:>9} {:>14} {:>9} {:>10}",
        "program",
        "placement",
        "native",
        "rings off",
        "speed-up",
        "shmpipe run",
        "speed-up",
        "ring bytes"
    );
    for p in PROGRAMS {
        for placement in ["cross", "same"] {
            let mut args: Vec<String> = p.args.iter().map(|s| s.to_string()).collect();
            args.push(placement.into());
            args.push(budget_ms.to_string());
            if let Some(procs) = p.name.strip_prefix("lat_ctx -P ") {
                args.push(procs.into());
            }
            let mut argv = vec![prog.as_os_str()];
            argv.extend(args.iter().map(OsStr::new));
            let ([n, u, o], ring, kernel) = three_ways(shmpipe, &stats, runs, &argv, measure)?;
            let unit = if p.bandwidth { "MB/s" } else { "ns" };
            let speedup = |x: f64| if p.bandwidth { x / n } else { n / x };
            let _ = writeln!(
                out,
                "{:<14} {:<10} {:>9.0} {unit:<4} {:>9.0} {unit:<4} {:>8.2}x {:>9.0} {unit:<4} {:>8.2}x {:>10}",
                p.name,
                placement,
                n,
                u,
                speedup(u),
                o,
                speedup(o),
                share(ring, kernel)
            );
        }
    }
    out.push_str(&pipeline_row(shmpipe, &stats, runs.min(3))?);
    out.push_str(&instructions_note(shmpipe, &prog));
    Ok(out)
}

/// The wall time of a 4-stage coreutils pipeline moving 1 GiB, natively
/// and under `shmpipe run` (at most 3 runs each: one takes seconds).
fn pipeline_row(shmpipe: &Path, stats: &Path, runs: usize) -> io::Result<String> {
    const SCRIPT: &str = "head -c 1G /dev/zero | tr '\\0' a | cat | wc -c";
    let timed = |cmd: &mut Command| -> io::Result<f64> {
        let start = std::time::Instant::now();
        let out = cmd.output()?;
        let took = start.elapsed().as_secs_f64();
        if !out.status.success() || String::from_utf8_lossy(&out.stdout).trim() != "1073741824" {
            return Err(io::Error::other(format!("{SCRIPT:?} failed: {out:?}")));
        }
        Ok(took)
    };
    let argv = ["sh", "-c", SCRIPT].map(OsStr::new);
    let ([n, u, o], ring, kernel) = three_ways(shmpipe, stats, runs, &argv, timed)?;
    Ok(format!(
        "{:<14} {:<10} {:>9.2} {:<4} {:>9.2} {:<4} {:>8.2}x {:>9.2} {:<4} {:>8.2}x {:>10}\n",
        "coreutils x4",
        "1 GiB",
        n,
        "s",
        u,
        "s",
        n / u,
        o,
        "s",
        n / o,
        share(ring, kernel)
    ))
}

/// `runs` interleaved runs of `argv` natively, under `shmpipe run` with
/// its fast paths off and under it as it comes, each measured by
/// `measure`: the medians of the three, and the bytes the default runs
/// wrote through rings and through the kernel (counted in `stats`).
fn three_ways(
    shmpipe: &Path,
    stats: &Path,
    runs: usize,
    argv: &[&OsStr],
    measure: impl Fn(&mut Command) -> io::Result<f64>,
) -> io::Result<([f64; 3], u64, u64)> {
    let under_run = |switch: Option<&str>| {
        let mut c = Command::new(shmpipe);
        c.arg("run")
            .arg("--")
            .args(argv)
            .env("SHMPIPE_RUN_STATS", stats);
        match switch {
            Some(v) => c.env("SHMPIPE_RUN_RINGS", v),
            None => c.env_remove("SHMPIPE_RUN_RINGS"),
        };
        c
    };
    let mut times: [Vec<f64>; 3] = Default::default();
    let (mut ring, mut kernel) = (0u64, 0u64);
    for _ in 0..runs {
        times[0].push(measure(Command::new(argv[0]).args(&argv[1..]))?);
        times[1].push(measure(&mut under_run(Some("0")))?);
        fs::write(stats, vec![0u8; STATS_LEN])?;
        times[2].push(measure(&mut under_run(None))?);
        let (r, k) = ring_and_kernel_bytes(&fs::read(stats)?);
        ring += r;
        kernel += k;
    }
    Ok((times.map(|t| median(&t).unwrap_or(f64::NAN)), ring, kernel))
}

/// The share of bytes written through rings, or "-" if none were counted.
fn share(ring: u64, kernel: u64) -> String {
    if ring + kernel == 0 {
        "-".to_string()
    } else {
        format!("{:.0}%", 100.0 * ring as f64 / (ring + kernel) as f64)
    }
}

/// Compiles the programs with the system's C compiler.
fn compile(dir: &Path) -> io::Result<PathBuf> {
    let src = dir.join("unmodified.c");
    fs::write(&src, SOURCE)?;
    let prog = dir.join("unmodified");
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-pthread", "-o"])
        .arg(&prog)
        .arg(&src)
        .output()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("the C compiler ({}): {e}", cc.to_string_lossy()),
            )
        })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "compiling the unmodified programs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(prog)
}

/// Runs one program and reads the one figure it prints.
fn measure(cmd: &mut Command) -> io::Result<f64> {
    let out = cmd.output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    text.trim()
        .parse()
        .map_err(|_| io::Error::other(format!("{cmd:?} printed {text:?}")))
}

/// The bytes written through rings and through the kernel, summed over the
/// processes that counted in a statistics file.
fn ring_and_kernel_bytes(file: &[u8]) -> (u64, u64) {
    let word = |slot: usize, w: usize| {
        let at = slot * 64 + w * 8;
        file.get(at..at + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let slots = (word(0, 0) as usize).min(STATS_LEN / 64 - 1);
    (1..=slots).fold((0, 0), |(r, k), s| (r + word(s, 1), k + word(s, 2)))
}

/// The instructions (callgrind) the library adds to a one-byte `write` on
/// a regular file, and to a program's start, or why there are none.
fn instructions_note(shmpipe: &Path, prog: &Path) -> String {
    let counted = |under: bool, writes: u64| -> Option<f64> {
        let mut cmd = if under {
            let mut c = Command::new(shmpipe);
            c.args(["run", "--", "valgrind"]);
            c
        } else {
            Command::new("valgrind")
        };
        cmd.args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
            .arg(prog)
            .args(["write_file", "same", &writes.to_string()]);
        let out = cmd.output().ok()?;
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().find(|l| l.contains("Collected :"))?;
        line.rsplit(':').next()?.trim().parse().ok()
    };
    const N: u64 = 20_000;
    let figures = (|| {
        let (n0, n1) = (counted(false, N)?, counted(false, 2 * N)?);
        let (u0, u1) = (counted(true, N)?, counted(true, 2 * N)?);
        let per_write = ((u1 - u0) - (n1 - n0)) / N as f64;
        let start = (u0 - n0) - per_write * N as f64;
        Some((per_write, start))
    })();
    match figures {
        Some((w, s)) => format!(
            "\nthe preload library adds {w:.1} instructions to a write(2) on a regular file, and {s:.0} to a program's start (callgrind)\n"
        ),
        None => "\ninstructions the preload library adds: not counted (valgrind not found or failed)\n".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_summed_over_the_slots_taken() {
        let mut file = vec![0u8; STATS_LEN];
        let mut put = |slot: usize, word: usize, v: u64| {
            file[slot * 64 + word * 8..][..8].copy_from_slice(&v.to_le_bytes())
        };
        put(0, 0, 2);
        put(1, 1, 10);
        put(1, 2, 30);
        put(2, 2, 60);
        put(3, 2, 1000); // not taken: not counted
        assert_eq!(ring_and_kernel_bytes(&file), (10, 90));
        assert_eq!(share(10, 90), "10%");
        assert_eq!(share(0, 0), "-");
    }
}
