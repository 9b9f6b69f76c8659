//! The lease stores this build opens: one line per backend, SQL and etcd behind the cargo features
//! that build them in (their builds need a C compiler and protoc), the others always. A backend of another crate (an implementation of `nononce::lease::Backend`)
//! joins with a line of its own; nothing else in the command names a backend.

use nononce::lease::Backend;

/// The store `gen` and the `leases` commands use without `--store`: a SQLite file in the
/// working directory, so two `gen` processes on one host never share a machine ID.
pub const DEFAULT_STORE: &str = "sqlite://nononce-leases.db";

/// What `--store` takes.
pub const STORE_HELP: &str = "The lease store: sqlite://PATH (default: ./nononce-leases.db, created on first use), postgres://..., mysql://..., redis://HOST:PORT, etcd://HOST:PORT[,HOST:PORT...][/PREFIX/], zk://HOST:PORT[,HOST:PORT...][/ROOT], env:VAR (StatefulSet ordinal), hosts:NAME=ID,NAME=ID,...";

/// Every backend of this build, in the order the message on an unknown store lists them.
pub fn registered() -> Vec<Box<dyn Backend>> {
    vec![
        #[cfg(feature = "sql")]
        Box::new(nononce::backends::SqlBackend),
        Box::new(nononce::backends::RedisBackend),
        #[cfg(feature = "etcd")]
        Box::new(nononce::backends::EtcdBackend),
        Box::new(nononce::backends::ZooKeeperBackend),
        Box::new(nononce::backends::StatefulSetBackend),
        Box::new(nononce::backends::HostListBackend),
    ]
}
