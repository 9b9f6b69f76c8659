#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(all(doctest, feature = "postgres"))]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

mod builder;
mod error;
#[cfg(feature = "generation-metrics")]
mod metrics;

pub use builder::{
    Builder, FactoryOptions, FactoryOptionsExt, KeyHexError, Nononce, decode_key_hex,
};
pub use error::Error;
#[cfg(feature = "generation-metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "generation-metrics")))]
pub use metrics::{PUBLISH_INTERVAL, record_factory_metrics};

/// The lease layer: the `Strategy` trait and lease configuration (`lease-core`), and the lease
/// manager, its state and its state machine (`lease-manager`), under one path.
pub mod lease {
    pub use lease_core::*;
    pub use lease_manager::*;
}
/// Nonce generation: factories, nonce types, ciphers, clocks.
pub use nonce_core as nonce;

/// The conflict guard: peers compare machine IDs; on a duplicate the later starter stops.
#[cfg(feature = "guard")]
#[cfg_attr(docsrs, doc(cfg(feature = "guard")))]
pub use lease_guard as guard;

/// SQL leases (PostgreSQL, MySQL/MariaDB, SQLite) on NoNoncense's `no_noncense_leases` table.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite")))
)]
pub use lease_sql as sql;

/// Valkey 9 / Redis 8 leases: `HSETEX` with ownership markers, NoNoncense's hash layout.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use lease_redis as redis;

/// etcd v3 leases: one key per machine ID on an etcd lease, claimed in transactions.
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use lease_etcd as etcd;

/// ZooKeeper leases: one ephemeral znode per machine ID, claimed in multi-ops.
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use lease_zookeeper as zookeeper;

/// Machine IDs from a StatefulSet pod ordinal (an environment variable's trailing digits).
#[cfg(feature = "statefulset")]
#[cfg_attr(docsrs, doc(cfg(feature = "statefulset")))]
pub use lease_static::statefulset;

/// Machine IDs from this host's place in a shared node list.
#[cfg(feature = "hosts")]
#[cfg_attr(docsrs, doc(cfg(feature = "hosts")))]
pub use lease_static::hosts;

/// The backends this build has, for a program that opens lease stores by URL (as the `nononce`
/// command does): each implements [`lease::Backend`] for its URL schemes. A program lists the
/// ones it takes and finds a store's by its scheme.
pub mod backends {
    /// `etcd://` and `etcds://` stores.
    #[cfg(feature = "etcd")]
    #[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
    pub use lease_etcd::EtcdBackend;
    /// `redis://` and `rediss://` stores.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub use lease_redis::RedisBackend;
    /// `sqlite:`, `postgres:` (`postgresql:`), `mysql:` and `mariadb:` stores, as the dialect
    /// features build them in.
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite")))
    )]
    pub use lease_sql::SqlBackend;
    /// `hosts:NAME=ID,...` stores: the machine ID from this host's entry in a node list.
    #[cfg(feature = "hosts")]
    #[cfg_attr(docsrs, doc(cfg(feature = "hosts")))]
    pub use lease_static::HostListBackend;
    /// `env:VAR` stores: the machine ID from a StatefulSet pod name.
    #[cfg(feature = "statefulset")]
    #[cfg_attr(docsrs, doc(cfg(feature = "statefulset")))]
    pub use lease_static::StatefulSetBackend;
    /// `zk://` stores.
    #[cfg(feature = "zookeeper")]
    #[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
    pub use lease_zookeeper::ZooKeeperBackend;
}

pub use lease_core::{BoxStrategy, Strategy};
pub use lease_manager::{LeaseConfig, LeaseState, LossReason};
pub use nonce_core::{
    Base, BootClock, Cipher64, Cipher96, Cipher128, Decoded, Factory, Handle, MachineId, Nonce,
    Nonce64, Nonce96, Nonce128, TickerClock,
};

/// The clock of the factories [`Nononce`] builds: the process's [`TickerClock`] over its
/// suspend-aware [`BootClock`].
///
/// A sortable nonce reads it with one atomic load instead of a clock read; the value a ticker
/// thread publishes twice per millisecond is never ahead of the boot clock, so a late ticker
/// only makes timestamps older. The lease manager reads the same clock exactly
/// ([`Clock::exact_now_ms`](nonce_core::Clock::exact_now_ms)), so deadlines and expiry are
/// those of the boot clock (see docs/safety.md, "One clock, through suspend").
pub type FactoryClock = TickerClock<BootClock>;

/// The names most programs need.
pub mod prelude {
    pub use crate::{
        Base, Builder, FactoryOptions, FactoryOptionsExt, Nonce64, Nonce96, Nonce128, Nononce,
        Strategy,
    };
}
