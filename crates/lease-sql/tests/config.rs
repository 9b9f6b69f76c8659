//! A lease manager refuses, before any lease, a configuration the strategy cannot serve: a
//! longest lease (`max_lease_s`, `with_max_lease_duration`) below the manager's `min_ttl` would
//! make every grant an illegal TTL, each refused and each blocking an ID.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::time::Duration;

use common::{TestTable, server_url};
use lease_core::ErrorKind;
use lease_manager::{Failure, LeaseConfig, LeaseManager, StartError};
use lease_sql::{Dialect, SqlStrategy};

/// Below the default `min_ttl` of 30 s.
const SHORT: Duration = Duration::from_secs(10);

fn url(t: &TestTable, max_lease_s: u64) -> String {
    let base = match &t.dir {
        Some(dir) => format!("sqlite://{}", dir.path.join("leases.db").display()),
        None => server_url(t.pool.dialect()),
    };
    let join = if base.contains('?') { '&' } else { '?' };
    format!("{base}{join}table={}&max_lease_s={max_lease_s}", t.name)
}

/// No row was ever claimed, nor released.
async fn nothing_claimed(t: &TestTable) {
    let untouched = t.count("lock_version = 0 AND token IS NULL").await;
    assert_eq!(untouched, 512, "a row was claimed");
}

async fn start_fails(strategy: SqlStrategy, config: LeaseConfig) -> Failure {
    // The acquire timeout only ends the wait of a manager that does not check: the check itself
    // runs before any acquisition.
    let error = LeaseManager::builder(strategy)
        .with_config(config.with_acquire_timeout(Some(Duration::from_secs(3))))
        .start()
        .await
        .err()
        .expect("start must fail");
    let StartError::Strategy(failure) = error else {
        panic!("not refused by the strategy: {error:?}");
    };
    failure
}

per_dialect!(a_max_lease_below_the_minimum_ttl_fails_start_before_any_grant_and_at_it_starts);

async fn a_max_lease_below_the_minimum_ttl_fails_start_before_any_grant_and_at_it_starts(
    dialect: Dialect,
) {
    let t = TestTable::new(dialect).await;
    let by_setter = t.strategy().with_max_lease_duration(SHORT).unwrap();
    let by_url = SqlStrategy::connect_lazy(&url(&t, 10)).unwrap();
    for strategy in [by_setter, by_url] {
        let failure = start_fails(strategy, LeaseConfig::default()).await;
        assert_eq!(failure.kind, ErrorKind::Misconfigured, "{failure}");
        for needle in [
            "max_lease_s",
            "with_max_lease_duration",
            "min_ttl",
            "10 s",
            "30 s",
        ] {
            assert!(failure.reason.contains(needle), "{needle}: {failure}");
        }
        nothing_claimed(&t).await;
    }
    // A minimum just above the longest lease is refused too.
    let failure = start_fails(
        t.strategy().with_max_lease_duration(SHORT).unwrap(),
        LeaseConfig::default()
            .with_lease_duration(Duration::from_secs(60))
            .with_renew_interval(Duration::from_secs(4))
            .with_min_ttl(SHORT + Duration::from_millis(1))
            .with_margin(Duration::from_secs(1)),
    )
    .await;
    assert_eq!(failure.kind, ErrorKind::Misconfigured, "{failure}");
    nothing_claimed(&t).await;

    let config = LeaseConfig::default()
        .with_lease_duration(Duration::from_secs(60))
        .with_renew_interval(Duration::from_secs(20))
        .with_min_ttl(SHORT)
        .with_margin(Duration::from_secs(2));
    // Grants of 10 s (asked for 60 s), the minimum the manager accepts.
    for strategy in [
        t.strategy().with_max_lease_duration(SHORT).unwrap(),
        SqlStrategy::connect_lazy(&url(&t, 10)).unwrap(),
    ] {
        let manager = LeaseManager::builder(strategy)
            .with_config(config.clone())
            .start()
            .await
            .unwrap();
        assert!(manager.machine_id().is_some());
        manager.shutdown().await;
    }
}
