//! A herd: 512 nodes acquiring at once all end up with distinct IDs, each with its floor.
//! Prints the figures.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Key, options, raw, servers};
use lease_core::{Acquire, ErrorKind, LeaseError, Strategy};
use lease_redis::RedisStrategy;

const FLOOR_MS: u64 = 1_893_456_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herd_of_512_gets_distinct_ids_and_floors() {
    for server in servers() {
        drop(raw(&server).await);
        let key = Key::new(&server);
        // One strategy (and connection) per node, all made before the clock starts: `connect`
        // connects lazily, so each node reads the (still empty) hash once first.
        let mut nodes = Vec::new();
        for _ in 0..512 {
            let node = RedisStrategy::connect(&server.url, options(&key))
                .await
                .unwrap();
            assert!(node.holders().await.unwrap().is_empty());
            nodes.push(node);
        }
        let conflicts = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = nodes
            .into_iter()
            .map(|node| {
                let conflicts = Arc::clone(&conflicts);
                tokio::spawn(async move {
                    loop {
                        let ttl = Duration::from_secs(60);
                        let request = Acquire::new(ttl, FLOOR_MS, FLOOR_MS + 1);
                        match node.acquire(request).await {
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
            "{}: duplicate or missing ids",
            server.name
        );
        // Every ID got its floor, and only the winners wrote one.
        let mut c = raw(&server).await;
        let floors: Vec<(String, String)> = lease_redis::redis::cmd("HGETALL")
            .arg(&key.name)
            .query_async(&mut c)
            .await
            .unwrap();
        let floors: Vec<_> = floors
            .into_iter()
            .filter(|(field, _)| field.starts_with("floor."))
            .collect();
        assert_eq!(floors.len(), 512, "{}", server.name);
        assert!(floors.iter().all(|(_, v)| *v == (FLOOR_MS + 1).to_string()));
        println!(
            "herd on {}: 512 acquirers, all distinct in {} ms, {} conflict answers (each = {} lost claims)",
            server.name,
            elapsed.as_millis(),
            conflicts.load(Ordering::Relaxed),
            3
        );
    }
}
