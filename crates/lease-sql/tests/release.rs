//! Release on real servers, by the plain operations (NoNoncense's statements) and the
//! floor-aware ones (what the lease manager calls): a renewal that reaches the database after
//! the release (sent before it and delayed, or resent after a reconnect) is lost and extends
//! nothing, while the ID stays blocked for the guard, for NoNoncense nodes as for this crate's
//! acquirers, and is free after it.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::TestTable;
use lease_core::{ErrorKind, LeaseError, Strategy};
use lease_sql::{Dialect, SqlLease, SqlStrategy};

/// The lease manager's default lease duration.
const LEASE: Duration = Duration::from_secs(8 * 3600);
const LEASE_MS: u64 = 8 * 3_600_000;
const GUARD: Duration = Duration::from_millis(1500);
const GUARD_US: i64 = 1_500_000;
/// A floor far below any clock, so that the only free row counts as preferred.
const F: u64 = 1_000_000;
/// The only free ID in these tests.
const ID: u16 = 100;

#[derive(Debug, Clone, Copy)]
enum Mode {
    /// `acquire`, `renew`, `release`: NoNoncense's statements.
    Plain,
    /// `acquire_with_floor` and its companions: what the lease manager calls.
    Floor,
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

async fn acquire(s: &SqlStrategy, mode: Mode) -> SqlLease {
    let grant = match mode {
        Mode::Plain => s.acquire(LEASE).await,
        Mode::Floor => s.acquire_with_floor(LEASE, now_ms(), F + LEASE_MS).await,
    };
    grant.expect("acquire").lease
}

async fn release(s: &SqlStrategy, mode: Mode, lease: &SqlLease, guard: Duration) {
    match mode {
        Mode::Plain => s.release(lease, guard).await,
        Mode::Floor => s.release_with_floor(lease, guard, F + 12).await,
    }
    .expect("release");
}

async fn renew(s: &SqlStrategy, mode: Mode, lease: &SqlLease) -> ErrorKind {
    let renewal = match mode {
        Mode::Plain => s.renew(lease, LEASE).await,
        Mode::Floor => s.renew_with_floor(lease, LEASE, F + 2 * LEASE_MS).await,
    };
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
    for mode in [Mode::Plain, Mode::Floor] {
        let name = format!("{dialect} {mode:?}");
        let t = one_free_row(dialect).await;
        let s = t.strategy();
        let lease = acquire(&s, mode).await;
        assert_eq!(lease.machine_id().get(), ID, "{name}");
        release(&s, mode, &lease, GUARD).await;
        let floor_released = match mode {
            Mode::Plain => F,
            Mode::Floor => F + 12,
        };
        assert_eq!(floor(&t, ID).await, floor_released, "{name}");

        // The late renewal: lost, and the ID keeps the guard, not a new 8 h lease.
        assert_eq!(renew(&s, mode, &lease).await, ErrorKind::Lost, "{name}");
        let (_, _, left) = t.pool.row(&t.name, ID).await;
        assert!(
            // (SQLite's julianday arithmetic in the check is off by a few µs)
            (1..=GUARD_US + 1_000).contains(&left),
            "{name}: the released id has {left} µs left, not the guard"
        );
        assert_eq!(
            floor(&t, ID).await,
            floor_released,
            "{name}: the late renewal moved the floor"
        );

        // Blocked during the guard: for NoNoncense (not among its candidates) and for this
        // crate's acquirers; operators see it held for the guard's time left.
        assert!(!nononcense_sees_free(&t, ID).await, "{name}");
        let error = s.acquire_with_floor(LEASE, now_ms(), F).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Exhausted, "{name}: {error}");
        let error = s.acquire(LEASE).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Exhausted, "{name}: {error}");
        let holders = s.holders().await.unwrap();
        let held = holders
            .iter()
            .find(|h| h.machine_id.get() == ID)
            .unwrap_or_else(|| panic!("{name}: {holders:?}"));
        assert!(held.expires_in <= GUARD, "{name}: {held:?}");

        // A retried release (its first reply lost) is harmless and changes nothing.
        release(&s, mode, &lease, GUARD).await;
        let (_, _, again) = t.pool.row(&t.name, ID).await;
        assert!(again <= left + 1_000, "{name}: {again} µs after {left} µs");
        assert_eq!(floor(&t, ID).await, floor_released, "{name}");
        assert_eq!(renew(&s, mode, &lease).await, ErrorKind::Lost, "{name}");

        // Free after the guard, for NoNoncense too; the late renewal still extends nothing.
        tokio::time::sleep(GUARD + Duration::from_millis(150)).await;
        assert!(nononcense_sees_free(&t, ID).await, "{name}");
        assert_eq!(renew(&s, mode, &lease).await, ErrorKind::Lost, "{name}");
        assert!(nononcense_sees_free(&t, ID).await, "{name}");
        assert_eq!(floor(&t, ID).await, floor_released, "{name}");
        let next = s.acquire_with_floor(LEASE, now_ms(), F).await.unwrap();
        assert_eq!(next.machine_id.get(), ID, "{name}");
        assert_eq!(next.floor_ms, floor_released, "{name}");
        assert_ne!(next.lease.token(), lease.token(), "{name}");
        // The old handle cannot touch the new holder's lease either.
        assert_eq!(renew(&s, mode, &lease).await, ErrorKind::Lost, "{name}");
        s.renew(&next.lease, LEASE).await.unwrap();
    }
}

async fn a_renewal_after_a_release_with_no_guard_is_lost(dialect: Dialect) {
    for mode in [Mode::Plain, Mode::Floor] {
        let name = format!("{dialect} {mode:?}");
        let t = one_free_row(dialect).await;
        let s = t.strategy();
        let lease = acquire(&s, mode).await;
        release(&s, mode, &lease, Duration::ZERO).await;
        // Free from the release's "now" on: wait until the database clock has moved past it
        // (SQLite's clock counts milliseconds).
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(nononcense_sees_free(&t, ID).await, "{name}");
        assert_eq!(renew(&s, mode, &lease).await, ErrorKind::Lost, "{name}");
        assert!(nononcense_sees_free(&t, ID).await, "{name}");
        assert_eq!(s.free_count().await.unwrap(), 1, "{name}");
    }
}
