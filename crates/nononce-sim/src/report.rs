//! What a run saw: per seed, and summed over many seeds.

use std::collections::BTreeMap;
use std::fmt;

use crate::plan::{Backend, Clocks};

/// Counters of one run, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Faults injected, by class.
    pub faults: BTreeMap<&'static str, u64>,
    /// Lease state transitions (`from -> to`).
    pub transitions: BTreeMap<(&'static str, &'static str), u64>,
    /// Why leases were lost.
    pub losses: BTreeMap<&'static str, u64>,
    /// Strategy calls by operation and outcome (`ok`, or the error kind).
    pub operations: BTreeMap<(&'static str, &'static str), u64>,
    /// Network events (messages, dropped, duplicated, reordered, ...).
    pub network: BTreeMap<&'static str, u64>,
    /// Generation refusals and other events at the nodes.
    pub nodes: BTreeMap<&'static str, u64>,
}

fn bump<K: Ord>(map: &mut BTreeMap<K, u64>, key: K) {
    *map.entry(key).or_insert(0) += 1;
}

fn add<K: Ord + Clone>(into: &mut BTreeMap<K, u64>, from: &BTreeMap<K, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

impl Stats {
    pub(crate) fn fault(&mut self, name: &'static str) {
        bump(&mut self.faults, name);
    }
    pub(crate) fn transition(&mut self, from: &'static str, to: &'static str) {
        bump(&mut self.transitions, (from, to));
    }
    pub(crate) fn loss(&mut self, name: &'static str) {
        bump(&mut self.losses, name);
    }
    pub(crate) fn operation(&mut self, op: &'static str, outcome: &'static str) {
        bump(&mut self.operations, (op, outcome));
    }
    pub(crate) fn net(&mut self, name: &'static str) {
        bump(&mut self.network, name);
    }
    pub(crate) fn node(&mut self, name: &'static str) {
        bump(&mut self.nodes, name);
    }

    /// Adds `other`'s counters to these.
    pub fn merge(&mut self, other: &Self) {
        add(&mut self.faults, &other.faults);
        add(&mut self.transitions, &other.transitions);
        add(&mut self.losses, &other.losses);
        add(&mut self.operations, &other.operations);
        add(&mut self.network, &other.network);
        add(&mut self.nodes, &other.nodes);
    }
}

/// The outcome of one seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// The backend.
    pub backend: Backend,
    /// The timing profile's name.
    pub profile: &'static str,
    /// The clock regime.
    pub clocks: Clocks,
    /// Fleet size.
    pub nodes: usize,
    /// IDs the store offered.
    pub capacity: u16,
    /// Simulated time (ms).
    pub sim_ms: u64,
    /// Nonces checked.
    pub nonces: u64,
    /// Values issued twice.
    pub duplicates: u64,
    /// Pairs of holders of one ID whose timestamp ranges overlap.
    pub overlaps: u64,
    /// Nonces outside their node's window.
    pub out_of_window: u64,
    /// Unexpected factory errors.
    pub unexpected: u64,
    /// Counters.
    pub stats: Stats,
    /// Events processed.
    pub events: u64,
    /// A fingerprint of every traced event: equal for two runs of one seed.
    pub fingerprint: u64,
    /// The first violation and the events that led to it.
    pub violation: Option<String>,
}

impl SeedReport {
    /// Whether any check failed.
    #[must_use]
    pub const fn failed(&self) -> bool {
        self.duplicates + self.overlaps + self.out_of_window + self.unexpected > 0
    }

    /// Simulated node-hours (fleet size times simulated time).
    #[must_use]
    pub fn node_hours(&self) -> f64 {
        let ms = u64::try_from(self.nodes)
            .unwrap_or(0)
            .saturating_mul(self.sim_ms);
        f64::from(u32::try_from(ms / 1000).unwrap_or(u32::MAX)) / 3600.0
    }

    /// A command that reruns this seed.
    #[must_use]
    pub fn rerun(&self) -> String {
        match self.backend {
            // Never drawn from a seed: named.
            Backend::ZooKeeper => {
                format!("cargo xtask sim --seed {} --backend zookeeper", self.seed)
            }
            _ => format!("cargo xtask sim --seed {}", self.seed),
        }
    }
}

impl fmt::Display for SeedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {}: {} backend, {} leases, {} clocks, {} nodes, {} ids, {:.1} s simulated, \
             {} nonces, {} duplicates, {} overlaps, {} out of window",
            self.seed,
            self.backend,
            self.profile,
            self.clocks.name(),
            self.nodes,
            self.capacity,
            ms_to_s(self.sim_ms),
            self.nonces,
            self.duplicates,
            self.overlaps,
            self.out_of_window
        )?;
        if let Some(v) = &self.violation {
            writeln!(f, "{v}")?;
            writeln!(f, "rerun: {}", self.rerun())?;
        }
        Ok(())
    }
}

fn ms_to_s(ms: u64) -> f64 {
    f64::from(u32::try_from(ms / 100).unwrap_or(u32::MAX)) / 10.0
}

/// Many seeds summed up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds per backend.
    pub by_backend: BTreeMap<&'static str, u64>,
    /// Seeds per timing profile.
    pub by_profile: BTreeMap<&'static str, u64>,
    /// Seeds per clock regime.
    pub by_clocks: BTreeMap<&'static str, u64>,
    /// Simulated node-hours.
    pub node_hours: f64,
    /// Nonces checked.
    pub nonces: u64,
    /// Values issued twice.
    pub duplicates: u64,
    /// Overlapping holder pairs.
    pub overlaps: u64,
    /// Nonces outside their window.
    pub out_of_window: u64,
    /// Unexpected factory errors.
    pub unexpected: u64,
    /// Events processed.
    pub events: u64,
    /// Counters.
    pub stats: Stats,
    /// The seeds that failed, with their first violation (at most 20 kept).
    pub failures: Vec<SeedReport>,
    /// How many seeds failed.
    pub failed: u64,
}

impl Summary {
    /// Adds one seed.
    pub fn add(&mut self, report: &SeedReport) {
        self.seeds += 1;
        bump(&mut self.by_backend, report.backend.name());
        bump(&mut self.by_profile, report.profile);
        bump(&mut self.by_clocks, report.clocks.name());
        self.node_hours += report.node_hours();
        self.nonces += report.nonces;
        self.duplicates += report.duplicates;
        self.overlaps += report.overlaps;
        self.out_of_window += report.out_of_window;
        self.unexpected += report.unexpected;
        self.events += report.events;
        self.stats.merge(&report.stats);
        if report.failed() {
            self.failed += 1;
            if self.failures.len() < 20 {
                self.failures.push(report.clone());
            }
        }
    }

    /// Adds every seed of `other`.
    pub fn merge(&mut self, other: &Self) {
        self.seeds += other.seeds;
        add(&mut self.by_backend, &other.by_backend);
        add(&mut self.by_profile, &other.by_profile);
        add(&mut self.by_clocks, &other.by_clocks);
        self.node_hours += other.node_hours;
        self.nonces += other.nonces;
        self.duplicates += other.duplicates;
        self.overlaps += other.overlaps;
        self.out_of_window += other.out_of_window;
        self.unexpected += other.unexpected;
        self.events += other.events;
        self.stats.merge(&other.stats);
        self.failed += other.failed;
        for f in &other.failures {
            if self.failures.len() < 20 {
                self.failures.push(f.clone());
            }
        }
        self.failures.sort_by_key(|r| r.seed);
    }
}

fn list<'a, K: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    title: &str,
    items: impl IntoIterator<Item = (K, &'a u64)>,
) -> fmt::Result {
    let items: Vec<String> = items.into_iter().map(|(k, v)| format!("{k} {v}")).collect();
    writeln!(f, "{title}: {}", items.join(", "))
}

/// Counters keyed by pairs, each key written `a{sep}b`.
fn pairs<'a>(
    counters: &'a BTreeMap<(&str, &str), u64>,
    sep: &'a str,
) -> impl Iterator<Item = (String, &'a u64)> {
    counters
        .iter()
        .map(move |((a, b), v)| (format!("{a}{sep}{b}"), v))
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} seeds, {:.0} simulated node-hours, {} events, {} nonces checked: {} duplicates, \
             {} overlapping holder ranges, {} out of window, {} unexpected errors; {} seeds failed",
            self.seeds,
            self.node_hours,
            self.events,
            self.nonces,
            self.duplicates,
            self.overlaps,
            self.out_of_window,
            self.unexpected,
            self.failed
        )?;
        let stats = &self.stats;
        list(f, "backends", &self.by_backend)?;
        list(f, "lease timing", &self.by_profile)?;
        list(f, "clocks", &self.by_clocks)?;
        list(f, "faults", &stats.faults)?;
        list(f, "network", &stats.network)?;
        list(f, "transitions", pairs(&stats.transitions, "->"))?;
        list(f, "losses", &stats.losses)?;
        list(f, "operations", pairs(&stats.operations, " "))?;
        list(f, "nodes", &stats.nodes)?;
        for failure in &self.failures {
            write!(f, "\n{failure}")?;
        }
        Ok(())
    }
}
