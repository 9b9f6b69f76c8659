//! Shared model state behind a [`DirectLink`]: what the conformance suite and the replay tests
//! run the model strategies on, with a clock the test controls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::MachineId;
use lease_etcd::{EtcdLease, EtcdStrategy};
use lease_redis::{RedisLease, RedisStrategy};

use super::etcd::{self, EtcdClient, EtcdServer};
use super::redis::{self, RedisClient, RedisServer};
use super::sql::{SqlClient, SqlServer};
use super::{Guards, Handles, Link, NetError, Reply, Request, Server};

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
/// strategies it makes, and the leases they handed out (`H`, by handle).
#[derive(Clone)]
struct Shared<H> {
    link: DirectLink,
    guards: Guards,
    max_lease: Duration,
    seeds: Arc<AtomicU64>,
    handles: H,
}

impl<H: Default> Shared<H> {
    fn on(server: Server, clock: ClockFn, max_lease: Duration) -> Self {
        Self {
            link: DirectLink {
                server: Arc::new(Mutex::new(server)),
                clock,
            },
            guards: Guards::ALL,
            max_lease,
            seeds: Arc::new(AtomicU64::new(1)),
            handles: H::default(),
        }
    }
}

impl<H> Shared<H> {
    fn next_seed(&self) -> u64 {
        self.seeds.fetch_add(1, Ordering::Relaxed)
    }
}

macro_rules! store {
    ($(#[$doc:meta])* $store:ident, $handles:ty, $name:literal) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $store(Shared<$handles>);

        impl std::fmt::Debug for $store {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct($name).field("guards", &self.0.guards).finish_non_exhaustive()
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

            /// Ends whatever lease holds `id` now, as if its TTL had run out.
            pub fn expire(&self, id: MachineId) {
                let now = (self.0.link.clock)();
                self.0.link.lock().expire(now, id);
            }

            /// The IDs leased now.
            #[must_use]
            pub fn held(&self) -> Vec<MachineId> {
                let now = (self.0.link.clock)();
                self.0.link.lock().held(now)
            }

            /// Runs `f` on the server, at the clock's time.
            pub fn with_server<T>(&self, f: impl FnOnce(&mut Server, u64) -> T) -> T {
                let now = (self.0.link.clock)();
                f(&mut self.0.link.lock(), now)
            }
        }
    };
}

store!(
    /// A migrated SQL lease table of 512 rows shared by every strategy made from it:
    /// lease-sql's strategy over the direct link.
    SqlStore,
    (),
    "SqlStore"
);
store!(
    /// A Redis lease hash shared by every strategy made from it, on a server that has been up
    /// for longer than the longest lease (so the amnesia guard lets acquisitions through):
    /// lease-redis's strategy over the direct link.
    RedisStore,
    Handles<RedisLease>,
    "RedisStore"
);
store!(
    /// An etcd cluster's lease prefix shared by every strategy made from it: lease-etcd's
    /// strategy over the direct link.
    EtcdStore,
    Handles<EtcdLease>,
    "EtcdStore"
);

impl SqlStore {
    /// A fresh table on `clock`, granting at most `max_lease`.
    pub fn new(clock: ClockFn, max_lease: Duration) -> Self {
        let server = Server::Sql(SqlServer::new(MachineId::COUNT));
        Self(Shared::on(server, clock, max_lease))
    }

    /// A strategy for one more node on this store.
    #[must_use]
    pub fn strategy(&self) -> SqlClient<DirectLink> {
        let s = &self.0;
        SqlClient::new(s.link.clone(), s.guards, s.max_lease, s.next_seed())
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

    /// A strategy for one more node on this store, with the store's guard switches.
    #[must_use]
    pub fn strategy(&self) -> RedisClient<DirectLink> {
        let s = &self.0;
        let handles = Arc::clone(&s.handles);
        RedisClient::new(
            s.link.clone(),
            s.guards,
            s.max_lease,
            s.next_seed(),
            handles,
        )
    }

    /// lease-redis's strategy itself for one more node on this store, its leases its own.
    #[must_use]
    pub fn real_strategy(&self) -> RedisStrategy<redis::SimTransport<DirectLink>> {
        let s = &self.0;
        redis::strategy(s.link.clone(), true, s.max_lease, s.next_seed())
    }
}

impl EtcdStore {
    /// A new cluster with an empty prefix on `clock`, `max_lease_duration` = `max_lease`.
    pub fn new(clock: ClockFn, max_lease: Duration) -> Self {
        let server = Server::Etcd(EtcdServer::new(MachineId::COUNT, 1));
        Self(Shared::on(server, clock, max_lease))
    }

    /// A strategy for one more node on this store, with the store's guard switches.
    #[must_use]
    pub fn strategy(&self) -> EtcdClient<DirectLink> {
        let s = &self.0;
        let handles = Arc::clone(&s.handles);
        EtcdClient::new(
            s.link.clone(),
            s.guards,
            s.max_lease,
            s.next_seed(),
            handles,
        )
    }

    /// lease-etcd's strategy itself for one more node on this store, its leases its own.
    #[must_use]
    pub fn real_strategy(&self) -> EtcdStrategy<etcd::SimTransport<DirectLink>> {
        let s = &self.0;
        etcd::strategy(s.link.clone(), s.max_lease, s.next_seed())
    }
}
