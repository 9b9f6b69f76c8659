//! Machine-ID leases on Valkey 9 / Redis 8.
//!
//! `cargo xtask with-services cargo run -p nononce --example redis --features redis`

use std::time::Duration;

use nononce::prelude::*;
use nononce::redis::{AmnesiaGuard, RedisOptions, RedisStrategy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("NONONCE_TEST_REDIS8_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6391".into());
    let options = RedisOptions::new()
        .with_max_lease_duration(Duration::from_secs(120))
        // The demo server was just started and keeps nothing on disk. In production leave the
        // guard on: after a restart it holds acquisitions off for `max_lease_duration`, so no
        // node is handed an ID a running node still holds.
        .with_amnesia_guard(AmnesiaGuard::Off);
    let strategy = RedisStrategy::connect(&url, options).await?;
    let nonces = Nononce::builder(strategy)
        .with_factory(
            "ids",
            FactoryOptions::new().with_base_key(vec![9u8; 32].into()),
        )
        .with_lease_duration(Duration::from_secs(120))
        .with_renew_interval(Duration::from_secs(30))
        .start()
        .await?;
    let ids = nonces.factory("ids").expect("configured");
    println!("machine id {:?}", nonces.machine_id());
    println!("{} {}", ids.counter64()?, ids.encrypted128(Base::Counter)?);
    nonces.shutdown().await;
    Ok(())
}
