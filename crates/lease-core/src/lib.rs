#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
pub mod backend;
mod chain;
mod choice;
mod dyn_strategy;
mod strategy;
pub mod time;

pub use admin::{BoxStoreAdmin, DynStoreAdmin, Holder, Migration, StoreAdmin};
pub use backend::{Access, Backend, Explained, OpenError, Opened, StoreUrl};
pub use chain::{error_chain, error_chain_with};
pub use choice::pick_free;
pub use dyn_strategy::{AnyLease, BoxFuture, BoxStrategy, DynError, DynStrategy, ForeignLease};
// The one type factories, strategies and targets exchange, from its own dependency-free crate.
pub use machine_id::{InvalidMachineId, MachineId};
pub use strategy::{
    Acquire, ErrorKind, Grant, LeaseError, LeaseTerms, Profile, Release, Renew, Renewal, Strategy,
};
