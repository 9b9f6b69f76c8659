//! Each coordinator model passes the `lease-testkit` conformance suite, floor checks included,
//! on tokio's paused clock (leases of an hour, checked in milliseconds): for etcd, lease-etcd's
//! own strategy against the cluster model, also with the options lease-etcd's own suite runs on
//! a real etcd (8 s leases, a 2 s guard); for Redis and SQL, lease-redis's and lease-sql's own
//! strategies against the hash and table models; for ZooKeeper, lease-zookeeper's own strategy
//! against the ensemble model (30 s leases: its sessions last at most 40 s).

use std::sync::Arc;
use std::time::Duration;

use lease_core::MachineId;
use lease_etcd::EtcdStrategy;
use lease_redis::RedisStrategy;
use lease_testkit::{Capabilities, Check, Harness, Options, Outcome};
use lease_zookeeper::ZooKeeperStrategy;
use nononce_sim::Guards;
use nononce_sim::clock::START_UNIX_MS;
use nononce_sim::model::SimTransport;
use nononce_sim::model::etcd::EtcdClient;
use nononce_sim::model::fixed::FixedModel;
use nononce_sim::model::redis::RedisClient;
use nononce_sim::model::sql::SqlClient;
use nononce_sim::model::zookeeper::{ZkClient, ZkTransport};
use nononce_sim::model::{
    ClockFn, DirectLink, EtcdStore, Link, NetError, RedisStore, Reply, Request, SqlStore, ZkStore,
};

const HOUR: Duration = Duration::from_secs(3600);

/// Unix ms on tokio's clock.
fn clock() -> ClockFn {
    let start = tokio::time::Instant::now();
    Arc::new(move || START_UNIX_MS + u64::try_from(start.elapsed().as_millis()).unwrap_or(0))
}

/// The same, pausing this test's own runtime first (the suite builds one per check).
fn paused() -> ClockFn {
    tokio::time::pause();
    clock()
}

/// Harnesses on the model stores, each making its strategies with the store's method named.
macro_rules! harnesses {
    ($($(#[$doc:meta])* $name:ident($store:ident) $make:ident -> $strategy:ty;)*) => {$(
        $(#[$doc])*
        struct $name($store);

        impl Harness for $name {
            type Strategy = $strategy;
            async fn node(&self) -> Self::Strategy {
                self.0.$make()
            }
            async fn expire(&self, id: MachineId) -> bool {
                self.0.expire(id);
                true
            }
            async fn force_release(&self, id: MachineId) -> Option<bool> {
                Some(self.0.force_release(id))
            }
        }
    )*};
}

harnesses!(
    /// lease-sql's strategy as the simulation runs it, with its guard switches.
    Sql(SqlStore) strategy -> SqlClient<DirectLink>;
    /// lease-redis's strategy itself against the hash model.
    Redis(RedisStore) real_strategy -> RedisStrategy<SimTransport<DirectLink>>;
    /// The same as the simulation runs it, with its guard switches.
    RedisSim(RedisStore) strategy -> RedisClient<DirectLink>;
    /// lease-etcd's strategy itself against the cluster model.
    Etcd(EtcdStore) real_strategy -> EtcdStrategy<SimTransport<DirectLink>>;
    /// The same as the simulation runs it, with its guard switches.
    EtcdSim(EtcdStore) strategy -> EtcdClient<DirectLink>;
    /// lease-zookeeper's strategy itself against the ensemble model.
    ZooKeeper(ZkStore) real_strategy -> ZooKeeperStrategy<ZkTransport<DirectLink>>;
    /// The same as the simulation runs it, with its guard switches.
    ZooKeeperSim(ZkStore) strategy -> ZkClient<DirectLink>;
);

/// The suite on each model, with `options`: hour-long leases, or lease-etcd's own conformance
/// options (whole-second leases, a guard etcd grants as its 2 s minimum, and slack for its
/// lessor's sweep).
macro_rules! on_models {
    ($($module:ident: $harness:ident($store:ident), $options:expr;)*) => {$(
        mod $module {
            use super::*;
            lease_testkit::conformance_tests!(
                || async { $harness($store::new(paused(), 8 * HOUR)) },
                $options,
                does_not_apply: [deterministic]
            );
        }
    )*};
}

on_models!(
    sql_model: Sql(SqlStore), Options::new(HOUR);
    redis: Redis(RedisStore), Options::new(HOUR);
    etcd: Etcd(EtcdStore), Options::new(HOUR);
    etcd_seconds: Etcd(EtcdStore), Options::new(Duration::from_secs(8))
        .with_guard(Duration::from_secs(2))
        .with_slack(Duration::from_millis(900));
    // Leases of 30 s, three quarters of the longest session the ensemble grants, as
    // lease-zookeeper's own suite runs on a real ensemble (with 20 s sessions there); the guard
    // ends with its session, on the ensemble's next tick.
    zookeeper_model: ZooKeeper(ZkStore), Options::new(Duration::from_secs(30))
        .with_min_ttl(Duration::from_secs(20))
        .with_guard(Duration::from_secs(2))
        .with_slack(Duration::from_millis(900));
);

/// The static model's link: its one call, the margin wait, sleeps on tokio's clock.
struct Local;

impl Link for Local {
    async fn exchange(&self, request: Request) -> Result<Reply, NetError> {
        match request {
            Request::Sleep(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(Reply::Slept)
            }
            _ => Err(NetError),
        }
    }

    fn now_ms(&self) -> u64 {
        START_UNIX_MS
    }
}

mod static_model {
    lease_testkit::conformance_tests!(
        || async {
            tokio::time::pause();
            || async { super::FixedModel::new(super::Local, super::MachineId::new(7).unwrap()) }
        },
        super::Options::new(super::HOUR).with_capabilities(super::Capabilities::STATIC),
        does_not_apply: [
            distinct_ids,
            lost_after_takeover,
            release_guard,
            exhausted,
            floor_travels,
            floor_recorded,
            floor_preferred,
            herd,
            renew_after_release,
        ]
    );
}

/// Runs `check` on a harness of `store` (shared by every harness it makes).
async fn outcome<S: Clone, H: Harness>(check: Check, store: S, harness: fn(S) -> H) -> Outcome {
    let new = || {
        let store = store.clone();
        async move { harness(store) }
    };
    lease_testkit::run_check(check, new, &Options::new(HOUR)).await
}

/// The switches are real: the suite sees each one the simulation turns off. Without the release
/// guard `release_guard` fails; without the floor the floor checks do not apply.
#[tokio::test(start_paused = true)]
async fn the_suite_sees_the_switched_off_guards() {
    let no_guard = Guards {
        release_guard: false,
        ..Guards::ALL
    };
    let no_floor = Guards {
        floor: false,
        ..Guards::ALL
    };
    for (guards, checks) in [
        (no_guard, &[Check::ReleaseGuard][..]),
        (
            no_floor,
            &[
                Check::FloorTravels,
                Check::FloorRecorded,
                Check::FloorPreferred,
            ],
        ),
    ] {
        for &check in checks {
            let max = 8 * HOUR;
            let outcomes = [
                outcome(check, SqlStore::new(clock(), max).with_guards(guards), Sql).await,
                outcome(
                    check,
                    RedisStore::new(clock(), max).with_guards(guards),
                    RedisSim,
                )
                .await,
                outcome(
                    check,
                    EtcdStore::new(clock(), max).with_guards(guards),
                    EtcdSim,
                )
                .await,
                outcome(
                    check,
                    ZkStore::new(clock(), max).with_guards(guards),
                    ZooKeeperSim,
                )
                .await,
            ];
            for outcome in outcomes {
                let expected = if guards == no_guard {
                    outcome.is_failed()
                } else {
                    matches!(outcome, Outcome::Skipped(_))
                };
                assert!(expected, "{check}: {outcome:?}");
            }
        }
    }
}
