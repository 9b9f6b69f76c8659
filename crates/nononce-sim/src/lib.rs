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
pub mod trace;

pub use model::Guards;
pub use plan::{Backend, Clocks, Config, Fault, Gaps, Plan, Profile};
pub use report::{SeedReport, Summary};

/// Runs one seed under `config`: reproducible, the same report every time.
#[must_use]
pub fn run_seed(seed: u64, config: &Config) -> SeedReport {
    let mut rng = rng::Rng::new(seed);
    let plan = Plan::new(seed, config, &mut rng);
    sim::run(plan, rng)
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
