//! Release on real servers, as the row shows it and a NoNoncense node reads it: after a release
//! and a late renewal the row keeps the guard (not a new lease) and the released floor, a
//! NoNoncense node does not list the ID among its candidates until the guard ends, and operators
//! see it held for the guard's time left. That the late renewal is lost, the retried release
//! harmless and the ID free after the guard for this crate's acquirers is `lease-testkit`'s
//! `renew_after_release` check (tests/conformance.rs).
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::time::Duration;

use common::{F, TestTable, now_ms};
use lease_core::{Acquire, Release, Renew, Strategy};
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

/// A renewal after the release, with a floor above the released one (its outcome is the
/// testkit's to check).
async fn late_renew(s: &SqlStrategy, lease: &SqlLease) {
    let renewal = s.renew(lease, Renew::new(LEASE, F + 2 * LEASE_MS)).await;
    assert!(renewal.is_err(), "a renewal after the release succeeded");
}

/// Whether a NoNoncense node would list `id` among its candidates: the reference's
/// `expires_at < now` on the database clock, in UTC (Ecto's and sqlx's session zone).
async fn nononcense_sees_free(t: &TestTable, id: u16) -> bool {
    let now = t.pool.at(0);
    t.count(&format!("id = {id} AND expires_at < {now}")).await == 1
}

/// A table whose only free row is `ID`, with floor `F`.
async fn one_free_row(dialect: Dialect) -> TestTable {
    let t = TestTable::new(dialect).await;
    t.pool.hold(&t.name, 0..=ID - 1).await;
    t.pool.hold(&t.name, ID + 1..=511).await;
    t.exec(&format!("UPDATE {{t}} SET floor_ms = {F} WHERE id = {ID}"))
        .await;
    t
}

per_dialect!(a_released_row_and_nononcense);

async fn a_released_row_and_nononcense(dialect: Dialect) {
    let t = one_free_row(dialect).await;
    let s = t.strategy();
    let lease = acquire(&s).await;
    assert_eq!(lease.machine_id().get(), ID);
    release(&s, &lease, GUARD).await;
    assert_eq!(t.floor(ID).await, RELEASED);

    // After a late renewal the row keeps the guard, not a new 8 h lease, and the released floor.
    late_renew(&s, &lease).await;
    let (_, _, left) = t.pool.row(&t.name, ID).await;
    assert!(
        // (SQLite's julianday arithmetic in the check is off by a few µs)
        (1..=GUARD_US + 1_000).contains(&left),
        "the released id has {left} µs left, not the guard"
    );
    assert_eq!(
        t.floor(ID).await,
        RELEASED,
        "the late renewal moved the floor"
    );

    // Blocked during the guard for NoNoncense (not among its candidates); operators see it
    // held for the guard's time left.
    assert!(!nononcense_sees_free(&t, ID).await);
    let holders = s.holders().await.unwrap();
    let held = holders
        .iter()
        .find(|h| h.machine_id.get() == ID)
        .unwrap_or_else(|| panic!("{holders:?}"));
    assert!(held.expires_in <= GUARD, "{held:?}");

    // A retried release does not lengthen the guard.
    release(&s, &lease, GUARD).await;
    let (_, _, again) = t.pool.row(&t.name, ID).await;
    assert!(again <= left + 1_000, "{again} µs after {left} µs");
    assert_eq!(t.floor(ID).await, RELEASED);

    // Free after the guard for NoNoncense too; a late renewal then changes nothing.
    tokio::time::sleep(GUARD + Duration::from_millis(150)).await;
    assert!(nononcense_sees_free(&t, ID).await);
    late_renew(&s, &lease).await;
    assert!(nononcense_sees_free(&t, ID).await);
    assert_eq!(t.floor(ID).await, RELEASED);

    // A release with no guard frees the row for NoNoncense at once.
    let lease = acquire(&s).await;
    release(&s, &lease, Duration::ZERO).await;
    // Free from the release's "now" on: wait until the database clock has moved past it
    // (SQLite's clock counts milliseconds).
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(nononcense_sees_free(&t, ID).await);
    late_renew(&s, &lease).await;
    assert!(nononcense_sees_free(&t, ID).await);
    assert_eq!(s.free_count().await.unwrap(), 1);
}
