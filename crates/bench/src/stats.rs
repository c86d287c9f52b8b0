//! Medians, ranges and ratios of the runs of one job.

use crate::job::{Job, Mechanism, Placement, Test};

/// The median of `samples` (the mean of the middle two for an even count);
/// `None` when there are none.
pub fn median(samples: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let mid = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[mid]
    } else {
        (s[mid - 1] + s[mid]) / 2.0
    })
}

/// What the runs of one job came to: nanoseconds per operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// What was measured.
    pub job: Job,
    /// Median of the runs, ns per operation.
    pub median_ns: f64,
    /// Fastest run, ns per operation.
    pub min_ns: f64,
    /// Slowest run, ns per operation.
    pub max_ns: f64,
    /// Number of runs.
    pub runs: usize,
}

impl Summary {
    /// Summarises the per-run figures (ns per operation) of `job`.
    pub fn of(job: Job, samples: &[f64]) -> Option<Self> {
        let median_ns = median(samples)?;
        let min_ns = samples.iter().copied().fold(f64::INFINITY, f64::min);
        let max_ns = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Self {
            job,
            median_ns,
            min_ns,
            max_ns,
            runs: samples.len(),
        })
    }

    /// GB/s (10^9 bytes per second) for tests that move a known amount.
    pub fn gbps(&self) -> Option<f64> {
        self.job
            .test
            .bytes_per_op()
            .map(|b| b as f64 / self.median_ns)
    }
}

/// All the summaries of one bench run, with look-ups for the ratios.
#[derive(Debug, Clone, Default)]
pub struct Results {
    /// One summary per job that ran.
    pub summaries: Vec<Summary>,
}

impl Results {
    /// The summary of one job, if it ran.
    pub fn get(&self, mechanism: Mechanism, test: Test, placement: Placement) -> Option<&Summary> {
        self.summaries.iter().find(|s| {
            s.job
                == Job {
                    mechanism,
                    test,
                    placement,
                }
        })
    }

    /// How many times faster than `pipe` this job was (pipe / this), in the
    /// same run.
    pub fn speedup_vs_pipe(&self, s: &Summary) -> Option<f64> {
        let pipe = self.get(Mechanism::Pipe, s.job.test, s.job.placement)?;
        ratio(pipe.median_ns, s.median_ns)
    }

    /// How many times the physical limit this job took (this / cacheline),
    /// in the same run.
    pub fn times_cacheline(&self, s: &Summary) -> Option<f64> {
        let limit = self.get(Mechanism::Cacheline, s.job.test, s.job.placement)?;
        ratio(s.median_ns, limit.median_ns)
    }
}

/// `a / b`, or `None` when it means nothing.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b > 0.0).then(|| a / b)
}
