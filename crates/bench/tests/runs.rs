//! Every contestant runs every test it takes part in, briefly, in every
//! placement, with its items checked. A custom main (no libtest threads),
//! because the harness forks and refuses to while other threads run.
//! Asserts completion and correctness, never time.

use std::time::Duration;

use shmpipe_bench::harness;
use shmpipe_bench::{Job, Mechanism, Placement, Test};

fn main() {
    harness::prepare_process().expect("prepare");
    let tests = [
        Test::Stream8,
        Test::RoundTrip(8),
        Test::RoundTrip(4096),
        Test::Bandwidth(65536),
        Test::TokenRing,
        Test::RpcNull,
        Test::Reread(64 << 10),
        Test::Reread(1 << 20),
        Test::Serve(1),
        Test::Serve(100),
    ];
    let mut ran = 0;
    let mut failed = 0;
    for placement in Placement::ALL {
        for test in tests {
            for mechanism in Mechanism::ALL {
                if !mechanism.runs(test) {
                    continue;
                }
                let job = Job {
                    mechanism,
                    test,
                    placement,
                };
                let n = match test {
                    Test::Stream8 => 2000,
                    Test::TokenRing => 3,
                    _ => 20,
                };
                ran += 1;
                match harness::run_once(job, n, Duration::from_secs(20)) {
                    Ok(_) => {}
                    Err(e) => {
                        failed += 1;
                        eprintln!(
                            "FAILED {} {} {}: {e}",
                            mechanism.name(),
                            test.name(),
                            placement.name()
                        );
                    }
                }
            }
        }
    }
    println!("{} passed, {failed} failed", ran - failed);
    if failed > 0 {
        std::process::exit(1);
    }
}
