//! `cargo xtask test [--quick]`: the check suite. What each step covers and why it is there:
//! docs/testing.md.
//!
//! The full run builds each configuration once and runs what waits beside what computes:
//!
//! 1. setup: `protoc` (building etcd-client needs it) and `cargo-hack`; the test servers install
//!    and start in the background meanwhile;
//! 2. format and clippy (fail fast), then one build of the workspace's tests (the chaos
//!    binaries with them);
//! 3. then three lanes: the servers' lane runs the workspace's tests (those that wait on
//!    servers and timers many at a time), then chaos (every backend under faults at once), then
//!    what reuses the test build: docs, doctests, each crate alone with the features that
//!    change it, the README's first command; the own-folders lane builds and runs loom, the
//!    no_std proof, nonce-core and lease-manager with each feature, and the simulation, each in
//!    a target folder of its own; the foreground checks every feature combination in the
//!    workspace's target folder, beside the tests.
//!
//! `--quick` is the edit-compile loop: format, clippy, every test that needs no server (unit,
//! property and SQLite tests), and the simulation at a few hundred seeds.

use std::path::{Path, PathBuf};
use std::thread;

use crate::services::{self, Running};
use crate::steps::{Step, Steps};
use crate::{chaos, core_deps, workspace};

/// nonce-core's features that convert nonces for other libraries (UUIDs, sqlx column types).
const NONCE_CORE_INTEROP: [&str; 4] = ["uuid", "sqlx-postgres", "sqlx-mysql", "sqlx-sqlite"];

/// Crates with features: besides the workspace run with every feature, each is tested crate by
/// crate with the combinations that change its behaviour ([`feature_test_steps`]).
const FEATURED: [&str; 7] = [
    "nonce-core",
    "lease-manager",
    "lease-sql",
    "lease-redis",
    "lease-etcd",
    "lease-guard",
    "nononce",
];

/// The name of the [`core_deps`] step.
pub const CORE_DEPS: &str = "lease-core: machine-id its only dependency";

/// What the test builds build: every library, binary and integration test. The examples are
/// type-checked by clippy and the feature checks, and run by none; linking them would double
/// the facade's build.
const TEST_TARGETS: [&str; 3] = ["--lib", "--bins", "--tests"];

/// Seeds of the simulation in the full run, and in `--quick`. The full run's sweep has every
/// guard on; the seeds that must fail with a guard off are `nononce-sim`'s fleet tests. The
/// step took 554 CPU seconds with 5,000 seeds and 289 with 2,000, the same build in both: the
/// 5,000 kept the run over 25 minutes. `nononce-sim` adds seeds on ZooKeeper, which no seed
/// draws: 250 here (`ZOOKEEPER_SIM_SEEDS`; 500, its default of a quarter, made the sim step the
/// run's last, 25:26 in all on a fresh clone), 75 in `--quick`.
const SIM_SEEDS: &str = "2000";
const ZOOKEEPER_SIM_SEEDS: &str = "250";
const QUICK_SIM_SEEDS: &str = "300";

pub fn run(args: &[String]) -> Result<(), String> {
    let quick = match args {
        [] => false,
        [flag] if flag == "--quick" => true,
        _ => {
            return Err(format!(
                "unknown test arguments {args:?}: use --quick or nothing"
            ));
        }
    };
    let steps = if quick {
        Steps::new()
    } else {
        // The full run builds most crates once: incremental compilation's caches cost time
        // there and pay off only in the edit-compile loop (`--quick` keeps them).
        Steps::new().with_env("CARGO_INCREMENTAL", "0")
    };
    let result = if quick {
        quick_steps(&steps)
    } else {
        full(&steps)
    };
    steps.print_table();
    result
}

/// Format and lints: the first steps of both tiers.
fn lint_steps() -> Vec<Step> {
    vec![
        Step::cargo_line("format", "fmt --all --check"),
        Step::cargo_line(
            "clippy",
            "clippy --workspace --all-targets --all-features --locked -- -D warnings",
        ),
        Step::cargo_line(
            "clippy, nonce-core without features",
            "clippy -p nonce-core --no-default-features --locked -- -D warnings",
        ),
    ]
}

fn quick_steps(steps: &Steps) -> Result<(), String> {
    steps.check("setup: protoc", services::etcd::ensure_protoc)?;
    steps.run_all(&lint_steps())?;
    steps.run(&workspace_tests(
        "tests without servers",
        &["--profile", "serverless"],
    ))?;
    steps.run(&sim_tests())?;
    steps.run(&Step::cargo(
        "sim (a few hundred seeds)",
        &["xtask", "sim", "--seeds", QUICK_SIM_SEEDS],
    ))
}

/// The fleet simulation's own tests (nextest's `sim` profile), in the `sim` build its sweep
/// runs in: hundreds of seeds each, five to twenty times faster there than in the test build.
fn sim_tests() -> Step {
    Step::cargo_line(
        "sim: tests",
        "nextest run -p nononce-sim --cargo-profile sim --profile sim --locked",
    )
}

fn full(steps: &Steps) -> Result<(), String> {
    // Before any build: etcd-client's build script needs protoc.
    steps.check("setup: protoc", services::etcd::ensure_protoc)?;
    let hack = steps.check_value("setup: cargo-hack", services::cargo_hack::ensure)?;
    thread::scope(|scope| {
        // The servers install and start while the first steps compile; stopped when `Running`
        // drops, whatever the outcome.
        let servers = scope.spawn(|| steps.check_value("setup: test servers", services::start));
        // Format and lints fail fast; clippy builds the proc-macros and build scripts the
        // test build reuses.
        let result = steps
            .run_all(&lint_steps())
            .and_then(|()| steps.run(&workspace_tests("build: tests", &["--no-run"])));
        let servers = servers
            .join()
            .map_err(|_| "starting the test servers panicked".to_owned())?;
        result?;
        tests(steps, &hack, &servers?)
    })
}

/// `cargo hack check` of the facade with each feature alone.
const NONONCE_EACH_FEATURE: &str = "hack check -p nononce --each-feature --exclude-features default --exclude-all-features --locked";

/// Every feature combination checked, in the workspace's target folder: the checks reuse
/// clippy's dependency metadata, build scripts and proc-macros (a folder of their own cost
/// about 160 CPU seconds more, building them again). Cargo locks the folder for one
/// invocation at a time: the checks run while the servers' lane runs tests and chaos, which
/// build nothing, and take turns with the builds after them. `hack` is the folder of the
/// `cargo-hack` binary.
fn feature_check_steps(hack: &Path) -> Result<Vec<Step>, String> {
    let path = services::cargo_hack::path_with(hack)?;
    let hack_step = |name, line: &str| {
        Step::cargo_line(name, line)
            .env("PATH", path.clone())
            .nice()
    };
    Ok(vec![
        // What users build: each published library and binary alone (no dev-dependencies
        // unified in), in every combination of its features. `default` adds nothing a
        // combination lacks. The unpublished crates (chaos, simulation, xtask, the example
        // strategy, the gRPC code check) have no features; the step below checks each alone
        // with its tests.
        hack_step(
            "features: check, every combination",
            "hack check --workspace --exclude nononce --exclude nonce-core --ignore-private \
             --feature-powerset --exclude-features default --locked",
        ),
        // nonce-core's interop features add trait impls on the nonce value types and nothing
        // else: no cipher, clock or generator code changes with them. Every combination of the
        // generator's features (64), then every combination of the interop features (16; those
        // of sqlx bring `std`), instead of all 2,048 together.
        hack_step(
            "features: check, nonce-core every combination of the generator's",
            &format!(
                "hack check -p nonce-core --feature-powerset --exclude-features default,{} \
                 --locked",
                NONCE_CORE_INTEROP.join(",")
            ),
        ),
        hack_step(
            "features: check, nonce-core every combination of its interop",
            &format!(
                "hack check -p nonce-core --feature-powerset --include-features {} --locked",
                NONCE_CORE_INTEROP.join(",")
            ),
        ),
        // The facade's backend features only re-export a crate checked above: each alone (the
        // library, then with its examples and tests), and every combination of the features
        // its own code depends on.
        hack_step(
            "features: check, nononce each feature",
            NONONCE_EACH_FEATURE,
        ),
        hack_step(
            "features: check, nononce examples and tests, each feature",
            &format!("{NONONCE_EACH_FEATURE} --all-targets"),
        ),
        hack_step(
            "features: check, nononce guard x tracing x both metrics",
            "hack check -p nononce --feature-powerset --include-features \
             guard,tracing,metrics,generation-metrics --locked",
        ),
        // The tests of the crates without features, each built alone (the workspace run unifies
        // the features of every crate).
        hack_step(
            "features: check, tests of each crate alone",
            &format!(
                "hack check --workspace --all-targets --exclude {} --locked",
                FEATURED.join(" --exclude ")
            ),
        ),
    ])
}

/// The tests of each crate with features, alone, in the combinations that change its behaviour,
/// built at a lower priority beside the workspace run. Each runs the tests that need no server
/// (nextest's `serverless` profile): those against servers ran in the workspace run, on the same
/// code paths. TLS and the facade's re-exports add no test of their own and are checked above.
///
/// - `nonce-core`: its ciphers, clocks and serde with no features and each alone, and
///   `lease-manager`'s driver and telemetry, are tested in a folder of their own
///   ([`own_folder_steps`]). nonce-core's defaults are every feature but `serde`, which only
///   adds impls: the workspace run tests them, with every feature.
/// - `lease-sql`: no dialect, and each dialect alone.
/// - `lease-redis`, `lease-etcd`, `lease-guard`: their default (no TLS, no tracing); their one
///   feature alone is what the workspace run has. Every integration test of the first two
///   needs a server, so only their unit tests are built.
/// - `nononce`: no features, `tracing` (its default), `guard`, `metrics` and
///   `generation-metrics` alone, and the repository README's example (built with `postgres`).
fn feature_test_steps(hack: &Path, env: &[(String, String)]) -> Result<Vec<Step>, String> {
    let path = services::cargo_hack::path_with(hack)?;
    let nextest_args = serverless_test_args();
    let each = |name, packages: &[&str], features: &[&str]| {
        each_feature_tests(&path, name, packages, features)
    };
    let nextest = |name, args: &str| {
        let args = format!("nextest run {args} {}", nextest_args.join(" "));
        Step::cargo_line(name, &args)
    };
    let steps = vec![
        each(
            "features: tests, lease-sql each dialect",
            &["lease-sql"],
            &[
                "--exclude-features",
                "default,tls-rustls,tls-rustls-native-roots",
            ],
        ),
        // Every integration test of these two needs a server (the serverless profile leaves
        // none of them): their unit tests alone, without building binaries that run nothing.
        Step::cargo_line(
            "features: tests, lease-redis and lease-etcd default features",
            "nextest run -p lease-redis -p lease-etcd --lib --profile serverless --locked",
        ),
        nextest(
            "features: tests, lease-guard default features",
            "-p lease-guard",
        ),
        nextest(
            "features: tests, nononce without features",
            "-p nononce --no-default-features",
        ),
        each(
            "features: tests, nononce each feature that changes it",
            &["nononce"],
            &[
                "--include-features",
                "tracing,guard,metrics,generation-metrics",
            ],
        ),
        Step::cargo_line(
            "features: tests, the README example (nononce with postgres)",
            "test -p nononce --no-default-features --features postgres --doc --locked",
        ),
    ];
    Ok(steps
        .into_iter()
        .map(|step| step.envs(env).nice())
        .collect())
}

/// What the feature tests run: the test targets alone (the examples are checked with each
/// feature, and linking them here would run nothing more), on nextest's `serverless` profile.
fn serverless_test_args() -> Vec<&'static str> {
    [&TEST_TARGETS[..], &["--profile", "serverless", "--locked"]].concat()
}

/// `cargo hack nextest run` of `packages` with no features and each feature alone, less what
/// `features` (cargo-hack's feature options) leaves out; `path` finds `cargo-hack`.
fn each_feature_tests(path: &str, name: &str, packages: &[&str], features: &[&str]) -> Step {
    let mut args = vec!["hack", "nextest", "run"];
    for p in packages {
        args.extend(["-p", p]);
    }
    args.extend(["--each-feature", "--exclude-all-features"]);
    args.extend(features);
    args.extend(serverless_test_args());
    Step::cargo(name, &args).env("PATH", path)
}

/// The command line of the workspace's tests: every library, binary and integration test, with
/// every feature, but the simulation's ([`sim_tests`]).
fn workspace_tests(name: &str, extra: &[&str]) -> Step {
    let args = [
        "nextest",
        "run",
        "--workspace",
        "--exclude",
        "nononce-sim",
        "--all-features",
        "--locked",
    ];
    Step::cargo(name, &[&args[..], &TEST_TARGETS, extra].concat())
}

/// The steps with the servers up, in three lanes:
///
/// - the servers' lane, in the workspace's target folder: the workspace's tests, chaos, then
///   the docs, the doctests, each crate with features alone and the README's first command
///   (what reuses the test build's artifacts);
/// - the own-folders lane, each in a folder of its own: loom, the no_std proof (their flags
///   share no artifact with the rest), nonce-core and lease-manager with each feature (small
///   trees, built again to free the workspace's folder), the simulation (the `sim` profile);
/// - the foreground, in the workspace's target folder too: every `cargo check` of the
///   feature combinations ([`feature_check_steps`]).
fn tests(steps: &Steps, hack: &Path, servers: &Running) -> Result<(), String> {
    let bins = chaos::Bins::in_dir(&workspace::target_dir().join("debug"));
    let after_chaos = test_build_steps(hack, &servers.env)?;
    let own_folders = own_folder_steps(hack)?;
    thread::scope(|scope| {
        // The workspace's tests, then chaos: both mostly wait, but together (dozens of test
        // processes, six private coordinators, 48 nodes) they starved the shared servers.
        // Then what compiles against the test build's artifacts, at a lower priority.
        let servers_lane = scope.spawn(|| {
            steps.run_logged(&workspace_tests("tests", &[]).envs(&servers.env))?;
            steps.check("chaos: every backend at once", || {
                chaos::suite(&servers.env, &bins)
            })?;
            after_chaos
                .iter()
                .try_for_each(|step| steps.run_logged(step))
        });
        let own_folders_lane = scope.spawn(|| {
            own_folders
                .iter()
                .try_for_each(|step| steps.run_logged(step))
        });
        let foreground = || -> Result<(), String> {
            steps.check(CORE_DEPS, core_deps::check)?;
            steps.run_all(&feature_check_steps(hack)?)
        };
        let foreground = foreground();
        let joined = |handle: thread::ScopedJoinHandle<'_, Result<(), String>>, what: &str| {
            handle
                .join()
                .unwrap_or_else(|_| Err(format!("{what} panicked")))
        };
        let servers_lane = joined(
            servers_lane,
            "the workspace run, chaos or the feature tests",
        );
        let own_folders_lane = joined(own_folders_lane, "loom, the no_std proof or the simulation");
        foreground.and(servers_lane).and(own_folders_lane)
    })
}

/// What runs in the workspace's target folder after chaos: docs, doctests, the feature tests
/// and the README's first command.
fn test_build_steps(hack: &Path, env: &[(String, String)]) -> Result<Vec<Step>, String> {
    let mut after = vec![
        Step::cargo_line("docs", "doc --workspace --no-deps --all-features --locked")
            .env("RUSTDOCFLAGS", "-D warnings")
            .nice(),
        Step::cargo_line("doctests", "test --doc --workspace --all-features --locked")
            .envs(env)
            .nice(),
    ];
    after.extend(feature_test_steps(hack, env)?);
    after.push(readme_gen()?);
    Ok(after)
}

/// Builds in a target folder of their own: loom (`--cfg loom` on every crate), the no_std proof,
/// nonce-core and lease-manager with each feature ([`each_feature_tests`]), and the simulation's
/// tests and its sweep at 2,000 seeds (the `sim` profile).
fn own_folder_steps(hack: &Path) -> Result<Vec<Step>, String> {
    let own_folder = |name: &str| workspace::target_dir().join(name).display().to_string();
    let mut own = vec![
        // The test profile, not release: the eight models run in seconds either way, and an
        // optimised build of loom and every dependency under `--cfg loom` took minutes.
        Step::cargo_line("loom", "test -p nonce-core --test loom --locked")
            .env("RUSTFLAGS", "--cfg loom")
            .env("CARGO_TARGET_DIR", own_folder("loom")),
    ];
    own.extend(nostd_steps());
    // Their dependency trees are small: building them again in a folder of their own costs less
    // than the time the step would hold the workspace's folder, which every other check and
    // feature test waits for.
    let path = services::cargo_hack::path_with(hack)?;
    // nonce-core's sqlx column types are tested on the servers in the workspace run; alone, each
    // would build sqlx and a driver here for tests that only run there.
    own.push(
        each_feature_tests(
            &path,
            "features: tests, nonce-core and lease-manager each feature",
            &["nonce-core", "lease-manager"],
            &[
                "--exclude-features",
                "default,sqlx-postgres,sqlx-mysql,sqlx-sqlite",
            ],
        )
        .env("CARGO_TARGET_DIR", own_folder("features")),
    );
    own.push(sim_tests().env("CARGO_TARGET_DIR", own_folder("sim")));
    // What `cargo xtask sim --seeds 2000 --zookeeper-seeds 250 --epoch-changes
    // --host-list-edits` runs, with the binary the tests' build made beside them: `cargo run`
    // would build it again without the tests' dev-dependencies, whose features change tokio's
    // and so everything above it (about 250 CPU seconds).
    let sim_binary = workspace::target_dir().join("sim/sim/nononce-sim");
    own.push(Step::program(
        "sim",
        sim_binary,
        &[
            "--seeds",
            SIM_SEEDS,
            "--zookeeper-seeds",
            ZOOKEEPER_SIM_SEEDS,
            "--epoch-changes",
            "--host-list-edits",
        ],
    ));
    Ok(own.into_iter().map(Step::background).collect())
}

/// The README's first command as a newcomer runs it, in an empty folder, with the binary the
/// test build made (`cargo run -p nononce-cli -- gen -n 3`; tests/docs.rs checks the README
/// says so). Its default store goes in that folder too (`XDG_STATE_HOME`), not in the home of
/// whoever runs the suite.
fn readme_gen() -> Result<Step, String> {
    let scratch = workspace::target_dir().join("readme-gen");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let binary: PathBuf = workspace::target_dir().join("debug/nononce");
    Ok(
        Step::program("README: nononce gen", binary, &["gen", "-n", "3"])
            .env("XDG_STATE_HOME", scratch.display().to_string())
            .dir(scratch),
    )
}

/// The no_std proof (`xtask/no-std-proof`), without features and with every one that promises
/// `no_std` without `alloc` (the ciphers, serde, uuid), in a target folder of its own.
pub fn nostd_steps() -> Vec<Step> {
    let root = workspace::root();
    let dir = root.join("xtask/no-std-proof");
    let target = root.join("target/no-std-proof").display().to_string();
    vec![
        Step::cargo("no_std proof, no features", &["build", "--locked"])
            .dir(dir.clone())
            .env("CARGO_TARGET_DIR", target.clone()),
        Step::cargo_line(
            "no_std proof, every cipher, serde and uuid",
            "build --locked --features ciphers",
        )
        .dir(dir)
        .env("CARGO_TARGET_DIR", target),
    ]
}
