//! `cargo xtask bench [ARGS]`: the benchmarks, then the goal table; `cargo xtask bench-report`:
//! the table again from the last run's figures.
//!
//! The goals are data beside the benchmarks they read, `crates/<package>/benches/goals.json`
//! of each package benchmarked, printed in the order of [`BENCHES`] and of each file:
//!
//! ```json
//! { "goals": [
//!   { "name": "fill_encrypted128 vs one at a time", "time": "encrypted/encrypted128_aes",
//!     "over": "encrypted/fill_encrypted128_aes_x1024", "over_calls": 1024, "at_least": 4 }
//! ] }
//! ```
//!
//! Each goal has a `name` (its row), one measured ratio and at most one bound:
//!
//! - `"time": A, "over": B`: criterion's time per iteration of benchmark A over B's, where one
//!   iteration of B is `over_calls` calls (default 1);
//! - `"rate": A, "over_per_second": N`: A's calls per second over N;
//! - `"paired": ID`: the `paired` benchmark's ratio ID (the baseline's cost over ours, from each
//!   side's fastest tenth of rounds), or with `"as_cost": true` its inverse, our cost over the
//!   baseline's; these rows make the second table;
//! - `"at_least": X` or `"at_most": X`: the bound; a row without one is printed to read the
//!   goals against, and not checked.
//!
//! An `about` field beside `goals` is for the reader. What is printed after the goal tables
//! (criterion's figures of the paired ratios, and the per-call times) is listed here.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::steps::{Step, Steps};
use crate::workspace;

/// A benchmark `cargo xtask bench` runs.
struct Bench {
    package: &'static str,
    bench: &'static str,
    step: &'static str,
    /// Whether the extra arguments of `cargo xtask bench` (criterion's) are passed on.
    criterion: bool,
}

/// The benchmarks, in the order they run; their packages' goals are printed in this order.
const BENCHES: [Bench; 3] = [
    Bench {
        package: "nonce-core",
        bench: "nonces",
        step: "benchmarks",
        criterion: true,
    },
    Bench {
        package: "nononce",
        bench: "facade",
        step: "facade benchmarks",
        criterion: true,
    },
    // Its own rounds, not criterion's: the criterion arguments do not apply.
    Bench {
        package: "nononce",
        bench: "paired",
        step: "paired ratios",
        criterion: false,
    },
];

/// Runs every benchmark (criterion's with `args`), then prints the goal table.
pub fn run(args: &[String]) -> Result<(), String> {
    let steps: Vec<Step> = BENCHES
        .iter()
        .map(|b| {
            let mut command = vec!["bench", "-p", b.package, "--bench", b.bench];
            if b.criterion {
                command.push("--");
                command.extend(args.iter().map(String::as_str));
            }
            Step::cargo(b.step, &command)
        })
        .collect();
    Steps::new().run_all(&steps).and_then(|()| report())
}

/// Where criterion keeps its results: `CRITERION_HOME`, else `criterion` in the cargo target
/// directory, as criterion finds them.
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return workspace::root().join(home);
    }
    workspace::target_dir().join("criterion")
}

/// A ratio of the `paired` benchmark: its fastest-tenth ratio (the goal's figure), then the
/// median, lower and upper quartile of its per-round ratios.
type PairedRatio = (f64, f64, f64, f64);

/// What a goal's ratio must be.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

impl Bound {
    /// Whether `got` meets it, with the comparison and the bound as the report prints them.
    fn check(self, got: f64) -> (bool, &'static str, f64) {
        match self {
            Self::AtLeast(need) => (got >= need, ">=", need),
            Self::AtMost(need) => (got <= need, "<=", need),
        }
    }
}

/// How a goal's ratio is measured.
#[derive(Debug, PartialEq)]
enum Measure {
    /// Criterion's time of `time` over that of one of the `over_calls` calls of `over`.
    Time {
        time: String,
        over: String,
        over_calls: f64,
    },
    /// Calls per second of `rate` over `per_second`.
    Rate { rate: String, per_second: f64 },
    /// A ratio of the `paired` report, inverted into a cost when `as_cost`.
    Paired { id: String, as_cost: bool },
}

/// One row of a goal table.
#[derive(Debug, PartialEq)]
struct Goal {
    name: String,
    measure: Measure,
    bound: Option<Bound>,
}

/// The goals of every benchmarked package, in the order they are printed.
fn goals() -> Result<Vec<Goal>, String> {
    let mut packages: Vec<&str> = BENCHES.iter().map(|b| b.package).collect();
    packages.dedup();
    let mut goals = Vec::new();
    for package in packages {
        let path = workspace::root()
            .join("crates")
            .join(package)
            .join("benches/goals.json");
        goals.extend(read_goals(&path)?);
    }
    Ok(goals)
}

fn read_goals(path: &Path) -> Result<Vec<Goal>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_goals(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The goals of one `goals.json`.
fn parse_goals(text: &str) -> Result<Vec<Goal>, String> {
    let json: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let file = json.as_object().ok_or("not an object")?;
    if let Some(key) = file
        .keys()
        .find(|k| !matches!(k.as_str(), "about" | "goals"))
    {
        return Err(format!("unknown field `{key}` (known: about, goals)"));
    }
    file.get("goals")
        .and_then(Value::as_array)
        .ok_or("no `goals` list")?
        .iter()
        .enumerate()
        .map(|(i, goal)| parse_goal(goal).map_err(|e| format!("goal {}: {e}", i + 1)))
        .collect()
}

fn parse_goal(goal: &Value) -> Result<Goal, String> {
    const FIELDS: [&str; 10] = [
        "name",
        "time",
        "over",
        "over_calls",
        "rate",
        "over_per_second",
        "paired",
        "as_cost",
        "at_least",
        "at_most",
    ];
    let fields = goal.as_object().ok_or("not an object")?;
    if let Some(key) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!("unknown field `{key}`"));
    }
    let text = |key: &str| {
        fields
            .get(key)
            .map(|v| v.as_str().ok_or(format!("`{key}` is not a string")))
    };
    let number = |key: &str| {
        fields
            .get(key)
            .map(|v| v.as_f64().ok_or(format!("`{key}` is not a number")))
    };
    let name = text("name").ok_or("no `name`")??.to_owned();
    let only_with = |key: &str, measure: &str| {
        if fields.contains_key(key) {
            Err(format!("`{key}` goes with `{measure}` only"))
        } else {
            Ok(())
        }
    };
    let measure = match (text("time"), text("rate"), text("paired")) {
        (Some(time), None, None) => {
            only_with("over_per_second", "rate")?;
            only_with("as_cost", "paired")?;
            Measure::Time {
                time: time?.to_owned(),
                over: text("over").ok_or("`time` needs `over`")??.to_owned(),
                over_calls: number("over_calls").transpose()?.unwrap_or(1.0),
            }
        }
        (None, Some(rate), None) => {
            only_with("over", "time")?;
            only_with("over_calls", "time")?;
            only_with("as_cost", "paired")?;
            Measure::Rate {
                rate: rate?.to_owned(),
                per_second: number("over_per_second").ok_or("`rate` needs `over_per_second`")??,
            }
        }
        (None, None, Some(id)) => {
            only_with("over", "time")?;
            only_with("over_calls", "time")?;
            only_with("over_per_second", "rate")?;
            let as_cost = match fields.get("as_cost") {
                None => false,
                Some(v) => v.as_bool().ok_or("`as_cost` is not true or false")?,
            };
            Measure::Paired {
                id: id?.to_owned(),
                as_cost,
            }
        }
        _ => return Err("needs one of `time`, `rate` or `paired`".into()),
    };
    let bound = match (number("at_least"), number("at_most")) {
        (None, None) => None,
        (Some(need), None) => Some(Bound::AtLeast(need?)),
        (None, Some(need)) => Some(Bound::AtMost(need?)),
        (Some(_), Some(_)) => return Err("`at_least` and `at_most` both".into()),
    };
    Ok(Goal {
        name,
        measure,
        bound,
    })
}

/// A paired ratio (baseline's cost over ours) turned into our cost over the baseline's.
fn cost((fastest, median, low, high): PairedRatio) -> PairedRatio {
    (1.0 / fastest, 1.0 / median, 1.0 / high, 1.0 / low)
}

/// The per-round ratios of the last run of the facade's `paired` benchmark
/// (`<target>/paired/report.json`), by ID.
fn paired_report() -> Result<impl Fn(&str) -> Result<PairedRatio, String>, String> {
    let path = workspace::target_dir().join("paired/report.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{}: {e} (run `cargo xtask bench` first)", path.display()))?;
    let json: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(move |id: &str| {
        let row = &json[id];
        let get = |k: &str| {
            row[k].as_f64().ok_or_else(|| {
                format!(
                    "{}: no {k} for {id} (run `cargo xtask bench` again)",
                    path.display()
                )
            })
        };
        Ok((
            get("fastest")?,
            get("median")?,
            get("lower_quartile")?,
            get("upper_quartile")?,
        ))
    })
}

/// Time in ns per iteration of one criterion benchmark of the last run: criterion's typical
/// estimate, the figure it prints as "time", so the report and criterion's own output agree.
/// That is the slope of the linear sampling (sample times against iteration counts, which
/// weighs the long samples most) when there is one, else the mean.
fn typical_ns(id: &str) -> Result<f64, String> {
    let path = criterion_dir().join(id).join("new/estimates.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{}: {e} (run `cargo xtask bench` first)", path.display()))?;
    let json: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let slope = &json["slope"]["point_estimate"];
    let estimate = if slope.is_null() {
        &json["mean"]["point_estimate"]
    } else {
        slope
    };
    estimate
        .as_f64()
        .ok_or_else(|| format!("{}: no slope or mean estimate", path.display()))
}

/// Prints the goals as ratios within the last benchmark run (markdown).
pub fn report() -> Result<(), String> {
    let ns = |id: &str| typical_ns(id);
    let paired = paired_report()?;
    // (goal, measured ratio, bound).
    let mut rows: Vec<(String, f64, Option<Bound>)> = Vec::new();
    // The ratios of two loops are goals as the `paired` benchmark measures them.
    let mut paired_rows: Vec<(String, PairedRatio, Option<Bound>)> = Vec::new();
    for goal in goals()? {
        match &goal.measure {
            Measure::Time {
                time,
                over,
                over_calls,
            } => rows.push((goal.name, ns(time)? / (ns(over)? / over_calls), goal.bound)),
            Measure::Rate { rate, per_second } => {
                rows.push((goal.name, 1e9 / ns(rate)? / per_second, goal.bound));
            }
            Measure::Paired { id, as_cost } => {
                let ratio = paired(id)?;
                let ratio = if *as_cost { cost(ratio) } else { ratio };
                paired_rows.push((goal.name, ratio, goal.bound));
            }
        }
    }
    let compared = comparisons()?;

    println!("| goal | measured | required | met |");
    println!("|---|---|---|---|");
    let mut missed = 0;
    // A row's last two columns, required and met: empty without a bound.
    let mut judged = |got: f64, bound: &Option<Bound>| {
        let Some(bound) = bound else {
            return "| | |".to_owned();
        };
        let (met, cmp, need) = bound.check(got);
        missed += usize::from(!met);
        format!("| {cmp} {need}x | {} |", if met { "yes" } else { "no" })
    };
    for (goal, got, bound) in &rows {
        println!("| {goal} | {got:.2}x {}", judged(*got, bound));
    }
    println!(
        "\nratios of two loops, from the `paired` benchmark's alternating rounds: each side's \
         fastest tenth of rounds, and the per-round ratios' median (quartiles):\n"
    );
    println!("| goal | measured | per round: median (quartiles) | required | met |");
    println!("|---|---|---|---|---|");
    for (goal, (fastest, median, low, high), bound) in &paired_rows {
        let judged = judged(*fastest, bound);
        println!("| {goal} | {fastest:.2}x | {median:.2}x ({low:.2}x-{high:.2}x) {judged}");
    }
    println!(
        "\nfor comparison, not goals: the same ratios from criterion's separately measured \
         rows, and nonce-core's own factory calls (no thread cache) against the peers:"
    );
    for (goal, got) in &compared {
        println!("- {goal}: {got:.2}x");
    }
    println!("\nper-call times (ns, criterion's typical estimate):");
    for (group, ids) in PER_CALL.lines().filter_map(|line| line.split_once(": ")) {
        for id in ids.split_whitespace().map(|id| format!("{group}/{id}")) {
            println!("| {id} | {:.2} |", ns(&id)?);
        }
    }
    let batch = ns("encrypted/fill_encrypted128_aes_x1024")? / 1024.0;
    println!("| encrypted/fill_encrypted128_aes (per nonce) | {batch:.2} |");
    if missed > 0 {
        eprintln!("xtask: {missed} goal(s) not met in this run");
    }
    Ok(())
}

/// Criterion's figures for the ratios the `paired` benchmark measures as goals (measured
/// separately, so not like for like), and nonce-core's own factory calls, without the thread
/// cache, against the peers.
fn comparisons() -> Result<Vec<(String, f64)>, String> {
    let ns = |id: &str| typical_ns(id);
    let fetch_add = ns("baseline/fetch_add_pack64")?;
    let uuid = ns("peers/uuid_now_v7")?;
    let ferroid_mono = ns("peers/ferroid_ulid_mono_thread_local")?;
    // Aggregate speed-up of 2 threads over 1: benchmarks `{id}_x1` and `{id}_x2`.
    let scaling = |id: &str| -> Result<f64, String> {
        Ok(ns(&format!("{id}_x1"))? / ns(&format!("{id}_x2"))?)
    };
    let mut compared: Vec<(String, f64)> = Vec::new();
    for (kind, id) in [
        ("counter64", "counter64_u64"),
        ("counter96", "counter96_u128"),
        ("counter128", "counter128_u128"),
    ] {
        compared.push((
            format!("{kind} vs fetch_add"),
            fetch_add / ns(&format!("counter/{id}"))?,
        ));
    }
    for kind in ["counter64", "counter128"] {
        compared.push((
            format!("handle {kind}: 2 threads vs 1 (aggregate)"),
            scaling(&format!("threads/handle_{kind}"))?,
        ));
    }
    // Peers each in its fastest configuration (see docs/performance.md): the peers in
    // nonce-core's run, the facade's rows in the next.
    for kind in ["sortable96", "sortable128"] {
        for (name, id) in [
            (format!("{kind} (BootClock)"), format!("sortable/{kind}")),
            (
                format!("{kind} on the ticker clock"),
                format!("sortable/ticker_{kind}"),
            ),
            (
                format!("facade {kind} (ticker clock)"),
                format!("facade_sortable/{kind}"),
            ),
            // The value as an integer, as ferroid returns its ULID.
            (
                format!("facade {kind} (ticker clock, value as an integer)"),
                format!("facade_sortable/{kind}_u128"),
            ),
        ] {
            let ours = ns(&id)?;
            compared.push((format!("{name} vs Uuid::now_v7 (fast-rng)"), uuid / ours));
            compared.push((
                format!("{name}: cost vs ferroid's thread-local monotonic ULID"),
                ours / ferroid_mono,
            ));
        }
    }
    for kind in ["sortable96", "sortable128"] {
        compared.push((
            format!("handle {kind}: 2 threads vs 1 (aggregate)"),
            scaling(&format!("sortable_threads/handle_{kind}"))?,
        ));
    }
    // Criterion's separate rows of a `fetch_add` and of a block, added (consecutive blocks of
    // the block row overlap in the pipeline, which no loop whose block waits for its counter
    // value can do).
    for (name, id, block) in [
        (
            "encrypted128 (aes)",
            "encrypted128_aes",
            "baseline/aes256_block",
        ),
        (
            "encrypted64 (speck)",
            "encrypted64_speck",
            "baseline/speck64_block",
        ),
    ] {
        compared.push((
            format!("{name} vs fetch_add + one block, criterion's separate rows added"),
            (fetch_add + ns(block)?) / ns(&format!("encrypted/{id}"))?,
        ));
    }
    // The facade's factories, shared by every thread as users call them.
    for (name, kind) in [
        ("counter64", "counter64"),
        ("counter128", "counter128"),
        ("encrypted128 (aes)", "encrypted128_aes"),
        ("sortable96", "sortable96"),
        ("sortable128", "sortable128"),
    ] {
        compared.push((
            format!("facade {name}, shared factory: 2 threads vs 1 (aggregate)"),
            scaling(&format!("facade_threads/{kind}"))?,
        ));
    }
    Ok(compared)
}

/// The criterion benchmarks whose time per call the report lists: on each line, a group and
/// benchmarks of it.
const PER_CALL: &str = "
baseline: fetch_add_pack64 aes256_block speck64_block boot_clock_now ticker_clock_now instant_now
peers: uuid_now_v7 ulid_generate ferroid_ulid_mono_thread_local ferroid_ulid_thread_local
peers: ferroid_atomic_snowflake
counter: counter64 counter96 counter128 counter64_u64 counter96_u128 counter128_u128
counter: handle_counter64 handle_counter128
threads: shared_counter128_x1 shared_counter128_x2 handle_counter64_x1 handle_counter64_x2
threads: handle_counter128_x1 handle_counter128_x2
sortable: sortable64 sortable96 sortable128 handle_sortable96 handle_sortable128 ticker_sortable64
sortable: ticker_sortable96 ticker_sortable128 ticker_handle_sortable96 ticker_handle_sortable128
sortable_threads: shared_sortable128_x1 shared_sortable128_x2 handle_sortable96_x1
sortable_threads: handle_sortable96_x2 handle_sortable128_x1 handle_sortable128_x2
encrypted: encrypted64_speck encrypted128_aes handle_encrypted128_aes encrypted128_aes_sortable
facade: fetch_add_pack64 counter64 counter128 encrypted128_aes handle_counter64 handle_counter128
facade: handle_encrypted128_aes
facade_sortable: sortable64 sortable96 sortable128 sortable96_u128 sortable128_u128
facade_threads: fetch_add_pack64_x1 fetch_add_pack64_x2 counter64_x1 counter64_x2
facade_threads: own_factories_counter64_x1 own_factories_counter64_x2 counter128_x1 counter128_x2
facade_threads: encrypted128_aes_x1 encrypted128_aes_x2 handle_counter64_x1 handle_counter64_x2
facade_threads: handle_counter128_x1 handle_counter128_x2 handle_encrypted128_aes_x1
facade_threads: handle_encrypted128_aes_x2 sortable96_x1 sortable96_x2 sortable128_x1
facade_threads: sortable128_x2 no_thread_cache_counter128_x1 no_thread_cache_counter128_x2
";

#[cfg(test)]
mod tests {
    use super::{Bound, Goal, Measure, goals, parse_goals};

    #[test]
    fn the_goal_files_beside_the_benchmarks_read() {
        let goals = goals().unwrap();
        assert!(goals.iter().any(|g| g.bound.is_some()));
        // Names are rows of one table: two alike would read as one goal measured twice.
        for (i, goal) in goals.iter().enumerate() {
            assert!(
                goals[..i].iter().all(|g| g.name != goal.name),
                "{} twice",
                goal.name
            );
        }
    }

    #[test]
    fn each_kind_of_ratio_reads_with_its_bound() {
        let goals = parse_goals(
            r#"{ "about": "x", "goals": [
                { "name": "a", "time": "t", "over": "o", "over_calls": 1024, "at_least": 4 },
                { "name": "b", "rate": "r", "over_per_second": 8192000, "at_most": 1.25 },
                { "name": "c", "paired": "p", "as_cost": true },
                { "name": "d", "time": "t", "over": "o" }
            ] }"#,
        )
        .unwrap();
        let time = |over_calls| Measure::Time {
            time: "t".into(),
            over: "o".into(),
            over_calls,
        };
        assert_eq!(
            goals,
            [
                Goal {
                    name: "a".into(),
                    measure: time(1024.0),
                    bound: Some(Bound::AtLeast(4.0)),
                },
                Goal {
                    name: "b".into(),
                    measure: Measure::Rate {
                        rate: "r".into(),
                        per_second: 8_192_000.0,
                    },
                    bound: Some(Bound::AtMost(1.25)),
                },
                Goal {
                    name: "c".into(),
                    measure: Measure::Paired {
                        id: "p".into(),
                        as_cost: true,
                    },
                    bound: None,
                },
                Goal {
                    name: "d".into(),
                    measure: time(1.0),
                    bound: None,
                },
            ]
        );
        // The bound prints as written: `>= 4x`, not `>= 4.0x`.
        assert_eq!(format!("{}", goals[0].bound.unwrap().check(5.0).2), "4");
    }

    #[test]
    fn a_misspelt_or_ambiguous_goal_is_refused() {
        let refused = |goal: &str| {
            parse_goals(&format!(r#"{{ "goals": [ {goal} ] }}"#))
                .err()
                .unwrap_or_else(|| panic!("{goal} was taken"))
        };
        assert!(refused(r#"{ "name": "a", "paired": "p", "at_leats": 1 }"#).contains("at_leats"));
        assert!(refused(r#"{ "name": "a", "paired": "p", "rate": "r" }"#).contains("one of"));
        assert!(refused(r#"{ "name": "a", "paired": "p", "over": "o" }"#).contains("`over`"));
        assert!(refused(r#"{ "name": "a", "time": "t" }"#).contains("needs `over`"));
        assert!(
            refused(r#"{ "name": "a", "paired": "p", "at_least": 1, "at_most": 2 }"#)
                .contains("both")
        );
        assert!(refused(r#"{ "paired": "p" }"#).contains("name"));
    }
}
