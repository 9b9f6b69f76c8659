//! The integration tests of lease-zookeeper against real ZooKeeper servers, in one binary.
//!
//! Each module is a file of `tests/`; `cargo test -p lease-zookeeper --test integration MODULE::`
//! runs one of them.

mod common;
mod conformance;
mod faults;
mod round_trips;
mod servers;
