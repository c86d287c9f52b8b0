//! Which jobs to run, in which order, and the loop that runs them:
//! calibrate each contestant, then interleave the contestants run by run.

use std::io;
use std::time::Duration;

use crate::harness;
use crate::job::{Job, Mechanism, Placement, Test, REREAD_SIZES, SERVE_CLIENTS, SWEEP};
use crate::stats::{Results, Summary};

/// How to run the bench.
#[derive(Debug, Clone)]
pub struct Config {
    /// Runs per job (the figure is their median).
    pub runs: usize,
    /// About how long one run should take.
    pub budget: Duration,
    /// Whether to run the size sweep, and at which placements.
    pub sweep_placements: Vec<Placement>,
    /// Filter words (see [`Config::select`]); empty selects everything.
    pub filter: Vec<String>,
}

impl Config {
    /// `--quick`: short runs, the sweep cross-core only; well under two
    /// minutes on a 2-core machine.
    pub fn quick() -> Self {
        Self {
            runs: 5,
            budget: Duration::from_millis(60),
            sweep_placements: vec![Placement::CrossCore],
            filter: Vec::new(),
        }
    }

    /// The default, slower and more careful run.
    pub fn careful() -> Self {
        Self {
            runs: 7,
            budget: Duration::from_millis(100),
            sweep_placements: Placement::ALL.to_vec(),
            filter: Vec::new(),
        }
    }

    /// The jobs selected, grouped by (placement, test); the contestants of
    /// one group are interleaved. Filter words name contestants
    /// (`shmpipe`), tests (`roundtrip-8B`), test families (`stream`,
    /// `roundtrip`, `bandwidth`, `token-ring`) or placements (`cross-core`);
    /// within each kind the words add up, and a kind with no word selects
    /// all of it.
    ///
    /// # Errors
    ///
    /// `InvalidInput`, saying what to do, for a word that names nothing,
    /// a contestant this build lacks (the peers need the `peers`
    /// feature), or a filter that selects no job.
    pub fn select(&self) -> io::Result<Vec<Vec<Job>>> {
        let mut mechs = Vec::new();
        let mut tests: Vec<String> = Vec::new();
        let mut places = Vec::new();
        for w in self
            .filter
            .iter()
            .flat_map(|f| f.split(','))
            .map(str::trim)
            .filter(|w| !w.is_empty())
        {
            if let Some(m) = Mechanism::from_name(w) {
                if !m.available() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "--filter: `{w}` is not in this build; build with the `peers` feature: \
                             FEATURES=peers bash scripts/bench.sh \
                             (or cargo build --release -p shmpipe-cli --features peers)"
                        ),
                    ));
                }
                mechs.push(m);
            } else if let Some(p) = Placement::from_name(w) {
                places.push(p);
            } else if Test::from_name(w).is_some()
                || [
                    "stream",
                    "roundtrip",
                    "bandwidth",
                    "token-ring",
                    "rpc",
                    "reread",
                    "serve",
                ]
                .contains(&w)
            {
                tests.push(w.to_owned());
            } else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("--filter: `{w}` names no contestant, test or placement"),
                ));
            }
        }
        let test_ok = |t: Test| {
            tests.is_empty()
                || tests.iter().any(|w| {
                    *w == t.name()
                        || (!w.contains(|c: char| c.is_ascii_digit())
                            && t.name().starts_with(&format!("{w}-")))
                })
        };
        let mut groups = Vec::new();
        for p in Placement::ALL {
            if !places.is_empty() && !places.contains(&p) {
                continue;
            }
            let mut all_tests = vec![
                Test::Stream8,
                Test::RoundTrip(8),
                Test::Bandwidth(65536),
                Test::TokenRing,
                Test::RpcNull,
            ];
            if p != Placement::Unpinned {
                all_tests.extend(REREAD_SIZES.map(Test::Reread));
            }
            if p == Placement::CrossCore {
                all_tests.extend(SERVE_CLIENTS.map(Test::Serve));
            }
            if self.sweep_placements.contains(&p) || !tests.is_empty() {
                for s in SWEEP {
                    for t in [Test::RoundTrip(s), Test::Bandwidth(s)] {
                        if !all_tests.contains(&t) {
                            all_tests.push(t);
                        }
                    }
                }
            }
            for t in all_tests {
                if !test_ok(t) {
                    continue;
                }
                let jobs: Vec<Job> = Mechanism::ALL
                    .into_iter()
                    .filter(|m| (mechs.is_empty() || mechs.contains(m)) && m.runs(t))
                    .map(|m| Job {
                        mechanism: m,
                        test: t,
                        placement: p,
                    })
                    .collect();
                if !jobs.is_empty() {
                    groups.push(jobs);
                }
            }
        }
        if groups.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "--filter `{}` selects nothing: none of the contestants named takes part \
                     in the tests named at the placements named (`shmpipe bench --help` \
                     lists the words; e.g. eventfd runs no bandwidth, reread runs pinned only)",
                    self.filter.join(",")
                ),
            ));
        }
        Ok(groups)
    }
}

/// A job that could not be measured.
#[derive(Debug)]
pub struct Failure {
    /// The job.
    pub job: Job,
    /// Why.
    pub error: io::Error,
}

/// What a bench run produced.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The figures.
    pub results: Results,
    /// The jobs that failed (other than by a failed check, which aborts).
    pub failures: Vec<Failure>,
}

/// Steps [`run`] reports to its progress callback: one calibration and
/// `runs` runs per job.
pub fn steps(groups: &[Vec<Job>], cfg: &Config) -> u64 {
    groups
        .iter()
        .map(|g| g.len() as u64 * (cfg.runs as u64 + 1))
        .sum()
}

/// Runs the jobs. `progress` hears of every step with what is being done.
/// A failed consistency check aborts with its error.
pub fn run(
    groups: &[Vec<Job>],
    cfg: &Config,
    mut progress: impl FnMut(&str),
) -> io::Result<Outcome> {
    let limit = Duration::from_secs(20) + cfg.budget * 20;
    let mut out = Outcome::default();
    for group in groups {
        let mut counts = Vec::new();
        for &job in group {
            progress(&format!(
                "calibrating {} {} {}",
                job.mechanism.name(),
                job.test.name(),
                job.placement.name()
            ));
            match harness::calibrate(job, cfg.budget, limit) {
                Ok(n) => counts.push((job, n, Vec::with_capacity(cfg.runs))),
                Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(with_job(job, e)),
                Err(e) => {
                    for _ in 0..cfg.runs {
                        progress("skipped");
                    }
                    out.failures.push(Failure { job, error: e });
                }
            }
        }
        for r in 0..cfg.runs {
            // Rotate the order, so that no contestant always goes first.
            let k = counts.len();
            for i in 0..k {
                let (job, n, samples): &mut (Job, u64, Vec<f64>) = &mut counts[(i + r) % k];
                progress(&format!(
                    "{} {} {}",
                    job.mechanism.name(),
                    job.test.name(),
                    job.placement.name()
                ));
                if samples.len() < r {
                    continue; // failed in an earlier run
                }
                match harness::run_once(*job, *n, limit) {
                    Ok(t) => samples.push(t.as_nanos() as f64 / harness::ops(job.test, *n) as f64),
                    Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                        return Err(with_job(*job, e))
                    }
                    Err(e) => out.failures.push(Failure {
                        job: *job,
                        error: e,
                    }),
                }
            }
        }
        for (job, _, samples) in counts {
            if samples.len() == cfg.runs {
                out.results.summaries.extend(Summary::of(job, &samples));
            }
        }
    }
    Ok(out)
}

fn with_job(job: Job, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "{} {} {}: {e}",
            job.mechanism.name(),
            job.test.name(),
            job.placement.name()
        ),
    )
}
