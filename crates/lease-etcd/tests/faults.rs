//! Faults on servers of the tests' own: an etcd restarted on its data keeps every lease, one
//! that lost its data is noticed, and a three-member cluster keeps leases through a member
//! killed and the leader moved.

use crate::common;

use std::time::Duration;

use common::{OwnCluster, Prefix};
use lease_core::{Acquire, ErrorKind, LeaseError, Release, Renew, Renewal, Strategy};
use lease_etcd::{EtcdLease, EtcdLeaseError, EtcdStrategy};

const TTL: Duration = Duration::from_secs(30);
/// Attempts at a request while a cluster settles (a restarted member, a new leader).
const ATTEMPTS: u32 = 100;

/// Renews until it succeeds, as a lease manager would retry uncertain answers; a confirmed
/// loss fails the test.
async fn renew_through(s: &EtcdStrategy, lease: &EtcdLease, what: &str) -> Renewal<EtcdLease> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        match s.renew(lease, Renew::new(TTL, 1)).await {
            Ok(renewal) => return renewal,
            Err(e) if e.kind() == ErrorKind::Lost => panic!("{what}: lease lost: {e}"),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: no renewal in {ATTEMPTS} attempts: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_etcd_keeps_every_lease() {
    let mut cluster = OwnCluster::start(1);
    let endpoints = cluster.endpoints();
    let prefix = Prefix::at(endpoints.clone());
    let s = EtcdStrategy::new(common::options_at(&endpoints, &prefix)).unwrap();
    common::initialize(&s).await;
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();

    cluster.kill(0);
    let e = s.renew(&grant.lease, Renew::new(TTL, 1)).await.unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Retry,
        "a stopped server is uncertain: {e}"
    );
    let e = s.acquire(Acquire::new(TTL, 0, 1)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry, "{e}");

    cluster.restart(0);
    cluster.wait_healthy(0);
    renew_through(&s, &grant.lease, "after the restart").await;
    // Another node sees the ID held, and its floor kept.
    let other = EtcdStrategy::new(common::options_at(&endpoints, &prefix)).unwrap();
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
    let mut cluster = OwnCluster::start(1);
    let endpoints = cluster.endpoints();
    let prefix = Prefix::at(endpoints.clone());
    let options = common::options_at(&endpoints, &prefix)
        .with_max_lease_duration(Duration::from_secs(60))
        .with_max_clock_offset(Duration::from_secs(100));
    let s = EtcdStrategy::new(options.clone()).unwrap();
    common::initialize(&s).await;
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();
    // Some history, so the revision the strategy saw is well above a fresh store's.
    for _ in 0..5 {
        s.renew(&grant.lease, Renew::new(TTL, 1)).await.unwrap();
    }

    cluster.wipe_and_restart(0);
    // The holder learns at its next renewal that its lease is gone.
    let mut lost = None;
    for _ in 0..ATTEMPTS {
        match s.renew(&grant.lease, Renew::new(TTL, 1)).await {
            Err(e) if e.kind() == ErrorKind::Lost => {
                lost = Some(e);
                break;
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::Retry, "{e}"),
            Ok(_) => panic!("a renewal succeeded on a store without the lease"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(lost.is_some(), "the loss was never reported");
    // This process saw a later revision: it holds acquisition off.
    let e = s.acquire(Acquire::new(TTL, 0, 1)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry);
    let EtcdLeaseError::StoreRewound { remaining, .. } = &e else {
        panic!("{e}");
    };
    // The longest lease and twice the largest clock offset: a lost holder's timestamps may be
    // an offset ahead, a successor's clock an offset behind.
    let hold_off = Duration::from_secs(60 + 2 * 100);
    assert_eq!(options.amnesia_hold_off(), hold_off);
    assert!(
        *remaining > hold_off - Duration::from_secs(30) && *remaining <= hold_off,
        "{e}"
    );
    // A process that never saw the old store finds the prefix without its initialization
    // marker, and holds off too (a restored snapshot keeps the marker: see the crate docs,
    // "Amnesia").
    let fresh = EtcdStrategy::new(options.clone()).unwrap();
    let e = fresh.acquire(Acquire::new(TTL, 0, 1)).await.unwrap_err();
    assert!(
        matches!(&e, EtcdLeaseError::NotInitialized { remaining, .. }
            if *remaining >= hold_off && *remaining <= hold_off + Duration::from_secs(1)),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::Retry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_member_cluster_keeps_leases_through_a_killed_member_and_a_moved_leader() {
    let mut cluster = OwnCluster::start(3);
    let endpoints = cluster.endpoints();
    let prefix = Prefix::at(endpoints.clone());
    let s = EtcdStrategy::new(common::options_at(&endpoints, &prefix)).unwrap();
    common::initialize(&s).await;
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();
    let id = grant.machine_id;

    // Each member's ID, and the leader.
    let mut members = Vec::new();
    for endpoint in &endpoints {
        let mut c = common::raw_at(std::slice::from_ref(endpoint)).await;
        let status = c.status().await.unwrap();
        members.push((status.header().unwrap().member_id(), status.leader()));
    }
    let leader_id = members[0].1;
    let leader = members.iter().position(|(m, _)| *m == leader_id).unwrap();
    let follower = (leader + 1) % 3;

    // A follower dies: two of three still form a quorum.
    cluster.kill(follower);
    renew_through(&s, &grant.lease, "with a follower killed").await;
    cluster.restart(follower);
    cluster.wait_healthy(follower);

    // The leader moves to another member.
    let target = (leader + 2) % 3;
    let mut c = common::raw_at(std::slice::from_ref(&endpoints[leader])).await;
    c.move_leader(members[target].0).await.unwrap();
    renew_through(&s, &grant.lease, "after the leader moved").await;

    // The new leader dies: the other two elect one.
    cluster.kill(target);
    renew_through(&s, &grant.lease, "after the leader was killed").await;
    let other = EtcdStrategy::new(common::options_at(&endpoints, &prefix)).unwrap();
    let mut taken = None;
    for _ in 0..ATTEMPTS {
        match other.acquire(Acquire::new(TTL, 0, 1)).await {
            Ok(g) => {
                taken = Some(g);
                break;
            }
            Err(e) => assert!(e.kind().is_retryable(), "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let taken = taken.expect("another node acquires after the election");
    assert_ne!(taken.machine_id, id, "the held ID was handed out again");
    renew_through(&s, &grant.lease, "at the end").await;
}
