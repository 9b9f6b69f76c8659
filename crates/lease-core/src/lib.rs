#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
pub mod backoff;
mod cache;
mod config;
mod dyn_strategy;
pub mod machine;
mod splitmix;
mod strategy;
mod target;
#[cfg(feature = "tokio")]
mod telemetry;
pub mod time;

#[cfg(feature = "tokio")]
mod driver;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use driver::{LeaseManager, LeaseManagerBuilder, LossSignal, StartError};

pub use admin::{BoxStoreAdmin, DynStoreAdmin, Holder, Migration, StoreAdmin};
pub use cache::{CachedLease, LeaseCache};
pub use config::{ConfigError, LeaseConfig};
pub use dyn_strategy::{AnyLease, BoxFuture, BoxStrategy, DynError, DynStrategy, ForeignLease};
pub use machine::{Action, Effect, LeaseMachine, LeaseState, LossReason, StartupError};
// The machine ID is nonce-core's: the one type factories, strategies and targets exchange.
pub use nonce_core::{InvalidMachineId, MachineId};
pub use splitmix::SplitMix64;
pub use strategy::{
    ErrorKind, Failure, Grant, LeaseError, Renewal, Strategy, error_chain, error_chain_with,
};
pub use target::LeaseTarget;
