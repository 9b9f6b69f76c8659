#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod config;
mod dyn_strategy;
mod splitmix;
mod strategy;
pub mod time;

pub use admin::{BoxStoreAdmin, DynStoreAdmin, Holder, Migration, StoreAdmin};
pub use config::{LeaseConfig, LeaseConfigError};
pub use dyn_strategy::{AnyLease, BoxFuture, BoxStrategy, DynError, DynStrategy, ForeignLease};
// The machine ID is nonce-core's: the one type factories, strategies and targets exchange.
pub use nonce_core::{InvalidMachineId, MachineId};
pub use splitmix::SplitMix64;
pub use strategy::{
    ErrorKind, Failure, Grant, LeaseError, Renewal, Strategy, error_chain, error_chain_with,
};
