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
        "the seeds' table goes to stderr: {stderr}"
    );
}

#[test]
fn bench_rejects_an_unknown_filter() {
    let out = Command::new(env!("CARGO_BIN_EXE_shmpipe"))
        .args(["bench", "--filter", "no-such-contestant"])
        .output()
        .expect("run shmpipe");
    assert!(!out.status.success());
}
