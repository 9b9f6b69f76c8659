//! The integration tests of the fleet simulation, in one binary.
//!
//! Each module is a file of `tests/`; `cargo test -p nononce-sim --test integration MODULE::` runs
//! one of them.

mod conformance;
mod fleet;
mod timeline;
