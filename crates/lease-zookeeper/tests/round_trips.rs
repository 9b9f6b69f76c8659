//! Requests per lease operation, counted on the transport the strategy sends them over: each is
//! one round trip to ZooKeeper, but a release guard's, which opens a session of its own
//! (two: the session's handshake and the create).

use crate::common;

use std::sync::Mutex;
use std::time::Duration;

use common::Root;
use lease_core::{Acquire, Release, Renew, Strategy};
use lease_zookeeper::ZooKeeperStrategy;
use lease_zookeeper::transport::{Answer, Connection, Request, Transport, TransportError};

/// A [`Connection`] that records the kind of each request it carries.
struct Counted {
    inner: Connection,
    sent: Mutex<Vec<&'static str>>,
}

impl Counted {
    fn take(&self) -> Vec<&'static str> {
        std::mem::take(&mut self.sent.lock().unwrap())
    }
}

impl Transport for Counted {
    async fn exchange(&self, request: Request) -> Result<Answer, TransportError> {
        let kind = match &request {
            Request::Read(_) => "multi-read",
            Request::Write(_) => "multi",
            Request::Sync(_) => "sync",
            Request::MakePath(_) => "create path",
            Request::Guard { .. } => "guard session",
            _ => "other",
        };
        self.sent.lock().unwrap().push(kind);
        self.inner.exchange(request).await
    }

    fn now(&self) -> Duration {
        self.inner.now()
    }

    fn random(&self) -> u64 {
        self.inner.random()
    }
}

#[tokio::test]
async fn requests_per_operation() {
    const TTL: Duration = Duration::from_secs(60);
    let root = Root::new();
    drop(common::strategy(&root).await);
    let options = common::options(&root);
    let counted = Counted {
        inner: Connection::new(options.clone()),
        sent: Mutex::new(Vec::new()),
    };
    let s = ZooKeeperStrategy::with_transport(counted, options).expect("valid options");
    let first = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();
    // A new session's reads are synced with the leader first.
    assert_eq!(s.transport().take(), ["sync", "multi-read", "multi"]);
    let second = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();
    assert_eq!(s.transport().take(), ["multi-read", "multi"]);
    let renewed = s.renew(&first.lease, Renew::new(TTL, 600)).await.unwrap();
    assert_eq!(s.transport().take(), ["multi"]);
    s.release(&renewed.lease, Release::new(Duration::from_secs(1), 600))
        .await
        .unwrap();
    assert_eq!(
        s.transport().take(),
        ["multi-read", "guard session", "multi"]
    );
    s.release(&second.lease, Release::new(Duration::ZERO, 600))
        .await
        .unwrap();
    assert_eq!(s.transport().take(), ["multi-read", "multi"]);
    println!(
        "zookeeper requests: acquire 2 (3 on a new session), renew 1, release 3 (2 without a guard)"
    );
}
