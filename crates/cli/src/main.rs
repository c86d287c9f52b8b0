//! The `shmpipe` program. `shmpipe bench` measures shmpipe against the
//! kernel's IPC, peer crates and the physical limit on this machine.

#![deny(unsafe_code)]

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[cfg(feature = "zenoh")]
mod bridge;
mod files;
#[allow(unsafe_code)]
mod run;
use shmpipe_bench::instructions::{self, Counts, Which};
use shmpipe_bench::{plan, plot, probe, report, Config, Machine, Mechanism, Test};

/// Pipes between processes whose data path never enters the kernel.
#[derive(Debug, Parser)]
#[command(name = "shmpipe", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compare shmpipe with pipes, sockets, eventfd, futex, signals, peers
    /// and one bouncing cache line, on this machine.
    Bench(BenchArgs),
    /// Count shmpipe's instructions per message (stream-8B, roundtrip-8B)
    /// with valgrind's callgrind; `bench` reports them too.
    Instructions,
    /// Serve the files beneath a directory, read-only, over shmpipe RPC.
    ///
    /// Clients are bounded as `shmpipe::rpc::ServeLimits` says by default
    /// (4096 in all, 3072 per user, 64 per process, 64 MiB of requests
    /// buffered); a client past a bound is refused with the reason. The
    /// server raises its open-file limit to the hard limit unless
    /// `--keep-fd-limit` is given.
    Fileserver(files::FileserverArgs),
    /// Write files from a `shmpipe fileserver` to standard output.
    Cat(files::CatArgs),
    /// Carry a local service's connections between machines over Zenoh.
    #[cfg(feature = "zenoh")]
    Bridge(bridge::BridgeArgs),
    /// Run a program, and every process it starts, with shmpipe's preload
    /// library (LD_PRELOAD), which carries its pipes (see docs/run.md).
    Run(run::RunArgs),
    /// Run a fixed number of shmpipe messages in one thread, for counting
    /// instructions (see `instructions`).
    #[command(hide = true)]
    Probe {
        /// stream-8B, stream-8B-c, roundtrip-8B, roundtrip-8B-2p, roundtrip-8B-stages, line-permission or rpc-stub.
        test: String,
        /// Messages.
        count: u64,
    },
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// Short runs, the size sweep cross-core only: under two minutes.
    #[arg(long)]
    quick: bool,
    /// Write one JSON object to stdout (the tables go to stderr).
    #[arg(long)]
    json: bool,
    /// Write charts of latency and bandwidth against message size here.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Contestants, tests and placements to run, comma-separated: e.g.
    /// `shmpipe,pipe,roundtrip-8B,cross-core` or `stream,token-ring`.
    #[arg(long, value_name = "LIST")]
    filter: Vec<String>,
    /// Runs per figure (the median is reported; at least 5 for real figures).
    #[arg(long, value_name = "N")]
    runs: Option<usize>,
    /// Target duration of one run, in milliseconds.
    #[arg(long, value_name = "MS")]
    budget_ms: Option<u64>,
    /// Skip the size sweep (keeps the four main tests).
    #[arg(long)]
    no_sweep: bool,
    /// Run only the "unmodified programs" table: lmbench's tests as C
    /// programs, natively, under `shmpipe run` with its rings off
    /// (`SHMPIPE_RUN_RINGS=0`) and under it as it comes (about two and a
    /// half minutes).
    #[arg(long)]
    unmodified: bool,
}

fn bench(args: BenchArgs) -> io::Result<bool> {
    #[cfg(feature = "zenoh")]
    if bridge::wants_bench(&args.filter) {
        return bridge::bench(args.quick, args.runs);
    }
    if args.unmodified {
        let (runs, ms) = (args.runs.unwrap_or(5), args.budget_ms.unwrap_or(200));
        let exe = std::env::current_exe()?;
        print!(
            "{}",
            shmpipe_bench::unmodified::run(&Machine::detect(), &exe, runs, ms)?
        );
        return Ok(true);
    }
    let mut cfg = if args.quick {
        Config::quick()
    } else {
        Config::careful()
    };
    cfg.filter = args.filter;
    if let Some(r) = args.runs {
        cfg.runs = r.max(1);
    }
    if let Some(ms) = args.budget_ms {
        cfg.budget = Duration::from_millis(ms.max(1));
    }
    if args.no_sweep {
        cfg.sweep_placements.clear();
    }
    // Arguments are checked before the run: a bad filter or an unwritable
    // --plot folder fails now, not after minutes of measuring.
    let groups = cfg.select()?;
    if let Some(dir) = &args.plot {
        let jobs: Vec<_> = groups.iter().flatten().copied().collect();
        plot::check_dir(dir, &jobs)?;
    }
    shmpipe_bench::harness::prepare_process()?;
    let machine = Machine::detect();

    // Drawn only from this thread (no steady tick): the bench forks, and a
    // drawing thread would make that unsafe.
    let bar = if io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(plan::steps(&groups, &cfg));
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(bar)
    } else {
        None
    };
    let outcome = plan::run(&groups, &cfg, |what| {
        if let Some(b) = &bar {
            b.set_message(what.to_owned());
            b.inc(1);
        }
    });
    // Instructions per message, for the counted tests the filter selected.
    let selected = |m: Mechanism, t: Test| {
        groups
            .iter()
            .flatten()
            .any(|j| j.mechanism == m && j.test == t)
    };
    let which = Which {
        stream_8b: selected(Mechanism::Shmpipe, Test::Stream8),
        stream_8b_c: selected(Mechanism::ShmpipeC, Test::Stream8),
        roundtrip_8b: selected(Mechanism::Shmpipe, Test::RoundTrip(8)),
        rpc_stub: selected(Mechanism::ShmpipeRpc, Test::RpcNull),
    };
    let counts = (!which.none() && outcome.is_ok()).then(|| {
        if let Some(b) = &bar {
            b.set_message("counting instructions (valgrind callgrind)");
        }
        count_instructions(which)
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let outcome = outcome?;

    let tables = report::human(&machine, &outcome.results, cfg.runs, counts.as_ref());
    if args.json {
        eprint!("{tables}");
        let json = report::to_json(&machine, &outcome.results, counts.as_ref());
        let mut out = io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &json)?;
        writeln!(out)?;
    } else {
        print!("{tables}");
    }
    if let Some(dir) = args.plot {
        for path in plot::write_charts(&dir, &outcome.results)? {
            eprintln!("wrote {}", path.display());
        }
    }
    for f in &outcome.failures {
        eprintln!(
            "shmpipe bench: {} {} {} failed: {}",
            f.job.mechanism.name(),
            f.job.test.name(),
            f.job.placement.name(),
            f.error
        );
    }
    Ok(outcome.failures.is_empty())
}

/// Instructions per message, or why there are none.
fn count_instructions(which: Which) -> Result<Counts, String> {
    if !instructions::valgrind_available() {
        return Err("valgrind not found: apt-get install valgrind".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    instructions::count(&exe, which).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Cat(args) => return files::cat(args),
        Command::Run(args) => return run::run(args),
        Command::Fileserver(args) => files::fileserver(args),
        #[cfg(feature = "zenoh")]
        Command::Bridge(args) => bridge::run(args),
        Command::Bench(args) => bench(args),
        Command::Instructions => count_instructions(Which::ALL)
            .map(|c| {
                print!("{}", report::instructions_note(Some(&Ok(c))));
                true
            })
            .map_err(io::Error::other),
        Command::Probe { test, count } => match probe::Probe::from_name(&test) {
            Some(p) => probe::run(p, count).map(|()| true),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "probe: stream-8B, stream-8B-c, roundtrip-8B, roundtrip-8B-2p, roundtrip-8B-stages, line-permission or rpc-stub",
            )),
        },
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            // shmpipe's own errors start with `shmpipe: ` too: say it once.
            let text = e.to_string();
            eprintln!(
                "shmpipe: {}",
                text.strip_prefix("shmpipe: ").unwrap_or(&text)
            );
            ExitCode::FAILURE
        }
    }
}
