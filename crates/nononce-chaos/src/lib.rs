//! The nononce chaos harness: what a chaos node records, and the checker that reads it back.
//!
//! Every node process appends fixed-size [`Record`]s to a file of its own: the lease windows it
//! believed it held (recorded by a wrapper around its factory, *before* the factory is enabled or
//! extended, so a nonce never precedes the window that allows it) and every nonce with the local
//! clock time it was produced. [`check()`] reads every file of a run and reports duplicates across
//! all nodes, nonces outside a held window, lease handovers and time without a lease.
//!
//! `cargo xtask chaos` runs the nodes and injects faults; see `docs/reliability.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
pub mod record;

pub use check::{GuardReport, Report, check, check_guard};
pub use record::{Kind, Record};

/// The base key every chaos node encrypts with, so the checker can decrypt and decode
/// encrypted nonces. A test key: never use it anywhere else.
pub const CHAOS_KEY: [u8; 32] = *b"nononce-chaos-test-key-not-real!";
