//! The machine ID from this host's place in a node list shared by every node.
//!
//! `NODES=$(hostname)=0,other-host=1 cargo run -p nononce --example hosts --features hosts`

use nononce::hosts::HostListStrategy;
use nononce::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let list = std::env::var("NODES")
        .map_err(|_| "set NODES to a comma-separated node list that includes this host")?;
    let nodes: Vec<&str> = list.split(',').map(str::trim).collect();
    let strategy = HostListStrategy::new(&nodes)?;
    let nonces = Nononce::builder(strategy)
        .with_factory("ids", FactoryOptions::new())
        .start()
        .await?;
    let ids = nonces.factory("ids").expect("configured");
    println!(
        "machine id {:?}: {}",
        nonces.machine_id(),
        ids.counter128()?
    );
    nonces.shutdown().await;
    Ok(())
}
