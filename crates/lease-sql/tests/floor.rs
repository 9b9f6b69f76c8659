//! The timestamp floor on real servers where SQL goes beyond lease-testkit's floor checks (which
//! the conformance tests run on every dialect and acquisition mode): a force release raises it
//! to the lease's end; the coordinator clock readings; and the migration of a table made before
//! the column.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use common::{F, HOUR, TestTable, acquiring, now_ms, renewing};
use lease_core::{Acquire, MachineId, Renew, Strategy};
use lease_sql::{Acquisition, Dialect, SqlLease, SqlLeaseError};

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
    force_release_raises_the_floor_to_the_leases_end,
    coordinator_clock_is_read_on_grant_and_renewal,
    old_table_without_floor_is_migrated,
);

/// A force release raises the floor to the end of the lease it ends (its holder may issue up to
/// it before it finds its renewal lost), and keeps a floor above that.
async fn force_release_raises_the_floor_to_the_leases_end(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let id = MachineId::new(0).unwrap();
    t.pool.hold(&t.name, 1..=511).await;
    for above in [0, 7_200_000] {
        let a = s.acquire(Acquire::new(HOUR, now_ms(), F)).await.unwrap();
        assert_eq!(a.machine_id, id);
        s.renew(&a.lease, Renew::new(HOUR, F + 30)).await.unwrap();
        let lease_end = now_ms() + 3_600_000;
        if above > 0 {
            let floor = lease_end + above;
            t.exec(&format!("UPDATE {{t}} SET floor_ms = {floor} WHERE id = 0"))
                .await;
        }
        assert!(s.force_release(id).await.unwrap());
        let raised = t.floor(0).await;
        assert!(
            raised + 1_000 >= lease_end + above && raised <= lease_end + above + 1_000,
            "force release left the floor at {raised}, not {}",
            lease_end + above
        );
    }
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
        assert_eq!(renewal.lease, grant.lease);
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
    t.exec(create).await;
    t.exec(seed).await;
    // A node of the old version holds id 7.
    let held = SqlLease::from_parts(MachineId::new(7).unwrap(), [7; 16]);
    let token = match dialect {
        Dialect::Postgres => "'\\x07070707070707070707070707070707'::bytea",
        _ => "X'07070707070707070707070707070707'",
    };
    let until = t.pool.at(3600);
    t.exec(&format!(
        "UPDATE {{t}} SET token = {token}, expires_at = {until}, lock_version = 1 WHERE id = 7"
    ))
    .await;
    let s = t.strategy();
    let e = s.acquire(acquiring(HOUR)).await.unwrap_err();
    assert!(matches!(e, SqlLeaseError::WrongSchema { .. }), "{e:?}");
    assert!(e.to_string().contains("run the migration"), "{e}");
    assert_eq!(s.migrate().await.unwrap(), 0, "every row was there");
    let column = t.count("floor_ms = 0").await;
    assert_eq!(column, 512, "floor_ms added with 0 on every row");
    assert_eq!(s.migrate().await.unwrap(), 0, "idempotent");
    // The old holder renews undisturbed; new nodes acquire at once (the migration recorded
    // this server as the one that granted the table's leases).
    s.renew(&held, Renew::new(HOUR, F)).await.unwrap();
    assert_eq!(t.floor(7).await, F);
    let grant = s.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(grant.machine_id.get(), 0);
    assert_eq!(s.free_count().await.unwrap(), 510);
}
