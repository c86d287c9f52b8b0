//! The loom test files' one way to run a model (included by `#[path]`).

/// Runs `f` under loom with preemption bound `bound` (the environment's
/// `LOOM_MAX_PREEMPTIONS` wins) and prints how many executions it explored.
pub fn model<F>(bound: Option<usize>, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = bound;
    }
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    builder.check(move || {
        counter.fetch_add(1, Relaxed);
        f();
    });
    let bound = builder
        .preemption_bound
        .map_or("none".to_string(), |b| b.to_string());
    println!(
        "{} executions (preemption bound {bound})",
        runs.load(Relaxed)
    );
}
