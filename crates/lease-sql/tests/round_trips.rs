//! Round trips per lease operation, counted three ways and required to agree with the crate
//! docs ("Round trips"):
//!
//! - **on the server**: PostgreSQL (a private cluster with `log_statement = all`) logs every
//!   statement it executes, one line per simple query (a multi-statement text counts once) and
//!   one per extended-protocol execute; MariaDB counts the statements of the session
//!   (`SHOW SESSION STATUS`: `Questions`, `Com_*`);
//! - **on the wire**: a TCP proxy between the pool and the server counts request flights (bytes
//!   from the client after an answer from the server), so it also sees the pool's pings (one
//!   before it hands a connection out, `test_before_acquire`, on by default; one when the
//!   connection comes back) and any prepare;
//! - **in sqlx**: its statement log (`sqlx::query` events), one event per request sent; the only
//!   count for SQLite, which runs in the process (a request is one call to the connection's
//!   worker thread).
//!
//! Every operation is measured the second time it runs on its connection, with the prepared
//! statements cached, as in a running node. Prints the table;
//! `cargo xtask with-services cargo test -p lease-sql --all-features --test round_trips -- --nocapture`.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::fmt::Write as _;
use std::sync::{Mutex, Once};
use std::time::Duration;

use common::cluster::Cluster;
use common::proxy::Proxy;
use common::{HOUR, Pool, TempDir, mysql_url, now_ms, server_addr, suffix};
use lease_core::{Acquire, Release, Renew, Strategy};
use lease_sql::sqlx::{self, AssertSqlSafe, Row};
use lease_sql::{Acquisition, Dialect, SqlLease, SqlStrategy};

const HOUR_MS: u64 = 3_600_000;

/// An acquisition as the lease manager asks for one: its clock, and the floor of the lease.
fn acquiring() -> Acquire {
    Acquire::new(HOUR, now_ms(), now_ms() + HOUR_MS)
}

/// A release with no guard, recording the floor of this moment.
fn releasing() -> Release {
    Release::new(Duration::ZERO, now_ms())
}

// ---------------------------------------------------------------------------------------------
// sqlx's statement log

/// The statement of each of sqlx's `sqlx::query` events (one per request), in order.
static STATEMENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The process's subscriber: keeps sqlx's statements in [`STATEMENTS`].
struct StatementLog;

struct Visit<'a>(&'a mut String, &'a mut String);

impl tracing::field::Visit for Visit<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "summary" => value.clone_into(self.0),
            "db.statement" => value.trim().clone_into(self.1),
            _ => {}
        }
    }
    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl tracing::Subscriber for StatementLog {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == "sqlx::query"
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        let (mut summary, mut full) = (String::new(), String::new());
        event.record(&mut Visit(&mut summary, &mut full));
        let statement = if full.is_empty() { summary } else { full };
        STATEMENTS.lock().unwrap().push(statement);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Installs the statement log (once) and returns how many statements it holds.
fn logged_statements() -> usize {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        tracing::subscriber::set_global_default(StatementLog).expect("one subscriber");
    });
    STATEMENTS.lock().unwrap().len()
}

// ---------------------------------------------------------------------------------------------
// The server

/// What the server counts for one session.
enum Server {
    /// The private cluster and the backend PID of the measured connection.
    Postgres {
        cluster: Cluster,
        pid: i64,
    },
    /// The measured pool itself (one connection): its session status.
    MariaDb,
    Sqlite,
}

/// One server-side count: statements executed (and, on MariaDB, the counters that moved).
#[derive(Default)]
struct ServerCount {
    statements: Option<i64>,
    detail: String,
}

const MARIADB_COUNTERS: &[&str] = &[
    "Questions",
    "Com_stmt_prepare",
    "Com_stmt_execute",
    "Com_select",
    "Com_update",
    "Com_set_option",
    "Com_begin",
    "Com_commit",
    "Com_rollback",
    "Com_show_status",
];

async fn mariadb_status(pool: &sqlx::MySqlPool) -> Vec<i64> {
    // Text protocol: one question, counted as `Com_show_status`, nothing prepared.
    let rows = sqlx::raw_sql(AssertSqlSafe("SHOW SESSION STATUS"))
        .fetch_all(pool)
        .await
        .unwrap();
    MARIADB_COUNTERS
        .iter()
        .map(|name| {
            rows.iter()
                .find(|r| {
                    r.try_get::<String, _>(0)
                        .unwrap()
                        .eq_ignore_ascii_case(name)
                })
                .map_or(0, |r| r.try_get::<String, _>(1).unwrap().parse().unwrap())
        })
        .collect()
}

/// Lines `pid<pid>:LOG:  statement: ...` / `... execute ...` of the cluster's log.
fn pg_logged(cluster: &Cluster, pid: i64) -> Vec<String> {
    let prefix = format!("pid{pid}:LOG:  ");
    cluster
        .log()
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter(|l| l.starts_with("statement: ") || l.starts_with("execute "))
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------------------

/// One connection, pinged before each use as by default (what `connect_lazy` makes).
fn one_connection<DB: sqlx::Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .test_before_acquire(true)
}

struct Setup {
    /// The measured strategy: one connection, through the proxy (not SQLite).
    strategy: SqlStrategy,
    measured: Pool,
    /// Direct access for set-up, not measured.
    direct: Pool,
    proxy: Option<Proxy>,
    server: Server,
    table: String,
    _dir: Option<TempDir>,
}

/// One measured operation's counts.
struct Counted {
    wire: Option<usize>,
    server: ServerCount,
    /// What sqlx logged: one statement per request.
    statements: Vec<String>,
}

impl Setup {
    async fn new(dialect: Dialect) -> Self {
        let table = format!("lease_rt_{}", suffix());
        let (mut proxy, mut dir) = (None, None);
        let (measured, direct, server) = match dialect {
            Dialect::Postgres => {
                let cluster = Cluster::start_with(&["log_statement=all", "log_line_prefix=pid%p:"]);
                let through =
                    proxy.insert(Proxy::start(([127, 0, 0, 1], cluster.port).into()).await);
                let options: sqlx::postgres::PgConnectOptions = cluster.url().parse().unwrap();
                let direct = one_connection().connect_with(options.clone()).await;
                let measured = one_connection().connect_with(options.port(through.addr.port()));
                let measured = Pool::Pg(measured.await.unwrap());
                let pid = measured.scalar("SELECT pg_backend_pid()::bigint").await;
                let server = Server::Postgres { cluster, pid };
                (measured, Pool::Pg(direct.unwrap()), server)
            }
            Dialect::MySql => {
                let through = proxy.insert(Proxy::start(server_addr(&mysql_url())).await);
                let options: sqlx::mysql::MySqlConnectOptions = mysql_url().parse().unwrap();
                let measured = one_connection().connect_with(options.port(through.addr.port()));
                let measured = Pool::My(measured.await.unwrap());
                (measured, Pool::mysql(2).await, Server::MariaDb)
            }
            _ => {
                let path = dir.insert(TempDir::new()).path.join("leases.db");
                let measured = one_connection().connect_with(lease_sql::sqlite_options(&path));
                let measured = Pool::Lite(measured.await.unwrap());
                (measured, Pool::sqlite(&path, 1).await, Server::Sqlite)
            }
        };
        let strategy = measured.strategy(&table);
        assert_eq!(strategy.migrate().await.unwrap(), 512);
        Self {
            strategy,
            measured,
            direct,
            proxy,
            server,
            table,
            _dir: dir,
        }
    }

    /// Runs `op` on the measured connection and counts what it sent.
    async fn count<T>(&self, op: impl AsyncFnOnce(&SqlStrategy) -> T) -> (T, Counted) {
        let server_before = match (&self.server, &self.measured) {
            (Server::MariaDb, Pool::My(pool)) => Some(mariadb_status(pool).await),
            _ => None,
        };
        let logged_before = match &self.server {
            Server::Postgres { cluster, pid } => pg_logged(cluster, *pid).len(),
            _ => 0,
        };
        // SQLite's worker thread logs a statement when it has finished with it, which may be
        // just after the caller has its rows: let it settle on both sides of the operation.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let wire_before = self.proxy.as_ref().map(Proxy::flights);
        let statements_before = logged_statements();
        let value = op(&self.strategy).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let statements = STATEMENTS.lock().unwrap()[statements_before..].to_vec();
        let wire = self
            .proxy
            .as_ref()
            .map(|p| p.flights() - wire_before.unwrap());
        let server = match (&self.server, &self.measured) {
            (Server::Postgres { cluster, pid }, _) => {
                // The log is written as the server executes; give it the same settling time.
                let logged = pg_logged(cluster, *pid);
                ServerCount {
                    statements: Some(i64::try_from(logged.len() - logged_before).unwrap()),
                    detail: String::new(),
                }
            }
            (Server::MariaDb, Pool::My(pool)) => {
                let after = mariadb_status(pool).await;
                let before = server_before.unwrap();
                // The SHOW that read these counters is one question itself.
                let delta = |i: usize, name: &str| {
                    after[i]
                        - before[i]
                        - i64::from(name == "Questions" || name == "Com_show_status")
                };
                // Questions, then the counters that moved.
                let moved: Vec<String> = MARIADB_COUNTERS
                    .iter()
                    .enumerate()
                    .skip(1)
                    .map(|(i, &name)| (name, delta(i, name)))
                    .filter(|(_, d)| *d != 0)
                    .map(|(name, d)| format!("{name} {d}"))
                    .collect();
                ServerCount {
                    statements: Some(delta(0, MARIADB_COUNTERS[0])),
                    detail: moved.join(", "),
                }
            }
            _ => ServerCount::default(),
        };
        (
            value,
            Counted {
                wire,
                server,
                statements,
            },
        )
    }

    async fn set_floors(&self, floor: u64) {
        self.direct
            .exec(&format!("UPDATE {} SET floor_ms = {floor}", self.table))
            .await;
    }
}

/// The operations, each run twice: the second run is measured.
async fn measure(dialect: Dialect) -> Vec<(&'static str, Counted)> {
    let setup = Setup::new(dialect).await;
    let optimistic = setup
        .strategy
        .clone()
        .with_acquisition(Acquisition::Optimistic { candidates: 8 });
    let mut rows = Vec::new();
    for pass in 0..2 {
        let mut measured: Vec<(&'static str, Counted)> = Vec::new();
        let (grant, c) = setup.count(async |s| s.acquire(acquiring()).await).await;
        let lease: SqlLease = grant.unwrap().lease;
        measured.push(("acquire, `SkipLocked`", c));
        let (r, c) = setup
            .count(async |s| s.renew(&lease, Renew::new(HOUR, now_ms() + HOUR_MS)).await)
            .await;
        r.unwrap();
        measured.push(("renew", c));
        let (r, c) = setup
            .count(async |s| s.release(&lease, releasing()).await)
            .await;
        r.unwrap();
        measured.push(("release", c));

        // Every free ID's floor ahead of the acquirer's clock.
        setup.set_floors(now_ms() + 10 * HOUR_MS).await;
        let (grant, c) = setup.count(async |s| s.acquire(acquiring()).await).await;
        let lease = grant.unwrap().lease;
        measured.push(("acquire, `SkipLocked`, every floor ahead", c));
        setup.strategy.release(&lease, releasing()).await.unwrap();
        setup.set_floors(0).await;

        let (grant, c) = setup
            .count(async |_| optimistic.acquire(acquiring()).await)
            .await;
        let lease = grant.unwrap().lease;
        if dialect != Dialect::Sqlite {
            measured.push(("acquire, `Optimistic`, first candidate won", c));
        }
        setup.strategy.release(&lease, releasing()).await.unwrap();
        if pass == 1 {
            rows = measured;
        }
    }
    setup.measured.close().await;
    setup.direct.close().await;
    if dialect == Dialect::MySql {
        common::drop_table(dialect, &setup.table);
    }
    rows
}

/// Requests per operation, as the crate docs state them (prepared statements cached, no ping).
fn expected(dialect: Dialect, operation: &str) -> usize {
    match (dialect, operation) {
        (Dialect::MySql, "acquire, `SkipLocked`, every floor ahead") => 3,
        (Dialect::MySql, "acquire, `SkipLocked`") => 2,
        (_, "acquire, `Optimistic`, first candidate won") => 2,
        _ => 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_per_operation() {
    logged_statements();
    let mut table = String::from(
        "| dialect | operation | requests (sqlx log) | round trips on the wire (incl. pings) | statements on the server |\n|---|---|---|---|---|\n",
    );
    let mut wrong = Vec::new();
    for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
        for (operation, counted) in measure(dialect).await {
            let requests = expected(dialect, operation);
            let sqlx = counted.statements.len();
            if sqlx != requests {
                wrong.push(format!(
                    "{dialect} {operation}: {sqlx} requests, not {requests}: {:?}",
                    counted.statements
                ));
            }
            // The wire adds two pings each time the connection is taken from the pool: before
            // it is handed out (`test_before_acquire`) and when it is given back (always, in
            // the background). Each request takes it, except in the MySQL claims, which hold
            // it for their whole transaction.
            if let Some(wire) = counted.wire {
                let checkouts = match (dialect, operation) {
                    (Dialect::MySql, op) if op.starts_with("acquire") => 1,
                    _ => requests,
                };
                let pings = 2 * checkouts;
                if wire != requests + pings {
                    wrong.push(format!(
                        "{dialect} {operation}: {wire} round trips, not {requests} + {pings} pings"
                    ));
                }
            }
            // PostgreSQL logs one statement per request.
            if dialect == Dialect::Postgres
                && counted.server.statements != Some(i64::try_from(requests).unwrap())
            {
                wrong.push(format!(
                    "{dialect} {operation}: {:?} statements logged, not {requests}",
                    counted.server.statements
                ));
            }
            let server = match counted.server.statements {
                Some(n) if counted.server.detail.is_empty() => n.to_string(),
                Some(n) => format!("{n} ({})", counted.server.detail),
                None => "-".to_owned(),
            };
            let wire = counted.wire.map_or("-".to_owned(), |w| w.to_string());
            let _ = writeln!(
                table,
                "| {dialect} | {operation} | {sqlx} | {wire} | {server} |"
            );
        }
    }
    println!("{table}");
    assert!(wrong.is_empty(), "{wrong:#?}");
}
