#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod hosts;
pub mod statefulset;

pub use hosts::{HostListStrategy, HostsError, IdentifierSource, NodeMatch, SystemIdentifiers};
pub use statefulset::{StatefulSetError, StatefulSetStrategy};
