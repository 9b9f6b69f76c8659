//! `cargo xtask`: everything that is not plain cargo.
//!
//! - `cargo xtask test`: the whole check suite CI runs (format, lints, feature checks, tests on
//!   real servers, chaos, the simulation, loom, docs, the no_std proof; see `suite.rs`);
//!   `cargo xtask test --quick`: the edit-compile loop (format, clippy, the tests that need no
//!   server, a short simulation).
//! - `cargo xtask nostd`: only the no_std proof.
//! - `cargo xtask core-deps`: only the check that `lease-core` pulls in no tokio, tracing,
//!   metrics or futures (see `core_deps.rs`).
//! - `cargo xtask bench [ARGS]`: `cargo bench -p nonce-core`, then the facade's benchmark
//!   (`cargo bench -p nononce`), with extra criterion arguments; prints the goal table.
//! - `cargo xtask fuzz [--cases N]`: every fuzz target in release mode (see `fuzz.rs`).

mod chaos;
mod core_deps;
mod fuzz;
mod launcher;
mod ports;
mod services;
mod sim;
mod steps;
mod suite;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use steps::{Step, Steps};

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => suite::run(&args[1..]),
        Some("nostd") => Steps::new().run_all(&nostd_steps()),
        Some("core-deps") => Steps::new().check(suite::CORE_DEPS, core_deps::check),
        Some("bench") => Steps::new()
            .run_all(&[
                Step::cargo(
                    "benchmarks",
                    &[
                        &["bench", "-p", "nonce-core", "--bench", "nonces", "--"][..],
                        &str_refs(&args[1..]),
                    ]
                    .concat(),
                ),
                Step::cargo(
                    "facade benchmarks",
                    &[
                        &["bench", "-p", "nononce", "--bench", "facade", "--"][..],
                        &str_refs(&args[1..]),
                    ]
                    .concat(),
                ),
                // Its own rounds, not criterion's: the criterion arguments do not apply.
                Step::cargo(
                    "paired ratios",
                    &["bench", "-p", "nononce", "--bench", "paired"],
                ),
            ])
            .and_then(|()| bench_report()),
        Some("bench-report") => bench_report(),
        Some("chaos") => chaos::run(&args[1..]),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("sim") => sim::run(&args[1..]),
        Some("with-services") => with_services(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <test [--quick]|nostd|core-deps|bench [criterion args]|bench-report|fuzz [--cases N]|with-services CMD [ARGS]>"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("xtask: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn str_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `cargo`, without the variables `cargo run` set for xtask itself ([`clean_env`]).
fn cargo() -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    clean_env(&mut cmd);
    cmd
}

/// Removes from `cmd`'s environment what `cargo run` set for xtask itself
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...): build scripts that track them (ring's does) would
/// otherwise run again in every cargo command xtask starts, and everything above them would
/// rebuild, here and again in the developer's next plain `cargo` command.
fn clean_env(cmd: &mut Command) {
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || matches!(
                &*key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
            )
        {
            cmd.env_remove(&*key);
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn nostd_steps() -> Vec<Step> {
    let root = workspace_root();
    let dir = root.join("xtask/no-std-proof");
    let target = root.join("target/no-std-proof").display().to_string();
    vec![
        Step::cargo("no_std proof, no features", &["build", "--locked"])
            .dir(dir.clone())
            .env("CARGO_TARGET_DIR", target.clone()),
        Step::cargo(
            "no_std proof, every cipher",
            &["build", "--locked", "--features", "ciphers"],
        )
        .dir(dir)
        .env("CARGO_TARGET_DIR", target),
    ]
}

/// Runs a command with the test servers up and their `NONONCE_TEST_*` variables set, then
/// stops what was started: `cargo xtask with-services cargo test -p lease-redis`.
fn with_services(command: &[String]) -> Result<(), String> {
    let (program, args) = command
        .split_first()
        .ok_or("with-services needs a command to run")?;
    let services = services::start()?;
    let mut cmd = Command::new(program);
    clean_env(&mut cmd);
    let status = cmd
        .args(args)
        .envs(services.env.iter().map(|(k, v)| (k, v)))
        .status()
        .map_err(|e| format!("could not run {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} failed ({status})"))
    }
}

/// The cargo target directory: `CARGO_TARGET_DIR`, relative to the workspace, or `target`.
fn target_dir() -> PathBuf {
    let root = workspace_root();
    env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |t| root.join(t))
}

/// Where criterion keeps its results: `CRITERION_HOME`, else `criterion` in the cargo target
/// directory, as criterion finds them.
fn criterion_dir() -> PathBuf {
    if let Some(home) = env::var_os("CRITERION_HOME") {
        return workspace_root().join(home);
    }
    target_dir().join("criterion")
}

/// A ratio of the `paired` benchmark: its fastest-tenth ratio (the goal's figure), then the
/// median, lower and upper quartile of its per-round ratios.
type PairedRatio = (f64, f64, f64, f64);

/// What a goal's ratio must be.
#[derive(Clone, Copy)]
enum Goal {
    AtLeast(f64),
    AtMost(f64),
}

impl Goal {
    /// Whether `got` meets it, with the comparison and the bound as the report prints them.
    fn check(self, got: f64) -> (bool, &'static str, f64) {
        match self {
            Self::AtLeast(need) => (got >= need, ">=", need),
            Self::AtMost(need) => (got <= need, "<=", need),
        }
    }
}

/// A paired ratio (baseline's cost over ours) turned into our cost over the baseline's.
fn cost((fastest, median, low, high): PairedRatio) -> PairedRatio {
    (1.0 / fastest, 1.0 / median, 1.0 / high, 1.0 / low)
}

/// The per-round ratios of the last run of the facade's `paired` benchmark
/// (`<target>/paired/report.json`), by ID.
fn paired_report() -> Result<impl Fn(&str) -> Result<PairedRatio, String>, String> {
    let path = target_dir().join("paired/report.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{}: {e} (run `cargo xtask bench` first)", path.display()))?;
    let json: serde_json::Value =
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
    let json: serde_json::Value =
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

/// Prints the nonce-core goals as ratios within the last benchmark run (markdown).
fn bench_report() -> Result<(), String> {
    let ns = |id: &str| typical_ns(id);
    let fetch_add = ns("baseline/fetch_add_pack64")?;
    let aes = ns("baseline/aes256_block")?;
    let speck = ns("baseline/speck64_block")?;
    let uuid = ns("peers/uuid_now_v7")?;
    let single_aes = ns("encrypted/encrypted128_aes")?;
    let cap_rate = 8_192_000.0;
    // Aggregate speed-up of 2 threads over 1: benchmarks `{id}_x1` and `{id}_x2`.
    let scaling = |id: &str| -> Result<f64, String> {
        Ok(ns(&format!("{id}_x1"))? / ns(&format!("{id}_x2"))?)
    };
    // (goal, measured ratio, required ratio).
    let mut rows: Vec<(String, f64, Goal)> = Vec::new();
    // The ratios of two loops are goals as the `paired` benchmark measures them; criterion's
    // separately measured rows give the same ratios, printed for comparison.
    let paired = paired_report()?;
    let mut paired_rows: Vec<(String, PairedRatio, Goal)> = Vec::new();
    let mut compared: Vec<(String, f64)> = Vec::new();
    for (kind, id) in [
        ("counter64", "counter64_u64"),
        ("counter96", "counter96_u128"),
        ("counter128", "counter128_u128"),
    ] {
        let name = format!("{kind} vs fetch_add");
        compared.push((name.clone(), fetch_add / ns(&format!("counter/{id}"))?));
        paired_rows.push((
            name,
            paired(&format!("fetch_add/{id}"))?,
            Goal::AtLeast(0.8),
        ));
        paired_rows.push((
            format!("facade {kind} (thread cache) vs fetch_add"),
            paired(&format!("fetch_add/facade_{id}"))?,
            Goal::AtLeast(0.8),
        ));
    }
    for kind in ["counter64", "counter128"] {
        let name = format!("handle {kind}: 2 threads vs 1 (aggregate)");
        compared.push((name.clone(), scaling(&format!("threads/handle_{kind}"))?));
        paired_rows.push((
            name,
            paired(&format!("scaling/handle_{kind}"))?,
            Goal::AtLeast(1.8),
        ));
    }
    rows.push((
        "sortable64 rate vs 8.192 M/s cap".into(),
        1e9 / ns("sortable/sortable64")? / cap_rate,
        Goal::AtLeast(0.97),
    ));
    // Peers each in its fastest configuration (see docs/performance.md). The goals are the
    // facade's (its factories on its ticker clock), measured against the peers in alternating
    // rounds; criterion's rows (the peers in nonce-core's run, the facade's in the next) and
    // nonce-core's own factory calls, without the thread cache, for comparison.
    let ferroid_mono = ns("peers/ferroid_ulid_mono_thread_local")?;
    for kind in ["sortable96", "sortable128"] {
        paired_rows.push((
            format!("facade {kind} (ticker clock) vs Uuid::now_v7 (fast-rng)"),
            paired(&format!("uuid/{kind}"))?,
            Goal::AtLeast(10.0),
        ));
        paired_rows.push((
            format!("facade {kind} (ticker clock): cost vs ferroid's thread-local monotonic ULID"),
            cost(paired(&format!("ferroid/{kind}"))?),
            Goal::AtMost(1.5),
        ));
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
    rows.push((
        "sortable64 on the ticker clock rate vs 8.192 M/s cap".into(),
        1e9 / ns("sortable/ticker_sortable64")? / cap_rate,
        Goal::AtLeast(0.97),
    ));
    for kind in ["sortable96", "sortable128"] {
        let name = format!("handle {kind}: 2 threads vs 1 (aggregate)");
        compared.push((
            name.clone(),
            scaling(&format!("sortable_threads/handle_{kind}"))?,
        ));
        paired_rows.push((
            name,
            paired(&format!("scaling/handle_{kind}"))?,
            Goal::AtLeast(1.8),
        ));
    }
    // Against the same done by hand in one loop; criterion's separate rows of a `fetch_add`
    // and of a block, added, beside them (consecutive blocks of the block row overlap in the
    // pipeline, which no loop whose block waits for its counter value can do).
    for (name, id, block) in [
        ("encrypted128 (aes)", "encrypted128_aes", aes),
        ("encrypted64 (speck)", "encrypted64_speck", speck),
    ] {
        paired_rows.push((
            format!("{name} vs fetch_add + one block, by hand in one loop"),
            paired(&format!("by_hand/{id}"))?,
            Goal::AtLeast(0.8),
        ));
        compared.push((
            format!("{name} vs fetch_add + one block, criterion's separate rows added"),
            (fetch_add + block) / ns(&format!("encrypted/{id}"))?,
        ));
    }
    let batch = ns("encrypted/fill_encrypted128_aes_x1024")? / 1024.0;
    rows.push((
        "fill_encrypted128 vs one at a time".into(),
        single_aes / batch,
        Goal::AtLeast(4.0),
    ));
    // The facade's factories, shared by every thread as users call them (crates/nononce
    // benches/facade.rs: handles measured in the same run).
    for (name, kind) in [
        ("counter64", "counter64"),
        ("counter128", "counter128"),
        ("encrypted128 (aes)", "encrypted128_aes"),
    ] {
        let goal = format!("facade {name}, shared factory: 2 threads vs 1 (aggregate)");
        compared.push((goal.clone(), scaling(&format!("facade_threads/{kind}"))?));
        paired_rows.push((
            goal,
            paired(&format!("scaling/{kind}"))?,
            Goal::AtLeast(1.8),
        ));
        rows.push((
            format!("facade {name}, shared factory: cost vs a handle (1 thread)"),
            ns(&format!("facade/{kind}"))? / ns(&format!("facade/handle_{kind}"))?,
            Goal::AtMost(1.25),
        ));
    }

    for kind in ["sortable96", "sortable128"] {
        let goal = format!("facade {kind}, shared factory: 2 threads vs 1 (aggregate)");
        compared.push((goal.clone(), scaling(&format!("facade_threads/{kind}"))?));
        paired_rows.push((
            goal,
            paired(&format!("scaling/{kind}"))?,
            Goal::AtLeast(1.8),
        ));
    }
    // Not goals: what the goals' scaling ratios are read against.
    let control = paired("scaling/own_factories_counter64")?;
    let shared_atomic = paired("scaling/fetch_add_pack64")?;

    println!("| goal | measured | required | met |");
    println!("|---|---|---|---|");
    let mut missed = 0;
    for (goal, got, need) in &rows {
        let (met, cmp, need) = need.check(*got);
        missed += usize::from(!met);
        println!(
            "| {goal} | {got:.2}x | {cmp} {need}x | {} |",
            if met { "yes" } else { "no" }
        );
    }
    println!(
        "\nratios of two loops, from the `paired` benchmark's alternating rounds: each side's \
         fastest tenth of rounds, and the per-round ratios' median (quartiles):\n"
    );
    println!("| goal | measured | per round: median (quartiles) | required | met |");
    println!("|---|---|---|---|---|");
    for (goal, (fastest, median, low, high), need) in &paired_rows {
        let (met, cmp, need) = need.check(*fastest);
        missed += usize::from(!met);
        println!(
            "| {goal} | {fastest:.2}x | {median:.2}x ({low:.2}x-{high:.2}x) | {cmp} {need}x | {} |",
            if met { "yes" } else { "no" }
        );
    }
    for (what, (fastest, median, low, high)) in [
        (
            "control, not a goal: counter64 with a factory per thread (nothing shared)",
            control,
        ),
        (
            "control, not a goal: one shared `fetch_add` (contended: read the median, its \
             fastest rounds are those whose threads overlapped least)",
            shared_atomic,
        ),
    ] {
        println!("| {what} | {fastest:.2}x | {median:.2}x ({low:.2}x-{high:.2}x) | | |");
    }
    println!(
        "\nfor comparison, not goals: the same ratios from criterion's separately measured \
         rows, and nonce-core's own factory calls (no thread cache) against the peers:"
    );
    for (goal, got) in &compared {
        println!("- {goal}: {got:.2}x");
    }
    println!("\nper-call times (ns, criterion's typical estimate):");
    for id in [
        "baseline/fetch_add_pack64",
        "baseline/aes256_block",
        "baseline/speck64_block",
        "baseline/boot_clock_now",
        "baseline/ticker_clock_now",
        "baseline/instant_now",
        "peers/uuid_now_v7",
        "peers/ulid_generate",
        "peers/ferroid_ulid_mono_thread_local",
        "peers/ferroid_ulid_thread_local",
        "peers/ferroid_atomic_snowflake",
        "counter/counter64",
        "counter/counter96",
        "counter/counter128",
        "counter/counter64_u64",
        "counter/counter96_u128",
        "counter/counter128_u128",
        "counter/handle_counter64",
        "counter/handle_counter128",
        "threads/shared_counter128_x1",
        "threads/shared_counter128_x2",
        "threads/handle_counter64_x1",
        "threads/handle_counter64_x2",
        "threads/handle_counter128_x1",
        "threads/handle_counter128_x2",
        "sortable/sortable64",
        "sortable/sortable96",
        "sortable/sortable128",
        "sortable/handle_sortable96",
        "sortable/handle_sortable128",
        "sortable/ticker_sortable64",
        "sortable/ticker_sortable96",
        "sortable/ticker_sortable128",
        "sortable/ticker_handle_sortable96",
        "sortable/ticker_handle_sortable128",
        "sortable_threads/shared_sortable128_x1",
        "sortable_threads/shared_sortable128_x2",
        "sortable_threads/handle_sortable96_x1",
        "sortable_threads/handle_sortable96_x2",
        "sortable_threads/handle_sortable128_x1",
        "sortable_threads/handle_sortable128_x2",
        "encrypted/encrypted64_speck",
        "encrypted/encrypted128_aes",
        "encrypted/handle_encrypted128_aes",
        "encrypted/encrypted128_aes_sortable",
        "facade/fetch_add_pack64",
        "facade/counter64",
        "facade/counter128",
        "facade/encrypted128_aes",
        "facade/handle_counter64",
        "facade/handle_counter128",
        "facade/handle_encrypted128_aes",
        "facade_sortable/sortable64",
        "facade_sortable/sortable96",
        "facade_sortable/sortable128",
        "facade_sortable/sortable96_u128",
        "facade_sortable/sortable128_u128",
        "facade_threads/fetch_add_pack64_x1",
        "facade_threads/fetch_add_pack64_x2",
        "facade_threads/counter64_x1",
        "facade_threads/counter64_x2",
        "facade_threads/own_factories_counter64_x1",
        "facade_threads/own_factories_counter64_x2",
        "facade_threads/counter128_x1",
        "facade_threads/counter128_x2",
        "facade_threads/encrypted128_aes_x1",
        "facade_threads/encrypted128_aes_x2",
        "facade_threads/handle_counter64_x1",
        "facade_threads/handle_counter64_x2",
        "facade_threads/handle_counter128_x1",
        "facade_threads/handle_counter128_x2",
        "facade_threads/handle_encrypted128_aes_x1",
        "facade_threads/handle_encrypted128_aes_x2",
        "facade_threads/sortable96_x1",
        "facade_threads/sortable96_x2",
        "facade_threads/sortable128_x1",
        "facade_threads/sortable128_x2",
        "facade_threads/no_thread_cache_counter128_x1",
        "facade_threads/no_thread_cache_counter128_x2",
    ] {
        println!("| {id} | {:.2} |", ns(id)?);
    }
    println!("| encrypted/fill_encrypted128_aes (per nonce) | {batch:.2} |");
    if missed > 0 {
        eprintln!("xtask: {missed} goal(s) not met in this run");
    }
    Ok(())
}
