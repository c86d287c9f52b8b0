//! Which contestant takes part in which test: each keeps the tests it has
//! always run, under the names that tables, JSON and `--filter` use.
//! Nothing here runs a test.

use shmpipe_bench::job::{REREAD_SIZES, SERVE_CLIENTS, SWEEP};
use shmpipe_bench::{Mechanism, Test};

/// Every test `shmpipe bench` can select.
fn every_test() -> Vec<Test> {
    let mut tests = vec![Test::Stream8, Test::TokenRing, Test::RpcNull];
    for s in SWEEP {
        tests.push(Test::RoundTrip(s));
        tests.push(Test::Bandwidth(s));
    }
    tests.extend(REREAD_SIZES.map(Test::Reread));
    tests.extend(SERVE_CLIENTS.map(Test::Serve));
    tests
}

/// The round trips and writes of the sweep, up to `largest` bytes.
fn sweep_up_to(largest: &str) -> String {
    let all = [
        "roundtrip-8B bandwidth-8B",
        "roundtrip-64B bandwidth-64B",
        "roundtrip-512B bandwidth-512B",
        "roundtrip-4KiB bandwidth-4KiB",
        "roundtrip-16KiB bandwidth-16KiB",
        "roundtrip-64KiB bandwidth-64KiB",
        "roundtrip-256KiB bandwidth-256KiB",
        "roundtrip-1MiB bandwidth-1MiB",
    ];
    let end = all
        .iter()
        .position(|s| s.ends_with(&format!("-{largest}")))
        .expect("a size of the sweep");
    all[..=end].join(" ")
}

#[test]
fn each_contestant_runs_its_tests() {
    let pipes = format!("stream-8B token-ring-8 {}", sweep_up_to("1MiB"));
    let serve = "serve-1 serve-100 serve-1000";
    let reread = "reread-4KiB-64KiB reread-4KiB-1MiB reread-4KiB-16MiB";
    let peers = cfg!(feature = "peers");
    let expected: Vec<(&str, String)> = vec![
        ("shmpipe", format!("{pipes} {serve}")),
        ("shmpipe-blocking", pipes.clone()),
        ("shmpipe-c", "stream-8B".into()),
        ("pipe", pipes.clone()),
        ("unix-stream", pipes.clone()),
        (
            "unix-seqpacket",
            format!("stream-8B token-ring-8 {}", sweep_up_to("64KiB")),
        ),
        ("eventfd", "token-ring-8 roundtrip-8B".into()),
        ("futex", "token-ring-8 roundtrip-8B".into()),
        ("signal", "token-ring-8 roundtrip-8B".into()),
        ("cacheline", "stream-8B token-ring-8 roundtrip-8B".into()),
        (
            "iceoryx2",
            if peers {
                format!("stream-8B rpc-null roundtrip-8B {serve}")
            } else {
                String::new()
            },
        ),
        (
            "shmem-ipc",
            if peers {
                format!("stream-8B {}", sweep_up_to("1MiB"))
            } else {
                String::new()
            },
        ),
        ("shmpipe-rpc", "rpc-null".into()),
        ("unix-rpc", "rpc-null".into()),
        ("pread", reread.into()),
        ("shmpipe-fileserver", reread.into()),
        ("unix-fileserver", reread.into()),
        ("epoll-seqpacket", serve.into()),
        ("epoll-pipe", serve.into()),
        ("shmpipe-tokio", "roundtrip-8B".into()),
        ("tokio-unix", "roundtrip-8B".into()),
    ];
    let tests = every_test();
    let got: Vec<(&str, String)> = Mechanism::ALL
        .into_iter()
        .map(|m| {
            let runs: Vec<String> = tests
                .iter()
                .filter(|&&t| m.runs(t))
                .map(|t| t.name())
                .collect();
            (m.name(), runs.join(" "))
        })
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn contestants_not_built_in_run_nothing() {
    for m in Mechanism::ALL.into_iter().filter(|m| !m.available()) {
        assert!(every_test().into_iter().all(|t| !m.runs(t)), "{m:?}");
    }
    assert_eq!(
        Mechanism::Iceoryx2.available(),
        cfg!(feature = "peers"),
        "the peers come with the feature"
    );
}
