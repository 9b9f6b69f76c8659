#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod announce;
mod check;
mod config;
mod guard;
mod telemetry;

pub use announce::{Announce, InstanceToken};
pub use check::{Conflict, PeerCheck, PeerOutcome, Resolution, check};
pub use config::{GuardConfig, GuardError};
pub use guard::{ConflictGuard, halt};
