//! The integration tests of the lease manager, in one binary.
//!
//! Each module is a file of `tests/`; `cargo test -p lease-manager --test integration MODULE::` runs
//! one of them.

mod driver;
mod machine;
