//! A lease table whose rows vanish while the database stays up: `TRUNCATE`, or `DELETE FROM`
//! every row or a held ID's row, by an operator or a cleanup script. A node starting afterwards
//! (which migrates at startup) or acquiring must not be handed an ID a running node still
//! holds: the rows come back blocked for the hold-off, acquisition answers `Retry` saying so,
//! and the holder's renewal is lost.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::time::Duration;

use common::{HOUR, TestTable, acquiring, next_id, now_ms, renewing};
use lease_core::{ErrorKind, LeaseError, MachineId, Strategy};
use lease_sql::{AmnesiaGuard, Dialect, SqlLeaseError, SqlStrategy};

per_dialect!(
    wiped_rows_hold_acquisitions_off,
    a_wiped_table_heals_after_the_hold_off,
    guard_off_hands_the_wiped_id_out_again;
    servers: an_unseeded_table_is_seeded_free,
);

/// How the rows vanish.
#[derive(Debug, Clone, Copy)]
enum Wipe {
    /// `TRUNCATE` (SQLite has none: its `DELETE FROM` without `WHERE` truncates).
    Truncate,
    /// `DELETE FROM` the table.
    DeleteAll,
    /// `DELETE FROM` the table `WHERE id =` the held ID.
    DeleteHeld,
}

impl Wipe {
    async fn run(self, t: &TestTable, held: u16) {
        let sql = match (self, t.pool.dialect()) {
            (Self::Truncate, Dialect::Postgres) => format!("TRUNCATE {}", t.name),
            (Self::Truncate, Dialect::MySql) => format!("TRUNCATE TABLE {}", t.name),
            (Self::Truncate | Self::DeleteAll, _) => format!("DELETE FROM {}", t.name),
            (Self::DeleteHeld, _) => format!("DELETE FROM {} WHERE id = {held}", t.name),
        };
        t.pool.exec(&sql).await;
    }
}

/// The IDs blocked and the time left, from the error of an acquisition held off after rows
/// were found missing.
fn rows_held_off(e: &SqlLeaseError) -> (u64, Duration) {
    match e {
        SqlLeaseError::RowsDeleted {
            blocked, remaining, ..
        } => (*blocked, *remaining),
        other => panic!("expected a hold-off after deleted rows, got {other:?}"),
    }
}

/// Node A holds ID 0, every other ID is taken, then the rows vanish. Returns A's strategy and
/// lease.
async fn held_then_wiped(
    t: &TestTable,
    a: SqlStrategy,
    wipe: Wipe,
) -> (SqlStrategy, lease_sql::SqlLease) {
    let held = a.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(held.machine_id.get(), 0);
    t.pool.hold(&t.name, 1..=511).await;
    wipe.run(t, 0).await;
    (a, held.lease)
}

/// After each wipe, node B acquires: after a migration (as nodes run at startup, and as
/// `nononce leases migrate` does) or without one. It must not get A's ID: it is told to wait
/// for the hold-off, not that every ID is taken, and the missing rows are put back blocked.
async fn wiped_rows_hold_acquisitions_off(dialect: Dialect) {
    for (wipe, migrate) in [
        (Wipe::Truncate, true),
        (Wipe::DeleteAll, true),
        (Wipe::DeleteHeld, true),
        (Wipe::Truncate, false),
        (Wipe::DeleteHeld, false),
    ] {
        wiped_then_acquired(dialect, wipe, migrate).await;
    }
}

async fn wiped_then_acquired(dialect: Dialect, wipe: Wipe, migrate: bool) {
    let t = TestTable::new(dialect).await;
    let (a, lease) = held_then_wiped(&t, t.strategy(), wipe).await;
    let b = t.strategy();
    if migrate {
        b.migrate().await.unwrap();
    }
    let e = b
        .acquire(acquiring(HOUR))
        .await
        .expect_err("granted an ID whose row was wiped while its holder runs");
    assert_eq!(
        e.kind(),
        ErrorKind::Retry,
        "{wipe:?}, migrated {migrate}: {e:?}"
    );
    let (blocked, remaining) = rows_held_off(&e);
    let expected = match wipe {
        Wipe::DeleteHeld => 1,
        Wipe::Truncate | Wipe::DeleteAll => 512,
    };
    assert_eq!(blocked, expected, "{e}");
    let hold_off = b.amnesia_hold_off();
    assert!(
        remaining <= hold_off && remaining > hold_off - Duration::from_secs(600),
        "{remaining:?} of {hold_off:?}"
    );
    let text = e.to_string();
    for part in [
        t.name.as_str(),
        "TRUNCATE",
        "nononce leases release",
        "amnesia_guard=off",
        "max_lease_s",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    // The rows are back, held by nobody, until the hold-off ends.
    assert_eq!(t.count("true").await, 512);
    assert_eq!(b.free_count().await.unwrap(), 0);
    // A finds out at its next renewal and stops.
    let lost = a.renew(&lease, renewing(HOUR)).await.unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::Lost, "{lost:?}");
    // Migrating (again) changes nothing: the rows were put back.
    assert_eq!(b.migrate().await.unwrap(), 0);
    let (again, remaining) = rows_held_off(&b.acquire(acquiring(HOUR)).await.unwrap_err());
    assert_eq!(again, expected);

    // An operator frees A's ID (`nononce leases release`) while A may still run: the next
    // holder is granted it with a floor at the block's end, so that it starts above anything A
    // may issue until its lease runs out, and not from its own clock on a floor of 0.
    let block_end = now_ms() + u64::try_from(remaining.as_millis()).unwrap();
    assert!(b.force_release(MachineId::new(0).unwrap()).await.unwrap());
    let grant = b.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(grant.machine_id.get(), 0);
    // The block's end on the database clock, which may differ from this one by a second.
    assert!(
        grant.floor_ms + 1_000 >= block_end,
        "granted on floor {} though the row was blocked until about {block_end}",
        grant.floor_ms
    );
}

/// With a short longest lease and clock offset, the hold-off ends on the database clock and
/// the table is usable again without an operator.
async fn a_wiped_table_heals_after_the_hold_off(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let short = || {
        t.strategy()
            .with_max_lease_duration(Duration::from_secs(1))
            .unwrap()
            .with_max_clock_offset(Duration::from_millis(500))
            .unwrap()
    };
    let expected_hold_off = match dialect {
        // One host, one clock: the longest lease alone.
        Dialect::Sqlite => Duration::from_secs(1),
        _ => Duration::from_secs(2),
    };
    assert_eq!(short().amnesia_hold_off(), expected_hold_off);
    held_then_wiped(&t, short(), Wipe::Truncate).await;
    let b = short();
    let e = b.acquire(acquiring(HOUR)).await.unwrap_err();
    let (_, mut remaining) = rows_held_off(&e);
    assert!(remaining <= expected_hold_off, "{remaining:?}");
    let started = std::time::Instant::now();
    let first_remaining = remaining;
    // Each retry waits what the last answer said was left: a few rounds at most.
    for _ in 0..20 {
        tokio::time::sleep(remaining + Duration::from_millis(20)).await;
        match b.acquire(acquiring(HOUR)).await {
            Ok(grant) => {
                assert_eq!(grant.machine_id.get(), 0);
                assert!(
                    started.elapsed() + Duration::from_millis(100) >= first_remaining,
                    "granted {:?} into a hold-off of {first_remaining:?}",
                    started.elapsed()
                );
                return;
            }
            Err(e) => remaining = rows_held_off(&e).1,
        }
    }
    panic!("still held off after 20 waits of what was said to be left");
}

/// With the amnesia guard off, the check is off too: the wiped ID is handed out again at once,
/// as before the check existed (documented).
async fn guard_off_hands_the_wiped_id_out_again(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let off = || t.strategy().with_amnesia_guard(AmnesiaGuard::Off);
    held_then_wiped(&t, off(), Wipe::Truncate).await;
    let b = off();
    assert_eq!(b.migrate().await.unwrap(), 512);
    let id = next_id(&b).await;
    assert_eq!(
        id, 0,
        "the test can fail: with the guard off, the wiped ID is free again"
    );
}

/// A first migration cut off after creating the table and before seeding it (MySQL commits
/// each `CREATE TABLE` on its own) left an empty table that was never seeded: the next
/// migration seeds it free.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn an_unseeded_table_is_seeded_free(dialect: Dialect) {
    let t = TestTable::unmigrated(dialect).await;
    let (token, expires) = match dialect {
        Dialect::Postgres => ("bytea", "timestamp(6)"),
        _ => ("binary(16)", "datetime(6)"),
    };
    t.exec(&format!(
        "CREATE TABLE {{t}} (id smallint NOT NULL PRIMARY KEY, token {token} NULL, \
         expires_at {expires} NOT NULL, lock_version integer NOT NULL DEFAULT 0, \
         floor_ms bigint NOT NULL DEFAULT 0)"
    ))
    .await;
    let s = t.strategy();
    assert_eq!(s.migrate().await.unwrap(), 512);
    assert_eq!(next_id(&s).await, 0);
}
