//! The facade's conflict guard: two nodes with one StatefulSet ordinal, the later one stops.
//! The strategy comes from the dev-dependency, so the test needs the `guard` feature alone.
#![cfg(feature = "guard")]

use std::time::Duration;

use lease_static::statefulset::StatefulSetStrategy;
use nononce::guard::GuardConfig;
use nononce::nonce::Error as NonceError;
use nononce::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_later_of_two_nodes_sharing_an_ordinal_stops() {
    let pod = |n: &str| StatefulSetStrategy::from_value("POD_NAME", n, 0).unwrap();
    let loopback = "127.0.0.1:0".parse().unwrap();
    let first = Nononce::builder(pod("worker-7"))
        .with_factory("ids", FactoryOptions::new())
        .with_conflict_guard(GuardConfig::new(loopback))
        .start()
        .await
        .unwrap();
    let seed = first.conflict_guard().unwrap().local_addr();
    // Started later (and a later start instant), with the same ordinal: a force-deleted pod's
    // replacement running beside it.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = Nononce::builder(pod("worker-7"))
        .with_factory("ids", FactoryOptions::new())
        .with_conflict_guard(GuardConfig::new(loopback).with_seeds([seed]))
        .start()
        .await
        .unwrap();
    let (a, b) = (
        first.factory("ids").unwrap().clone(),
        second.factory("ids").unwrap().clone(),
    );
    let mut stopped = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if b.counter64() == Err(NonceError::Disabled) {
            stopped = true;
            break;
        }
    }
    assert!(stopped, "the later node stopped generating");
    assert!(a.counter64().is_ok(), "the earlier node keeps its id");
    assert_eq!(second.machine_id(), None);
    second.shutdown().await;
    first.shutdown().await;
}
