//! Requests per lease operation, counted by an etcd of this test's own (its gRPC metrics, so
//! no other test's requests count), as docs/performance.md reports them:
//! `cargo xtask with-services cargo test -p lease-etcd --test round_trips -- --nocapture`.
//! The test fails if the counts change.

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{OwnCluster, Prefix, now_ms, options_at};
use lease_core::{Acquire, Release, Renew, Strategy};
use lease_etcd::EtcdStrategy;

/// What the member on `port` has received so far: gRPC messages by method (a unary call is
/// one; a stream counts each message sent on it) and streams opened by method, from its
/// `/metrics` (`grpc_server_msg_received_total`, `grpc_server_started_total` of the streams).
fn received(port: u16) -> BTreeMap<String, u64> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("request /metrics");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read /metrics");
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let (metric, what) =
            if let Some(rest) = line.strip_prefix("grpc_server_msg_received_total{") {
                ("", rest)
            } else if let Some(rest) = line.strip_prefix("grpc_server_started_total{")
                && line.contains("stream\"")
            {
                ("stream opened: ", rest)
            } else {
                continue;
            };
        let method = what
            .split(',')
            .find_map(|label| label.strip_prefix("grpc_method=\""))
            .and_then(|m| m.strip_suffix('"'))
            .expect("a grpc_method label");
        let value: f64 = what
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a counter value");
        // Counters are whole numbers, printed as floats.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let value = value as u64;
        if value > 0 {
            counts.insert(format!("{metric}{method}"), value);
        }
    }
    counts
}

/// The messages received between `before` and `after`, by method.
fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> Vec<(String, u64)> {
    after
        .iter()
        .filter_map(|(method, n)| {
            let d = n - before.get(method).copied().unwrap_or(0);
            (d > 0).then(|| (method.clone(), d))
        })
        .collect()
}

/// `operation` run, and the messages the member on `port` received meanwhile.
async fn counted<T>(port: u16, operation: impl Future<Output = T>) -> (T, Vec<(String, u64)>) {
    let before = received(port);
    let out = operation.await;
    (out, delta(&before, &received(port)))
}

fn expect(what: &str, seen: &[(String, u64)], expected: &[(&str, u64)]) {
    let expected: Vec<(String, u64)> = expected
        .iter()
        .map(|(m, n)| ((*m).to_owned(), *n))
        .collect();
    println!("{what}: {seen:?}");
    assert_eq!(seen, expected, "{what}: requests received by the server");
}

#[tokio::test]
async fn requests_per_operation() {
    let cluster = OwnCluster::start(1);
    let port = cluster.members[0].client_port;
    let prefix = Prefix::at(cluster.endpoints());
    let s = EtcdStrategy::new(options_at(&cluster.endpoints(), &prefix)).unwrap();
    common::initialize(&s).await;
    let ttl = Duration::from_secs(30);
    let guard = Duration::from_secs(2);
    let acquire = || Acquire::new(ttl, now_ms(), now_ms());
    let renew = || Renew::new(ttl, now_ms());
    let release = || Release::new(guard, now_ms());
    // First use: connects; measured from the second round on, as in a running node.
    let grant = s.acquire(acquire()).await.unwrap();
    s.renew(&grant.lease, renew()).await.unwrap();
    s.release(&grant.lease, release()).await.unwrap();

    let (grant, seen) = counted(port, s.acquire(acquire())).await;
    let grant = grant.unwrap();
    // The read of the prefix (keys and floors), the holder's etcd lease, the claim.
    expect(
        "acquire",
        &seen,
        &[("LeaseGrant", 1), ("Range", 1), ("Txn", 1)],
    );

    let (renewal, seen) = counted(port, s.renew(&grant.lease, renew())).await;
    renewal.unwrap();
    // A keep-alive stream (opened with one keep-alive, whose answer the client keeps to
    // itself, then a second for the TTL and the Raft term) and the proof of the key with the
    // floor's raise.
    expect(
        "renew",
        &seen,
        &[
            ("LeaseKeepAlive", 2),
            ("Txn", 1),
            ("stream opened: LeaseKeepAlive", 1),
        ],
    );

    let (released, seen) = counted(port, s.release(&grant.lease, release())).await;
    released.unwrap();
    // The guard's etcd lease, the move of the key onto it with the floor, the holder's etcd
    // lease revoked.
    expect(
        "release",
        &seen,
        &[("LeaseGrant", 1), ("LeaseRevoke", 1), ("Txn", 1)],
    );
}
