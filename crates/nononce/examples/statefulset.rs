//! The machine ID from a StatefulSet pod name.
//!
//! `POD_NAME=nonce-worker-3 cargo run -p nononce --example statefulset --features statefulset`

use nononce::prelude::*;
use nononce::statefulset::StatefulSetStrategy;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // In Kubernetes, POD_NAME comes from the Downward API (metadata.name).
    let strategy = StatefulSetStrategy::from_env("POD_NAME")?;
    let nonces = Nononce::builder(strategy)
        .with_factory("ids", FactoryOptions::new())
        .start()
        .await?;
    let ids = nonces.factory("ids").expect("configured");
    println!("machine id {:?}", nonces.machine_id());
    for _ in 0..3 {
        println!("{}", ids.sortable64()?);
    }
    nonces.shutdown().await;
    Ok(())
}
