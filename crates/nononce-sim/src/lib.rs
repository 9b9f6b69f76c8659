#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
pub mod clock;
pub mod link;
pub mod model;
pub mod plan;
pub mod report;
pub mod rng;
mod sim;
mod timeline;
pub mod trace;

pub use model::Guards;
pub use plan::{Backend, Clocks, Config, Fault, Gaps, Plan, Profile};
pub use report::{SeedReport, Summary};

/// The picture of a run: see [`run_seed_with_timeline`].
pub use nononce_timeline::{Timeline, report_path};

/// Runs one seed under `config`: reproducible, the same report every time.
#[must_use]
pub fn run_seed(seed: u64, config: &Config) -> SeedReport {
    let mut rng = rng::Rng::new(seed);
    let plan = Plan::new(seed, config, &mut rng);
    sim::run(plan, rng, None).0
}

/// Runs one seed under `config` as [`run_seed`] does, and records its picture: every lease
/// window by machine ID and node, every fault, the first finding of each kind. The same run
/// as [`run_seed`]'s: recording draws nothing from the seed's generator.
///
/// ```
/// use nononce_sim::{Config, run_seed, run_seed_with_timeline};
///
/// let (report, timeline) = run_seed_with_timeline(3, &Config::default());
/// assert_eq!(report, run_seed(3, &Config::default()));
/// assert!(!timeline.windows.is_empty() && timeline.marks.is_empty());
/// assert!(timeline.svg().unwrap().contains("time of the run (s)"));
/// ```
#[must_use]
pub fn run_seed_with_timeline(seed: u64, config: &Config) -> (SeedReport, Timeline) {
    let mut rng = rng::Rng::new(seed);
    let plan = Plan::new(seed, config, &mut rng);
    let (report, recorder) = sim::run(plan, rng, Some(Box::default()));
    let recorder = recorder.unwrap_or_default();
    let verdict = if report.failed() { "FAILED" } else { "passed" };
    let title = format!(
        "nononce-sim seed {}: {} backend, {} leases, {} clocks, {} nodes, {} ids ({verdict})",
        report.seed,
        report.backend,
        report.profile,
        report.clocks.name(),
        report.nodes,
        report.capacity,
    );
    let timeline = recorder.finish(title, report.sim_ms);
    (report, timeline)
}

/// The backend seed `seed` runs on under `config`: the one its plan draws, or the one
/// `config` names.
#[must_use]
pub fn backend_of(seed: u64, config: &Config) -> Backend {
    let mut rng = rng::Rng::new(seed);
    Plan::new(seed, config, &mut rng).backend
}

/// Runs `seeds` one after the other and sums them up.
pub fn run_seeds(seeds: impl IntoIterator<Item = u64>, config: &Config) -> Summary {
    let mut summary = Summary::default();
    for seed in seeds {
        summary.add(&run_seed(seed, config));
    }
    summary
}

/// The first seed of `seeds` whose run fails a check, with its report.
pub fn first_failure(seeds: impl IntoIterator<Item = u64>, config: &Config) -> Option<SeedReport> {
    seeds
        .into_iter()
        .map(|seed| run_seed(seed, config))
        .find(SeedReport::failed)
}

/// The first seed of `seeds` whose run issues the very same value twice (an exact duplicate,
/// not only overlapping timestamp ranges): each seed runs to its end.
pub fn first_duplicate(
    seeds: impl IntoIterator<Item = u64>,
    config: &Config,
) -> Option<SeedReport> {
    let config = Config {
        stop_at_first: false,
        ..config.clone()
    };
    seeds
        .into_iter()
        .map(|seed| run_seed(seed, &config))
        .find(|r| r.duplicates > 0)
}
