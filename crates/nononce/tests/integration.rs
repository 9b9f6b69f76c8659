//! The integration tests of the facade, in one binary.
//!
//! Each module is a file of `tests/`; `cargo test -p nononce --test integration MODULE::` runs
//! one of them.

mod builder;
mod guard;
mod keys;
#[cfg(feature = "generation-metrics")]
mod metrics;
mod threads;
