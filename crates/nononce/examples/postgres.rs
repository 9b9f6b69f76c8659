//! Machine-ID leases on PostgreSQL.
//!
//! `cargo xtask with-services cargo run -p nononce --example postgres --features postgres`

use nononce::prelude::*;
use nononce::sql::SqlStrategy;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("NONONCE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    // A table of this example's own, so it never touches a real lease table.
    let strategy = SqlStrategy::connect_lazy(&url)?.with_table("nononce_example_leases")?;
    strategy.migrate().await?; // idempotent: creates the table and its 512 rows once
    let nonces = Nononce::builder(strategy)
        .with_factory(
            "ids",
            FactoryOptions::new().with_base_key(vec![3u8; 32].into()),
        )
        .start()
        .await?;
    let ids = nonces.factory("ids").expect("configured");
    println!("machine id {:?}", nonces.machine_id());
    println!(
        "{} {} {}",
        ids.counter64()?,
        ids.sortable96()?,
        ids.encrypted128(Base::Counter)?
    );
    nonces.shutdown().await; // disable, then release (the id stays blocked for the guard)
    Ok(())
}
