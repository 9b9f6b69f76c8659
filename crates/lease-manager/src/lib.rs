#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
mod cache;
#[cfg(feature = "tokio")]
mod claims;
mod config;
mod failure;
pub mod machine;
mod splitmix;
mod target;
#[cfg(feature = "tokio")]
mod telemetry;

#[cfg(feature = "tokio")]
mod driver;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use driver::{LeaseManager, LeaseManagerBuilder, LossSignal, StartError};

pub use cache::{CachedLease, LeaseCache};
pub use config::{LeaseConfig, LeaseConfigError};
pub use failure::Failure;
pub use machine::{AcquireError, Action, Effect, LeaseMachine, LeaseState, LossReason};
pub use splitmix::SplitMix64;
pub use target::{LeaseTarget, floor_terms};
