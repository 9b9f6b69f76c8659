//! A herd: 512 nodes acquiring at once all end up with distinct IDs. Prints the figures.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Key, options, raw, servers};
use lease_core::{ErrorKind, LeaseError, Strategy};
use lease_redis::RedisStrategy;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herd_of_512_gets_distinct_ids() {
    for server in servers() {
        drop(raw(&server).await);
        let key = Key::new(&server);
        // One strategy (and connection) per node, all made before the clock starts.
        let mut nodes = Vec::new();
        for _ in 0..512 {
            nodes.push(
                RedisStrategy::connect(&server.url, options(&key))
                    .await
                    .unwrap(),
            );
        }
        let conflicts = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = nodes
            .into_iter()
            .map(|node| {
                let conflicts = Arc::clone(&conflicts);
                tokio::spawn(async move {
                    loop {
                        match node.acquire(Duration::from_secs(60)).await {
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
        println!(
            "herd on {}: 512 acquirers, all distinct in {} ms, {} conflict answers (each = {} lost claims)",
            server.name,
            elapsed.as_millis(),
            conflicts.load(Ordering::Relaxed),
            3
        );
        assert!(elapsed < Duration::from_secs(30), "herd took {elapsed:?}");
    }
}
