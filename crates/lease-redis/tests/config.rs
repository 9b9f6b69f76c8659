//! A lease manager refuses, before any lease, a configuration the Redis options cannot serve.

use crate::common;

use std::time::Duration;

use lease_core::ErrorKind;
use lease_manager::{LeaseConfig, LeaseManager, StartError};

#[tokio::test]
async fn a_max_lease_below_the_minimum_ttl_fails_start_before_any_grant() {
    let server = common::valkey();
    let key = common::Key::new(&server);
    let options = common::options(&key).with_max_lease_duration(Duration::from_secs(10));
    let strategy = common::connect(&server, options).await;
    // The default minimum TTL is 30 s: every 10 s grant would be refused.
    let error = LeaseManager::builder(strategy)
        .with_config(LeaseConfig::default())
        .start()
        .await
        .err()
        .expect("start must fail");
    let StartError::Strategy(failure) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(failure.kind, ErrorKind::Misconfigured);
    assert!(failure.reason.contains("max_lease_duration"), "{failure}");
    assert!(failure.reason.contains("min_ttl"), "{failure}");
    let fields = common::hkeys(&mut common::raw(&server).await, &key).await;
    assert!(fields.is_empty(), "nothing was claimed: {fields:?}");
}
