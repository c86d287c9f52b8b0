//! Loom models of the signal gate: the functions of the module above, as
//! the library runs them, with threads for a waiting read and for a
//! program installing a handler without `SA_RESTART`.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p shmpipe-preload --release --lib`.
//!
//! A wait runs a few polls; at every point of it where signals are
//! unblocked a handler could run, and there the model asserts that no
//! handler without `SA_RESTART` is installed yet (loom lets that load see
//! every store the memory model allows). The installer asserts the same
//! from its side once its drain is over: no wait is in its unblocked part.

use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;
use loom::thread;

use super::*;

use Ordering::SeqCst;

/// One wait of `polls` polls: begin, poll (switching to blocked signals
/// when the gate says so), end.
fn wait(gate: &Gate, installed: &AtomicBool, unblocked: &AtomicBool, polls: usize) {
    if !gate.begin_unmasked() {
        return; // the wait blocks signals from its start
    }
    unblocked.store(true, SeqCst);
    for _ in 0..polls {
        // A signal's handler may run here, and the wait goes on after it.
        assert!(
            !installed.load(SeqCst),
            "a handler without SA_RESTART ran in an unblocked wait"
        );
        if gate.must_mask() {
            // (Signals blocked here.)
            unblocked.store(false, SeqCst);
            gate.end_unmasked();
            return;
        }
        thread::yield_now();
    }
    assert!(
        !installed.load(SeqCst),
        "a handler without SA_RESTART ran in an unblocked wait"
    );
    unblocked.store(false, SeqCst);
    gate.end_unmasked();
}

/// The program's `sigaction` of a handler without `SA_RESTART`, through
/// the library's wrapper, from a thread with `beneath` waits of its own
/// (it runs in a handler that interrupted them).
fn install(gate: &Gate, installed: &AtomicBool, unblocked: &AtomicBool, beneath: u32) {
    gate.before_interrupting_handler(beneath, || {
        thread::yield_now();
        false
    });
    assert!(
        !unblocked.load(SeqCst),
        "a handler without SA_RESTART installed while a wait is unblocked"
    );
    installed.store(true, SeqCst);
}

fn wait_against_installers(polls: usize, installers: usize) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(if installers > 1 { 1 } else { 3 });
    }
    // Two installers spin on the count side by side.
    builder.max_branches = 100_000;
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let gate = Arc::new(Gate::new());
        let installed = Arc::new(AtomicBool::new(false));
        let unblocked = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (gate, installed, unblocked) = (gate.clone(), installed.clone(), unblocked.clone());
            thread::spawn(move || wait(&gate, &installed, &unblocked, polls))
        };
        let others: Vec<_> = (1..installers)
            .map(|_| {
                let (gate, installed, unblocked) =
                    (gate.clone(), installed.clone(), unblocked.clone());
                thread::spawn(move || install(&gate, &installed, &unblocked, 0))
            })
            .collect();
        install(&gate, &installed, &unblocked, 0);
        waiter.join().unwrap();
        for t in others {
            t.join().unwrap();
        }
        // Every wait is over: the count is back to none, and the gate
        // stays shut.
        assert_eq!(gate.unmasked.load(SeqCst), 0);
        assert!(gate.must_mask());
        assert!(!gate.begin_unmasked());
    });
    println!(
        "a wait of {polls} polls against {installers} installers: {} executions",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[test]
fn a_wait_of_one_poll_against_an_installer() {
    wait_against_installers(1, 1);
}

#[test]
fn a_wait_of_three_polls_against_an_installer() {
    wait_against_installers(3, 1);
}

#[test]
fn a_wait_against_two_installers() {
    wait_against_installers(1, 2);
}

/// An installer beneath which its own thread's wait runs unblocked (it
/// runs in a handler that interrupted it) does not wait for that wait;
/// another thread's wait still blocks first.
#[test]
fn an_installer_does_not_wait_for_the_wait_beneath_it() {
    loom::model(|| {
        let gate = Arc::new(Gate::new());
        let installed = Arc::new(AtomicBool::new(false));
        let unblocked = Arc::new(AtomicBool::new(false));
        assert!(gate.begin_unmasked()); // this thread's own wait, interrupted
        let waiter = {
            let (gate, installed, unblocked) = (gate.clone(), installed.clone(), unblocked.clone());
            thread::spawn(move || wait(&gate, &installed, &unblocked, 2))
        };
        install(&gate, &installed, &unblocked, 1);
        // The handler returns; the interrupted wait polls and blocks.
        assert!(gate.must_mask());
        gate.end_unmasked();
        waiter.join().unwrap();
        assert_eq!(gate.unmasked.load(SeqCst), 0);
    });
}
