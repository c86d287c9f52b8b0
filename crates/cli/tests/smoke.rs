//! `shmpipe bench` end to end, cut to the minimum: one contestant, one
//! test, one placement, one short run. Checks the JSON shape, not time.

use std::process::Command;

#[test]
fn bench_quick_json_on_one_tiny_job() {
    let out = Command::new(env!("CARGO_BIN_EXE_shmpipe"))
        .args([
            "bench",
            "--quick",
            "--json",
            "--filter",
            "pipe,stream-8B,unpinned",
            "--runs",
            "1",
            "--budget-ms",
            "1",
        ])
        .output()
        .expect("run shmpipe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "shmpipe bench failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert!(v["machine"]["cpu_model"].is_string());
    let rows = v["results"].as_array().expect("results");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["mechanism"], "pipe");
    assert_eq!(rows[0]["test"], "stream-8B");
    assert_eq!(rows[0]["placement"], "unpinned");
    assert!(
        stderr.contains("KERNEL:"),
        "the tables go to stderr: {stderr}"
    );
    // Only pipe ran: no instruction counts, which are shmpipe's.
    assert!(!stderr.contains("Instructions per message"), "{stderr}");
}

/// A bad `--plot` folder fails before the run, naming the folder.
#[test]
fn bench_checks_the_plot_folder_before_the_run() {
    let out = Command::new(env!("CARGO_BIN_EXE_shmpipe"))
        .args([
            "bench",
            "--quick",
            "--plot",
            "/proc/nope",
            "--filter",
            "pipe,roundtrip,unpinned",
            "--runs",
            "1",
            "--budget-ms",
            "1",
        ])
        .output()
        .expect("run shmpipe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--plot /proc/nope"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "it ran: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A peer named without the `peers` build says how to build it.
#[test]
fn bench_names_the_peers_build() {
    if shmpipe_bench::Mechanism::Iceoryx2.available() {
        return; // built with peers: iceoryx2 is there
    }
    let out = Command::new(env!("CARGO_BIN_EXE_shmpipe"))
        .args(["bench", "--filter", "iceoryx2"])
        .output()
        .expect("run shmpipe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("FEATURES=peers"), "{stderr}");
}

#[test]
fn bench_rejects_an_unknown_filter() {
    let out = Command::new(env!("CARGO_BIN_EXE_shmpipe"))
        .args(["bench", "--filter", "no-such-contestant"])
        .output()
        .expect("run shmpipe");
    assert!(!out.status.success());
}
