//! A lease manager refuses, before any lease, a configuration the Redis options cannot serve.

use crate::common;

use std::time::Duration;

use lease_core::ErrorKind;
use lease_manager::{LeaseConfig, LeaseManager, StartError};
use lease_redis::RedisStrategy;

#[tokio::test]
async fn a_max_lease_below_the_minimum_ttl_fails_start_before_any_grant() {
    let server = common::valkey();
    drop(common::raw(&server).await);
    let key = common::Key::new(&server);
    let options = common::options(&key).with_max_lease_duration(Duration::from_secs(10));
    let strategy = RedisStrategy::connect(&server.url, options).await.unwrap();
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
    let mut connection = common::raw(&server).await;
    let fields: Vec<String> = lease_redis::redis::cmd("HKEYS")
        .arg(&key.name)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(fields.is_empty(), "nothing was claimed: {fields:?}");
}
