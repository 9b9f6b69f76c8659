//! The nononce chaos harness: what a chaos node records, and the checker that reads it back.
//!
//! Every node process appends fixed-size [`Record`]s to a file of its own: the lease windows it
//! believed it held (recorded by a wrapper around its factories, *before* they are enabled or
//! extended, so a nonce never precedes the window that allows it), with the timestamp floor each
//! lease came with, and every nonce with the node's clock when it was produced. Each node runs
//! on a [`NodeClock`]: the machine's clock plus an offset the orchestrator picks (and may step
//! back), and every record carries that offset. [`check()`] reads every file of a run and
//! reports duplicates across all nodes, nonces outside a held window (judged on the node's own
//! clock), lease handovers and time without a lease. [`proxy`] is the TCP proxy the
//! orchestrator puts between each node and its coordinator.
//!
//! `cargo xtask chaos` runs the nodes and injects faults; see `docs/reliability.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
pub mod clock;
pub mod proxy;
pub mod record;

pub use check::{GuardReport, Report, check, check_guard, check_with_timeline};
pub use clock::NodeClock;
pub use record::{Kind, Record, Stamp};

/// The base key every chaos node encrypts with, so the checker can decrypt and decode
/// encrypted nonces. A test key: never use it anywhere else.
pub const CHAOS_KEY: [u8; 32] = *b"nononce-chaos-test-key-not-real!";

/// Runs a harness binary's `work` on a tokio runtime of one worker: success, or its error on
/// stderr after `name` and failure.
pub fn block_on(
    name: &str,
    work: impl Future<Output = Result<(), String>>,
) -> std::process::ExitCode {
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))
        .and_then(|runtime| runtime.block_on(work));
    if let Err(e) = result {
        eprintln!("{name}: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
