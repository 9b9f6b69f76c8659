//! A herd: 512 nodes acquiring at once all end up with distinct IDs, each with its floor.
//! Prints the time until all held one.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Prefix, options, raw};
use lease_core::{Acquire, ErrorKind, LeaseError, Strategy};
use lease_etcd::EtcdStrategy;
use lease_etcd::etcd_client::GetOptions;

const FLOOR_MS: u64 = 1_893_456_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herd_of_512_gets_distinct_ids_and_floors() {
    let prefix = Prefix::new();
    let mut c = raw().await;
    // One strategy (and client) per node, all made and connected before the clock starts.
    let mut nodes = Vec::new();
    for _ in 0..512 {
        let node =
            EtcdStrategy::new(options(&prefix).with_request_timeout(Duration::from_secs(10)))
                .unwrap();
        node.free_count().await.unwrap();
        nodes.push(node);
    }
    common::initialize(&nodes[0]).await;
    let conflicts = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = nodes
        .into_iter()
        .map(|node| {
            let conflicts = Arc::clone(&conflicts);
            tokio::spawn(async move {
                loop {
                    let ttl = Duration::from_secs(60);
                    match node
                        .acquire(Acquire::new(ttl, FLOOR_MS, FLOOR_MS + 1))
                        .await
                    {
                        Ok(grant) => return grant.machine_id.get(),
                        // Lost three races in a row: try again, as the lease manager would.
                        Err(e) if e.kind() == ErrorKind::Conflict => {
                            conflicts.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("unexpected acquire error: {e}"),
                    }
                }
            })
        })
        .collect();
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..512).collect::<Vec<u16>>(),
        "duplicate or missing ids"
    );
    let keys = c
        .get(prefix.name.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let floors: Vec<_> = keys
        .kvs()
        .iter()
        .filter(|kv| kv.key_str().unwrap().contains("/floor/"))
        .collect();
    // Every ID got its floor, and only the winners wrote one.
    assert_eq!(floors.len(), 512);
    assert!(
        floors
            .iter()
            .all(|kv| kv.value_str().unwrap() == format!("{:020}", FLOOR_MS + 1))
    );
    println!(
        "herd on etcd: 512 acquirers, all distinct in {} ms, {} conflict answers (each = 3 lost claims)",
        elapsed.as_millis(),
        conflicts.load(Ordering::Relaxed),
    );
}
