//! The harness's arithmetic and output shapes: medians, ratios, names,
//! filters and the `--json` object. Nothing here measures time.

use shmpipe_bench::instructions::{parse_summary, Counts, Which};
use shmpipe_bench::stats::{median, ratio, Results, Summary};
use shmpipe_bench::{report, Config, Job, Machine, Mechanism, Placement, Test};

fn job(m: Mechanism, t: Test) -> Job {
    Job {
        mechanism: m,
        test: t,
        placement: Placement::CrossCore,
    }
}

#[test]
fn median_of_odd_even_and_empty() {
    assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&[7.0]), Some(7.0));
    assert_eq!(median(&[]), None);
    assert_eq!(median(&[f64::NAN, 2.0]), Some(2.0));
}

#[test]
fn summary_keeps_range_and_count() {
    let s = Summary::of(
        job(Mechanism::Pipe, Test::Stream8),
        &[3.0, 9.0, 1.0, 4.0, 5.0],
    )
    .unwrap();
    assert_eq!(
        (s.median_ns, s.min_ns, s.max_ns, s.runs),
        (4.0, 1.0, 9.0, 5)
    );
    assert!(Summary::of(job(Mechanism::Pipe, Test::Stream8), &[]).is_none());
}

#[test]
fn ratios_against_pipe_and_cacheline() {
    let t = Test::RoundTrip(8);
    let results = Results {
        summaries: vec![
            Summary::of(job(Mechanism::Pipe, t), &[1000.0]).unwrap(),
            Summary::of(job(Mechanism::Cacheline, t), &[100.0]).unwrap(),
            Summary::of(job(Mechanism::Shmpipe, t), &[150.0]).unwrap(),
        ],
    };
    let shm = results
        .get(Mechanism::Shmpipe, t, Placement::CrossCore)
        .unwrap();
    let speedup = results.speedup_vs_pipe(shm).unwrap();
    assert!((speedup - 1000.0 / 150.0).abs() < 1e-9);
    assert!((results.times_cacheline(shm).unwrap() - 1.5).abs() < 1e-9);
    assert!(results
        .get(Mechanism::Shmpipe, t, Placement::SameCore)
        .is_none());
    assert_eq!(ratio(1.0, 0.0), None);
}

#[test]
fn names_round_trip() {
    for name in [
        "stream-8B",
        "roundtrip-8B",
        "bandwidth-64KiB",
        "token-ring-8",
        "roundtrip-1MiB",
        "bandwidth-512B",
    ] {
        assert_eq!(Test::from_name(name).map(Test::name).as_deref(), Some(name));
    }
    for m in Mechanism::ALL {
        assert_eq!(Mechanism::from_name(m.name()), Some(m));
    }
    for p in Placement::ALL {
        assert_eq!(Placement::from_name(p.name()), Some(p));
    }
    assert_eq!(Test::Bandwidth(65536).name(), "bandwidth-64KiB");
}

#[test]
fn filter_selects_by_contestant_test_and_placement() {
    let mut cfg = Config::quick();
    cfg.filter = vec![
        "pipe,shmpipe".into(),
        "roundtrip-8B,stream".into(),
        "same-core".into(),
    ];
    let jobs: Vec<Job> = cfg.select().unwrap().into_iter().flatten().collect();
    assert_eq!(jobs.len(), 4, "{jobs:?}");
    assert!(jobs.iter().all(|j| j.placement == Placement::SameCore));
    assert!(jobs
        .iter()
        .all(|j| matches!(j.mechanism, Mechanism::Pipe | Mechanism::Shmpipe)));
    assert!(jobs
        .iter()
        .all(|j| matches!(j.test, Test::RoundTrip(8) | Test::Stream8)));

    cfg.filter = vec!["roundtrip".into(), "eventfd".into()];
    let jobs: Vec<Job> = cfg.select().unwrap().into_iter().flatten().collect();
    // eventfd carries 8 bytes only: one job per placement.
    assert_eq!(jobs.len(), 3, "{jobs:?}");

    cfg.filter = vec!["no-such-thing".into()];
    assert!(cfg.select().is_err());
}

#[test]
fn json_has_machine_results_and_instructions() {
    let t = Test::Bandwidth(65536);
    let results = Results {
        summaries: vec![Summary::of(job(Mechanism::Shmpipe, t), &[2.0, 4.0, 3.0]).unwrap()],
    };
    let counts = Ok(Counts {
        asked: Which::ALL,
        stream_8b: Some(70.0),
        stream_8b_c: Some(75.0),
        roundtrip_8b: Some(550.0),
        rpc_stub: Some(60.0),
    });
    let v = report::to_json(&Machine::detect(), &results, Some(&counts));
    let mut top: Vec<&String> = v.as_object().unwrap().keys().collect();
    top.sort();
    assert_eq!(top, ["instructions_per_message", "machine", "results"]);
    assert_eq!(v["instructions_per_message"]["stream-8B"], 70.0);
    assert_eq!(v["instructions_per_message"]["roundtrip-8B"], 550.0);
    assert_eq!(v["instructions_per_message"]["rpc-stub"], 60.0);
    let none = report::to_json(
        &Machine::detect(),
        &results,
        Some(&Err("no valgrind".into())),
    );
    assert!(none["instructions_per_message"].is_null());
    assert!(report::instructions_note(Some(&counts)).contains("stream-8B: 70.0 per item"));
    assert!(report::instructions_note(Some(&Err("no valgrind".into()))).contains("no valgrind"));
    assert_eq!(report::instructions_note(None), "");
    for key in [
        "cpu_model",
        "cpu_vendor",
        "cpu_family",
        "cpu_model_number",
        "cpu_stepping",
        "cpu_mhz",
        "cpu",
        "cores",
        "kernel",
        "virtualised",
        "governor",
    ] {
        assert!(v["machine"].get(key).is_some(), "machine lacks {key}");
    }
    let row = &v["results"][0];
    let mut keys: Vec<&String> = row.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "max_ns",
            "mechanism",
            "median_ns",
            "min_ns",
            "placement",
            "runs",
            "test"
        ]
    );
    assert_eq!(row["mechanism"], "shmpipe");
    assert_eq!(row["test"], "bandwidth-64KiB");
    assert_eq!(row["placement"], "cross-core");
    assert_eq!(row["median_ns"], 3.0);
    assert_eq!(row["runs"], 3);
}

#[test]
fn tables_show_the_ratios() {
    let results = Results {
        summaries: vec![
            Summary::of(job(Mechanism::Pipe, Test::Stream8), &[800.0]).unwrap(),
            Summary::of(job(Mechanism::Shmpipe, Test::Stream8), &[8.0]).unwrap(),
        ],
    };
    let text = report::seeds_table(&results);
    assert!(text.contains("AFFINITY SHMEM:"), "{text}");
    assert!(text.contains("100x faster"), "{text}");
    let lm = report::lmbench_table(&results);
    assert!(lm.contains("stream-8B") && lm.contains("shmpipe"), "{lm}");
}

#[test]
fn noisy_figures_are_named() {
    let t = Test::RoundTrip(8);
    let results = Results {
        summaries: vec![
            Summary::of(job(Mechanism::Pipe, t), &[1000.0, 1100.0, 1050.0]).unwrap(),
            Summary::of(job(Mechanism::Shmpipe, t), &[300.0, 310.0, 90000.0]).unwrap(),
        ],
    };
    let notes = report::noise_notes(&results);
    assert!(notes.contains("shmpipe roundtrip-8B cross-core"), "{notes}");
    assert!(
        !notes.contains("pipe roundtrip-8B cross-core: median 1"),
        "{notes}"
    );
    let quiet = Results {
        summaries: vec![Summary::of(job(Mechanism::Pipe, t), &[1000.0, 1100.0]).unwrap()],
    };
    assert_eq!(report::noise_notes(&quiet), "");
}

#[test]
fn callgrind_summary_line_is_parsed() {
    let out =
        "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 31555970\ntotals: 31555970\n";
    assert_eq!(parse_summary(out), Some(31_555_970));
    assert_eq!(parse_summary("events: Ir\n"), None);
    assert_eq!(parse_summary("summary: lots\n"), None);
}

/// Every contestant in every test and placement it takes, as a full run
/// with the `peers` build would report them.
fn every_result() -> Results {
    let mut tests = vec![
        Test::Stream8,
        Test::TokenRing,
        Test::RpcNull,
        Test::Reread(64 << 10),
        Test::Reread(1 << 20),
        Test::Reread(16 << 20),
        Test::Serve(1),
        Test::Serve(100),
        Test::Serve(1000),
    ];
    for s in shmpipe_bench::job::SWEEP {
        tests.push(Test::RoundTrip(s));
        tests.push(Test::Bandwidth(s));
    }
    let mut summaries = Vec::new();
    for p in Placement::ALL {
        for &t in &tests {
            for (i, m) in Mechanism::ALL.into_iter().enumerate() {
                if m.runs(t) || matches!(m, Mechanism::Iceoryx2 | Mechanism::ShmemIpc) {
                    let job = Job {
                        mechanism: m,
                        test: t,
                        placement: p,
                    };
                    // Wide figures, to find the widest cells.
                    let ns = 123_456.7 + i as f64;
                    summaries.push(Summary::of(job, &[ns, ns * 1.1]).unwrap());
                }
            }
        }
    }
    Results { summaries }
}

#[test]
fn every_table_fits_100_columns_and_explains_its_heads() {
    let counts = Ok(Counts {
        asked: Which::ALL,
        stream_8b: Some(64.0),
        stream_8b_c: Some(74.0),
        roundtrip_8b: Some(565.0),
        rpc_stub: Some(28.3),
    });
    let text = report::human(&Machine::detect(), &every_result(), 7, Some(&counts));
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "over 100 columns: {line:?}\n{text}"
        );
    }
    for head in [
        "pipe/x:",
        "x/cl:",
        "GB/s:",
        "x rt8:",
        "1000 / 1:",
        "x pread:",
        "cycles:",
    ] {
        assert_eq!(
            text.matches(head).count(),
            1,
            "{head} not explained once:\n{text}"
        );
    }
    for internal in ["seeds", "goal", "SawMill", "Pentium"] {
        assert!(
            !text.contains(internal),
            "{internal} in the output:\n{text}"
        );
    }
    assert!(
        text.contains("shmpipe handles a message 1.00x as fast as epoll-pipe"),
        "{text}"
    );
}

#[test]
fn instruction_counts_only_for_what_was_asked() {
    let counts = Ok(Counts {
        asked: Which {
            roundtrip_8b: true,
            ..Which::default()
        },
        stream_8b: None,
        stream_8b_c: None,
        roundtrip_8b: Some(565.0),
        rpc_stub: None,
    });
    let note = report::instructions_note(Some(&counts));
    assert!(note.contains("roundtrip-8B: 565.0"), "{note}");
    for other in ["stream-8B", "rpc-stub"] {
        assert!(!note.contains(other), "{note}");
    }
}

#[test]
fn filter_errors_say_what_to_do() {
    let mut cfg = Config::quick();
    cfg.filter = vec!["eventfd,bandwidth".into()];
    let e = cfg.select().unwrap_err().to_string();
    assert!(e.contains("selects nothing"), "{e}");
    if !Mechanism::Iceoryx2.available() {
        cfg.filter = vec!["iceoryx2".into()];
        let e = cfg.select().unwrap_err().to_string();
        assert!(e.contains("FEATURES=peers bash scripts/bench.sh"), "{e}");
    }
}

#[test]
fn plot_folder_is_checked_before_the_run() {
    use shmpipe_bench::plot::check_dir;
    let jobs: Vec<Job> = Config::quick()
        .select()
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    let e = check_dir("/proc/nope".as_ref(), &jobs)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--plot /proc/nope"), "{e}");
    // No sweep and no serve-N: nothing to draw, and no folder made.
    let mut cfg = Config::quick();
    cfg.sweep_placements.clear();
    cfg.filter = vec!["stream-8B".into()];
    let jobs: Vec<Job> = cfg.select().unwrap().into_iter().flatten().collect();
    let dir = std::env::temp_dir().join(format!("no-charts-{}", std::process::id()));
    let e = check_dir(&dir, &jobs).unwrap_err().to_string();
    assert!(e.contains("draw no chart"), "{e}");
    assert!(!dir.exists());
}
