#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod backend;
mod error;
mod keys;
mod operator;
mod options;
mod strategy;
pub mod transport;

pub use backend::EtcdBackend;
pub use error::{EtcdLeaseError, LostReason};
pub use etcd_client;
pub use options::EtcdOptions;
pub use strategy::{EtcdLease, EtcdStrategy};
