//! The integration tests of lease-redis against real Valkey 9, Redis 8 and Redis 7, in one binary.
//!
//! Each module is a file of `tests/`; `cargo test -p lease-redis --test integration MODULE::` runs
//! one of them.

mod common;
mod conformance;
mod faults;
mod floor;
mod forgets;
mod protocol;
mod release;
