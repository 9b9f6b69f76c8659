//! Faults on servers of the tests' own: an etcd restarted on its data keeps every lease, one
//! that lost its data is noticed, and a three-member cluster keeps leases through a member
//! killed and the leader moved.

use crate::common;

use std::time::Duration;

use common::{OwnCluster, Prefix, fails, initialized, poll};
use lease_core::ErrorKind::{Lost, Retry};
use lease_core::{Acquire, LeaseError, Release, Renew, Renewal, Strategy};
use lease_etcd::{EtcdLease, EtcdLeaseError, EtcdOptions, EtcdStrategy};

const TTL: Duration = Duration::from_secs(30);
/// Attempts at a request while a cluster settles (a restarted member, a new leader).
const ATTEMPTS: u32 = 100;

/// A cluster of the test's own with `size` members, a prefix on it, and options for that prefix.
fn own_cluster(size: usize) -> (OwnCluster, Prefix, EtcdOptions) {
    let cluster = OwnCluster::start(size);
    let prefix = Prefix::at(cluster.endpoints());
    let options = common::options_at(&cluster.endpoints(), &prefix);
    (cluster, prefix, options)
}

/// Renews until it succeeds, as a lease manager would retry uncertain answers; a confirmed
/// loss fails the test.
async fn renew_through(s: &EtcdStrategy, lease: &EtcdLease, what: &str) -> Renewal<EtcdLease> {
    poll(ATTEMPTS, what, || async {
        match s.renew(lease, Renew::new(TTL, 1)).await {
            Err(e) if e.kind() == Lost => panic!("{what}: lease lost: {e}"),
            answer => answer,
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_etcd_keeps_every_lease() {
    let (mut cluster, _prefix, options) = own_cluster(1);
    let s = initialized(options.clone()).await;
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();

    cluster.kill(0);
    // A stopped server.
    fails(s.renew(&grant.lease, Renew::new(TTL, 1)).await, Retry);
    fails(s.acquire(Acquire::new(TTL, 0, 1)).await, Retry);

    cluster.restart(0);
    renew_through(&s, &grant.lease, "after the restart").await;
    // Another node sees the ID held, and its floor kept.
    let other = EtcdStrategy::new(options).unwrap();
    let holders = other.holders().await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].machine_id, grant.machine_id);
    assert_eq!(other.free_count().await.unwrap(), 511);
    other
        .release(&grant.lease, Release::new(Duration::from_secs(1), 500))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_that_lost_its_data_is_noticed() {
    let (mut cluster, _prefix, options) = own_cluster(1);
    let options = options
        .with_max_lease_duration(Duration::from_secs(60))
        .with_max_clock_offset(Duration::from_secs(100));
    let s = initialized(options.clone()).await;
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();
    // Some history, so the revision the strategy saw is well above a fresh store's.
    for _ in 0..5 {
        s.renew(&grant.lease, Renew::new(TTL, 1)).await.unwrap();
    }

    cluster.wipe_and_restart(0);
    // The holder learns at its next renewal that its lease is gone.
    poll(ATTEMPTS, "the loss was never reported", || async {
        match s.renew(&grant.lease, Renew::new(TTL, 1)).await {
            Err(e) if e.kind() == Lost => Ok(()),
            Err(e) => {
                assert_eq!(e.kind(), Retry, "{e}");
                Err(e)
            }
            Ok(_) => panic!("a renewal succeeded on a store without the lease"),
        }
    })
    .await;
    // This process saw a later revision: it holds acquisition off.
    let e = fails(s.acquire(Acquire::new(TTL, 0, 1)).await, Retry);
    let EtcdLeaseError::StoreRewound { remaining, .. } = &e else {
        panic!("{e}");
    };
    // The longest lease and twice the largest clock offset: a lost holder's timestamps may be
    // an offset ahead, a successor's clock an offset behind.
    let hold_off = Duration::from_secs(60 + 2 * 100);
    assert_eq!(options.amnesia_hold_off(), hold_off);
    let least = hold_off - Duration::from_secs(30);
    assert!(*remaining > least && *remaining <= hold_off, "{e}");
    // A process that never saw the old store finds the prefix without its initialization
    // marker, and holds off too (a restored snapshot keeps the marker: see the crate docs,
    // "Amnesia").
    let fresh = EtcdStrategy::new(options).unwrap();
    let e = fails(fresh.acquire(Acquire::new(TTL, 0, 1)).await, Retry);
    assert!(
        matches!(&e, EtcdLeaseError::NotInitialized { remaining, .. }
            if *remaining >= hold_off && *remaining <= hold_off + Duration::from_secs(1)),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_member_cluster_keeps_leases_through_a_killed_member_and_a_moved_leader() {
    let (mut cluster, _prefix, options) = own_cluster(3);
    let endpoints = cluster.endpoints();
    let s = initialized(options.clone()).await;
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();

    // Each member's ID, and the leader.
    let mut members = Vec::new();
    for endpoint in &endpoints {
        let mut c = common::raw_at(std::slice::from_ref(endpoint)).await;
        let status = c.status().await.unwrap();
        members.push((status.header().unwrap().member_id(), status.leader()));
    }
    let leader = members.iter().position(|(m, _)| *m == members[0].1);
    let leader = leader.unwrap();
    let follower = (leader + 1) % 3;

    // A follower dies: two of three still form a quorum.
    cluster.kill(follower);
    renew_through(&s, &grant.lease, "with a follower killed").await;
    cluster.restart(follower);

    // The leader moves to another member.
    let target = (leader + 2) % 3;
    let mut c = common::raw_at(std::slice::from_ref(&endpoints[leader])).await;
    c.move_leader(members[target].0).await.unwrap();
    renew_through(&s, &grant.lease, "after the leader moved").await;

    // The new leader dies: the other two elect one.
    cluster.kill(target);
    renew_through(&s, &grant.lease, "after the leader was killed").await;
    let other = EtcdStrategy::new(options).unwrap();
    let taken = poll(ATTEMPTS, "another node acquires", || async {
        let answer = other.acquire(Acquire::new(TTL, 0, 1)).await;
        if let Err(e) = &answer {
            assert!(e.kind().is_retryable(), "{e}");
        }
        answer
    })
    .await;
    assert_ne!(taken.machine_id, grant.machine_id, "handed out again");
    renew_through(&s, &grant.lease, "at the end").await;
}
