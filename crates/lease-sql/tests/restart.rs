//! A lease survives a database restart within its validity: the holder's renewals fail with
//! `Retry` (never `Lost`) while the server is down, and succeed with the same token after.
//!
//! PostgreSQL runs as a private cluster made for this test (the shared server is never
//! restarted), from the installed server binaries; SQLite is "restarted" by closing every
//! connection to the file and opening it again.
#![cfg(any(feature = "postgres", feature = "sqlite"))]

use crate::common;

use std::time::Duration;

#[cfg(feature = "postgres")]
use common::cluster::Cluster;
#[cfg(feature = "sqlite")]
use common::{Pool, TempDir};
use common::{acquiring, renewing};
use lease_core::{ErrorKind, LeaseError, Strategy};
#[cfg(feature = "postgres")]
use lease_sql::SqlStrategy;

const TTL: Duration = Duration::from_secs(60);

/// Renews until the server answers again: every failure meanwhile must be uncertain (`Retry`),
/// never `Lost`. No time limit: `pg_ctl -w start` has returned once the server accepts
/// connections.
#[cfg(feature = "postgres")]
async fn renew_through_outage(s: &SqlStrategy, lease: &lease_sql::SqlLease) {
    loop {
        match s.renew(lease, renewing(TTL)).await {
            Ok(renewal) => return assert_eq!(renewal.lease, *lease),
            Err(e) => assert_eq!(e.kind(), ErrorKind::Retry, "{e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_survives_a_server_restart() {
    let cluster = Cluster::start();
    let s = SqlStrategy::connect_lazy(&cluster.url()).unwrap();
    assert_eq!(s.migrate().await.unwrap(), 512);
    let grant = s.acquire(acquiring(TTL)).await.unwrap();
    cluster.ctl(&["-m", "fast", "stop"]);
    // Down: the holder cannot tell whether its lease still stands.
    let e = s.renew(&grant.lease, renewing(TTL)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry, "{e:?}");
    cluster.ctl(&["start"]);
    renew_through_outage(&s, &grant.lease).await;
    // The new server state still has our token on the row, and nobody else can take the ID.
    let other = s.acquire(acquiring(TTL)).await.unwrap();
    assert_ne!(other.machine_id, grant.machine_id);
    let holders = s.holders().await.unwrap();
    assert_eq!(holders.len(), 2);
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lease_survives_closing_and_reopening_the_file() {
    let dir = TempDir::new();
    let path = dir.path.join("leases.db");
    let pool = Pool::sqlite(&path, 2).await;
    let s = pool.strategy("no_noncense_leases");
    s.migrate().await.unwrap();
    let grant = s.acquire(acquiring(TTL)).await.unwrap();
    pool.close().await;
    let e = s.renew(&grant.lease, renewing(TTL)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Misconfigured, "a closed pool: {e:?}");
    let reopened = Pool::sqlite(&path, 2).await.strategy("no_noncense_leases");
    let renewed = reopened.renew(&grant.lease, renewing(TTL)).await.unwrap();
    assert_eq!(renewed.lease, grant.lease);
    assert_ne!(
        reopened.acquire(acquiring(TTL)).await.unwrap().machine_id,
        grant.machine_id
    );
}
