//! Release on real servers, as the lease manager calls it: a renewal that reaches the database
//! after the release (sent before it and delayed, or resent after a reconnect) is lost and
//! extends nothing, while the ID stays blocked for the guard, for NoNoncense nodes as for this
//! crate's acquirers, and is free after it.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::time::Duration;

use common::{F, TestTable, now_ms};
use lease_core::{Acquire, ErrorKind, LeaseError, Release, Renew, Strategy};
use lease_sql::{Dialect, SqlLease, SqlStrategy};

/// The lease manager's default lease duration.
const LEASE: Duration = Duration::from_secs(8 * 3600);
const LEASE_MS: u64 = 8 * 3_600_000;
const GUARD: Duration = Duration::from_millis(1500);
const GUARD_US: i64 = 1_500_000;
/// The only free ID in these tests (its floor is `F`, below any clock, so it is preferred).
const ID: u16 = 100;
/// The floor a release records: the exact bound of what the holder issued.
const RELEASED: u64 = F + 12;

async fn acquire(s: &SqlStrategy) -> SqlLease {
    let grant = s.acquire(Acquire::new(LEASE, now_ms(), F + LEASE_MS)).await;
    grant.expect("acquire").lease
}

async fn release(s: &SqlStrategy, lease: &SqlLease, guard: Duration) {
    s.release(lease, Release::new(guard, RELEASED))
        .await
        .expect("release");
}

/// A renewal of `lease` that must fail: its kind.
async fn renew(s: &SqlStrategy, lease: &SqlLease) -> ErrorKind {
    let renewal = s.renew(lease, Renew::new(LEASE, F + 2 * LEASE_MS)).await;
    renewal.expect_err("a renewal after the release").kind()
}

async fn floor(t: &TestTable, id: u16) -> u64 {
    let sql = format!("SELECT floor_ms FROM {} WHERE id = {id}", t.name);
    u64::try_from(t.pool.scalar(&sql).await).unwrap()
}

/// Whether a NoNoncense node would list `id` among its candidates: the reference's
/// `expires_at < now` on the database clock, in UTC (Ecto's and sqlx's session zone).
async fn nononcense_sees_free(t: &TestTable, id: u16) -> bool {
    let now = match t.pool.dialect() {
        Dialect::Postgres => "(CURRENT_TIMESTAMP AT TIME ZONE 'UTC')",
        Dialect::MySql => "UTC_TIMESTAMP(6)",
        _ => "strftime('%Y-%m-%d %H:%M:%f', 'now')",
    };
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE id = {id} AND expires_at < {now}",
        t.name
    );
    t.pool.scalar(&sql).await == 1
}

/// A table whose only free row is `ID`, with floor `F`.
async fn one_free_row(dialect: Dialect) -> TestTable {
    let t = TestTable::new(dialect).await;
    t.pool.hold(&t.name, 0..=ID - 1).await;
    t.pool.hold(&t.name, ID + 1..=511).await;
    t.pool
        .exec(&format!(
            "UPDATE {} SET floor_ms = {F} WHERE id = {ID}",
            t.name
        ))
        .await;
    t
}

per_dialect!(
    a_renewal_that_arrives_after_the_release_is_lost_and_extends_nothing,
    a_renewal_after_a_release_with_no_guard_is_lost,
);

async fn a_renewal_that_arrives_after_the_release_is_lost_and_extends_nothing(dialect: Dialect) {
    let t = one_free_row(dialect).await;
    let s = t.strategy();
    let lease = acquire(&s).await;
    assert_eq!(lease.machine_id().get(), ID);
    release(&s, &lease, GUARD).await;
    assert_eq!(floor(&t, ID).await, RELEASED);

    // The late renewal: lost, and the ID keeps the guard, not a new 8 h lease.
    assert_eq!(renew(&s, &lease).await, ErrorKind::Lost);
    let (_, _, left) = t.pool.row(&t.name, ID).await;
    assert!(
        // (SQLite's julianday arithmetic in the check is off by a few µs)
        (1..=GUARD_US + 1_000).contains(&left),
        "the released id has {left} µs left, not the guard"
    );
    assert_eq!(
        floor(&t, ID).await,
        RELEASED,
        "the late renewal moved the floor"
    );

    // Blocked during the guard: for NoNoncense (not among its candidates) and for this
    // crate's acquirers; operators see it held for the guard's time left.
    assert!(!nononcense_sees_free(&t, ID).await);
    let error = s
        .acquire(Acquire::new(LEASE, now_ms(), F))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Exhausted, "{error}");
    let holders = s.holders().await.unwrap();
    let held = holders
        .iter()
        .find(|h| h.machine_id.get() == ID)
        .unwrap_or_else(|| panic!("{holders:?}"));
    assert!(held.expires_in <= GUARD, "{held:?}");

    // A retried release (its first reply lost) is harmless and changes nothing.
    release(&s, &lease, GUARD).await;
    let (_, _, again) = t.pool.row(&t.name, ID).await;
    assert!(again <= left + 1_000, "{again} µs after {left} µs");
    assert_eq!(floor(&t, ID).await, RELEASED);
    assert_eq!(renew(&s, &lease).await, ErrorKind::Lost);

    // Free after the guard, for NoNoncense too; the late renewal still extends nothing.
    tokio::time::sleep(GUARD + Duration::from_millis(150)).await;
    assert!(nononcense_sees_free(&t, ID).await);
    assert_eq!(renew(&s, &lease).await, ErrorKind::Lost);
    assert!(nononcense_sees_free(&t, ID).await);
    assert_eq!(floor(&t, ID).await, RELEASED);
    let next = s.acquire(Acquire::new(LEASE, now_ms(), F)).await.unwrap();
    assert_eq!(next.machine_id.get(), ID);
    assert_eq!(next.floor_ms, RELEASED);
    assert_ne!(next.lease.token(), lease.token());
    // The old handle cannot touch the new holder's lease either.
    assert_eq!(renew(&s, &lease).await, ErrorKind::Lost);
    s.renew(&next.lease, Renew::new(LEASE, F + LEASE_MS))
        .await
        .unwrap();
}

async fn a_renewal_after_a_release_with_no_guard_is_lost(dialect: Dialect) {
    let t = one_free_row(dialect).await;
    let s = t.strategy();
    let lease = acquire(&s).await;
    release(&s, &lease, Duration::ZERO).await;
    // Free from the release's "now" on: wait until the database clock has moved past it
    // (SQLite's clock counts milliseconds).
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(nononcense_sees_free(&t, ID).await);
    assert_eq!(renew(&s, &lease).await, ErrorKind::Lost);
    assert!(nononcense_sees_free(&t, ID).await);
    assert_eq!(s.free_count().await.unwrap(), 1);
}
