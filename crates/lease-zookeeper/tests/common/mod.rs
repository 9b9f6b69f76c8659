//! Shared test helpers: the shared test server's address, roots of a test's own with cleanup,
//! strategies on them.
#![allow(dead_code, reason = "each test file uses a different subset")]

pub mod proxy;
pub mod servers;

pub use proxy::Proxy;
pub use servers::{Mode, OwnEnsemble};

use std::time::Duration;

use lease_core::{ErrorKind, LeaseError, StoreAdmin};
use lease_zookeeper::zookeeper_client::{Client, Error};
use lease_zookeeper::{ZooKeeperLeaseError, ZooKeeperOptions, ZooKeeperStrategy};
use nonce_core::{BootClock, Clock};

pub use lease_testkit::poll;

/// The shared test server (`cargo xtask test` starts it), as `host:port`.
pub fn hosts() -> String {
    std::env::var("NONONCE_TEST_ZOOKEEPER").unwrap_or_else(|_| "127.0.0.1:2397".to_owned())
}

/// A plain client on `hosts`; panics (a test failure, never a skip) if nothing answers.
pub async fn raw_at(hosts: &str) -> Client {
    let connect = Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .with_fail_eagerly()
        .connect(hosts);
    let failure = match tokio::time::timeout(Duration::from_secs(10), connect).await {
        Ok(Ok(client)) => return client,
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer within 10 s".to_owned(),
    };
    panic!(
        "ZooKeeper does not answer at {hosts} ({failure}): run `cargo xtask test` (or `cargo xtask with-services`), which starts it"
    )
}

/// A client on the shared test server.
pub async fn raw() -> Client {
    raw_at(&hosts()).await
}

/// Deletes `path` and everything under it (`deleteall`); a missing znode is no error.
pub async fn delete_all(client: &Client, path: &str) -> Result<(), Error> {
    let children = match client.list_children(path).await {
        Ok(children) => children,
        Err(Error::NoNode) => return Ok(()),
        Err(e) => return Err(e),
    };
    for child in children {
        Box::pin(delete_all(client, &format!("{path}/{child}"))).await?;
    }
    match client.delete(path, None).await {
        Ok(()) | Err(Error::NoNode) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Runs `work` on a runtime of its own, on a thread of its own (off any runtime the caller is
/// on).
fn on_own_runtime<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> Option<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    std::thread::spawn(move || runtime.expect("runtime").block_on(work))
        .join()
        .ok()
}

/// A root znode of the test's own on the shared server (or on `hosts`), deleted with everything
/// under it when dropped.
pub struct Root {
    pub path: String,
    hosts: String,
}

impl Root {
    pub fn new() -> Self {
        Self::at(&hosts())
    }

    pub fn at(hosts: &str) -> Self {
        Self {
            path: format!("/nononce-test/{:016x}", rand::random::<u64>()),
            hosts: hosts.to_owned(),
        }
    }

    pub fn lease(&self, id: u16) -> String {
        format!("{}/leases/{id}", self.path)
    }

    pub fn floor(&self, id: u16) -> String {
        format!("{}/floors/{id}", self.path)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let (path, hosts) = (self.path.clone(), self.hosts.clone());
        on_own_runtime(async move {
            let work = async {
                let client = Client::connector()
                    .with_fail_eagerly()
                    .connect(&hosts)
                    .await?;
                delete_all(&client, &path).await
            };
            let _ = tokio::time::timeout(Duration::from_secs(10), work).await;
        });
    }
}

/// Options for tests on `hosts`: the root, a 20 s session (leases of 15 s), short timeouts.
pub fn options_at(hosts: &str, root: &Root) -> ZooKeeperOptions {
    ZooKeeperOptions::new(hosts)
        .with_root(root.path.clone())
        .with_session_timeout(Duration::from_secs(20))
        .with_request_timeout(Duration::from_secs(10))
        .with_connect_timeout(Duration::from_secs(3))
}

pub fn options(root: &Root) -> ZooKeeperOptions {
    options_at(&hosts(), root)
}

/// A strategy with `options`, whose root it initializes (as an operator does once for a new
/// root).
pub async fn initialized(options: ZooKeeperOptions) -> ZooKeeperStrategy {
    let strategy = ZooKeeperStrategy::new(options).expect("valid options");
    StoreAdmin::migrate(&strategy)
        .await
        .unwrap_or_else(|e| panic!("initializing the root: {e}"));
    strategy
}

/// A strategy on the shared server using `root`, which it initializes.
pub async fn strategy(root: &Root) -> ZooKeeperStrategy {
    drop(raw().await);
    initialized(options(root)).await
}

/// This machine's clock in Unix ms.
pub fn now_ms() -> u64 {
    BootClock::new().now_ms()
}

/// The error of `result`, which must be one of `kind`.
pub fn fails<T: std::fmt::Debug>(
    result: Result<T, ZooKeeperLeaseError>,
    kind: ErrorKind,
) -> ZooKeeperLeaseError {
    let error = result.expect_err("expected an error");
    assert_eq!(error.kind(), kind, "{error}");
    error
}
