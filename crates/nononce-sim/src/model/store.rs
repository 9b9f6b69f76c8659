//! Shared model state behind a [`DirectLink`]: what the conformance suite and the replay tests
//! run the model strategies on, with a clock the test controls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::MachineId;
use lease_etcd::EtcdStrategy;

use super::etcd::{EtcdClient, EtcdServer, Handles, SimTransport};
use super::redis::{RedisModel, RedisServer};
use super::sql::{SqlModel, SqlServer};
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

macro_rules! store {
    ($(#[$doc:meta])* $store:ident, $model:ident, $name:literal) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $store {
            link: DirectLink,
            guards: Guards,
            max_lease: Duration,
            seeds: Arc<AtomicU64>,
        }

        impl std::fmt::Debug for $store {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct($name).field("guards", &self.guards).finish_non_exhaustive()
            }
        }

        impl $store {
            /// A store on `server`, read at `clock`'s time, granting at most `max_lease`.
            fn on(server: Server, clock: ClockFn, max_lease: Duration) -> Self {
                Self {
                    link: DirectLink {
                        server: Arc::new(Mutex::new(server)),
                        clock,
                    },
                    guards: Guards::ALL,
                    max_lease,
                    seeds: Arc::new(AtomicU64::new(1)),
                }
            }

            /// The same store, making strategies with `guards`.
            #[must_use]
            pub fn with_guards(mut self, guards: Guards) -> Self {
                self.guards = guards;
                self
            }

            /// A strategy for one more node on this store.
            #[must_use]
            pub fn strategy(&self) -> $model<DirectLink> {
                let seed = self.seeds.fetch_add(1, Ordering::Relaxed);
                $model::new(self.link.clone(), self.guards, self.max_lease, seed)
            }

            /// Ends whatever lease holds `id` now, as if its TTL had run out.
            pub fn expire(&self, id: MachineId) {
                let now = (self.link.clock)();
                self.link.lock().expire(now, id);
            }

            /// The IDs leased now.
            #[must_use]
            pub fn held(&self) -> Vec<MachineId> {
                let now = (self.link.clock)();
                self.link.lock().held(now)
            }

            /// Runs `f` on the server, at the clock's time.
            pub fn with_server<T>(&self, f: impl FnOnce(&mut Server, u64) -> T) -> T {
                let now = (self.link.clock)();
                f(&mut self.link.lock(), now)
            }
        }
    };
}

store!(
    /// A migrated SQL lease table of 512 rows shared by every [`SqlModel`] made from it.
    SqlStore,
    SqlModel,
    "SqlStore"
);
store!(
    /// A Redis lease hash shared by every [`RedisModel`] made from it, on a server that has
    /// been up for longer than the longest lease (so the amnesia guard lets acquisitions
    /// through).
    RedisStore,
    RedisModel,
    "RedisStore"
);

impl SqlStore {
    /// A fresh table on `clock`, granting at most `max_lease`.
    pub fn new(clock: ClockFn, max_lease: Duration) -> Self {
        Self::on(
            Server::Sql(SqlServer::new(MachineId::COUNT)),
            clock,
            max_lease,
        )
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
        Self::on(server, clock, max_lease)
    }
}

/// An etcd cluster's lease prefix shared by every [`EtcdClient`] made from it: lease-etcd's
/// strategy over the direct link.
#[derive(Clone)]
pub struct EtcdStore {
    link: DirectLink,
    guards: Guards,
    max_lease: Duration,
    seeds: Arc<AtomicU64>,
    handles: Handles,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("guards", &self.guards)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// A new cluster with an empty prefix on `clock`, `max_lease_duration` = `max_lease`.
    pub fn new(clock: ClockFn, max_lease: Duration) -> Self {
        Self {
            link: DirectLink {
                server: Arc::new(Mutex::new(Self::server(Guards::ALL))),
                clock,
            },
            guards: Guards::ALL,
            max_lease,
            seeds: Arc::new(AtomicU64::new(1)),
            handles: Handles::default(),
        }
    }

    fn server(guards: Guards) -> Server {
        Server::Etcd(EtcdServer::new(MachineId::COUNT, 1).with_guards(guards))
    }

    /// The same store, making strategies with `guards` (the cluster, new, as those guards see
    /// it).
    #[must_use]
    pub fn with_guards(mut self, guards: Guards) -> Self {
        self.guards = guards;
        *self.link.lock() = Self::server(guards);
        self
    }

    /// A strategy for one more node on this store.
    #[must_use]
    pub fn strategy(&self) -> EtcdClient<DirectLink> {
        let seed = self.seeds.fetch_add(1, Ordering::Relaxed);
        EtcdClient::new(
            self.link.clone(),
            self.guards,
            self.max_lease,
            seed,
            Arc::clone(&self.handles),
        )
    }

    /// lease-etcd's strategy itself for one more node on this store, its leases its own.
    #[must_use]
    pub fn real_strategy(&self) -> EtcdStrategy<SimTransport<DirectLink>> {
        let seed = self.seeds.fetch_add(1, Ordering::Relaxed);
        super::etcd::strategy(self.link.clone(), self.max_lease, seed)
    }

    /// Ends whatever lease holds `id` now, as if its TTL had run out.
    pub fn expire(&self, id: MachineId) {
        let now = (self.link.clock)();
        self.link.lock().expire(now, id);
    }

    /// The IDs leased now.
    #[must_use]
    pub fn held(&self) -> Vec<MachineId> {
        let now = (self.link.clock)();
        self.link.lock().held(now)
    }

    /// Runs `f` on the server, at the clock's time.
    pub fn with_server<T>(&self, f: impl FnOnce(&mut Server, u64) -> T) -> T {
        let now = (self.link.clock)();
        f(&mut self.link.lock(), now)
    }
}
