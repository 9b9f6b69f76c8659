//! Faults on real servers: connections killed or cut in the middle of a renewal, an unreachable
//! database, and the lease manager keeping nonce factories safe through a network cut.
//!
//! The fault tests run on the servers (PostgreSQL and MariaDB), each with its dialect's feature.
#![cfg(any(feature = "postgres", feature = "mysql"))]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::proxy::Proxy;
use common::{
    HOUR, Pool, TestTable, acquiring, mysql_url, pg_url, renewing, server_addr, server_url,
};
use lease_core::{ErrorKind, LeaseError, Strategy};
use lease_manager::{LeaseConfig, LeaseManager, LeaseState};
use lease_sql::sqlx::{self, AssertSqlSafe, Connection, Executor};
use lease_sql::{Dialect, SqlLeaseError, SqlStrategy};
use nonce_core::{BootClock, Clock, Factory, FactoryConfig};

/// A pool of one connection through `proxy`, quick to give up.
async fn proxied_strategy(dialect: Dialect, proxy: &Proxy, table: &str) -> SqlStrategy {
    fn options<DB: sqlx::Database>(max: u32) -> sqlx::pool::PoolOptions<DB> {
        sqlx::pool::PoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_millis(800))
    }
    let port = proxy.addr.port();
    let strategy = match dialect {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => {
            let o: sqlx::postgres::PgConnectOptions = pg_url().parse().unwrap();
            SqlStrategy::postgres(options(1).connect_lazy_with(o.port(port)))
        }
        #[cfg(feature = "mysql")]
        Dialect::MySql => {
            let o: sqlx::mysql::MySqlConnectOptions = mysql_url().parse().unwrap();
            SqlStrategy::mysql(options(1).connect_lazy_with(o.port(port)))
        }
        other => unreachable!("no proxied {other} strategy"),
    };
    strategy.with_table(table).unwrap()
}

/// A connection that holds the row lock of `id` in an open transaction.
enum Locker {
    #[cfg(feature = "postgres")]
    Pg(sqlx::PgConnection),
    #[cfg(feature = "mysql")]
    My(sqlx::MySqlConnection),
}

impl Locker {
    async fn lock(dialect: Dialect, table: &str, id: u16) -> Self {
        let sql = format!("SELECT id FROM {table} WHERE id = {id} FOR UPDATE");
        match dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
                c.execute("BEGIN").await.unwrap();
                c.execute(AssertSqlSafe(sql)).await.unwrap();
                Self::Pg(c)
            }
            #[cfg(feature = "mysql")]
            Dialect::MySql => {
                let mut c = sqlx::MySqlConnection::connect(&mysql_url()).await.unwrap();
                c.execute("BEGIN").await.unwrap();
                c.execute(AssertSqlSafe(sql)).await.unwrap();
                Self::My(c)
            }
            other => unreachable!("no row locks on {other}"),
        }
    }

    async fn unlock(self) {
        match self {
            #[cfg(feature = "postgres")]
            Self::Pg(mut c) => drop(c.execute("ROLLBACK").await.unwrap()),
            #[cfg(feature = "mysql")]
            Self::My(mut c) => drop(c.execute("ROLLBACK").await.unwrap()),
        }
    }
}

/// Waits until a statement on `table` (and not ours) is waiting for a row lock; returns the
/// server's id for its connection.
async fn blocked_backend(pool: &Pool, table: &str) -> i64 {
    let sql = match pool.dialect() {
        Dialect::Postgres => format!(
            "SELECT COALESCE(MAX(pid), 0)::bigint FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE \"{table}\"%'"
        ),
        _ => format!(
            "SELECT CAST(COALESCE(MAX(id), 0) AS SIGNED) FROM information_schema.processlist \
             WHERE info LIKE 'UPDATE `{table}`%'"
        ),
    };
    for _ in 0..200 {
        let id = pool.scalar(&sql).await;
        if id != 0 {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the renewal never waited for the row lock");
}

/// `s` holds ID 0 on `t` and its renewal waits for the row lock a `Locker` holds: the grant,
/// the locker, the renewal and the server's id for its connection.
async fn renewal_waiting_for_the_lock(
    t: &TestTable,
    s: &SqlStrategy,
) -> (
    lease_core::Grant<lease_sql::SqlLease>,
    Locker,
    tokio::task::JoinHandle<Result<lease_core::Renewal<lease_sql::SqlLease>, SqlLeaseError>>,
    i64,
) {
    let grant = s.acquire(acquiring(HOUR)).await.unwrap();
    let locker = Locker::lock(t.pool.dialect(), &t.name, 0).await;
    let waiting = {
        let (s, lease) = (s.clone(), grant.lease);
        tokio::spawn(async move { s.renew(&lease, renewing(HOUR)).await })
    };
    let backend = blocked_backend(&t.pool, &t.name).await;
    (grant, locker, waiting, backend)
}

per_dialect!(;
    servers: connection_killed_mid_renewal_is_retry,
    reply_lost_mid_renewal_is_retry_and_retry_succeeds,
    manager_disables_before_takeover_and_reenables,
);

/// A renewal whose connection the server kills while it waits for a row lock is `Retry`, not
/// `Lost`; the lease is still ours and the next renewal succeeds.
async fn connection_killed_mid_renewal_is_retry(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let (grant, locker, waiting, backend) = renewal_waiting_for_the_lock(&t, &s).await;
    match dialect {
        Dialect::Postgres => {
            let kill = format!("SELECT pg_terminate_backend({backend})::int::int8");
            assert_eq!(t.pool.scalar(&kill).await, 1);
        }
        _ => drop(t.pool.exec(&format!("KILL {backend}")).await),
    }
    let e = waiting.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry, "{e:?}");
    assert!(matches!(e, SqlLeaseError::Unavailable(_)), "{e:?}");
    assert!(e.to_string().contains("did not answer"), "{e}");
    locker.unlock().await;
    let renewed = s.renew(&grant.lease, renewing(HOUR)).await.unwrap();
    assert_eq!(renewed.lease, grant.lease);
}

/// The network drops after the renewal reached the server, so it may be applied while its reply
/// is lost: the strategy says `Retry`, and the retried renewal (same token) succeeds.
async fn reply_lost_mid_renewal_is_retry_and_retry_succeeds(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let proxy = Proxy::start(server_addr(&server_url(dialect))).await;
    let s = proxied_strategy(dialect, &proxy, &t.name).await;
    let (grant, locker, waiting, _) = renewal_waiting_for_the_lock(&t, &s).await;
    proxy.cut();
    let e = waiting.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry, "{e:?}");
    // While cut, nothing gets through, and that is a retry too.
    let e = s.renew(&grant.lease, renewing(HOUR)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry, "{e:?}");
    locker.unlock().await;
    proxy.restore();
    let renewed = s.renew(&grant.lease, renewing(HOUR)).await.unwrap();
    assert_eq!(renewed.lease, grant.lease);
    let (token, _, remaining) = t.pool.row(&t.name, 0).await;
    assert_eq!(token.as_deref(), Some(&grant.lease.token()[..]));
    assert!(remaining > 3_590_000_000);
}

/// A database that does not answer is a retryable error that says so, never a startup failure;
/// on every dialect.
#[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_is_retry() {
    // A port nobody listens on: bind one, then close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let attempts = [
        format!("postgres://postgres@127.0.0.1:{port}/test"),
        format!("mariadb://root@127.0.0.1:{port}/test"),
    ]
    .map(|url| {
        tokio::spawn(async move {
            let s = SqlStrategy::connect_lazy(&url).unwrap();
            (url, s.acquire(acquiring(HOUR)).await.unwrap_err())
        })
    });
    for attempt in attempts {
        let (url, e) = attempt.await.unwrap();
        assert_eq!(e.kind(), ErrorKind::Retry, "{url}: {e:?}");
        assert!(e.to_string().contains("did not answer"), "{e}");
    }
    let e = SqlStrategy::connect_lazy("oracle://x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Misconfigured);
    // An SQLite file that cannot be created is a configuration problem, not a blip.
    let s = SqlStrategy::connect_lazy("sqlite:///nonexistent-dir-for-lease-sql/leases.db").unwrap();
    let e = s.acquire(acquiring(HOUR)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Misconfigured, "{e:?}");
}

/// The lease manager with this strategy and a 3 s lease: when the node loses the database, its
/// factory stops before another node can claim the ID, and starts again (with a new ID) once the
/// node reaches the database and acquires one.
async fn manager_disables_before_takeover_and_reenables(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    t.pool.hold(&t.name, 1..=511).await;
    let proxy = Proxy::start(server_addr(&server_url(dialect))).await;
    let a = proxied_strategy(dialect, &proxy, &t.name).await;
    let clock = BootClock::new();
    let factory = Arc::new(Factory::new(clock, FactoryConfig::new()).unwrap());
    let losses = Arc::new(AtomicUsize::new(0));
    let config = LeaseConfig::default()
        .with_lease_duration(Duration::from_secs(3))
        .with_renew_interval(Duration::from_secs(1))
        .with_min_ttl(Duration::from_secs(2))
        .with_margin(Duration::from_millis(500))
        .with_call_timeout(Duration::from_secs(1))
        .with_acquire_backoff_base(Duration::from_millis(50))
        .with_renew_backoff_base(Duration::from_millis(100))
        .with_acquire_timeout(None);
    let manager = LeaseManager::builder(a)
        .with_config(config)
        .with_clock(clock)
        .with_target(factory.clone())
        .with_on_lease_lost({
            let losses = Arc::clone(&losses);
            move |_| {
                losses.fetch_add(1, Ordering::SeqCst);
            }
        })
        .start()
        .await
        .unwrap();
    assert_eq!(manager.machine_id().map(|id| id.get()), Some(0));
    assert!(factory.counter64().is_ok());

    // Let a renewal or two go through, then cut node A off the database.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(factory.counter64().is_ok());
    proxy.cut();
    let deadline_at_cut = factory.deadline_ms().expect("enabled with a deadline");

    // Node B, on a direct connection, tries to take ID 0 until it can.
    let b = t.strategy();
    // When B's grant arrived: B can generate from then on. (Not when B's claim was sent: on a
    // loaded machine the database may take longer than A's margin to get to it, and it judges
    // A's lease expired only when it does.)
    let granted_at = loop {
        match b.acquire(acquiring(HOUR)).await {
            Ok(grant) => {
                assert_eq!(grant.machine_id.get(), 0);
                break clock.now_ms();
            }
            // Held, or (on a loaded machine) a contended or slow round trip: tried again.
            Err(e) => assert!(
                matches!(
                    e.kind(),
                    ErrorKind::Exhausted | ErrorKind::Conflict | ErrorKind::Retry
                ),
                "{e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // A's factory stopped (its deadline passed, and it was disabled) before B could generate.
    assert!(
        deadline_at_cut <= granted_at,
        "A could generate until {deadline_at_cut}, B was granted its ID at {granted_at}"
    );
    assert!(factory.counter64().is_err(), "A's factory must be off");
    let mut state = manager.watch_state();
    state
        .wait_for(|s| matches!(s, LeaseState::Reacquiring))
        .await
        .expect("A noticed the loss");
    assert!(!factory.is_enabled());
    assert_eq!(losses.load(Ordering::SeqCst), 1);

    // A reaches the database again; once an ID is free it gets it and its factory runs again.
    proxy.restore();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!factory.is_enabled(), "every id is held: A stays off");
    t.pool.expire(&t.name, 7).await;
    state
        .wait_for(|s| matches!(s, LeaseState::Held { .. }))
        .await
        .expect("A reacquired");
    assert_eq!(manager.machine_id().map(|id| id.get()), Some(7));
    assert_eq!(factory.machine_id().map(|id| id.get()), Some(7));
    assert!(factory.counter64().is_ok());
    manager.shutdown().await;
    assert!(!factory.is_enabled());
    // Shutdown released ID 7 with the guard (default: the margin), not at "now".
    let remaining = t.pool.row(&t.name, 7).await.2;
    assert!((0..=500_000).contains(&remaining), "{remaining}");
}
