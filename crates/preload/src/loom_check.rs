//! What the crate's loom models share: one way to run a model.

/// Runs `f` in every schedule loom explores within `bound` preemptions
/// (`LOOM_MAX_PREEMPTIONS` wins) and prints how many there were. Readers
/// and writers in the models pause while another side works: runs longer
/// than loom's default branch limit allows, all of which end.
pub fn check(what: &str, bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = bound;
    }
    builder.max_branches = builder.max_branches.max(20_000);
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    builder.check(move || {
        counter.fetch_add(1, Relaxed);
        f();
    });
    println!("{what}: {} executions", runs.load(Relaxed));
}
