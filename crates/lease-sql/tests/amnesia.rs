//! Coordinator amnesia: a database server that is not the one that granted the table's leases
//! (a promoted replica that missed lease writes) must not hand out an ID a running node holds.
//!
//! The failover test runs a private PostgreSQL primary and a streaming replica on loopback
//! ports; the identity tests use the shared servers.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::time::Duration;

#[cfg(feature = "postgres")]
use common::cluster::Cluster;
use common::{HOUR, Pool, TestTable, acquiring, next_id, pg_url, renewing, suffix};
use lease_core::{ErrorKind, LeaseError, Strategy};
use lease_sql::sqlx::{self, AssertSqlSafe, Row};
use lease_sql::{AmnesiaGuard, COORDINATOR_TABLE, Dialect, SqlLeaseError, SqlStrategy};

const EIGHT_HOURS: Duration = Duration::from_secs(8 * 3600);
/// The default hold-off: the longest lease (8 h) and twice the largest clock offset (1 h).
const HOLD_OFF: Duration = Duration::from_secs(10 * 3600);

/// The first grant `s` gets once its amnesia hold-off of `hold_off` (counted from about now, when
/// the test's record was replaced) ended: refused while the longest lease alone has passed,
/// granted within the hold-off and a few seconds.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn after_the_hold_off(
    s: &SqlStrategy,
    hold_off: Duration,
) -> lease_core::Grant<lease_sql::SqlLease> {
    let started = std::time::Instant::now();
    tokio::time::sleep(s.max_lease_duration() + Duration::from_millis(100)).await;
    let e = s
        .acquire(acquiring(HOUR))
        .await
        .expect_err("granted after the longest lease, before twice the clock offset more");
    assert!(held_off(&e).2 > Duration::ZERO, "{e}");
    loop {
        match s.acquire(acquiring(HOUR)).await {
            Ok(grant) => return grant,
            Err(e) => {
                assert!(
                    started.elapsed() < hold_off + Duration::from_secs(3),
                    "still held off {:?} in: {e}",
                    started.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The table's coordinator record: identity, previous identity, seconds since it was recorded
/// (database clock).
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn record(pool: &Pool, table: &str) -> Option<(String, Option<String>, i64)> {
    let columns = match pool.dialect() {
        Dialect::Postgres => {
            "server_identity, previous_identity, \
             CAST(EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP AT TIME ZONE 'UTC') - since) AS bigint)"
        }
        _ => {
            "CAST(server_identity AS CHAR(255)), CAST(previous_identity AS CHAR(255)), \
             CAST(TIMESTAMPDIFF(SECOND, since, UTC_TIMESTAMP(6)) AS SIGNED)"
        }
    };
    let sql = format!("SELECT {columns} FROM {COORDINATOR_TABLE} WHERE lease_table = '{table}'");
    on_pool!(pool, p => sqlx::query(AssertSqlSafe(sql)).fetch_optional(p).await.unwrap().map(|r| {
        (r.try_get(0).unwrap(), r.try_get(1).unwrap(), r.try_get(2).unwrap())
    }))
}

/// The server's identity as the strategy computes it, read independently.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn identity(pool: &Pool) -> String {
    let sql = match pool.dialect() {
        Dialect::Postgres => {
            "SELECT (SELECT system_identifier::text FROM pg_control_system()) || ':' || \
             (SELECT lpad(upper(to_hex(timeline_id)), 8, '0') FROM pg_control_checkpoint())"
        }
        _ => "SELECT CAST(CONCAT(@@server_id, '/', @@hostname, ':', @@port) AS CHAR(255))",
    };
    on_pool!(pool, p => sqlx::query(sql).fetch_one(p).await.unwrap().get(0))
}

/// Records `identity` as the server that granted `t`'s leases.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn recorded_as(t: &TestTable, identity: &str) {
    let set = format!("UPDATE {COORDINATOR_TABLE} SET server_identity = '{identity}'");
    t.exec(&format!("{set} WHERE lease_table = '{{t}}'")).await;
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn held_off(e: &SqlLeaseError) -> (Option<String>, String, Duration) {
    match e {
        SqlLeaseError::ServerChanged {
            previous,
            current,
            remaining,
            ..
        } => (previous.clone(), current.clone(), *remaining),
        other => panic!("expected a hold-off, got {other:?}"),
    }
}

/// A pool of one connection to `url`.
#[cfg(feature = "postgres")]
fn pg_pool(url: &str) -> Pool {
    let options = sqlx::postgres::PgPoolOptions::new().max_connections(1);
    Pool::Pg(options.connect_lazy(url).unwrap())
}

/// Whether a lease holds `id` in the default table on `pool`'s server.
#[cfg(feature = "postgres")]
async fn held_on(pool: &Pool, id: u16) -> bool {
    let sql =
        format!("SELECT COUNT(*) FROM no_noncense_leases WHERE id = {id} AND token IS NOT NULL");
    pool.scalar(&sql).await == 1
}

/// The failover the guard exists for. Node A leases an ID on the primary while the replica is
/// not receiving; the primary dies and the replica, which never saw the grant, is promoted.
/// Node B on the promoted replica must not be handed A's ID: acquisition is held off with an
/// error that says for how long and how to override it. With the guard off, B gets A's ID,
/// which is what happened before the guard existed.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_failover_to_a_lagging_replica_holds_acquisitions_off() {
    let primary = Cluster::start();
    let a = SqlStrategy::connect_lazy(&primary.url()).unwrap();
    assert_eq!(a.migrate().await.unwrap(), 512);
    // A lease the replica will have: granted before it was made.
    let replicated = a.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(replicated.machine_id.get(), 0);

    let replica = Cluster::replica_of(&primary);
    let replica_pool = pg_pool(&replica.url());
    assert!(
        held_on(&replica_pool, 0).await,
        "the replica has the first lease"
    );
    let in_recovery = "SELECT pg_is_in_recovery()::int::bigint";
    assert_eq!(replica_pool.scalar(in_recovery).await, 1);
    let primary_identity = identity(&pg_pool(&primary.url())).await;

    // The replica stops receiving; A's lease is granted on the primary only.
    replica_pool.close().await;
    replica.ctl(&["-m", "fast", "stop"]);
    let granted = a.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(granted.machine_id.get(), 1);

    // The primary dies; the replica comes back (still a standby, its primary gone), and the
    // grant really is missing there.
    primary.kill();
    replica.ctl(&["start"]);
    let replica_pool = pg_pool(&replica.url());
    assert!(held_on(&replica_pool, 0).await);
    assert!(
        !held_on(&replica_pool, 1).await,
        "A's grant never reached the replica"
    );
    // A standby cannot grant anything.
    let standby = SqlStrategy::connect_lazy(&replica.url()).unwrap();
    let e = standby.acquire(acquiring(HOUR)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry, "{e:?}");
    replica.promote();
    assert_eq!(replica_pool.scalar(in_recovery).await, 0);

    // B on the promoted replica: held off, with a message that says for how long and how to
    // override it.
    let b = SqlStrategy::connect_lazy(&replica.url()).unwrap();
    let e = b.acquire(acquiring(HOUR)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry, "{e:?}");
    let (previous, current, remaining) = held_off(&e);
    assert_eq!(previous.as_deref(), Some(primary_identity.as_str()));
    let (system, timeline) = current.split_once(':').unwrap();
    assert_eq!(
        Some(system),
        primary_identity.split(':').next(),
        "same system"
    );
    assert_eq!(timeline, "00000002", "the promotion started timeline 2");
    assert_eq!(remaining, HOLD_OFF);
    let text = e.to_string();
    for part in [
        "held off for 10 h 0 min",
        "max_clock_offset_s",
        "amnesia_guard=off",
        "with_amnesia_guard",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    // Still held off on the next try, with what remains of the 10 h.
    let e = b.acquire(acquiring(HOUR)).await.unwrap_err();
    let (_, _, remaining) = held_off(&e);
    assert!(
        remaining <= HOLD_OFF && remaining > HOLD_OFF - Duration::from_secs(600),
        "{remaining:?}"
    );
    assert_eq!(
        record(&replica_pool, "no_noncense_leases").await.unwrap().0,
        current,
        "the promoted server is recorded from now on"
    );
    // A lease the promoted server has is renewed as usual: a token that survived is proof.
    let renewed = b.renew(&replicated.lease, renewing(HOUR)).await.unwrap();
    assert_eq!(renewed.lease, replicated.lease);

    // Without the guard, B is handed A's ID, which A is still using.
    let unguarded =
        SqlStrategy::connect_lazy(&format!("{}?amnesia_guard=off", replica.url())).unwrap();
    let taken = unguarded.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(
        taken.machine_id, granted.machine_id,
        "the test can fail: without the guard the promoted replica hands out A's id"
    );

    // The hold-off ends after the longest lease (here 1 s) and twice the largest clock offset
    // (here 2 s) on the database clock.
    let short = SqlStrategy::connect_lazy(&format!(
        "{}?max_lease_s=1&max_clock_offset_s=2",
        replica.url()
    ))
    .unwrap();
    let later = after_the_hold_off(&short, Duration::from_secs(5)).await;
    assert_eq!(later.machine_id.get(), 2);
    assert_eq!(later.ttl, Duration::from_secs(1), "leases are capped too");
    replica_pool.close().await;
}

per_dialect!(; servers: changed_identity_holds_acquisitions_off, missing_record);

/// On the shared servers: the migration records the server; a record naming another server
/// holds acquisitions off (and is replaced), renewals go on, the hold-off ends after the
/// longest lease, and the guard can be turned off.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn changed_identity_holds_acquisitions_off(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let me = identity(&t.pool).await;
    let (recorded, previous, age) = record(&t.pool, &t.name).await.unwrap();
    assert_eq!(recorded, me);
    assert_eq!(previous, None);
    assert!(
        age > 1_000_000_000,
        "recorded as trusted (since 1970): {age}"
    );
    let held = s.acquire(acquiring(HOUR)).await.unwrap();

    // As if the leases had been granted by another server.
    recorded_as(&t, "another server").await;
    let e = s.acquire(acquiring(HOUR)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry);
    let (previous, current, remaining) = held_off(&e);
    assert_eq!(
        (previous.as_deref(), current.as_str()),
        (Some("another server"), me.as_str())
    );
    assert_eq!(remaining, HOLD_OFF);
    let (recorded, previous, age) = record(&t.pool, &t.name).await.unwrap();
    assert_eq!(
        (recorded.as_str(), previous.as_deref()),
        (me.as_str(), Some("another server"))
    );
    assert!((0..60).contains(&age), "recorded now: {age}");
    for s in [
        s.clone(),
        s.clone()
            .with_acquisition(lease_sql::Acquisition::Optimistic { candidates: 4 }),
    ] {
        let e = s.acquire(acquiring(HOUR)).await.unwrap_err();
        let (previous, _, remaining) = held_off(&e);
        assert_eq!(previous.as_deref(), Some("another server"));
        assert!(remaining < HOLD_OFF, "{remaining:?}");
    }
    assert_eq!(s.free_count().await.unwrap(), 511, "nothing was claimed");
    s.renew(&held.lease, renewing(HOUR)).await.unwrap();
    // The guard off: acquisitions go on.
    let off = t.strategy().with_amnesia_guard(AmnesiaGuard::Off);
    assert_eq!(next_id(&off).await, 1);
    // With a longest lease of 1 s and clocks within 2 s the hold-off is over after 5 s.
    let short = t
        .strategy()
        .with_max_lease_duration(Duration::from_secs(1))
        .unwrap()
        .with_max_clock_offset(Duration::from_secs(2))
        .unwrap();
    assert_eq!(short.amnesia_hold_off(), Duration::from_secs(5));
    let grant = after_the_hold_off(&short, Duration::from_secs(5)).await;
    assert_eq!(grant.machine_id.get(), 2);
    assert_eq!(grant.ttl, Duration::from_secs(1));
    // Renewals are capped too.
    let renewal = short.renew(&grant.lease, renewing(HOUR)).await.unwrap();
    assert_eq!(renewal.ttl, Duration::from_secs(1));
}

/// No record for a table that has granted leases: held off (the record may have been lost with
/// the leases). No record for a table that never granted one: trusted at once.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn missing_record(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let forget = format!("DELETE FROM {COORDINATOR_TABLE} WHERE lease_table = '{{t}}'");
    t.exec(&forget).await;
    let first = s.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(first.machine_id.get(), 0, "never claimed: trusted");
    let (recorded, _, age) = record(&t.pool, &t.name).await.unwrap();
    assert_eq!(recorded, identity(&t.pool).await);
    assert!(age > 1_000_000_000, "trusted: {age}");

    t.exec(&forget).await;
    let e = s.acquire(acquiring(HOUR)).await.unwrap_err();
    let (previous, current, remaining) = held_off(&e);
    assert_eq!(previous, None);
    assert_eq!(current, identity(&t.pool).await);
    assert_eq!(remaining, HOLD_OFF);
    assert!(e.to_string().contains("no record"), "{e}");
    let (_, _, age) = record(&t.pool, &t.name).await.unwrap();
    assert!((0..60).contains(&age), "recorded now: {age}");
    assert_eq!(
        held_off(&s.acquire(acquiring(HOUR)).await.unwrap_err()).0,
        None
    );
    s.renew(&first.lease, renewing(HOUR)).await.unwrap();
}

/// The guard needs no privilege beyond the tables: a plain login role reads the server's
/// identity.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_guard_works_for_a_plain_role() {
    let t = TestTable::new(Dialect::Postgres).await;
    let user = format!("lease_rw_{}", suffix());
    for sql in [
        format!("CREATE ROLE {user} LOGIN"),
        format!("GRANT SELECT, UPDATE ON {} TO {user}", t.name),
        format!("GRANT SELECT, INSERT, UPDATE ON {COORDINATOR_TABLE} TO {user}"),
    ] {
        t.pool.exec(&sql).await;
    }
    let url = pg_url().replacen("postgres@", &format!("{user}@"), 1);
    let s = SqlStrategy::connect_lazy(&format!("{url}?table={}", t.name)).unwrap();
    let acquired = s.acquire(acquiring(HOUR)).await;
    recorded_as(&t, "x").await;
    let held = s.acquire(acquiring(HOUR)).await;
    for sql in [
        format!("REVOKE ALL ON {} FROM {user}", t.name),
        format!("REVOKE ALL ON {COORDINATOR_TABLE} FROM {user}"),
        format!("DROP ROLE {user}"),
    ] {
        t.pool.exec(&sql).await;
    }
    assert_eq!(acquired.unwrap().machine_id.get(), 0);
    let (previous, ..) = held_off(&held.unwrap_err());
    assert_eq!(previous.as_deref(), Some("x"));
}

/// SQLite has no replicas: no coordinator table, no server check, the options are accepted.
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_has_no_guard() {
    let t = TestTable::new(Dialect::Sqlite).await;
    let tables = t
        .pool
        .scalar(&format!(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = '{COORDINATOR_TABLE}'"
        ))
        .await;
    assert_eq!(tables, 0);
    let path = t.dir.as_ref().unwrap().path.join("leases.db");
    let s = SqlStrategy::connect_lazy(&format!(
        "sqlite://{}?amnesia_guard=hold_off&max_lease_s=60&table={}",
        path.display(),
        t.name
    ))
    .unwrap();
    assert_eq!(s.amnesia_guard(), AmnesiaGuard::HoldOff);
    let grant = s.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(grant.ttl, Duration::from_secs(60));
}

/// The URL options, and misspelt ones refused by name, for every dialect.
#[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_options() {
    let s = SqlStrategy::connect_lazy(&format!(
        "{}?amnesia_guard=off&max_lease_s=300&table=app_leases",
        pg_url()
    ))
    .unwrap();
    assert_eq!(s.amnesia_guard(), AmnesiaGuard::Off);
    assert_eq!(s.max_lease_duration(), Duration::from_secs(300));
    assert_eq!(s.table(), "app_leases");
    let s = SqlStrategy::connect_lazy(&format!(
        "{}?max_clock_offset_s=120&max_lease_s=60",
        pg_url()
    ))
    .unwrap();
    assert_eq!(s.max_clock_offset(), Duration::from_secs(120));
    assert_eq!(s.amnesia_hold_off(), Duration::from_secs(300));
    let s = SqlStrategy::connect_lazy("mariadb://root@127.0.0.1:1/test?ssl-mode=DISABLED").unwrap();
    assert_eq!(
        (s.amnesia_guard(), s.max_lease_duration()),
        (AmnesiaGuard::HoldOff, EIGHT_HOURS)
    );
    for (url, named) in [
        ("postgres://h/db?amnesia_gaurd=off", "`amnesia_gaurd`"),
        ("mysql://h/db?max_lease=5", "`max_lease`"),
        ("sqlite://x.db?tables=x", "`tables`"),
        ("postgres://h/db?max_lease_s=0", "out of range"),
        ("postgres://h/db?max_lease_s=soon", "max_lease_s=`soon`"),
        (
            "postgres://h/db?max_clock_offset_s=1m",
            "max_clock_offset_s=`1m`",
        ),
        ("postgres://h/db?table=Leases", "invalid lease table name"),
        (
            "postgres://h/db?table=nononce_coordinator",
            "coordinator table",
        ),
    ] {
        let e = SqlStrategy::connect_lazy(url).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Misconfigured, "{url}");
        assert!(e.to_string().contains(named), "{url}: {e}");
    }
}
