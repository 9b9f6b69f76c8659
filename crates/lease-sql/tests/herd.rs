//! Herd safety: 512 nodes starting at once against one table all end up with distinct IDs.
//! Each claims as the lease manager does: with its clock and the floor of the lease (the floor
//! preference and the amnesia guard in the claim).
//!
//! Prints the time until all 512 held a lease and how many attempts lost a race (`conflict`);
//! for figures without other tests competing for the CPU run
//! `cargo xtask with-services cargo test -p lease-sql --all-features --test integration herd:: -- --nocapture --test-threads=1`.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(feature = "sqlite")]
use common::TempDir;
use common::{Pool, TestTable, now_ms};
use lease_core::{Acquire, ErrorKind, LeaseError, Strategy};
use lease_sql::{Acquisition, Dialect};

const NODES: usize = 512;
const POOLS: usize = 8;
const CONNECTIONS: u32 = 6;
const HOUR: Duration = Duration::from_secs(3600);
const HOUR_MS: u64 = 3_600_000;

/// Opens every connection of `pool` before the clock starts.
async fn warm(pool: &Pool) {
    let mut held = Vec::new();
    for _ in 0..CONNECTIONS {
        match pool {
            #[cfg(feature = "postgres")]
            Pool::Pg(p) => held.push(Box::new(p.acquire().await.unwrap()) as Box<dyn Send>),
            #[cfg(feature = "mysql")]
            Pool::My(p) => held.push(Box::new(p.acquire().await.unwrap()) as Box<dyn Send>),
            #[cfg(feature = "sqlite")]
            Pool::Lite(p) => held.push(Box::new(p.acquire().await.unwrap()) as Box<dyn Send>),
        }
    }
}

async fn herd(dialect: Dialect, acquisition: Acquisition, label: &str) {
    let table = TestTable::new(dialect).await;
    let mut pools = Vec::new();
    for _ in 0..POOLS {
        let pool = match dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => Pool::postgres(CONNECTIONS).await,
            #[cfg(feature = "mysql")]
            Dialect::MySql => Pool::mysql(CONNECTIONS).await,
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => {
                let dir = table
                    .dir
                    .as_ref()
                    .map(|d: &TempDir| d.path.join("leases.db"));
                Pool::sqlite(&dir.unwrap(), CONNECTIONS).await
            }
            other => panic!("lease-sql is built without the {other} feature"),
        };
        warm(&pool).await;
        pools.push(pool);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(NODES + 1));
    let nodes: Vec<_> = (0..NODES)
        .map(|i| {
            let strategy = pools[i % POOLS]
                .strategy(&table.name)
                .with_acquisition(acquisition);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                let (mut conflicts, mut others) = (0u32, 0u32);
                loop {
                    // As the lease manager asks: with its clock and the floor of the lease.
                    let now = now_ms();
                    match strategy
                        .acquire(Acquire::new(HOUR, now, now + HOUR_MS))
                        .await
                    {
                        Ok(grant) => return (grant.machine_id.get(), conflicts, others),
                        Err(e) if e.kind() == ErrorKind::Conflict => conflicts += 1,
                        Err(e) => {
                            assert!(e.kind().is_retryable(), "{e:?}");
                            others += 1;
                        }
                    }
                    assert!(conflicts + others < 1000, "node never got an id");
                    let mut jitter = [0u8; 1];
                    getrandom::fill(&mut jitter).unwrap();
                    tokio::time::sleep(Duration::from_micros(u64::from(jitter[0]) * 20)).await;
                }
            })
        })
        .collect();
    barrier.wait().await;
    let start = Instant::now();
    let mut ids = BTreeSet::new();
    let (mut conflicts, mut others) = (0, 0);
    for node in nodes {
        let (id, c, o) = node.await.unwrap();
        assert!(ids.insert(id), "machine id {id} handed out twice");
        conflicts += c;
        others += o;
    }
    let elapsed = start.elapsed();
    assert_eq!(ids.len(), NODES);
    assert_eq!(table.strategy().free_count().await.unwrap(), 0);
    for pool in &pools {
        pool.close().await;
    }
    println!(
        "herd {label}: {NODES} acquirers on {POOLS} pools x {CONNECTIONS} connections: all distinct, \
         all held after {} ms, {conflicts} conflicts, {others} other retries",
        elapsed.as_millis()
    );
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
const OPTIMISTIC: Acquisition = Acquisition::Optimistic { candidates: 8 };

// One test per server, modes one after the other, so a server never sees two herds at once.

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    herd(
        Dialect::Postgres,
        Acquisition::SkipLocked,
        "postgres skip-locked",
    )
    .await;
    herd(Dialect::Postgres, OPTIMISTIC, "postgres optimistic(8)").await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb() {
    herd(
        Dialect::MySql,
        Acquisition::SkipLocked,
        "mariadb skip-locked",
    )
    .await;
    herd(Dialect::MySql, OPTIMISTIC, "mariadb optimistic(8)").await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_one_file() {
    herd(
        Dialect::Sqlite,
        Acquisition::SkipLocked,
        "sqlite (wal, one file)",
    )
    .await;
}
