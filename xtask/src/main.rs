//! `cargo xtask`: everything that is not plain cargo.
//!
//! - `cargo xtask test`: the whole check suite CI runs (format, lints, feature checks, tests on
//!   real servers, chaos, the simulation, loom, docs, the no_std proof; see `suite.rs`);
//!   `cargo xtask test --quick`: the edit-compile loop (format, clippy, the tests that need no
//!   server, a short simulation).
//! - `cargo xtask nostd`: only the no_std proof.
//! - `cargo xtask core-deps`: only the check that `lease-core`'s dependency tree is
//!   `machine-id` alone (see `core_deps.rs`).
//! - `cargo xtask bench [ARGS]`: `cargo bench -p nonce-core`, then the facade's benchmarks
//!   (`cargo bench -p nononce`), with extra criterion arguments; prints the goal table, whose
//!   goals are listed beside the benchmarks (see `bench.rs`).
//! - `cargo xtask fuzz [--cases N]`: every fuzz target in release mode (see `fuzz.rs`).
//! - `cargo xtask serve-bench [--seconds N] [--rounds N]`: `nononce serve` against a bare axum
//!   handler and ferroid-tonic-server, on loopback (see `serve_bench.rs`).

mod bench;
mod chaos;
mod core_deps;
mod fuzz;
mod launcher;
mod ports;
mod serve_bench;
mod services;
mod sim;
mod steps;
mod suite;
mod workspace;

use std::env;
use std::process::{Command, ExitCode};

use steps::Steps;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => suite::run(&args[1..]),
        Some("nostd") => Steps::new().run_all(&suite::nostd_steps()),
        Some("core-deps") => Steps::new().check(suite::CORE_DEPS, core_deps::check),
        Some("bench") => bench::run(&args[1..]),
        Some("bench-report") => bench::report(),
        Some("chaos") => chaos::run(&args[1..]),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("sim") => sim::run(&args[1..]),
        Some("serve-bench") => serve_bench::run(&args[1..]),
        Some("with-services") => with_services(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <test [--quick]|nostd|core-deps|bench [criterion args]|bench-report|fuzz [--cases N]|serve-bench [--seconds N] [--rounds N]|with-services CMD [ARGS]>"
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

/// Runs a command with the test servers up and their `NONONCE_TEST_*` variables set, then
/// stops what was started: `cargo xtask with-services cargo test -p lease-redis`.
fn with_services(command: &[String]) -> Result<(), String> {
    let (program, args) = command
        .split_first()
        .ok_or("with-services needs a command to run")?;
    let services = services::start()?;
    let mut cmd = Command::new(program);
    workspace::clean_env(&mut cmd);
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
