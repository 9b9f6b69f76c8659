#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod backend;
mod error;
mod operator;
mod options;
mod scripts;
mod strategy;
pub mod transport;
mod wire;

pub use backend::RedisBackend;
pub use error::RedisLeaseError;
pub use options::{AmnesiaGuard, RedisOptions};
pub use redis;
pub use strategy::{RedisLease, RedisStrategy};
