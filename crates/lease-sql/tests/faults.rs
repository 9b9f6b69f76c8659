//! Faults on real servers: connections killed or cut in the middle of a renewal, an unreachable
//! database, and the lease manager keeping nonce factories safe through a network cut.
//!
//! The fault tests run on the servers (PostgreSQL and MariaDB), each with its dialect's feature.
#![cfg(any(feature = "postgres", feature = "mysql"))]
// Each test is compiled with the dialect it needs; the helpers serve some of them.
#![cfg_attr(
    not(all(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code, unused_imports)
)]

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Pool, TestTable, acquiring, mysql_url, pg_url, renewing};
use lease_core::{ErrorKind, LeaseError, Strategy};
use lease_manager::{LeaseConfig, LeaseManager, LeaseState};
use lease_sql::sqlx::{self, AssertSqlSafe, Connection, Executor};
use lease_sql::{Dialect, SqlLeaseError, SqlStrategy};
use nonce_core::{BootClock, Clock, Factory, FactoryConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const HOUR: Duration = Duration::from_secs(3600);

/// A TCP proxy to the database that the test can cut: every open connection is closed and new
/// ones are refused until it is restored.
struct Proxy {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, _) = watch::channel(false);
        let cut_rx = cut.subscribe();
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if *cut_rx.borrow() {
                    drop(client);
                    continue;
                }
                let mut cut_rx = cut_rx.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut_rx.wait_for(|cut| *cut) => {}
                    }
                    // Dropping both ends closes them.
                });
            }
        });
        Self { addr, cut }
    }

    fn cut(&self) {
        self.cut.send_replace(true);
    }

    fn restore(&self) {
        self.cut.send_replace(false);
    }
}

fn upstream(url: &str) -> SocketAddr {
    let rest = url.split("://").nth(1).unwrap();
    let host_port = rest
        .split('@')
        .next_back()
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    host_port.parse().unwrap_or_else(|_| {
        panic!(
            "test urls must use an ip address and port: {}",
            lease_sql::redacted_url(url)
        )
    })
}

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

/// A renewal whose connection the server kills while it waits for a row lock is `Retry`, not
/// `Lost`; the lease is still ours and the next renewal succeeds.
async fn connection_killed_mid_renewal_is_retry(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let s = t.strategy();
    let grant = s.acquire(acquiring(HOUR)).await.unwrap();
    let locker = Locker::lock(dialect, &t.name, 0).await;
    let waiting = {
        let s = s.clone();
        let lease = grant.lease;
        tokio::spawn(async move { s.renew(&lease, renewing(HOUR)).await })
    };
    let backend = blocked_backend(&t.pool, &t.name).await;
    let kill = match dialect {
        Dialect::Postgres => format!("SELECT pg_terminate_backend({backend})::int::int8"),
        _ => format!("KILL {backend}"),
    };
    match dialect {
        Dialect::Postgres => assert_eq!(t.pool.scalar(&kill).await, 1),
        _ => drop(t.pool.exec(&kill).await),
    }
    let e = waiting.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry, "{e:?}");
    assert!(matches!(e, SqlLeaseError::Unavailable(_)), "{e:?}");
    assert!(e.to_string().contains("did not answer"), "{e}");
    locker.unlock().await;
    let renewed = s.renew(&grant.lease, renewing(HOUR)).await.unwrap();
    assert_eq!(renewed.lease, grant.lease);
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connection_killed_mid_renewal_is_retry() {
    connection_killed_mid_renewal_is_retry(Dialect::Postgres).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_connection_killed_mid_renewal_is_retry() {
    connection_killed_mid_renewal_is_retry(Dialect::MySql).await;
}

/// The network drops after the renewal reached the server, so it may be applied while its reply
/// is lost: the strategy says `Retry`, and the retried renewal (same token) succeeds.
async fn reply_lost_mid_renewal_is_retry_and_retry_succeeds(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let url = match dialect {
        Dialect::Postgres => pg_url(),
        _ => mysql_url(),
    };
    let proxy = Proxy::start(upstream(&url)).await;
    let s = proxied_strategy(dialect, &proxy, &t.name).await;
    let grant = s.acquire(acquiring(HOUR)).await.unwrap();
    let locker = Locker::lock(dialect, &t.name, 0).await;
    let waiting = {
        let s = s.clone();
        let lease = grant.lease;
        tokio::spawn(async move { s.renew(&lease, renewing(HOUR)).await })
    };
    blocked_backend(&t.pool, &t.name).await;
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

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_reply_lost_mid_renewal_is_retry() {
    reply_lost_mid_renewal_is_retry_and_retry_succeeds(Dialect::Postgres).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_reply_lost_mid_renewal_is_retry() {
    reply_lost_mid_renewal_is_retry_and_retry_succeeds(Dialect::MySql).await;
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
    let url = match dialect {
        Dialect::Postgres => pg_url(),
        _ => mysql_url(),
    };
    let proxy = Proxy::start(upstream(&url)).await;
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

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_manager_disables_before_takeover_and_reenables() {
    manager_disables_before_takeover_and_reenables(Dialect::Postgres).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_manager_disables_before_takeover_and_reenables() {
    manager_disables_before_takeover_and_reenables(Dialect::MySql).await;
}
