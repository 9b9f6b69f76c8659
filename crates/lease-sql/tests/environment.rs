//! The strategy in less friendly surroundings: non-UTC session time zones, a database user
//! without privileges, and several OS processes sharing one SQLite file.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{
    HOUR, Pool, TempDir, TestTable, acquiring, mysql_url, next_id, pg_url, renewing, suffix,
};
use lease_core::error_chain;
use lease_core::{ErrorKind, LeaseError, Strategy};
use lease_sql::{Dialect, SqlLeaseError, SqlStrategy};

per_dialect!(;
    servers: expiry_is_utc_whatever_the_session_time_zone,
    read_only_user_is_told_to_get_grants,
);

/// A pool whose sessions run in a time zone `hours` east of UTC.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn zoned(dialect: Dialect, hours: i32) -> Pool {
    let pool = match dialect {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => {
            // POSIX zone names count the other way round.
            Pool::postgres_in_zone(2, format!("<X>{}", -hours)).await
        }
        #[cfg(feature = "mysql")]
        Dialect::MySql => {
            let zone = format!("{hours:+03}:00");
            Pool::mysql_with(2, move |o| o.timezone(Some(zone))).await
        }
        other => unreachable!("{other} sessions have no time zone"),
    };
    // The session really is in that zone.
    let offset = match dialect {
        Dialect::Postgres => "SELECT EXTRACT(TIMEZONE FROM now())::bigint",
        _ => "SELECT CAST(TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW()) AS SIGNED)",
    };
    assert_eq!(pool.scalar(offset).await, i64::from(hours) * 3600);
    pool
}

/// Leases written by a session at UTC+13 are read correctly by a session at UTC-11 and by a UTC
/// session, and expire after their TTL on the database's UTC clock, not 24 hours off.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn expiry_is_utc_whatever_the_session_time_zone(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let east = zoned(dialect, 13).await;
    let west = zoned(dialect, -11).await;
    let a = east.strategy(&t.name);
    let b = west.strategy(&t.name);

    let grant = a.acquire(acquiring(Duration::from_secs(2))).await.unwrap();
    assert_eq!(grant.machine_id.get(), 0);
    for reader in [&t.pool, &east, &west] {
        let remaining = reader.row(&t.name, 0).await.2;
        assert!(
            (1_000_000..=2_001_000).contains(&remaining),
            "expires in about 2 s whoever reads it: {remaining} µs"
        );
    }
    // The western session sees the lease as held.
    assert_eq!(next_id(&b).await, 1);
    // A renewal under the western zone keeps the expiry in UTC too.
    let renewed = b
        .renew(&grant.lease, renewing(Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(renewed.lease, grant.lease);
    let remaining = t.pool.row(&t.name, 0).await.2;
    assert!((1_000_000..=2_001_000).contains(&remaining), "{remaining}");
    // And it expires on time: the western session takes it over once the 2 s are up.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let taken = b.acquire(acquiring(HOUR)).await.unwrap();
    assert_eq!(taken.machine_id.get(), 0);
    let e = a.renew(&grant.lease, renewing(HOUR)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost);
    // The stored value is UTC (the column has no zone): compared with a UTC session's clock.
    let minutes = t.pool.row(&t.name, 0).await.2 / 60_000_000;
    assert!(
        (59..=60).contains(&minutes),
        "written at UTC-11, off by {minutes} min"
    );
}

/// A user who may read but not update the table gets a clear, non-retryable error.
async fn read_only_user_is_told_to_get_grants(dialect: Dialect) {
    let t = TestTable::new(dialect).await;
    let user = format!("lease_ro_{}", suffix());
    let (setup, teardown, url): (Vec<String>, Vec<String>, String) = match dialect {
        Dialect::Postgres => (
            vec![
                format!("CREATE ROLE {user} LOGIN"),
                format!("GRANT SELECT ON {} TO {user}", t.name),
            ],
            vec![
                format!("REVOKE ALL ON {} FROM {user}", t.name),
                format!("DROP ROLE {user}"),
            ],
            pg_url().replacen("postgres@", &format!("{user}@"), 1),
        ),
        _ => (
            vec![
                format!("CREATE USER '{user}'@'%'"),
                format!("CREATE USER '{user}'@'localhost'"),
                format!("GRANT SELECT ON {} TO '{user}'@'%'", t.name),
                format!("GRANT SELECT ON {} TO '{user}'@'localhost'", t.name),
            ],
            vec![
                format!("DROP USER '{user}'@'%'"),
                format!("DROP USER '{user}'@'localhost'"),
            ],
            mysql_url().replacen("root@", &format!("{user}@"), 1),
        ),
    };
    for sql in &setup {
        t.pool.exec(sql).await;
    }
    let s = SqlStrategy::connect_lazy(&url)
        .unwrap()
        .with_table(&t.name)
        .unwrap();
    let acquired = s.acquire(acquiring(HOUR)).await;
    let migrated = s.migrate().await;
    let free = s.free_count().await;
    for sql in &teardown {
        t.pool.exec(sql).await;
    }
    let e = acquired.unwrap_err();
    assert!(matches!(e, SqlLeaseError::PermissionDenied { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Misconfigured);
    assert!(e.to_string().contains("grant"), "{e}");
    let e = migrated.unwrap_err();
    assert!(matches!(e, SqlLeaseError::PermissionDenied { .. }), "{e:?}");
    assert_eq!(free.unwrap(), 512, "reading is allowed");
}

const CHILD_DB: &str = "LEASE_SQL_TEST_CHILD_DB";
const PROCESSES: usize = 4;
const PER_PROCESS: usize = 48;

/// Several OS processes (this test binary, re-run as children) lease IDs from one SQLite file at
/// the same time: every ID is handed out once, and the parent sees them all as held.
#[cfg(feature = "sqlite")]
#[test]
fn processes_share_one_sqlite_file() {
    if let Ok(path) = std::env::var(CHILD_DB) {
        return child(&path);
    }
    let dir = TempDir::new();
    let path = dir.path.join("leases.db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let parent = rt.block_on(async {
        let s = Pool::sqlite(&path, 2).await.strategy("no_noncense_leases");
        assert_eq!(s.migrate().await.unwrap(), 512);
        s
    });
    // This test as libtest names it: its module path without the crate's name.
    let name = concat!(module_path!(), "::processes_share_one_sqlite_file");
    let name = name.split_once("::").map_or(name, |(_, test)| test);
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--nocapture", "--test-threads=1"])
                .env(CHILD_DB, &path)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ids = BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("leased ids: ").map(|(_, ids)| ids))
            .unwrap_or_else(|| panic!("no ids from child: {stdout}"));
        for id in line.split(',') {
            let id: u16 = id.parse().unwrap();
            assert!(ids.insert(id), "id {id} leased by two processes");
        }
    }
    assert_eq!(ids.len(), PROCESSES * PER_PROCESS);
    rt.block_on(async {
        assert_eq!(
            parent.free_count().await.unwrap(),
            u64::try_from(512 - PROCESSES * PER_PROCESS).unwrap()
        );
        let mine = parent.acquire(acquiring(HOUR)).await.unwrap();
        assert!(!ids.contains(&mine.machine_id.get()));
    });
}

/// One child process: lease `PER_PROCESS` IDs concurrently over its own pool, renew them, print them.
#[cfg(feature = "sqlite")]
fn child(path: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let pool = Pool::sqlite(std::path::Path::new(path), 4).await;
        // WAL is on for the file, as the options promise.
        let wal = "SELECT COUNT(*) FROM pragma_journal_mode WHERE journal_mode = 'wal'";
        assert_eq!(pool.scalar(wal).await, 1);
        let s = pool.strategy("no_noncense_leases");
        let tasks: Vec<_> = (0..PER_PROCESS)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move {
                    let grant = s.acquire(acquiring(HOUR)).await.unwrap();
                    s.renew(&grant.lease, renewing(HOUR)).await.unwrap();
                    grant.machine_id.get()
                })
            })
            .collect();
        let mut ids = Vec::new();
        for task in tasks {
            ids.push(task.await.unwrap().to_string());
        }
        println!("leased ids: {}", ids.join(","));
    });
}

/// A pool that cannot open a connection reports sqlx's `PoolTimedOut`, which has no cause; the
/// strategy finds the cause with one direct connection and says it.
#[cfg(any(feature = "postgres", feature = "mysql"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_says_why() {
    let mut cases: Vec<(String, ErrorKind, &str)> = Vec::new();
    #[cfg(feature = "postgres")]
    cases.push((
        "postgres://postgres@127.0.0.1:1/test".into(),
        ErrorKind::Retry,
        "refused",
    ));
    #[cfg(feature = "mysql")]
    {
        cases.push((
            "mysql://root@127.0.0.1:1/test?ssl-mode=DISABLED".into(),
            ErrorKind::Retry,
            "refused",
        ));
        // A live server that refuses the credentials.
        let wrong = mysql_url().replacen("root@", "root:not-the-password@", 1);
        assert_ne!(wrong, mysql_url(), "the test url names user root");
        cases.push((wrong, ErrorKind::Misconfigured, "Access denied"));
    }
    for (url, kind, cause) in cases {
        let strategy = SqlStrategy::connect_lazy(&url).unwrap();
        let error = strategy.migrate().await.unwrap_err();
        let chain = error_chain(&error);
        assert!(!chain.contains("pool timed out"), "{url}: {chain}");
        assert!(chain.contains(cause), "{url}: {chain}");
        assert_eq!(error.kind(), kind, "{url}: {chain}");
        // Reads say the same.
        let error = strategy.holders().await.unwrap_err();
        assert!(error_chain(&error).contains(cause), "{url}: {error}");
    }
}
