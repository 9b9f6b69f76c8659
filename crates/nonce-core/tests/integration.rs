//! The integration tests of nonce-core, in one binary (`loom` has its own: it builds only with
//! `--cfg loom`).
//!
//! Each module is a file of `tests/`; `cargo test -p nonce-core --test integration MODULE::` runs
//! one of them.

#[macro_use]
mod common;
mod factory;
mod floor;
mod fork;
mod fuzz;
mod kinds;
mod known_answers;
mod properties;
mod sortable_handles;
mod thread_cache;
