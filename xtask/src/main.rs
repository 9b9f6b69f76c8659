//! `cargo xtask`: everything that is not plain cargo.
//!
//! - `cargo xtask test`: the whole check suite CI runs (format, lints, feature checks, tests on
//!   real servers, chaos, the simulation, loom, docs, the no_std proof; see `suite.rs`);
//!   `cargo xtask test --quick`: the edit-compile loop (format, clippy, the tests that need no
//!   server, a short simulation).
//! - `cargo xtask nostd`: only the no_std proof.
//! - `cargo xtask core-deps`: only the check that `lease-core` pulls in no tokio, tracing,
//!   metrics or futures (see `core_deps.rs`).
//! - `cargo xtask bench [ARGS]`: `cargo bench -p nonce-core`, then the facade's benchmarks
//!   (`cargo bench -p nononce`), with extra criterion arguments; prints the goal table, whose
//!   goals are listed beside the benchmarks (see `bench.rs`).
//! - `cargo xtask fuzz [--cases N]`: every fuzz target in release mode (see `fuzz.rs`).

mod bench;
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
        Some("bench") => bench::run(&args[1..]),
        Some("bench-report") => bench::report(),
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
