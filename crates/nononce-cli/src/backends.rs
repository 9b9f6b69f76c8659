//! The lease stores this build opens: one line per backend, SQL and etcd behind the cargo features
//! that build them in (their builds need a C compiler and protoc), the others always. A backend of another crate (an implementation of `nononce::lease::Backend`)
//! joins with a line of its own; nothing else in the command names a backend.

use nononce::lease::Backend;

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
