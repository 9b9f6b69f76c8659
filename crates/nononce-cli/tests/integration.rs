//! The integration tests of the `nononce` command, in one binary: each runs the real binary.
//!
//! Each module is a file of `tests/`; `cargo test -p nononce-cli --test integration MODULE::` runs
//! one of them.

#[macro_use]
mod common;
mod bounds;
mod cli;
mod decode;
mod docs;
mod etcd;
mod fuzz;
mod lease_command;
mod leases;
mod output;
mod serve;
mod serve_auth;
mod serve_docs;
mod serve_fuzz;
mod serve_grpc;
mod stores;
mod zookeeper;
