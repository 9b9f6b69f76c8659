//! The integration tests of lease-sql against real PostgreSQL, MariaDB and SQLite, in one binary
//! (`round_trips` has its own: it installs a process-wide statement log).
//!
//! Each module is a file of `tests/`; `cargo test -p lease-sql --test integration MODULE::` runs
//! one of them.
// Each test is compiled with the dialects it needs; the helpers serve some of them.
#![cfg_attr(
    not(all(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code, unused_imports)
)]

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[macro_use]
mod common;
mod amnesia;
mod config;
mod conformance;
mod environment;
mod faults;
mod floor;
mod protocol;
mod release;
mod restart;
mod urls;
mod wiped;
