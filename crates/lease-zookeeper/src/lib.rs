#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod backend;
mod error;
mod options;
mod paths;
mod strategy;
pub mod transport;

pub use backend::ZooKeeperBackend;
pub use error::{LostReason, ZooKeeperLeaseError};
pub use options::{ZooKeeperOptions, granted_ttl};
pub use strategy::{ZooKeeperLease, ZooKeeperStrategy};
pub use zookeeper_client;
