//! The integration tests of the static strategies, in one binary.
//!
//! Each module is a file of `tests/`; `cargo test -p lease-static --test integration MODULE::` runs
//! one of them.

mod conformance;
mod floor_file;
mod fuzz;
