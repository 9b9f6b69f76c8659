//! Machine-ID leases on SQL: a SQLite file (processes of one host) by default, or the
//! PostgreSQL or MySQL / MariaDB database whose URL is the first argument.
//!
//! `cargo run -p nononce --example sql --features sqlite`, or with a server's feature and URL:
//! `cargo run -p nononce --example sql --features postgres -- postgres://postgres@127.0.0.1:5432/test`
//! (`--features mysql -- mysql://root@127.0.0.1:3306/test`).

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
fn main() {
    eprintln!("build with --features sqlite, postgres or mysql");
}

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use nononce::prelude::*;
    use nononce::sql::SqlStrategy;

    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sqlite://nononce-example.db".into());
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
