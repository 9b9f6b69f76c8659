//! The integration tests of lease-etcd against real etcd servers, in one binary.
//!
//! Each module is a file of `tests/`; `cargo test -p lease-etcd --test integration MODULE::` runs
//! one of them.

mod common;
mod conformance;
mod faults;
mod protocol;
mod round_trips;
mod wiped;
