//! ZooKeeper stores (`zk://host:port[,host:port...][/root]`) on the ZooKeeper test server: two
//! `gen`s from two folders at once get distinct machine IDs and share no value; a third, once
//! both released, reuses an ID and starts above everything issued under it; a dead endpoint or
//! a new root fails at once in one line naming the cause. Every test has a root of its own.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use nononce::zookeeper::zookeeper_client::{Acls, Client, CreateMode};

/// `(timestamp_ms, machine_id)` of a nonce, decoded by the command.
fn decoded(nonce: &str) -> (u64, u64) {
    let json = json(nonce);
    (
        json["timestamp_ms"].as_u64().unwrap(),
        json["machine_id"].as_u64().unwrap(),
    )
}

/// Holds every ID but `free` under `store`'s root with znodes of a foreign owner.
fn occupy_all_but(store: &str, free: u64) {
    let root = store.split_once("/nononce-cli/").map(|(_, r)| r).unwrap();
    let root = format!("/nononce-cli/{root}");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = Client::connect(&zookeeper_hosts()).await.unwrap();
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        for id in (0..512).filter(|id| *id != free) {
            let path = format!("{root}/leases/{id}");
            client.create(&path, b"foreign", &persistent).await.unwrap();
        }
    });
}

#[test]
fn two_gens_from_two_folders_share_no_value_and_a_third_starts_above_them() {
    let store = zookeeper_store();
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let spawn = |dir: &std::path::Path| {
        std_nononce()
            .args(["gen", "--store", &store, "-n", "100000"])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(one.path()), spawn(two.path()));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success(), "{}", stderr(&a));
    assert!(b.status.success(), "{}", stderr(&b));
    let (a, b) = (
        String::from_utf8(a.stdout).unwrap(),
        String::from_utf8(b.stdout).unwrap(),
    );
    let mut all: Vec<&str> = a.lines().chain(b.lines()).collect();
    assert_eq!(all.len(), 200_000);
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 200_000, "the two gens printed a value twice");
    let (a_last, a_id) = decoded(a.lines().last().unwrap());
    let (_, b_id) = decoded(b.lines().last().unwrap());
    assert_ne!(a_id, b_id, "two gens got the same machine id");

    // Only the first gen's ID left free: the third gets it once its release guard (a session
    // of 10 s, left to expire) has ended, and starts above its floor.
    occupy_all_but(&store, a_id);
    std::thread::sleep(Duration::from_secs(8));
    let third = run_ok(&["gen", "--store", &store, "-n", "1"]);
    let (first_ts, third_id) = decoded(third.trim());
    assert_eq!(third_id, a_id);
    assert!(first_ts > a_last, "{first_ts} <= {a_last}");
}

/// A root nobody initialized holds acquisition off, in one line naming `leases migrate`.
#[test]
fn a_new_root_says_to_migrate() {
    let store = format!("zk://{}/nononce-cli/{}", zookeeper_hosts(), unique("new"));
    let out = run(&["gen", "--store", &store, "-n", "1"]);
    let err = assert_one_line_failure(&out, "gen on a new root");
    assert!(err.contains("leases migrate --store"), "{err}");
    assert!(err.contains("held"), "{err}");
}

/// A dead endpoint is refused at once: one line naming the cause (not a timeout).
#[test]
fn a_dead_endpoint_is_refused_with_its_cause() {
    let out = run(&["gen", "--store", "zk://127.0.0.1:1/x", "-n", "1"]);
    let err = assert_one_line_failure(&out, "gen on a dead endpoint");
    assert!(err.contains("zk://127.0.0.1:1/x"), "{err}");
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    for stale in ["timed out", "within", "no available hosts"] {
        assert!(!err.contains(stale), "{err}");
    }
}
