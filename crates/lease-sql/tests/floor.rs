//! The timestamp floor on real servers: recorded by acquire and renew (never lowered), set by
//! release, kept through expiry and force release, reported to the next holder, preferred low;
//! the coordinator clock readings; and the migration of a table made before the column.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::time::Duration;

use common::{F, TestTable, acquiring, now_ms, renewing};
use lease_core::{Acquire, ErrorKind, LeaseError, MachineId, Release, Renew, Strategy};
use lease_sql::{Acquisition, Dialect, SqlLease, SqlLeaseError};

const HOUR: Duration = Duration::from_secs(3600);
const GUARD: Duration = Duration::from_millis(1);

async fn floor(t: &TestTable, id: u16) -> u64 {
    let sql = format!("SELECT floor_ms FROM {} WHERE id = {id}", t.name);
    u64::try_from(t.pool.scalar(&sql).await).unwrap()
}

async fn set_floor(t: &TestTable, ids: std::ops::RangeInclusive<u16>, floor: u64) {
    t.pool
        .exec(&format!(
            "UPDATE {} SET floor_ms = {floor} WHERE id BETWEEN {} AND {}",
            t.name,
            ids.start(),
            ids.end()
        ))
        .await;
}

/// A clock reading of a server on this host: within a minute of ours.
fn assert_sane(coordinator_ms: Option<u64>, what: &str) {
    let reading = coordinator_ms.unwrap_or_else(|| panic!("{what}: no coordinator clock"));
    let ours = now_ms();
    assert!(
        reading.abs_diff(ours) < 60_000,
        "{what}: coordinator clock {reading} vs ours {ours}"
    );
}

per_dialect!(
    acquire_records_the_floor_and_reports_the_one_before,
    renew_raises_the_floor_and_never_lowers_it,
    release_sets_the_floor,
    floor_survives_expiry_and_force_release,
    acquire_prefers_an_id_whose_floor_is_below_now,
    stale_holder_cannot_touch_the_floor,
    coordinator_clock_is_read_on_grant_and_renewal,
    old_table_without_floor_is_migrated,
);

async fn acquire_records_the_floor_and_reports_the_one_before(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    assert!(s.profile().records_floor);
    let grant = s
        .acquire(Acquire::new(HOUR, now_ms(), F + 10))
        .await
        .unwrap();
    assert_eq!(grant.machine_id.get(), 0);
    assert_eq!(grant.floor_ms, 0, "a fresh row has no floor");
    assert_eq!(floor(&t, 0).await, F + 10, "recorded in the claim");
    assert_eq!(floor(&t, 1).await, 0, "other rows untouched");
    // A stored floor above the acquirer's is kept (GREATEST) and reported.
    t.pool.expire(&t.name, 0).await;
    set_floor(&t, 0..=0, F + 50).await;
    let again = s
        .acquire(Acquire::new(HOUR, now_ms(), F + 20))
        .await
        .unwrap();
    assert_eq!(again.machine_id.get(), 0);
    assert_eq!(again.floor_ms, F + 50);
    assert_eq!(floor(&t, 0).await, F + 50);
    // In the optimistic mode as well.
    if dialect != Dialect::Sqlite {
        let o = t
            .strategy()
            .with_acquisition(Acquisition::Optimistic { candidates: 4 });
        t.pool.hold(&t.name, 1..=511).await;
        t.pool.expire(&t.name, 0).await;
        let grant = o
            .acquire(Acquire::new(HOUR, now_ms(), F + 70))
            .await
            .unwrap();
        assert_eq!((grant.machine_id.get(), grant.floor_ms), (0, F + 50));
        assert_eq!(floor(&t, 0).await, F + 70);
    }
}

async fn renew_raises_the_floor_and_never_lowers_it(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let grant = s
        .acquire(Acquire::new(HOUR, now_ms(), F + 100))
        .await
        .unwrap();
    s.renew(&grant.lease, Renew::new(HOUR, F + 300))
        .await
        .unwrap();
    assert_eq!(floor(&t, 0).await, F + 300);
    s.renew(&grant.lease, Renew::new(HOUR, F + 200))
        .await
        .unwrap();
    assert_eq!(
        floor(&t, 0).await,
        F + 300,
        "a lower floor does not lower it"
    );
    let renewal = s
        .renew(&grant.lease, Renew::new(HOUR, F + 400))
        .await
        .unwrap();
    assert_eq!(renewal.lease, grant.lease);
    assert_eq!(floor(&t, 0).await, F + 400);
}

async fn release_sets_the_floor(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let a = s
        .acquire(Acquire::new(HOUR, now_ms(), F + 900))
        .await
        .unwrap();
    // The exact bound of what was issued, below the recorded upper bound: stored as is.
    s.release(&a.lease, Release::new(GUARD, F + 500))
        .await
        .unwrap();
    assert_eq!(floor(&t, 0).await, F + 500);
    // Blocked for the guard (1 ms), then free.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let b = s
        .acquire(Acquire::new(HOUR, now_ms(), F + 800))
        .await
        .unwrap();
    assert_eq!((b.machine_id.get(), b.floor_ms), (0, F + 500));
    assert_eq!(floor(&t, 0).await, F + 800);
}

async fn floor_survives_expiry_and_force_release(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let a = s
        .acquire(Acquire::new(HOUR, now_ms(), F + 10))
        .await
        .unwrap();
    s.renew(&a.lease, Renew::new(HOUR, F + 20)).await.unwrap();
    t.pool.expire(&t.name, 0).await;
    assert_eq!(floor(&t, 0).await, F + 20, "expiry keeps the floor");
    let b = s
        .acquire(Acquire::new(HOUR, now_ms(), F + 5))
        .await
        .unwrap();
    assert_eq!((b.machine_id.get(), b.floor_ms), (0, F + 20));
    assert_eq!(floor(&t, 0).await, F + 20);
    s.renew(&b.lease, Renew::new(HOUR, F + 30)).await.unwrap();
    let renewed = now_ms();
    assert!(s.force_release(MachineId::new(0).unwrap()).await.unwrap());
    // The floor the holder reported is far below its lease's end: the lease's end it is, as
    // the holder may issue up to it before it finds its renewal lost.
    let raised = floor(&t, 0).await;
    let lease_end = renewed + 3_600_000;
    assert!(
        raised + 1_000 >= lease_end && raised <= lease_end + 1_000,
        "force release raised the floor to {raised}, not the lease's end {lease_end}"
    );
    // Ahead of the clock now: acquisition prefers the other IDs while they are free.
    t.pool.hold(&t.name, 1..=511).await;
    let c = s
        .acquire(Acquire::new(HOUR, now_ms(), F + 5))
        .await
        .unwrap();
    assert_eq!((c.machine_id.get(), c.floor_ms), (0, raised));
    // A floor above the lease's end stays.
    s.renew(&c.lease, Renew::new(HOUR, F + 30)).await.unwrap();
    t.pool
        .exec(&format!(
            "UPDATE {} SET floor_ms = {} WHERE id = 0",
            t.name,
            lease_end + 7_200_000
        ))
        .await;
    assert!(s.force_release(MachineId::new(0).unwrap()).await.unwrap());
    assert_eq!(
        floor(&t, 0).await,
        lease_end + 7_200_000,
        "force release keeps a higher floor"
    );
}

async fn acquire_prefers_an_id_whose_floor_is_below_now(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let ahead = now_ms() + 3_600_000;
    set_floor(&t, 0..=4, ahead).await;
    let grant = s.acquire(Acquire::new(HOUR, now_ms(), F)).await.unwrap();
    assert_eq!(
        grant.machine_id.get(),
        5,
        "ids 0..=4 have floors ahead of us"
    );
    assert_eq!(grant.floor_ms, 0);
    // When every free id is ahead, the lowest of them is still granted, with its floor.
    t.pool.hold(&t.name, 6..=511).await;
    let last = s.acquire(Acquire::new(HOUR, now_ms(), F)).await.unwrap();
    assert_eq!((last.machine_id.get(), last.floor_ms), (0, ahead));
    if dialect != Dialect::Sqlite {
        // Random candidates, the ones below our clock first.
        let o = t
            .strategy()
            .with_acquisition(Acquisition::Optimistic { candidates: 2 });
        t.pool
            .exec(&format!(
                "UPDATE {} SET expires_at = {}",
                t.name,
                t.pool.at(-1)
            ))
            .await;
        set_floor(&t, 0..=511, ahead).await;
        set_floor(&t, 300..=300, F).await;
        for _ in 0..3 {
            let g = o.acquire(Acquire::new(HOUR, now_ms(), F)).await.unwrap();
            assert_eq!(g.machine_id.get(), 300, "the only id below our clock");
            t.pool.expire(&t.name, 300).await;
            set_floor(&t, 300..=300, F).await;
        }
    }
}

async fn stale_holder_cannot_touch_the_floor(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let a = s
        .acquire(Acquire::new(HOUR, now_ms(), F + 10))
        .await
        .unwrap();
    t.pool.expire(&t.name, 0).await;
    let b = s
        .acquire(Acquire::new(HOUR, now_ms(), F + 20))
        .await
        .unwrap();
    assert_eq!(b.machine_id, a.machine_id);
    let e = s
        .renew(&a.lease, Renew::new(HOUR, F + 999))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost);
    s.release(&a.lease, Release::new(GUARD, F + 1))
        .await
        .unwrap();
    assert_eq!(
        floor(&t, 0).await,
        F + 20,
        "only the holder's own writes count"
    );
    let forged = SqlLease::from_parts(b.machine_id, [9; 16]);
    s.release(&forged, Release::new(GUARD, F + 1))
        .await
        .unwrap();
    assert_eq!(floor(&t, 0).await, F + 20);
}

async fn coordinator_clock_is_read_on_grant_and_renewal(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    for s in [
        t.strategy(),
        t.strategy()
            .with_acquisition(Acquisition::Optimistic { candidates: 4 }),
    ] {
        let grant = s.acquire(acquiring(HOUR)).await.unwrap();
        assert_sane(grant.coordinator_ms, "grant");
        let renewal = s.renew(&grant.lease, renewing(HOUR)).await.unwrap();
        // MySQL/MariaDB report it too, through LAST_INSERT_ID(expr) in the same statement.
        assert_sane(renewal.coordinator_ms, "renewal");
        assert!(renewal.coordinator_ms >= grant.coordinator_ms);
    }
}

/// The schema of NoNoncense and earlier nononce versions, without `floor_ms`.
async fn old_table_without_floor_is_migrated(dialect: Dialect) {
    let t = TestTable::unmigrated(dialect).await;
    let (create, seed) = match dialect {
        Dialect::Postgres => (
            "CREATE TABLE {t} (id smallint PRIMARY KEY, token bytea NULL, \
             expires_at timestamp(6) NOT NULL, lock_version integer NOT NULL DEFAULT 0)",
            "INSERT INTO {t} (id, token, expires_at, lock_version) \
             SELECT n, NULL, TIMESTAMP '1970-01-01 00:00:00', 0 FROM generate_series(0, 511) AS n",
        ),
        Dialect::MySql => (
            "CREATE TABLE {t} (id smallint NOT NULL PRIMARY KEY, token binary(16) NULL, \
             expires_at datetime(6) NOT NULL, lock_version integer NOT NULL DEFAULT 0) ENGINE = InnoDB",
            "INSERT INTO {t} (id, token, expires_at, lock_version) \
             WITH RECURSIVE seq (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < 511) \
             SELECT n, NULL, '1970-01-01 00:00:00', 0 FROM seq",
        ),
        _ => (
            "CREATE TABLE {t} (id integer PRIMARY KEY NOT NULL, token blob NULL, \
             expires_at text NOT NULL, lock_version integer NOT NULL DEFAULT 0)",
            "WITH RECURSIVE seq (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < 511) \
             INSERT INTO {t} (id, token, expires_at, lock_version) \
             SELECT n, NULL, '1970-01-01 00:00:00.000', 0 FROM seq",
        ),
    };
    t.pool.exec(&create.replace("{t}", &t.name)).await;
    t.pool.exec(&seed.replace("{t}", &t.name)).await;
    // A node of the old version holds id 7.
    let held = SqlLease::from_parts(MachineId::new(7).unwrap(), [7; 16]);
    let token = match dialect {
        Dialect::Postgres => "'\\x07070707070707070707070707070707'::bytea",
        _ => "X'07070707070707070707070707070707'",
    };
    t.pool
        .exec(&format!(
            "UPDATE {} SET token = {token}, expires_at = {}, lock_version = 1 WHERE id = 7",
            t.name,
            t.pool.at(3600)
        ))
        .await;
    let s = t.strategy();
    let e = s.acquire(acquiring(HOUR)).await.unwrap_err();
    assert!(matches!(e, SqlLeaseError::WrongSchema { .. }), "{e:?}");
    assert!(e.to_string().contains("run the migration"), "{e}");
    assert_eq!(s.migrate().await.unwrap(), 0, "every row was there");
    let column = t
        .pool
        .scalar(&format!(
            "SELECT COUNT(*) FROM {} WHERE floor_ms = 0",
            t.name
        ))
        .await;
    assert_eq!(column, 512, "floor_ms added with 0 on every row");
    assert_eq!(s.migrate().await.unwrap(), 0, "idempotent");
    // The old holder renews undisturbed; new nodes acquire at once (the migration recorded
    // this server as the one that granted the table's leases).
    s.renew(&held, Renew::new(HOUR, F)).await.unwrap();
    assert_eq!(floor(&t, 7).await, F);
    let grant = s.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(grant.machine_id.get(), 0);
    assert_eq!(s.free_count().await.unwrap(), 510);
}
