//! The lease protocol on real servers: PostgreSQL, MariaDB and a SQLite file, each test on a
//! table of its own.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::time::Duration;

use common::{HOUR, TestTable, acquiring, next_id, releasing, renewing};
use lease_core::{ErrorKind, LeaseError, Strategy};
use lease_sql::{Acquisition, Dialect, SqlLease, SqlLeaseError};

per_dialect!(
    migrate_is_idempotent_and_adds_missing_rows,
    acquires_lowest_free_id_skips_held_rows_and_is_exhausted_when_every_id_is_held,
    claims_renewals_and_a_takeover,
    release_blocks_for_the_guard_then_frees_and_never_extends,
    ttl_is_the_requested_duration_on_the_database_clock,
    missing_table_or_wrong_schema_is_misconfigured_and_a_bad_name_is_refused,
    optimistic_race_for_one_row_has_one_winner,
    operators_see_holders_and_can_free_a_dead_nodes_id,
);

async fn migrate_is_idempotent_and_adds_missing_rows(dialect: Dialect) {
    let t = TestTable::unmigrated(dialect).await;
    let s = t.strategy();
    assert_eq!(s.migrate().await.unwrap(), 512, "fresh table seeded");
    assert_eq!(s.migrate().await.unwrap(), 0, "second run is a no-op");
    assert_eq!(t.count("true").await, 512);
    // Seeding as the reference: expired at 1970-01-01, no token, version 0.
    let (token, version, remaining) = t.pool.row(&t.name, 511).await;
    assert_eq!((token, version), (None, 0));
    assert!(
        remaining < -1_000_000_000_000_000,
        "expires_at is 1970: {remaining}"
    );
    assert_eq!(t.count("lock_version = 0 AND token IS NULL").await, 512);
    // A held lease survives a migration; missing rows come back, blocked for the amnesia
    // hold-off (their IDs may have been in use: see tests/wiped.rs).
    // A brand-new table is usable at once: nothing is held off.
    let held = s.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(held.machine_id.get(), 0);
    assert_eq!(s.free_count().await.unwrap(), 511);
    t.exec("DELETE FROM {t} WHERE id BETWEEN 100 AND 199").await;
    assert_eq!(s.migrate().await.unwrap(), 100);
    assert_eq!(t.count("true").await, 512);
    s.renew(&held.lease, renewing(HOUR)).await.unwrap();
    assert_eq!(s.free_count().await.unwrap(), 411);
    let (token, version, remaining) = t.pool.row(&t.name, 150).await;
    assert_eq!((token, version), (None, 0));
    let hold_off = i64::try_from(s.amnesia_hold_off().as_micros()).unwrap();
    assert!(
        remaining > hold_off - 600_000_000 && remaining <= hold_off,
        "blocked for the hold-off: {remaining} µs"
    );
}

async fn acquires_lowest_free_id_skips_held_rows_and_is_exhausted_when_every_id_is_held(
    dialect: Dialect,
) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let a = s.acquire(acquiring(HOUR)).await.unwrap();
    let b = s.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!((a.machine_id.get(), b.machine_id.get()), (0, 1));
    t.pool.hold(&t.name, 2..=9).await;
    assert_eq!(next_id(&s).await, 10);
    t.pool.expire(&t.name, 0).await;
    assert_eq!(next_id(&s).await, 0);
    assert_eq!(next_id(&s).await, 11);
    // Every ID but the last held.
    t.pool.hold(&t.name, 12..=510).await;
    assert_eq!(next_id(&s).await, 511);
    for s in [
        s.clone(),
        s.clone()
            .with_acquisition(Acquisition::Optimistic { candidates: 8 }),
    ] {
        let e = s.acquire(acquiring(HOUR)).await.unwrap_err();
        assert!(matches!(e, SqlLeaseError::Exhausted { .. }), "{e:?}");
        assert_eq!(e.kind(), ErrorKind::Exhausted);
        assert!(e.to_string().contains("every machine id"), "{e}");
    }
    assert_eq!(s.free_count().await.unwrap(), 0);
}

/// A claim sets a fresh token; each renewal, even after expiry, bumps the version; a renewal
/// after another node took the ID over is lost, and the new holder is undisturbed.
async fn claims_renewals_and_a_takeover(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let a = s.acquire(acquiring(HOUR)).await.unwrap();
    let (token, version, _) = t.pool.row(&t.name, 0).await;
    assert_eq!(token.as_deref(), Some(&a.lease.token()[..]));
    assert_eq!(version, 1);
    assert_ne!(a.lease.token(), [0; 16]);
    let first = s.renew(&a.lease, renewing(HOUR)).await.unwrap();
    assert_eq!(first.lease, a.lease);
    let (token, version, _) = t.pool.row(&t.name, 0).await;
    assert_eq!(
        token.as_deref(),
        Some(&a.lease.token()[..]),
        "renew keeps the token"
    );
    assert_eq!(version, 2, "renew bumps the version");
    // As if the first reply was lost: the same handle again.
    let second = s.renew(&a.lease, renewing(HOUR)).await.unwrap();
    assert_eq!(second.lease, a.lease);
    assert_eq!(t.pool.row(&t.name, 0).await.1, 3);
    // Renewed after it expired, nobody having claimed it: the lease goes on.
    t.pool.expire(&t.name, 0).await;
    assert!(t.pool.row(&t.name, 0).await.2 < 0);
    let renewed = s.renew(&a.lease, renewing(HOUR)).await.unwrap();
    assert_eq!(renewed.lease, a.lease);
    let (_, version, remaining) = t.pool.row(&t.name, 0).await;
    assert!(remaining > 3_590_000_000, "{remaining}");
    assert_eq!(version, 4);
    t.pool.expire(&t.name, 0).await;
    let b = s.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(b.machine_id.get(), 0);
    assert_ne!(
        b.lease.token(),
        a.lease.token(),
        "a new claim gets a new token"
    );
    let (token, version, _) = t.pool.row(&t.name, 0).await;
    assert_eq!(token.as_deref(), Some(&b.lease.token()[..]));
    assert_eq!(version, 5);

    // Taken over: the old holder's renewals are lost, and the new holder is undisturbed.
    let before = t.pool.row(&t.name, 0).await;
    for _ in 0..2 {
        let e = s.renew(&a.lease, renewing(HOUR)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Lost, "{e:?}");
        assert!(e.to_string().contains("no longer ours"), "{e}");
    }
    // The old holder's release leaves the new holder's lease alone: it only raises the
    // floor (a write that bumps the version).
    s.release(&a.lease, releasing(Duration::ZERO))
        .await
        .unwrap();
    let after = t.pool.row(&t.name, 0).await;
    assert_eq!(after.0, before.0, "token untouched");
    assert_eq!(after.1, before.1 + 1, "only the floor was written");
    assert!(after.2 > 3_590_000_000, "new holder's expiry untouched");
    s.renew(&b.lease, renewing(HOUR)).await.unwrap();
    // A forged handle with the right ID and another token is not the holder either.
    let forged = SqlLease::from_parts(b.machine_id, [7; 16]);
    assert_eq!(
        s.renew(&forged, renewing(HOUR)).await.unwrap_err().kind(),
        ErrorKind::Lost
    );
}

async fn release_blocks_for_the_guard_then_frees_and_never_extends(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let a = s.acquire(acquiring(HOUR)).await.unwrap();
    let guard = Duration::from_millis(1500);
    s.release(&a.lease, releasing(guard)).await.unwrap();
    let remaining = t.pool.row(&t.name, 0).await.2;
    assert!(
        (1_000_000..=1_501_000).contains(&remaining),
        "blocked for the guard, not freed now: {remaining} µs"
    );
    let b = s.acquire(acquiring(Duration::from_secs(5))).await.unwrap();
    assert_eq!(b.machine_id.get(), 1, "released id still blocked");
    tokio::time::sleep(guard + Duration::from_millis(150)).await;
    let c = s.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(c.machine_id.get(), 0, "free after the guard");
    assert_ne!(c.lease.token(), a.lease.token());
    // A guard longer than the lease left does not extend it.
    s.release(&b.lease, releasing(HOUR)).await.unwrap();
    let remaining = t.pool.row(&t.name, 1).await.2;
    assert!(remaining <= 5_001_000, "{remaining}");
}

async fn ttl_is_the_requested_duration_on_the_database_clock(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let requested = Duration::from_micros(90_123_456);
    let grant = s.acquire(acquiring(requested)).await.unwrap();
    let expected = match dialect {
        Dialect::Sqlite => Duration::from_millis(90_123),
        _ => requested,
    };
    assert_eq!(grant.ttl, expected);
    let remaining = t.pool.row(&t.name, 0).await.2;
    let ttl = i64::try_from(expected.as_micros()).unwrap();
    assert!(
        // (SQLite's julianday arithmetic in the check is off by a few µs)
        (ttl - 1_000_000..=ttl + 1_000).contains(&remaining),
        "expires_at = db now + ttl: {remaining} vs {ttl}"
    );
    let renewal = s
        .renew(&grant.lease, renewing(requested * 2))
        .await
        .unwrap();
    assert!(renewal.ttl >= expected * 2 - Duration::from_millis(1));
    let e = s
        .acquire(acquiring(Duration::from_secs(400 * 24 * 3600)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Misconfigured);
}

/// A missing table says to run the migration, a bad name is refused, and a table of that name
/// with other columns is misconfigured.
async fn missing_table_or_wrong_schema_is_misconfigured_and_a_bad_name_is_refused(
    dialect: Dialect,
) {
    let t = TestTable::unmigrated(dialect).await;
    let s = t.strategy();
    let e = s.acquire(acquiring(HOUR)).await.unwrap_err();
    assert!(matches!(e, SqlLeaseError::MissingTable { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Misconfigured);
    assert!(!e.kind().is_retryable());
    assert!(e.to_string().contains("run the migration"), "{e}");
    assert!(e.to_string().contains(&t.name), "{e}");
    let lease = SqlLease::from_parts(lease_core::MachineId::new(3).unwrap(), [1; 16]);
    let e = s.renew(&lease, renewing(HOUR)).await.unwrap_err();
    assert!(matches!(e, SqlLeaseError::MissingTable { .. }), "{e:?}");
    let e = s.free_count().await.unwrap_err();
    assert!(matches!(e, SqlLeaseError::MissingTable { .. }), "{e:?}");
    let e = s.clone().with_table("leases; DROP TABLE x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Misconfigured);
    assert!(e.to_string().contains("invalid lease table name"), "{e}");

    t.exec("CREATE TABLE {t} (id smallint PRIMARY KEY, owner varchar(40), expires_at varchar(40))")
        .await;
    let e = s.acquire(acquiring(HOUR)).await.unwrap_err();
    assert!(matches!(e, SqlLeaseError::WrongSchema { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Misconfigured);
    assert!(e.to_string().contains("expected schema"), "{e}");
    let e = s.migrate().await.unwrap_err();
    assert!(matches!(e, SqlLeaseError::WrongSchema { .. }), "{e:?}");
}

async fn optimistic_race_for_one_row_has_one_winner(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    t.pool.hold(&t.name, 0..=510).await;
    let s = t
        .strategy()
        .with_acquisition(Acquisition::Optimistic { candidates: 4 });
    let attempts = (0..8).map(|_| {
        let s = s.clone();
        tokio::spawn(async move { s.acquire(acquiring(HOUR)).await })
    });
    let mut winners = Vec::new();
    for attempt in attempts {
        match attempt.await.unwrap() {
            Ok(grant) => winners.push(grant.machine_id.get()),
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::Conflict | ErrorKind::Exhausted),
                "{e:?}"
            ),
        }
    }
    assert_eq!(winners, [511]);
}

async fn operators_see_holders_and_can_free_a_dead_nodes_id(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let a = s.acquire(acquiring(HOUR)).await.unwrap();
    let b = s.acquire(acquiring(Duration::from_secs(90))).await.unwrap();
    let holders = s.holders().await.unwrap();
    let ids: Vec<u16> = holders.iter().map(|h| h.machine_id.get()).collect();
    assert_eq!(ids, [0, 1]);
    let hex: String = a.lease.token().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(holders[0].token_prefix, hex[..8]);
    assert!(
        (Duration::from_secs(3590)..=HOUR).contains(&holders[0].expires_in),
        "{holders:?}"
    );
    assert!(
        (Duration::from_secs(85)..=Duration::from_secs(90)).contains(&holders[1].expires_in),
        "{holders:?}"
    );
    assert_eq!(s.free_count().await.unwrap(), 510);
    let zero = lease_core::MachineId::new(0).unwrap();
    assert!(s.force_release(zero).await.unwrap(), "0 was held");
    assert!(!s.force_release(zero).await.unwrap(), "0 is free now");
    assert!(
        !s.force_release(lease_core::MachineId::new(5).unwrap())
            .await
            .unwrap()
    );
    assert_eq!(
        s.renew(&a.lease, renewing(HOUR)).await.unwrap_err().kind(),
        ErrorKind::Lost
    );
    let ids: Vec<u16> = s
        .holders()
        .await
        .unwrap()
        .iter()
        .map(|h| h.machine_id.get())
        .collect();
    assert_eq!(ids, [1]);
    // Free again, though on a floor at the end of the lease it ended: an acquirer prefers the
    // IDs below its clock, and is granted this one once it is the only free ID.
    t.pool.hold(&t.name, 2..=511).await;
    assert_eq!(next_id(&s).await, 0);
    s.renew(&b.lease, renewing(HOUR)).await.unwrap();
}
