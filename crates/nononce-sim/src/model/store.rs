//! Shared model state behind a [`DirectLink`]: what the conformance suite runs the model
//! strategies on, with a clock the test controls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::{MachineId, Strategy};
use lease_etcd::EtcdStrategy;
use lease_redis::RedisStrategy;
use lease_sql::SqlStrategy;
use lease_zookeeper::ZooKeeperStrategy;

use super::client::{Client, Handles, SimTransport};
use super::etcd::{self, EtcdServer};
use super::redis::{self, RedisServer};
use super::sql::{self, SqlServer};
use super::zookeeper::{self, ZkServer, ZkTransport};
use super::{Guards, Link, NetError, Reply, Request, Server};

/// A clock read by a [`DirectLink`]: Unix ms, for example from `tokio::time::Instant` on a
/// paused runtime.
pub type ClockFn = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A link that applies each request to a shared server at once, at the clock's time (client
/// and server share the clock).
#[derive(Clone)]
pub struct DirectLink {
    server: Arc<Mutex<Server>>,
    clock: ClockFn,
}

impl std::fmt::Debug for DirectLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectLink").finish_non_exhaustive()
    }
}

impl DirectLink {
    fn lock(&self) -> MutexGuard<'_, Server> {
        self.server.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Link for DirectLink {
    fn exchange(&self, request: Request) -> impl Future<Output = Result<Reply, NetError>> + Send {
        let now = (self.clock)();
        // A wait ends at once: the test's clock moves only when the test moves it.
        let response = match request {
            Request::Sleep(_) => Reply::Slept,
            request => self.lock().handle(now, now, request),
        };
        async move { Ok(response) }
    }

    fn now_ms(&self) -> u64 {
        (self.clock)()
    }
}

/// A store's state: its server behind a [`DirectLink`], the guards and longest lease of the
/// strategies it makes, and the leases they handed out.
#[derive(Clone)]
struct Shared<L> {
    link: DirectLink,
    guards: Guards,
    max_lease: Duration,
    seeds: Arc<AtomicU64>,
    handles: Handles<L>,
}

impl<L> Shared<L> {
    fn on(server: Server, clock: ClockFn, max_lease: Duration) -> Self {
        Self {
            link: DirectLink {
                server: Arc::new(Mutex::new(server)),
                clock,
            },
            guards: Guards::ALL,
            max_lease,
            seeds: Arc::new(AtomicU64::new(1)),
            handles: Handles::default(),
        }
    }

    fn next_seed(&self) -> u64 {
        self.seeds.fetch_add(1, Ordering::Relaxed)
    }
}

macro_rules! store {
    ($(#[$doc:meta])* $store:ident, $strategy:ty, $make:path) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $store(Shared<<$strategy as Strategy>::Lease>);

        impl std::fmt::Debug for $store {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($store)).field("guards", &self.0.guards).finish_non_exhaustive()
            }
        }

        impl $store {
            /// The same store, making strategies with `guards` (its server holding to those
            /// that are the server's).
            #[must_use]
            pub fn with_guards(mut self, guards: Guards) -> Self {
                self.0.guards = guards;
                self.0.link.lock().set_guards(guards);
                self
            }

            /// The backend's strategy for one more node on this store, with the store's guards
            /// where they are its settings.
            #[must_use]
            pub fn real_strategy(&self) -> $strategy {
                let s = &self.0;
                $make(s.link.clone(), s.guards, s.max_lease, s.next_seed())
            }

            /// The backend's strategy for one more node on this store, with the store's guard
            /// switches ([`Client`]).
            #[must_use]
            pub fn strategy(&self) -> Client<$strategy> {
                Client::new(self.real_strategy(), self.0.guards, Arc::clone(&self.0.handles))
            }

            /// Ends whatever lease holds `id` now, as if its TTL had run out.
            pub fn expire(&self, id: MachineId) {
                let now = (self.0.link.clock)();
                self.0.link.lock().expire(now, id);
            }

            /// An operator frees `id` now, whoever holds it; its floor stays. Whether it was
            /// held.
            pub fn force_release(&self, id: MachineId) -> bool {
                let now = (self.0.link.clock)();
                self.0.link.lock().force_release(now, now, id)
            }
        }
    };
}

store!(
    /// A migrated SQL lease table of 512 rows shared by every strategy made from it:
    /// lease-sql's strategy over the direct link.
    SqlStore,
    SqlStrategy<sql::SqlTransport<DirectLink>>,
    sql::strategy
);
store!(
    /// A Redis lease hash shared by every strategy made from it, on a server that has been up
    /// for longer than the longest lease (so the amnesia guard lets acquisitions through):
    /// lease-redis's strategy over the direct link.
    RedisStore,
    RedisStrategy<SimTransport<DirectLink>>,
    redis::strategy
);
store!(
    /// An etcd cluster's lease prefix shared by every strategy made from it: lease-etcd's
    /// strategy over the direct link.
    EtcdStore,
    EtcdStrategy<SimTransport<DirectLink>>,
    etcd::strategy
);

store!(
    /// A ZooKeeper ensemble's root shared by every strategy made from it: lease-zookeeper's
    /// strategy over the direct link, each on sessions of its own.
    ZkStore,
    ZooKeeperStrategy<ZkTransport<DirectLink>>,
    zookeeper::strategy
);

impl SqlStore {
    /// A fresh table on `clock`, granting at most `max_lease`.
    pub fn new(clock: ClockFn, max_lease: Duration) -> Self {
        let server = Server::Sql(SqlServer::new(MachineId::COUNT));
        Self(Shared::on(server, clock, max_lease))
    }
}

impl RedisStore {
    /// A fresh hash on `clock`, `max_lease_duration` = `max_lease`.
    pub fn new(clock: ClockFn, max_lease: Duration) -> Self {
        let now = clock();
        // Up for longer than the amnesia hold-off: a long-running server.
        let up_since = now.saturating_sub(
            super::amnesia_hold_off_ms(lease_core::time::millis(max_lease)).saturating_mul(2)
                + 10_000,
        );
        let server = Server::Redis(RedisServer::new(MachineId::COUNT, up_since, 1));
        Self(Shared::on(server, clock, max_lease))
    }
}

impl EtcdStore {
    /// A new cluster with an empty prefix on `clock`, `max_lease_duration` = `max_lease`.
    pub fn new(clock: ClockFn, max_lease: Duration) -> Self {
        let server = Server::Etcd(EtcdServer::new(MachineId::COUNT, 1));
        Self(Shared::on(server, clock, max_lease))
    }
}

impl ZkStore {
    /// A new ensemble with a deployed root on `clock`, its nodes asking for sessions as the
    /// simulation's do for leases up to `max_lease`.
    pub fn new(clock: ClockFn, max_lease: Duration) -> Self {
        let server = Server::ZooKeeper(ZkServer::new(
            MachineId::COUNT,
            zookeeper::MIN_SESSION_MS,
            zookeeper::MAX_SESSION_MS,
        ));
        Self(Shared::on(server, clock, max_lease))
    }
}
