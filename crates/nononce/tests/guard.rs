//! The facade's conflict guard: two nodes with one StatefulSet ordinal, the later one stops.
//! The strategy comes from the dev-dependency, so the test needs the `guard` feature alone.
#![cfg(feature = "guard")]

use std::time::Duration;

use lease_static::statefulset::StatefulSetStrategy;
use nononce::guard::GuardConfig;
use nononce::nonce::Error as NonceError;
use nononce::prelude::*;

/// Set in the child process that runs the second node: the first node's guard address.
const SEED_VAR: &str = "NONONCE_TEST_GUARD_SEED";
const TEST_NAME: &str = "guard::the_later_of_two_nodes_sharing_an_ordinal_stops";

fn pod(name: &str) -> StatefulSetStrategy {
    StatefulSetStrategy::from_value("POD_NAME", name, 0).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_later_of_two_nodes_sharing_an_ordinal_stops() {
    if let Ok(seed) = std::env::var(SEED_VAR) {
        return later_node(seed.parse().unwrap()).await;
    }
    let loopback = "127.0.0.1:0".parse().unwrap();
    let first = Nononce::builder(pod("worker-7"))
        .with_factory("ids", FactoryOptions::new())
        .with_conflict_guard(GuardConfig::new(loopback))
        .start()
        .await
        .unwrap();
    let seed = first.conflict_guard().unwrap().local_addr();

    // In this process a second node on the ordinal is refused before it generates anything.
    let refused = Nononce::builder(pod("worker-7"))
        .with_factory("ids", FactoryOptions::new())
        .start()
        .await
        .err()
        .expect("a second node on one ordinal started in the same process");
    let message = nononce::lease::error_chain(&refused);
    assert!(
        message.contains("machine ID 7") && message.contains("this process"),
        "{message}"
    );

    // Started later, in a process of its own, with the same ordinal: a force-deleted pod's
    // replacement running beside it. The guard must stop it.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let child = tokio::task::spawn_blocking(move || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads", "1"])
            .env(SEED_VAR, seed.to_string())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        child.status.success(),
        "the later node: {}",
        String::from_utf8_lossy(&child.stderr)
    );
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(stdout.contains("1 passed"), "the later node ran: {stdout}");
    let a = first.factory("ids").unwrap().clone();
    assert!(a.counter64().is_ok(), "the earlier node keeps its id");
    first.shutdown().await;
}

/// The later node, in the child process: it must stop generating once the guards meet.
async fn later_node(seed: std::net::SocketAddr) {
    let loopback = "127.0.0.1:0".parse().unwrap();
    let second = Nononce::builder(pod("worker-7"))
        .with_factory("ids", FactoryOptions::new())
        .with_conflict_guard(GuardConfig::new(loopback).with_seeds([seed]))
        .start()
        .await
        .unwrap();
    let b = second.factory("ids").unwrap().clone();
    let mut stopped = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if b.counter64() == Err(NonceError::Disabled) {
            stopped = true;
            break;
        }
    }
    assert!(stopped, "the later node stopped generating");
    assert_eq!(second.machine_id(), None);
    second.shutdown().await;
}
