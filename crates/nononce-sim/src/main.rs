//! `nononce-sim`: runs many seeds of the fleet simulation and prints what they saw.
//!
//! ```text
//! nononce-sim [--seeds N] [--seed S] [--nodes N] [--backend sql|redis|etcd|static|zookeeper] [--zookeeper-seeds M]
//!             [--clocks tight|wide] [--jobs J] [--trace EVENTS] [--keep-going] [--without FAULT] [--without-floor] [--without-release-guard]
//!             [--without-amnesia-guard] [--without-marker-guard] [--without-issued-record] [--without-epoch-floor] [--without-explicit-ids] [--epoch-changes] [--host-list-edits] [--gap redis-failover|sql-lost-commits|static-clock-behind|etcd-restore]
//!             [--report DIR]
//! ```
//!
//! `--seed S` alone runs that one seed and prints its trace if it fails; with `--seeds N`, the
//! seeds `S..S+N`, each on the backend it draws, and then, unless `--backend` names one, the
//! seeds `S..S+M` on ZooKeeper (which no seed draws, so that adding it changed no seed's plan):
//! `M` is `--zookeeper-seeds`, by default a quarter of `N`. Exits with status 1 if any seed
//! failed.
//!
//! `--report DIR` also draws one run per backend as a timeline, `DIR/sim-<backend>.svg`
//! (`nononce-timeline`): with `--seed S` alone that seed, else each backend's first failing
//! seed, or its first seed when none failed. The drawn seed runs once more, to its end (as
//! with `--keep-going`), recording its lease windows and faults; the sweep itself records
//! nothing for it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nononce_sim::{
    Backend, Clocks, Config, Fault, Summary, backend_of, run_seed, run_seed_with_timeline,
};

fn usage() -> ExitCode {
    eprintln!(
        "usage: nononce-sim [--seeds N] [--seed S] [--nodes N] [--backend sql|redis|etcd|static|zookeeper] [--zookeeper-seeds M] \
         [--clocks tight|wide] [--jobs J] [--trace EVENTS] [--keep-going] [--without FAULT] [--without-floor] [--without-release-guard] \
         [--without-amnesia-guard] [--without-marker-guard] [--without-issued-record] [--without-epoch-floor] [--without-explicit-ids] [--epoch-changes] [--host-list-edits] [--gap redis-failover|sql-lost-commits|static-clock-behind|etcd-restore] \
         [--report DIR]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut seeds: Option<u64> = None;
    let mut zookeeper_seeds: Option<u64> = None;
    let mut first: Option<u64> = None;
    let mut jobs = std::thread::available_parallelism().map_or(1, usize::from);
    let mut config = Config::default();
    let mut report_dir: Option<PathBuf> = None;
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match arg.as_str() {
            "--seeds" => seeds = value().parse().ok(),
            "--zookeeper-seeds" => match value().parse() {
                Ok(n) => zookeeper_seeds = Some(n),
                Err(_) => return usage(),
            },
            "--seed" => first = value().parse().ok(),
            "--nodes" => config.nodes = value().parse().ok(),
            "--trace" => config.trace_len = value().parse().unwrap_or(config.trace_len),
            "--jobs" => jobs = value().parse().unwrap_or(jobs).max(1),
            "--backend" => {
                config.backend = match value().as_str() {
                    "sql" => Some(Backend::Sql),
                    "redis" => Some(Backend::Redis),
                    "etcd" => Some(Backend::Etcd),
                    "static" => Some(Backend::Static),
                    "zookeeper" => Some(Backend::ZooKeeper),
                    _ => return usage(),
                };
            }
            "--clocks" => {
                config.clocks = match value().as_str() {
                    "tight" => Some(Clocks::Tight),
                    "wide" => Some(Clocks::Wide),
                    _ => return usage(),
                };
            }
            "--without" => {
                let name = value();
                match Fault::ALL.into_iter().find(|f| f.name() == name) {
                    Some(fault) => config.without.push(fault),
                    None => return usage(),
                }
            }
            "--keep-going" => config.stop_at_first = false,
            "--report" => match value() {
                dir if dir.is_empty() => return usage(),
                dir => report_dir = Some(PathBuf::from(dir)),
            },
            "--without-floor" => config.guards.floor = false,
            "--without-release-guard" => config.guards.release_guard = false,
            "--without-amnesia-guard" => config.guards.amnesia = false,
            "--without-marker-guard" => config.guards.marker = false,
            "--without-issued-record" => config.guards.issued_record = false,
            "--without-epoch-floor" => config.guards.epoch_floor = false,
            "--without-explicit-ids" => config.guards.explicit_ids = false,
            "--epoch-changes" => config.epoch_changes = true,
            "--host-list-edits" => config.host_list_edits = true,
            "--gap" => match value().as_str() {
                "redis-failover" => config.gaps.redis_failover = true,
                "sql-lost-commits" => config.gaps.sql_lost_commits = true,
                "static-clock-behind" => config.gaps.static_clock_behind = true,
                "etcd-restore" => config.gaps.etcd_restore = true,
                _ => return usage(),
            },
            _ => return usage(),
        }
    }
    if seeds.is_none()
        && let Some(seed) = first
    {
        let report = run_seed(seed, &config);
        say(format_args!(
            "{report}events {}, fingerprint {:016x}\n",
            report.events, report.fingerprint
        ));
        if let Some(dir) = &report_dir
            && let Err(e) = draw(seed, &config, dir)
        {
            eprintln!("nononce-sim: {e}");
            return ExitCode::FAILURE;
        }
        return if report.failed() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let count = seeds.unwrap_or(1000);
    let start = first.unwrap_or(1);
    let started = Instant::now();
    let mut summary = sweep(start, count, jobs, &config);
    let mut ranges = format!("seeds {start}..{}", start + count);
    let zookeeper = if config.backend.is_some() {
        0
    } else {
        zookeeper_seeds.unwrap_or(count / 4)
    };
    if zookeeper > 0 {
        let on_zookeeper = Config {
            backend: Some(Backend::ZooKeeper),
            ..config.clone()
        };
        summary.merge(&sweep(start, zookeeper, jobs, &on_zookeeper));
        ranges.push_str(&format!(" and {start}..{} on zookeeper", start + zookeeper));
    }
    let count = count + zookeeper;
    let secs = started.elapsed().as_secs_f64();
    say(format_args!(
        "{summary}\n{ranges}, {jobs} jobs, {secs:.1} s wall, {:.1} seeds/s\n",
        f64::from(u32::try_from(count).unwrap_or(u32::MAX)) / secs.max(1e-9)
    ));
    if let Some(dir) = &report_dir {
        let on_zookeeper = Config {
            backend: Some(Backend::ZooKeeper),
            ..config.clone()
        };
        let sweeps = [
            (start..start + count - zookeeper, &config),
            (start..start + zookeeper, &on_zookeeper),
        ];
        for (seed, config) in drawn_seeds(&summary, &sweeps) {
            if let Err(e) = draw(seed, config, dir) {
                eprintln!("nononce-sim: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if summary.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The seed to draw for each backend the sweeps ran (each a range of seeds and its config):
/// its first failing seed, else its first seed, with the config it ran under.
fn drawn_seeds<'a>(
    summary: &Summary,
    sweeps: &[(std::ops::Range<u64>, &'a Config)],
) -> Vec<(u64, &'a Config)> {
    let mut drawn: Vec<(Backend, u64, &Config)> = Vec::new();
    for &(ref seeds, config) in sweeps {
        for seed in seeds.clone() {
            let backend = backend_of(seed, config);
            if drawn.iter().all(|(b, ..)| *b != backend) {
                drawn.push((backend, seed, config));
            }
        }
    }
    // The failures are in the order of their seeds.
    for (backend, seed, config) in &mut drawn {
        let failed = sweeps.iter().find_map(|&(ref seeds, c)| {
            let f = summary.failures.iter().find(|f| {
                f.backend == *backend
                    && seeds.contains(&f.seed)
                    && backend_of(f.seed, c) == *backend
            })?;
            Some((f.seed, c))
        });
        if let Some((s, c)) = failed {
            (*seed, *config) = (s, c);
        }
    }
    drawn.into_iter().map(|(_, seed, c)| (seed, c)).collect()
}

/// Runs `seed` under `config` to its end, recording its picture, and writes it into `dir` as
/// `sim-<backend>.svg`.
fn draw(seed: u64, config: &Config, dir: &Path) -> Result<(), String> {
    let to_the_end = Config {
        stop_at_first: false,
        ..config.clone()
    };
    let (report, timeline) = run_seed_with_timeline(seed, &to_the_end);
    let path = nononce_timeline_path(dir, report.backend);
    timeline
        .write_svg(&path)
        .map_err(|e| format!("seed {seed}: {e}"))?;
    say(format_args!(
        "timeline of seed {seed} ({} backend): {}\n",
        report.backend,
        path.display()
    ));
    Ok(())
}

/// `DIR/sim-<backend>.svg`.
fn nononce_timeline_path(dir: &Path, backend: Backend) -> PathBuf {
    nononce_sim::report_path(dir, "sim", backend.name())
}

/// Runs the seeds `start..start + count` under `config` on `jobs` threads.
fn sweep(start: u64, count: u64, jobs: usize, config: &Config) -> Summary {
    let next = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let mut summary = Summary::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            break summary;
                        }
                        summary.add(&run_seed(start + i, config));
                    }
                })
            })
            .collect();
        let mut total = Summary::default();
        for worker in workers {
            if let Ok(part) = worker.join() {
                total.merge(&part);
            }
        }
        total
    })
}

/// Writes to standard output; a reader that went away (`| head`) ends the output quietly, the
/// exit status still the run's.
fn say(text: std::fmt::Arguments<'_>) {
    let _ = std::io::stdout().lock().write_fmt(text);
}
