//! The checker: reads every node file of a run and proves (or refutes) "never twice", as
//! `never-twice` judges it.
//!
//! - **Duplicates**: every nonce value of one kind and size, across all nodes and restarts,
//!   must be unique.
//! - **Out of window**: every nonce's own machine ID and timestamp (decrypted first for
//!   encrypted nonces, decoded with its node's epoch) must fall in a lease window its node
//!   recorded for that ID: `floor < timestamp < deadline`, the floor in the floors' terms, the
//!   deadline on the node's clock; and, on the machine's clock (which clock offsets and steps
//!   do not move), produced no earlier than the window began and begun no later than its
//!   disable. This is the property the lease layer promises; a duplicate across nodes can only
//!   come from a broken window or a broken floor.
//! - Figures: lease handovers (an ID's next window belongs to another node), time without a
//!   lease per node, windows whose floor was ahead of the node's clock, clock steps, and
//!   faults injected (from the orchestrator's `faults.jsonl`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};

use never_twice::{Issued, Seen};
use nononce::lease::floor_terms;
use nononce::nonce::{BootClock, Factory, FactoryConfig, Nonce64, Nonce96, Nonce128};
use nononce_timeline::{self as timeline, Timeline};
use serde::Serialize;

use crate::record::{Kind, Record, Stamp, read_all};

/// How many offending values a report lists in full.
const EXAMPLES: usize = 20;

/// A lease window one node process believed it held, as a report describes it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Window {
    /// Node file.
    pub file: String,
    /// Node index.
    pub node: u32,
    /// Leased ID.
    pub machine_id: u16,
    /// Timestamp floor the lease came with: every timestamp must be above it. In the floors'
    /// terms (a timestamp plus the default epoch: for a node on the default epoch its clock's
    /// ms; written by earlier holders on theirs), whatever the node's epoch.
    pub floor_ms: u64,
    /// Node clock recorded before the factories were enabled.
    pub start_ms: u64,
    /// The node's clock offset at the start.
    pub offset_ms: i64,
    /// The same instant as `start_ms` on the machine's clock.
    pub start_machine_ms: u64,
    /// Machine clock when the window stopped allowing generation (deadline or disable, whichever
    /// came first; the file's end for a window open to it). Set once the file is read.
    pub end_machine_ms: u64,
    /// Latest deadline the factories were given (node clock).
    #[serde(skip)]
    deadline_ms: u64,
    /// The deadline on the machine's clock, with the offset of its last enable or extend.
    #[serde(skip)]
    deadline_machine_ms: u64,
    /// Machine clock when the factories were disabled, if before the file ends.
    #[serde(skip)]
    disabled_ms: Option<u64>,
}

/// A nonce that no recorded window allows.
#[derive(Debug, Clone, Serialize)]
pub struct OutOfWindow {
    /// Node file.
    pub file: String,
    /// Generator and size, e.g. `sortable96`.
    pub series: String,
    /// Value in hex.
    pub value: String,
    /// Machine ID inside the nonce.
    pub machine_id: u16,
    /// Timestamp inside the nonce (Unix ms).
    pub timestamp_ms: u64,
    /// The node's clock right after it was produced.
    pub produced_ms: u64,
}

/// A value seen more than once.
#[derive(Debug, Clone, Serialize)]
pub struct Duplicate {
    /// Generator and size.
    pub series: String,
    /// Value in hex.
    pub value: String,
    /// The files it appears in (once per occurrence).
    pub files: Vec<String>,
}

/// Two windows that let the same values through, and how many.
#[derive(Debug, Clone, Serialize)]
pub struct DuplicateSource {
    /// Repeated values between the two.
    pub duplicates: u64,
    /// The earlier window (by its start on the machine's clock).
    pub first: Window,
    /// The later one.
    pub second: Window,
}

/// Where and when a nonce was seen, on the machine's clock.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Sighting {
    /// Node file.
    pub file: String,
    /// Node index.
    pub node: u32,
    /// The machine ID inside the nonce (`u16::MAX` if it could not be decoded).
    pub machine_id: u16,
    /// The machine's clock when the node recorded it (Unix ms).
    pub machine_ms: u64,
}

impl Sighting {
    /// Keeps `self` in `first` if it is earlier than what `first` holds.
    fn keep_earliest(self, first: &mut Option<Self>) {
        if first
            .as_ref()
            .is_none_or(|f| self.machine_ms < f.machine_ms)
        {
            *first = Some(self);
        }
    }
}

/// Per node figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeFigures {
    /// Processes (the first start plus restarts).
    pub incarnations: u32,
    /// Nonces recorded.
    pub nonces: u64,
    /// Lease windows.
    pub windows: u32,
    /// Time the processes ran.
    pub running_ms: u64,
    /// Time the processes ran without a usable lease.
    pub without_lease_ms: u64,
    /// Clock offsets the node's processes started with (ms, node clock minus machine clock).
    pub start_offsets_ms: BTreeSet<i64>,
    /// Backward clock steps.
    pub clock_steps: u32,
}

/// The result of [`check`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Node files read.
    pub files: Vec<String>,
    /// Nonces checked.
    pub nonces: u64,
    /// Nonces per series (`counter64`, ...).
    pub per_series: BTreeMap<String, u64>,
    /// Values seen twice or more (each extra occurrence counts once).
    pub duplicates: u64,
    /// Examples of duplicates.
    pub duplicate_examples: Vec<Duplicate>,
    /// The window pairs the duplicates came from, most duplicates first.
    pub duplicate_sources: Vec<DuplicateSource>,
    /// Nonces outside every window their node recorded for their ID.
    pub out_of_window: u64,
    /// Examples of out-of-window nonces.
    pub out_of_window_examples: Vec<OutOfWindow>,
    /// The first value issued a second time, when it was (the second-earliest of its
    /// sightings, on the machine's clock): found by [`check_with_timeline`] alone, which reads
    /// the files again for the repeated values' times; `None` from [`check`].
    pub first_duplicate: Option<Sighting>,
    /// The earliest nonce outside every window, on the machine's clock.
    pub first_out_of_window: Option<Sighting>,
    /// Counter nonces produced (local time) after their window's deadline with a timestamp
    /// before it: allowed (a frozen process resumes with counters still below the deadline),
    /// reported for information.
    pub late_counter_nonces: u64,
    /// Lease windows recorded.
    pub windows: u64,
    /// Times an ID's next window belonged to a different node.
    pub handovers: u64,
    /// Window pairs of different nodes for one ID that overlap in real time (the machine's
    /// clock). Informational: with clock offsets and steps two nodes may both believe they hold
    /// an ID; the floor keeps their timestamps apart, and the nonce checks above are the proof.
    pub window_overlaps: u64,
    /// Windows whose floor was at or ahead of the node's clock when they began: the node
    /// took an ID whose earlier holder's clock (or timestamps) ran ahead of its own.
    pub floor_ahead_windows: u64,
    /// The largest such lead, ms.
    pub floor_ahead_max_ms: u64,
    /// Backward clock steps the nodes recorded.
    pub clock_steps: u64,
    /// Figures per node index.
    pub nodes: BTreeMap<u32, NodeFigures>,
    /// Faults injected, by name (from `faults.jsonl`).
    pub faults: BTreeMap<String, u64>,
    /// Clean shutdowns recorded.
    pub clean_ends: u64,
}

impl Report {
    /// Whether the run passed: nonces were checked, none twice, none outside a window.
    pub fn passed(&self) -> bool {
        self.nonces > 0 && self.duplicates == 0 && self.out_of_window == 0
    }

    /// A one-screen summary.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let faults: u64 = self.faults.values().sum();
        out.push_str(&format!(
            "files {}  nonces checked {}  duplicates {}  out-of-window {}  windows {}  handovers {}  faults {}  ({})\n",
            self.files.len(),
            self.nonces,
            self.duplicates,
            self.out_of_window,
            self.windows,
            self.handovers,
            faults,
            if self.passed() { "PASS" } else { "FAIL" }
        ));
        out.push_str(&format!(
            "late counter nonces (allowed) {}  window overlaps (informational) {}  clean shutdowns {}\n",
            self.late_counter_nonces, self.window_overlaps, self.clean_ends
        ));
        out.push_str(&format!(
            "windows with the floor ahead of the node's clock {} (max {} ms)  clock steps {}\n",
            self.floor_ahead_windows, self.floor_ahead_max_ms, self.clock_steps
        ));
        let counts = |map: &BTreeMap<String, u64>| {
            let pairs: Vec<String> = map.iter().map(|(k, v)| format!("{k}={v}")).collect();
            pairs.join(" ")
        };
        out.push_str(&format!("per series: {}\n", counts(&self.per_series)));
        if !self.faults.is_empty() {
            out.push_str(&format!("faults: {}\n", counts(&self.faults)));
        }
        out.push_str(
            "node  runs  windows     nonces  running_s  no_lease_s  steps  clock offsets (ms)\n",
        );
        for (node, f) in &self.nodes {
            let offsets: Vec<String> = f
                .start_offsets_ms
                .iter()
                .map(|o| format!("{o:+}"))
                .collect();
            out.push_str(&format!(
                "{node:>4}  {:>4}  {:>7}  {:>9}  {:>9.1}  {:>10.1}  {:>5}  {}\n",
                f.incarnations,
                f.windows,
                f.nonces,
                ms_to_s(f.running_ms),
                ms_to_s(f.without_lease_ms),
                f.clock_steps,
                offsets.join(" ")
            ));
        }
        for d in &self.duplicate_examples {
            let files = d.files.join(", ");
            out.push_str(&format!("DUPLICATE {} {} in {files}\n", d.series, d.value));
        }
        for d in &self.duplicate_sources {
            let w = |w: &Window| {
                format!(
                    "{} (node {}, clock {:+} ms) id {} floor {} from {} (machine {}..{})",
                    w.file,
                    w.node,
                    w.offset_ms,
                    w.machine_id,
                    w.floor_ms,
                    w.start_ms,
                    w.start_machine_ms,
                    w.end_machine_ms
                )
            };
            let (n, first, second) = (d.duplicates, w(&d.first), w(&d.second));
            out.push_str(&format!("DUPLICATES {n} between {first} and {second}\n"));
        }
        for o in &self.out_of_window_examples {
            out.push_str(&format!(
                "OUT OF WINDOW {} {} id {} timestamp {} produced {} in {}\n",
                o.series, o.value, o.machine_id, o.timestamp_ms, o.produced_ms, o.file
            ));
        }
        out
    }
}

#[allow(clippy::cast_precision_loss)] // display only
fn ms_to_s(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// An error reading a run.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A file could not be read or is not a node file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The checker's decryption factory could not be built.
    #[error("decryption factory: {0}")]
    Factory(String),
}

impl CheckError {
    /// An error reading `path`.
    fn io(path: &Path) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io { path, source }
    }
}

/// The node files of a run directory: every `*.bin`, sorted by name.
pub fn node_files(dir: &Path) -> Result<Vec<PathBuf>, CheckError> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(CheckError::io(dir))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    files.sort();
    Ok(files)
}

/// What one file contained, after its nonces were checked against its windows. Times are on
/// the machine's clock.
#[derive(Default)]
struct FileScan {
    node: u32,
    windows: Vec<Window>,
    first_ms: u64,
    last_ms: u64,
    clean_end: bool,
    conflict_ms: Option<u64>,
    nonces: u64,
    start_offset_ms: Option<i64>,
    clock_steps: u32,
}

/// A nonce as the judgement sees it, decrypting encrypted ones.
fn decode(
    decrypter: &Factory<BootClock>,
    epoch_ms: u64,
    kind: Kind,
    bits: u16,
    value: u128,
) -> Option<Issued> {
    let decoded = match bits {
        64 => {
            let mut n = Nonce64::from_u64(u64::try_from(value).ok()?);
            if kind == Kind::Encrypted {
                n = decrypter.decrypt64(n).ok()?;
            }
            n.decode(epoch_ms)
        }
        96 => {
            let mut n = Nonce96::try_from(value).ok()?;
            if kind == Kind::Encrypted {
                n = decrypter.decrypt96(n).ok()?;
            }
            n.decode(epoch_ms)
        }
        128 => {
            let mut n = Nonce128::from_u128(value);
            if kind == Kind::Encrypted {
                n = decrypter.decrypt128(n).ok()?;
            }
            n.decode(epoch_ms)
        }
        _ => return None,
    };
    Some(Issued::new(value, &decoded, epoch_ms))
}

/// Where a value was seen: its file and window (index in that file's windows; `u32::MAX` for
/// none).
type Occurrence = (u32, u32);

/// A value of a series (kind and size).
type SeriesValue = ((Kind, u16), u128);

/// How many repeated values [`Values`] remembers for the first duplicate's time.
const REPEATED: usize = 1 << 16;

/// Every value of each series, and its repeats.
#[derive(Default)]
struct Values {
    seen: Seen<(Kind, u16), Occurrence>,
    /// Repeats per pair of sightings (the one before, the repeat).
    pairs: BTreeMap<(Occurrence, Occurrence), u64>,
    /// The values seen twice (up to [`REPEATED`]), with their machine ID: the files are read
    /// in name order, not in time, so when each was issued a second time takes a second read.
    repeated: HashMap<SeriesValue, u16>,
}

impl Values {
    /// Records `value` of `series` (kind and size), with machine ID `id`, seen at `here`; a
    /// repeat goes into the report.
    fn insert(
        &mut self,
        report: &mut Report,
        series: (Kind, u16),
        value: u128,
        id: u16,
        here: Occurrence,
    ) {
        let Err(before) = self.seen.insert(series, value, here) else {
            return;
        };
        report.duplicates += 1;
        if self.repeated.len() < REPEATED {
            self.repeated.insert((series, value), id);
        }
        *self.pairs.entry((before, here)).or_default() += 1;
        let (series, value) = (
            format!("{}{}", series.0.name(), series.1),
            format!("{value:x}"),
        );
        let file = |(file, _): Occurrence| report.files[file as usize].clone();
        let (before, here) = (file(before), file(here));
        let examples = &mut report.duplicate_examples;
        if let Some(d) = examples
            .iter_mut()
            .find(|d| (&d.series, &d.value) == (&series, &value))
        {
            d.files.push(here);
        } else if examples.len() < EXAMPLES {
            examples.push(Duplicate {
                series,
                value,
                files: vec![before, here],
            });
        }
    }
}

/// Whether window `w` allows `nonce`, produced (node clock read right after) at `at`, in a batch
/// begun at `tick`: in the window as `never-twice` judges it, and on the machine's clock
/// produced no earlier than the window began, in a batch begun no later than its end.
fn allows(w: &Window, nonce: &Issued, at: Stamp, tick: Stamp) -> bool {
    let lease = never_twice::Window {
        id: w.machine_id,
        floor: w.floor_ms,
        deadline: w.deadline_ms,
    };
    lease.allows(nonce)
        && w.start_machine_ms <= at.machine_ms()
        && w.disabled_ms.is_none_or(|end| tick.machine_ms() <= end)
}

fn scan_file(
    path: &Path,
    file_index: usize,
    decrypter: &Factory<BootClock>,
    values: &mut Values,
    report: &mut Report,
) -> Result<FileScan, CheckError> {
    let name = path.display().to_string();
    let file = fs::File::open(path).map_err(CheckError::io(path))?;
    let mut scan = FileScan {
        node: u32::MAX,
        first_ms: u64::MAX,
        ..FileScan::default()
    };
    let mut epoch_ms = 0;
    // The generator's last batch start: every nonce after it was asked for no earlier.
    let mut tick: Option<Stamp> = None;
    read_all(BufReader::with_capacity(1 << 16, file), |record| {
        let at = record.stamp();
        let machine = at.machine_ms();
        // A time of the node's clock, on the machine's.
        let on_machine = |ms| Stamp { at_ms: ms, ..at }.machine_ms();
        scan.first_ms = scan.first_ms.min(machine);
        scan.last_ms = scan.last_ms.max(machine);
        match record {
            Record::Start {
                node, epoch_ms: e, ..
            } => {
                scan.node = node;
                epoch_ms = e;
                scan.start_offset_ms.get_or_insert(i64::from(at.offset_ms));
            }
            Record::Enable {
                machine_id,
                floor_ms,
                deadline_ms,
                ..
            } => {
                // An enable while a window is open replaces it (the factories start anew).
                if let Some(open) = scan.windows.last_mut()
                    && open.disabled_ms.is_none()
                {
                    open.disabled_ms = Some(machine);
                }
                // The node's clock in the floors' terms: on another epoch its timestamps, and
                // so its floors, lie that far from its clock.
                let now = floor_terms(at.at_ms, epoch_ms);
                if floor_ms >= now {
                    report.floor_ahead_windows += 1;
                    report.floor_ahead_max_ms = report.floor_ahead_max_ms.max(floor_ms - now);
                }
                scan.windows.push(Window {
                    file: name.clone(),
                    node: scan.node,
                    machine_id,
                    floor_ms,
                    start_ms: at.at_ms,
                    offset_ms: i64::from(at.offset_ms),
                    start_machine_ms: machine,
                    deadline_ms,
                    deadline_machine_ms: on_machine(deadline_ms),
                    end_machine_ms: 0,
                    disabled_ms: None,
                });
            }
            Record::Extend { deadline_ms, .. } => {
                if let Some(open) = scan.windows.last_mut()
                    && open.disabled_ms.is_none()
                    && deadline_ms >= open.deadline_ms
                {
                    open.deadline_ms = deadline_ms;
                    open.deadline_machine_ms = on_machine(deadline_ms);
                }
            }
            Record::Disable { .. } => {
                if let Some(open) = scan.windows.last_mut()
                    && open.disabled_ms.is_none()
                {
                    open.disabled_ms = Some(machine);
                }
            }
            Record::Tick { at } => tick = Some(at),
            Record::Conflict { .. } => {
                scan.conflict_ms.get_or_insert(machine);
            }
            Record::ClockStep { .. } => scan.clock_steps += 1,
            Record::End { .. } => scan.clean_end = true,
            Record::Nonce {
                at,
                kind,
                bits,
                value,
            } => {
                scan.nonces += 1;
                let label = format!("{}{bits}", kind.name());
                *report.per_series.entry(label.clone()).or_default() += 1;
                let decoded = decode(decrypter, epoch_ms, kind, bits, value);
                // Windows are recorded before the factories are enabled or extended, so every
                // window a nonce may rely on precedes it in the file.
                let tick = tick.unwrap_or(at);
                let found = decoded.as_ref().and_then(|nonce| {
                    let mut windows = scan.windows.iter();
                    windows.rposition(|w| allows(w, nonce, at, tick))
                });
                let window = found.and_then(|i| u32::try_from(i).ok());
                let file = u32::try_from(file_index).unwrap_or(u32::MAX);
                let here = (file, window.unwrap_or(u32::MAX));
                let id = decoded.as_ref().map_or(u16::MAX, |n| n.id);
                values.insert(report, (kind, bits), value, id, here);
                let late = found.is_some_and(|i| at.at_ms >= scan.windows[i].deadline_ms);
                if late && kind != Kind::Sortable {
                    report.late_counter_nonces += 1;
                }
                if found.is_none() {
                    report.out_of_window += 1;
                    let sighting = Sighting {
                        file: name.clone(),
                        node: scan.node,
                        machine_id: decoded.as_ref().map_or(u16::MAX, |n| n.id),
                        machine_ms: machine,
                    };
                    sighting.keep_earliest(&mut report.first_out_of_window);
                    if report.out_of_window_examples.len() < EXAMPLES {
                        let (machine_id, timestamp_ms) =
                            decoded.map_or((u16::MAX, 0), |n| (n.id, n.unix_ms));
                        report.out_of_window_examples.push(OutOfWindow {
                            file: name.clone(),
                            series: label,
                            value: format!("{value:x}"),
                            machine_id,
                            timestamp_ms,
                            produced_ms: at.at_ms,
                        });
                    }
                }
            }
        }
        Ok(())
    })
    .map_err(CheckError::io(path))?;
    if scan.first_ms == u64::MAX {
        scan.first_ms = 0;
    }
    for w in &mut scan.windows {
        let end = w
            .disabled_ms
            .unwrap_or(scan.last_ms.max(w.start_machine_ms));
        w.end_machine_ms = w.deadline_machine_ms.min(end);
    }
    Ok(scan)
}

/// The report on the node files in `dir`, and what each contained.
fn scan_all(dir: &Path) -> Result<(Report, Vec<FileScan>, Repeated), CheckError> {
    let files = node_files(dir)?;
    let config = FactoryConfig::new().with_base_key(&crate::CHAOS_KEY);
    let decrypter =
        Factory::new(BootClock::new(), config).map_err(|e| CheckError::Factory(e.to_string()))?;
    let mut report = Report {
        files: files.iter().map(|p| p.display().to_string()).collect(),
        ..Report::default()
    };
    let mut values = Values::default();
    let mut scans = Vec::new();
    for (i, path) in files.iter().enumerate() {
        scans.push(scan_file(path, i, &decrypter, &mut values, &mut report)?);
    }
    report.nonces = report.per_series.values().sum();

    // The window pairs the duplicates came from.
    let describe = |(file, window): Occurrence| {
        let windows = &scans.get(file as usize)?.windows;
        windows.get(window as usize).cloned()
    };
    let mut sources: BTreeMap<(Window, Window), u64> = BTreeMap::new();
    for ((a, b), repeats) in values.pairs {
        if let (Some(a), Some(b)) = (describe(a), describe(b)) {
            let pair = if a.start_machine_ms <= b.start_machine_ms {
                (a, b)
            } else {
                (b, a)
            };
            *sources.entry(pair).or_default() += repeats;
        }
    }
    let mut sources: Vec<DuplicateSource> = sources
        .into_iter()
        .map(|((first, second), duplicates)| DuplicateSource {
            duplicates,
            first,
            second,
        })
        .collect();
    sources.sort_by_key(|s| std::cmp::Reverse(s.duplicates));
    sources.truncate(EXAMPLES);
    report.duplicate_sources = sources;

    // Windows: handovers and overlaps per ID, figures per node.
    let mut by_id: BTreeMap<u16, Vec<&Window>> = BTreeMap::new();
    for scan in &scans {
        let figures = report.nodes.entry(scan.node).or_default();
        figures.incarnations += 1;
        figures.nonces += scan.nonces;
        figures.windows += u32::try_from(scan.windows.len()).unwrap_or(u32::MAX);
        let running = scan.last_ms.saturating_sub(scan.first_ms);
        let mut covered = 0u64;
        for w in &scan.windows {
            let end = w.end_machine_ms.min(scan.last_ms);
            covered += end.saturating_sub(w.start_machine_ms.max(scan.first_ms));
            by_id.entry(w.machine_id).or_default().push(w);
        }
        figures.running_ms += running;
        figures.without_lease_ms += running.saturating_sub(covered);
        figures.clock_steps += scan.clock_steps;
        if let Some(offset) = scan.start_offset_ms {
            figures.start_offsets_ms.insert(offset);
        }
        report.clock_steps += u64::from(scan.clock_steps);
        report.windows += scan.windows.len() as u64;
        report.clean_ends += u64::from(scan.clean_end);
    }
    for windows in by_id.values_mut() {
        windows.sort_by_key(|w| w.start_machine_ms);
        for pair in windows.windows(2) {
            if pair[0].node != pair[1].node {
                report.handovers += 1;
            }
        }
        for (i, a) in windows.iter().enumerate() {
            for b in &windows[i + 1..] {
                let meet =
                    a.start_machine_ms < b.end_machine_ms && b.start_machine_ms < a.end_machine_ms;
                if a.node != b.node && meet {
                    report.window_overlaps += 1;
                }
            }
        }
    }
    Ok((report, scans, values.repeated))
}

/// Checks every node file in `dir` (and counts the faults in `dir/faults.jsonl`).
///
/// # Errors
/// A file that cannot be read or is not a node file.
pub fn check(dir: &Path) -> Result<Report, CheckError> {
    let (mut report, ..) = scan_all(dir)?;
    report.faults = read_faults(dir);
    Ok(report)
}

/// Checks `dir` as [`check`] does, and draws the run: the picture of its lease windows, its
/// faults (from `faults.jsonl`, each from its line to the line that healed it) and its first
/// duplicate and out-of-window nonce, on the machine's clock from the first record of any
/// node, under `title`.
///
/// # Errors
/// As [`check`].
pub fn check_with_timeline(dir: &Path, title: String) -> Result<(Report, Timeline), CheckError> {
    let (mut report, scans, repeated) = scan_all(dir)?;
    report.faults = read_faults(dir);
    report.first_duplicate = first_duplicate(&report.files, &repeated)?;
    let faults = fs::read_to_string(dir.join("faults.jsonl")).unwrap_or_default();
    let timeline = timeline(&report, &scans, &faults, title);
    Ok((report, timeline))
}

/// The values seen twice, with their machine ID.
type Repeated = HashMap<SeriesValue, u16>;

/// When a value was first issued a second time: every sighting of the `repeated` values in
/// `files`, the earliest second sighting of one.
fn first_duplicate(files: &[String], repeated: &Repeated) -> Result<Option<Sighting>, CheckError> {
    if repeated.is_empty() {
        return Ok(None);
    }
    let mut sightings: HashMap<SeriesValue, Vec<(u64, usize, u32)>> = HashMap::new();
    for (i, name) in files.iter().enumerate() {
        let path = Path::new(name);
        let file = fs::File::open(path).map_err(CheckError::io(path))?;
        let mut node = u32::MAX;
        read_all(BufReader::with_capacity(1 << 16, file), |record| {
            match record {
                Record::Start { node: n, .. } => node = n,
                Record::Nonce {
                    at,
                    kind,
                    bits,
                    value,
                } if repeated.contains_key(&((kind, bits), value)) => {
                    let times = sightings.entry(((kind, bits), value)).or_default();
                    times.push((at.machine_ms(), i, node));
                }
                _ => {}
            }
            Ok(())
        })
        .map_err(CheckError::io(path))?;
    }
    let second = sightings.into_iter().filter_map(|(key, mut times)| {
        times.sort_unstable();
        times.get(1).map(|&(ms, file, node)| (ms, file, node, key))
    });
    Ok(second.min().map(|(machine_ms, file, node, key)| Sighting {
        file: files[file].clone(),
        node,
        machine_id: repeated.get(&key).copied().unwrap_or(u16::MAX),
        machine_ms,
    }))
}

/// The picture of a run from its scanned files and the lines of its `faults.jsonl`.
fn timeline(report: &Report, scans: &[FileScan], faults: &str, title: String) -> Timeline {
    let start = scans.iter().map(|s| s.first_ms).min().unwrap_or(0);
    let end = scans.iter().map(|s| s.last_ms).max().unwrap_or(start);
    let at = |machine_ms: u64| machine_ms.saturating_sub(start);
    let windows = scans
        .iter()
        .flat_map(|s| &s.windows)
        .map(|w| timeline::Window {
            machine_id: w.machine_id,
            node: w.node,
            start_ms: at(w.start_machine_ms),
            end_ms: at(w.end_machine_ms.max(w.start_machine_ms)),
        })
        .collect();
    let mut drawn: Vec<timeline::Fault> = Vec::new();
    for line in faults.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(unix_ms), node) = (
            value.get("unix_ms").and_then(serde_json::Value::as_u64),
            value
                .get("node")
                .and_then(serde_json::Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
        ) else {
            continue;
        };
        let name = |key: &str| value.get(key).and_then(|f| f.as_str()).map(str::to_owned);
        if let Some(kind) = name("fault") {
            drawn.push(timeline::Fault {
                kind,
                node,
                start_ms: at(unix_ms),
                end_ms: None,
            });
        } else if let Some(kind) = name("heal") {
            // The latest fault of that kind on that node still open; a heal of nothing open
            // (a coordinator restart names every kind it may end) is left out.
            if let Some(open) = drawn
                .iter_mut()
                .rev()
                .find(|f| f.kind == kind && f.node == node && f.end_ms.is_none())
            {
                open.end_ms = Some(at(unix_ms));
            }
        }
    }
    let mark = |finding, first: &Option<Sighting>| {
        first.as_ref().map(|s| timeline::Mark {
            finding,
            machine_id: (s.machine_id != u16::MAX).then_some(s.machine_id),
            node: Some(s.node),
            at_ms: at(s.machine_ms),
        })
    };
    let marks = [
        mark(timeline::Finding::Duplicate, &report.first_duplicate),
        mark(timeline::Finding::OutOfWindow, &report.first_out_of_window),
    ];
    Timeline {
        title,
        length_ms: at(end),
        windows,
        faults: drawn,
        marks: marks.into_iter().flatten().collect(),
    }
}

/// Counts the faults the orchestrator logged, one JSON object per line with a `fault` name.
fn read_faults(dir: &Path) -> BTreeMap<String, u64> {
    let mut faults = BTreeMap::new();
    let Ok(text) = fs::read_to_string(dir.join("faults.jsonl")) else {
        return faults;
    };
    for line in text.lines() {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(line)
            && let Some(name) = value.get("fault").and_then(|f| f.as_str())
        {
            *faults.entry(name.to_owned()).or_default() += 1;
        }
    }
    faults
}

/// The duplicated-ordinal scenario: two nodes with one StatefulSet ordinal and the conflict
/// guard; the one started later must stop.
#[derive(Debug, Clone, Serialize)]
pub struct GuardReport {
    /// The earlier node kept a window open to the end of its file.
    pub earlier_kept_id: bool,
    /// The later node recorded a conflict.
    pub later_saw_conflict: bool,
    /// From the later node's first enable to its disable (local clock).
    pub later_stopped_after_ms: Option<u64>,
    /// Nonces the later node produced (all of them overlap the earlier node's run).
    pub later_nonces: u64,
    /// Values both produced (counter and sortable nonces of one ID in the same millisecond
    /// collide: that is exactly what the guard bounds).
    pub duplicates: u64,
    /// The bound the later node had to stop within.
    pub bound_ms: u64,
}

impl GuardReport {
    /// Whether the later node stopped within the bound and the earlier one kept its ID.
    pub fn passed(&self) -> bool {
        self.earlier_kept_id
            && self.later_saw_conflict
            && self
                .later_stopped_after_ms
                .is_some_and(|ms| ms <= self.bound_ms)
    }
}

/// Checks the duplicated-ordinal scenario: `dir` holds exactly two node files, node 0 started
/// first, node 1 later.
///
/// # Errors
/// As [`check`]; also when the two nodes' files are not there.
pub fn check_guard(dir: &Path, bound_ms: u64) -> Result<GuardReport, CheckError> {
    let (report, scans, _) = scan_all(dir)?;
    let find = |node: u32| scans.iter().find(|s| s.node == node);
    let (Some(earlier), Some(later)) = (find(0), find(1)) else {
        let missing = io::Error::new(io::ErrorKind::NotFound, "node 0 and node 1 files expected");
        return Err(CheckError::io(dir)(missing));
    };
    let later_stopped_after_ms = later.windows.first().and_then(|w| {
        w.disabled_ms
            .or(later.conflict_ms)
            .map(|end| end.saturating_sub(w.start_machine_ms))
    });
    Ok(GuardReport {
        earlier_kept_id: earlier.windows.last().is_some_and(|w| {
            w.disabled_ms
                .is_none_or(|end| end + 1000 >= earlier.last_ms)
        }),
        later_saw_conflict: later.conflict_ms.is_some(),
        later_stopped_after_ms,
        later_nonces: later.nonces,
        duplicates: report.duplicates,
        bound_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::NodeClock;
    use nononce::lease::LeaseTarget;
    use nononce::nonce::DEFAULT_EPOCH_MS;
    use nononce::nonce::{Base, MachineId};
    use nononce_timeline::texts;

    /// The report on a run of `nodes`, each written as `node-<n>.bin` (from 1) in a folder of
    /// its own named after `name`.
    fn check_nodes(name: &str, nodes: &[&[Record]]) -> Report {
        let dir = std::env::temp_dir().join(format!("nononce-chaos-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for (i, records) in nodes.iter().enumerate() {
            let bytes: Vec<u8> = records.iter().flat_map(Record::encode).collect();
            fs::write(dir.join(format!("node-{}.bin", i + 1)), bytes).unwrap();
        }
        let report = check(&dir).unwrap();
        fs::remove_dir_all(dir).unwrap();
        report
    }

    /// [`check_with_timeline`] on a run of `nodes` (as [`check_nodes`] writes them) whose
    /// orchestrator logged `faults` (the lines of `faults.jsonl`).
    fn draw_nodes(
        name: &str,
        nodes: &[&[Record]],
        faults: &[serde_json::Value],
    ) -> (Report, Timeline) {
        let dir = std::env::temp_dir().join(format!("nononce-chaos-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for (i, records) in nodes.iter().enumerate() {
            let bytes: Vec<u8> = records.iter().flat_map(Record::encode).collect();
            fs::write(dir.join(format!("node-{}.bin", i + 1)), bytes).unwrap();
        }
        let lines: Vec<String> = faults.iter().map(ToString::to_string).collect();
        fs::write(dir.join("faults.jsonl"), lines.join("\n")).unwrap();
        let drawn = check_with_timeline(&dir, name.to_owned()).unwrap();
        fs::remove_dir_all(dir).unwrap();
        drawn
    }

    #[test]
    fn the_timeline_draws_windows_healed_faults_and_the_first_duplicate() {
        // As in `a_duplicate_names_the_two_windows_it_came_from`: two nodes believe they hold
        // ID 5; node 1 also holds ID 6 for a while; node 2 repeats one of node 1's values.
        let mut b = Node::new(2, -1_000);
        b.enable(5, 0, 60_000);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let mut a = Node::new(1, 0);
        a.enable(5, 0, 60_000).generate(3);
        let copied = a.records[4];
        let Record::Nonce { at, .. } = copied else {
            panic!("{copied:?}");
        };
        b.records.push(copied);
        let mut c = Node::new(3, 0);
        c.enable(6, 0, 60_000).generate(1).disable();
        let now = at.machine_ms();
        let faults = [
            serde_json::json!({"t_ms": 0, "unix_ms": now, "fault": "partition", "node": 1}),
            serde_json::json!({"t_ms": 1, "unix_ms": now + 1, "fault": "kill9", "node": 2}),
            serde_json::json!({"t_ms": 2, "unix_ms": now + 2, "event": "clock_bound", "node": null}),
            serde_json::json!({"t_ms": 5, "unix_ms": now + 5, "heal": "partition", "node": 1}),
            // A heal of nothing open is left out.
            serde_json::json!({"t_ms": 6, "unix_ms": now + 6, "heal": "coordinator", "node": null}),
        ];
        let (report, timeline) =
            draw_nodes("timeline", &[&a.records, &b.records, &c.records], &faults);
        assert_eq!(report.duplicates, 1, "{}", report.summary());
        let first = report.first_duplicate.as_ref().unwrap();
        assert_eq!((first.node, first.machine_id), (2, 5));
        assert_eq!(timeline.lanes(), [5, 6]);
        assert_eq!(timeline.windows.len(), 3);
        let spans: Vec<_> = timeline
            .faults
            .iter()
            .map(|f| (f.kind.as_str(), f.node, f.end_ms.map(|e| e - f.start_ms)))
            .collect();
        assert_eq!(
            spans,
            [("partition", Some(1), Some(5)), ("kill9", Some(2), None)]
        );
        let svg = timeline.svg().unwrap();
        let drawn = texts(&svg);
        let label = drawn
            .iter()
            .find(|t| t.starts_with("first duplicate: id 5, node 2 at "));
        assert!(label.is_some(), "{drawn:?}");
        for text in ["id 5", "id 6", "partition n1", "kill9 n2", "node 3"] {
            assert!(drawn.iter().any(|t| t == text), "{text}: {drawn:?}");
        }
        assert!(svg.contains("fill=\"#D62728\""), "no red marker");

        // The same run without the repeat: lanes, no marker.
        b.records.pop();
        let (report, timeline) = draw_nodes("timeline-pass", &[&a.records, &b.records], &faults);
        assert!(report.passed(), "{}", report.summary());
        assert!(report.first_duplicate.is_none() && timeline.marks.is_empty());
        let texts = texts(&timeline.svg().unwrap());
        assert!(texts.iter().any(|t| t == "id 5"), "{texts:?}");
        assert!(!texts.iter().any(|t| t.starts_with("first ")), "{texts:?}");
    }

    fn stamp(clock: &NodeClock) -> Stamp {
        let (at, offset) = clock.now_with_offset();
        Stamp::new(at, offset)
    }

    /// A node that generates like a chaos node: a real factory on a clock `offset_ms` off,
    /// enabled with `id` above `floor_ms` (0: none) until `deadline_off` ms from now.
    struct Node {
        clock: NodeClock,
        factory: Factory<NodeClock>,
        records: Vec<Record>,
        start: u64,
        deadline: u64,
    }

    impl Node {
        fn new(node: u32, offset_ms: i64) -> Self {
            Self::on_epoch(node, offset_ms, DEFAULT_EPOCH_MS)
        }

        /// A node whose factory counts from `epoch_ms`.
        fn on_epoch(node: u32, offset_ms: i64, epoch_ms: u64) -> Self {
            let clock = NodeClock::new(offset_ms).unwrap();
            let factory = Factory::new(
                clock.clone(),
                FactoryConfig::new()
                    .with_epoch_ms(epoch_ms)
                    .with_base_key(&crate::CHAOS_KEY),
            )
            .unwrap();
            let records = vec![Record::Start {
                node,
                at: stamp(&clock),
                epoch_ms: factory.epoch_ms(),
            }];
            Self {
                clock,
                factory,
                records,
                start: 0,
                deadline: 0,
            }
        }

        fn enable(&mut self, id: u16, floor_ms: u64, deadline_off: u64) -> &mut Self {
            self.enable_as(false, id, floor_ms, deadline_off)
        }

        /// `converted`: as the lease manager enables a factory, `floor_ms` in the floors'
        /// terms, converted to the factory's epoch (`LeaseTarget::enable`); else as given.
        fn enable_as(&mut self, converted: bool, id: u16, floor_ms: u64, off: u64) -> &mut Self {
            let at = stamp(&self.clock);
            self.start = at.at_ms;
            self.deadline = at.at_ms + off;
            self.records.push(Record::Enable {
                at,
                machine_id: id,
                floor_ms,
                deadline_ms: self.deadline,
            });
            let id = MachineId::new(id).unwrap();
            if converted {
                LeaseTarget::enable(&self.factory, id, floor_ms, self.deadline);
            } else {
                let enabled = self.factory.enable_above(id, floor_ms, self.deadline);
                enabled.unwrap();
            }
            self
        }

        /// `n` batches of counter64, sortable96 and encrypted128 nonces.
        fn generate(&mut self, n: usize) -> &mut Self {
            for _ in 0..n {
                self.records.push(Record::Tick {
                    at: stamp(&self.clock),
                });
                // A floor ahead of the clock holds the 64-bit counter back (WouldBlock).
                let values = [
                    (
                        Kind::Counter,
                        64,
                        self.factory.counter64().map(|n| u128::from(n.to_u64())),
                    ),
                    (
                        Kind::Sortable,
                        96,
                        self.factory.sortable96().map(|n| n.to_u128()),
                    ),
                    (
                        Kind::Encrypted,
                        128,
                        self.factory
                            .encrypted128(Base::Counter)
                            .map(|n| n.to_u128()),
                    ),
                ];
                for (kind, bits, value) in values {
                    if let Ok(value) = value {
                        self.records.push(Record::Nonce {
                            at: stamp(&self.clock),
                            kind,
                            bits,
                            value,
                        });
                    }
                }
            }
            self
        }

        fn disable(&mut self) -> &mut Self {
            self.factory.disable();
            self.records.push(Record::Disable {
                at: stamp(&self.clock),
            });
            self
        }
    }

    fn node(id: u16, offset_ms: i64) -> Node {
        let mut n = Node::new(u32::from(id), offset_ms);
        n.enable(id, 0, 60_000).generate(10);
        n
    }

    #[test]
    fn a_clean_run_passes_whatever_the_clock_offsets_and_a_fabricated_duplicate_fails() {
        let (a, mut b) = (node(1, 0).records, node(2, -3_600_000).records);
        let report = check_nodes("clean", &[&a, &b, &node(3, 15_000).records]);
        assert_eq!(report.nonces, 90, "{}", report.summary());
        assert_eq!(report.duplicates, 0);
        assert_eq!(report.out_of_window, 0, "{}", report.summary());
        assert!(report.passed());
        assert_eq!(
            report.nodes[&2]
                .start_offsets_ms
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            [-3_600_000]
        );
        // Node 2 "produced" one of node 1's values.
        b.push(a[3]);
        let report = check_nodes("dup", &[&a, &b]);
        assert_eq!(report.duplicates, 1, "{}", report.summary());
        assert_eq!(report.duplicate_examples.len(), 1);
        assert_eq!(report.duplicate_examples[0].files.len(), 2);
        // It also carries node 1's ID, for which node 2 held no window.
        assert_eq!(report.out_of_window, 1);
        assert!(!report.passed());
    }

    #[test]
    fn a_duplicate_names_the_two_windows_it_came_from() {
        // Two nodes that both believe they hold ID 5, with no floor between them.
        let mut b = Node::new(2, -1_000);
        b.enable(5, 0, 60_000);
        // Node 2's window begins first on the machine's clock (in an earlier millisecond: a
        // tie would order the windows by file).
        std::thread::sleep(std::time::Duration::from_millis(2));
        let mut a = Node::new(1, 0);
        a.enable(5, 0, 60_000).generate(3);
        let copied = a.records[4];
        b.records.push(copied);
        let report = check_nodes("sources", &[&a.records, &b.records]);
        assert_eq!(report.duplicates, 1, "{}", report.summary());
        assert_eq!(report.out_of_window, 0, "{}", report.summary());
        let source = &report.duplicate_sources[0];
        assert_eq!(source.duplicates, 1);
        assert_eq!((source.first.node, source.second.node), (2, 1));
        assert_eq!(source.first.offset_ms, -1_000);
        assert_eq!(source.second.machine_id, 5);
        assert!(report.summary().contains("DUPLICATES 1 between"));
    }

    #[test]
    fn nonces_past_the_deadline_at_or_below_the_floor_without_a_window_or_after_the_disable_fail() {
        // Node 1's run, its window's floor and deadline as `edit` leaves them (given its start).
        let edited = |name: &str, edit: fn(&mut u64, &mut u64, u64)| {
            let mut a = node(1, 0);
            assert!(a.deadline > a.start);
            let Record::Enable {
                floor_ms,
                deadline_ms,
                ..
            } = &mut a.records[1]
            else {
                panic!("{:?}", a.records[1]);
            };
            edit(floor_ms, deadline_ms, a.start);
            check_nodes(name, &[&a.records])
        };
        // Claim the window was shorter than the nonces' timestamps: deadline = start.
        let past_deadline = edited("oow", |_, deadline, start| *deadline = start);
        assert_eq!(past_deadline.duplicates, 0);
        assert!(past_deadline.summary().contains("OUT OF WINDOW"));
        // Claim the lease came with a floor above everything the node issued.
        let below_floor = edited("floor", |floor, _, start| *floor = start + 10_000);
        assert_eq!(below_floor.floor_ahead_windows, 1);
        // No window at all.
        let a = node(1, 0).records;
        let mut bare = vec![a[0]];
        bare.extend_from_slice(&a[2..]);
        let without_window = check_nodes("nowindow", &[&bare]);
        for report in [past_deadline, below_floor, without_window] {
            assert_eq!(report.out_of_window, 30, "{}", report.summary());
            assert!(!report.passed());
        }
        // A batch that began after the disable cannot hold a nonce of the window.
        let mut a = node(1, 0);
        let last = *a.records.last().unwrap();
        a.disable();
        std::thread::sleep(std::time::Duration::from_millis(3));
        a.records.push(Record::Tick {
            at: stamp(&a.clock),
        });
        a.records.push(last);
        let report = check_nodes("afterdisable", &[&a.records]);
        assert_eq!(report.out_of_window, 1, "{}", report.summary());
        assert_eq!(report.duplicates, 1);
    }

    #[test]
    fn a_clock_stepped_back_mid_window_is_judged_on_the_machine_clock() {
        let mut a = Node::new(1, 0);
        a.enable(1, 0, 60_000).generate(5);
        let from = a.clock.offset_ms();
        let offset = a.clock.step_back(20_000);
        a.records.push(Record::ClockStep {
            at: Stamp::new(a.clock.now_with_offset().0, offset),
            from_offset_ms: from,
        });
        // Produced "before" the window began on the node's clock, after it on the machine's.
        a.generate(5);
        let report = check_nodes("step", &[&a.records]);
        assert_eq!(report.out_of_window, 0, "{}", report.summary());
        assert_eq!(report.duplicates, 0);
        assert_eq!(report.clock_steps, 1);
    }

    #[test]
    fn overlapping_holders_kept_apart_by_the_floor_pass_and_are_counted() {
        // Node 1 holds ID 5; node 2, its clock 100 s behind, also believes it holds ID 5 (as
        // after a step back or a lost write), above the floor node 1 left.
        let mut a = Node::new(1, 0);
        let pause = || std::thread::sleep(std::time::Duration::from_millis(5));
        a.enable(5, 0, 60_000).generate(10);
        pause();
        let mut b = Node::new(2, -100_000);
        b.enable(5, a.deadline, 200_000).generate(10);
        pause();
        a.generate(10);
        let report = check_nodes("overlap", &[&a.records, &b.records]);
        assert_eq!(report.duplicates, 0, "{}", report.summary());
        assert_eq!(report.out_of_window, 0, "{}", report.summary());
        assert_eq!(report.window_overlaps, 1);
        assert_eq!(report.handovers, 1);
        assert_eq!(report.floor_ahead_windows, 1);
        assert!(
            report.floor_ahead_max_ms >= 150_000,
            "{}",
            report.floor_ahead_max_ms
        );
    }

    #[test]
    fn floors_are_judged_in_the_floors_terms_on_any_epoch() {
        // A node on an epoch `shift` ms from the default, enabled with a floor `ahead` ms from its
        // clock (the floors' terms): `converted` as the lease manager enables it, else taken as
        // clock ms, as before floors knew the epoch.
        let run = |name: &str, shift: i64, ahead: i64, converted: bool| {
            let mut a = Node::on_epoch(1, 0, DEFAULT_EPOCH_MS.saturating_add_signed(shift));
            let floor = stamp(&a.clock).at_ms.saturating_add_signed(ahead);
            a.enable_as(converted, 1, floor, 60_000).generate(10);
            check_nodes(name, &[&a.records])
        };
        // An epoch 5 s earlier: its timestamps, in the floors' terms, run 5 s ahead of its clock.
        // The floor a predecessor left 2 s ahead of its clock, converted, is 3 s behind them, so
        // the window begins with its floor below them, not ahead of them.
        let report = run("epoch", -5_000, 2_000, true);
        assert_eq!(report.nonces, 30, "{}", report.summary());
        // Decoded with the file's epoch and compared in the floors' terms: every nonce passes.
        // (Against the floor as decoded Unix ms, every one would be at or below it.)
        assert_eq!(report.out_of_window, 0, "{}", report.summary());
        assert_eq!(report.floor_ahead_windows, 0, "{}", report.summary());
        assert!(report.passed());
        // An epoch 5 s later, a floor 2 s behind its clock taken as clock ms: its timestamps,
        // in the floors' terms 5 s behind its clock, are at or below the floor.
        let report = run("epochfloor", 5_000, -2_000, false);
        // Every nonce the factory made (the floor, read as clock ms, holds none back).
        assert_eq!(report.nonces, 30, "{}", report.summary());
        assert_eq!(report.out_of_window, 30, "{}", report.summary());
        assert!(!report.passed());
        // The floor ahead of the node's clock in the floors' terms, by 3 s.
        assert_eq!(report.floor_ahead_windows, 1);
        assert!(
            (2_900..=3_000).contains(&report.floor_ahead_max_ms),
            "{}",
            report.floor_ahead_max_ms
        );
        // Converted, the same floor holds the factory above it: nothing out of window.
        let report = run("epochfloor2", 5_000, -2_000, true);
        assert!(report.nonces > 0, "{}", report.summary());
        assert_eq!(report.out_of_window, 0, "{}", report.summary());
    }
}
