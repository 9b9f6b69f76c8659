//! The integration tests of the conformance kit, in one binary.
//!
//! Each module is a file of `tests/`; `cargo test -p lease-testkit --test integration MODULE::` runs
//! one of them.

mod handover;
mod kit;
