//! Requests per lease operation, counted by an etcd of this test's own (its gRPC metrics, so
//! no other test's requests count), as docs/performance.md reports them (it gives the command
//! that prints them). The test fails if the counts change.

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{OwnCluster, Prefix, now_ms, options_at};
use lease_core::{Acquire, Release, Renew, Strategy};

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

/// Runs `operation` and checks that the member on `port` received `expected` meanwhile.
async fn requests<T>(
    port: u16,
    what: &str,
    operation: impl Future<Output = T>,
    expected: &[(&str, u64)],
) -> T {
    let before = received(port);
    let out = operation.await;
    let after = received(port);
    let seen: Vec<(&str, u64)> = after
        .iter()
        .map(|(method, n)| {
            (
                method.as_str(),
                n - before.get(method).copied().unwrap_or(0),
            )
        })
        .filter(|(_, d)| *d > 0)
        .collect();
    println!("{what}: {seen:?}");
    assert_eq!(seen, expected, "{what}: requests received by the server");
    out
}

#[tokio::test]
async fn requests_per_operation() {
    let cluster = OwnCluster::start(1);
    let port = cluster.members[0].client_port;
    let prefix = Prefix::at(cluster.endpoints());
    let s = common::initialized(options_at(&cluster.endpoints(), &prefix)).await;
    let ttl = Duration::from_secs(30);
    let acquire = || Acquire::new(ttl, now_ms(), now_ms());
    let renew = || Renew::new(ttl, now_ms());
    let release = || Release::new(Duration::from_secs(2), now_ms());
    // First use: connects; measured from the second round on, as in a running node.
    let grant = s.acquire(acquire()).await.unwrap();
    s.renew(&grant.lease, renew()).await.unwrap();
    s.release(&grant.lease, release()).await.unwrap();

    // The read of the prefix (keys and floors), the holder's etcd lease, the claim.
    let acquired = [("LeaseGrant", 1), ("Range", 1), ("Txn", 1)];
    let grant = requests(port, "acquire", s.acquire(acquire()), &acquired)
        .await
        .unwrap();
    // A keep-alive stream (opened with one keep-alive, whose answer the client keeps to
    // itself, then a second for the TTL and the Raft term) and the proof of the key with the
    // floor's raise.
    let renewed = [
        ("LeaseKeepAlive", 2),
        ("Txn", 1),
        ("stream opened: LeaseKeepAlive", 1),
    ];
    let renewal = requests(port, "renew", s.renew(&grant.lease, renew()), &renewed).await;
    renewal.unwrap();
    // The guard's etcd lease, the move of the key onto it with the floor, the holder's etcd
    // lease revoked.
    let released = [("LeaseGrant", 1), ("LeaseRevoke", 1), ("Txn", 1)];
    let releasing = s.release(&grant.lease, release());
    requests(port, "release", releasing, &released)
        .await
        .unwrap();
}
