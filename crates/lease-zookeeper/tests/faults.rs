//! Faults: a session cut off past its timeout and one that reconnects within it, a server
//! restarted on its data and one that lost it, a `deleteall` of the root, and a three-member
//! ensemble through the kill of a follower, of its leader, and of every member at once.

use crate::common;

use std::time::Duration;

use common::{OwnEnsemble, Proxy, Root, fails, poll};
use lease_core::ErrorKind::{Lost, Retry};
use lease_core::{Acquire, LeaseError, Release, Renew, Renewal, StoreAdmin, Strategy};
use lease_zookeeper::{ZooKeeperLease, ZooKeeperOptions, ZooKeeperStrategy};

const TTL: Duration = Duration::from_secs(60);
/// The tick of the servers of the tests' own: expired sessions end within a fifth of a second.
const TICK: Duration = Duration::from_millis(200);
/// Attempts at a request while servers settle (a restarted member, a new leader).
const ATTEMPTS: u32 = 100;

/// Renews until it succeeds, as a lease manager retries uncertain answers; a confirmed loss
/// fails the test.
async fn renew_through(
    s: &ZooKeeperStrategy,
    lease: &ZooKeeperLease,
    what: &str,
) -> Renewal<ZooKeeperLease> {
    poll(ATTEMPTS, what, || async {
        match s.renew(lease, Renew::new(TTL, 1)).await {
            Err(e) if e.kind() == Lost => panic!("{what}: lease lost: {e}"),
            answer => answer,
        }
    })
    .await
}

/// Options on `hosts` for `root` with a session of `session`.
fn options(hosts: &str, root: &Root, session: Duration) -> ZooKeeperOptions {
    common::options_at(hosts, root)
        .with_session_timeout(session)
        .with_request_timeout(Duration::from_secs(2))
        .with_connect_timeout(Duration::from_secs(2))
}

/// A root on servers of the test's own, initialized, and a strategy on it.
async fn own(ensemble: &OwnEnsemble, session: Duration) -> (Root, ZooKeeperStrategy) {
    let hosts = ensemble.connect_string();
    let root = Root::at(&hosts);
    let s = common::initialized(options(&hosts, &root, session)).await;
    (root, s)
}

/// Runs blocking server control (start, kill, restart) off the runtime's worker, so that the
/// clients' connections keep being served meanwhile.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(work)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cut_off_past_its_timeout_loses_its_lease_and_frees_the_id() {
    let root = Root::new();
    drop(common::strategy(&root).await);
    let proxy = Proxy::start(&common::hosts()).await;
    let cut_off = ZooKeeperStrategy::new(options(&proxy.address, &root, Duration::from_secs(2)))
        .expect("valid options");
    let grant = cut_off.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();
    let id = grant.machine_id;

    proxy.cut();
    // The ensemble ends the session it has not heard of for its timeout, and the ID's znode
    // with it.
    let raw = common::raw().await;
    let path = root.lease(id.get());
    let freed = poll(ATTEMPTS, "the session never ended", || async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match raw.check_stat(&path).await {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err("still there".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    let () = freed;

    proxy.heal();
    // The holder learns it: its session expired (its next request, on a new session, finds
    // the znode gone).
    let lost = poll(ATTEMPTS, "the loss was never reported", || async {
        match cut_off.renew(&grant.lease, Renew::new(TTL, 1)).await {
            Err(e) if e.kind() == Lost => Ok(e),
            Err(e) => Err(e.to_string()),
            Ok(_) => panic!("a renewal succeeded after the session ended"),
        }
    })
    .await;
    assert!(lost.to_string().contains("session"), "{lost}");
    // The same strategy leases again, on a new session.
    let again = poll(ATTEMPTS, "no new lease", || {
        cut_off.acquire(Acquire::new(TTL, 0, 500))
    })
    .await;
    assert_ne!(again.lease.session_id(), grant.lease.session_id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_within_the_session_timeout_keeps_the_lease() {
    let root = Root::new();
    drop(common::strategy(&root).await);
    let proxy = Proxy::start(&common::hosts()).await;
    let s = ZooKeeperStrategy::new(options(&proxy.address, &root, Duration::from_secs(10)))
        .expect("valid options");
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();
    proxy.cut();
    fails(s.renew(&grant.lease, Renew::new(TTL, 1)).await, Retry);
    proxy.heal();
    let renewed = renew_through(&s, &grant.lease, "after the reconnect").await;
    assert_eq!(renewed.lease.session_id(), grant.lease.session_id());
    s.release(&renewed.lease, Release::new(Duration::ZERO, 600))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_keeps_every_lease() {
    let mut ensemble = blocking(|| {
        OwnEnsemble::start_with_sessions(1, TICK, Duration::from_secs(1), Duration::from_secs(20))
    });
    let (_root, s) = own(&ensemble, Duration::from_secs(10)).await;
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();

    blocking(|| ensemble.kill(0));
    fails(s.renew(&grant.lease, Renew::new(TTL, 1)).await, Retry);
    blocking(|| ensemble.restart(0));
    // The server restores its sessions from its data, with fresh timers.
    renew_through(&s, &grant.lease, "after the restart").await;
    let holders = StoreAdmin::holders(&s).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].machine_id, grant.machine_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_lost_its_data_is_noticed() {
    let mut ensemble = blocking(|| OwnEnsemble::start(1, TICK));
    let (root, s) = own(&ensemble, Duration::from_secs(4)).await;
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();
    // Some history, so the floors this node saw were written well after a fresh server's
    // first transactions.
    let mut lease = grant.lease;
    for _ in 0..5 {
        lease = s.renew(&lease, Renew::new(TTL, 1)).await.unwrap().lease;
    }

    blocking(|| ensemble.wipe_and_restart(0));
    // The holder learns at its next renewal that its lease is gone: the server knows neither
    // its session nor its znode.
    poll(ATTEMPTS, "the loss was never reported", || async {
        match s.renew(&lease, Renew::new(TTL, 1)).await {
            Err(e) if e.kind() == Lost => Ok(()),
            Err(e) => Err(e.to_string()),
            Ok(_) => panic!("a renewal succeeded on a wiped server"),
        }
    })
    .await;
    // A new node finds no marker: acquisition holds off.
    let other = ZooKeeperStrategy::new(options(
        &ensemble.connect_string(),
        &root,
        Duration::from_secs(4),
    ))
    .expect("valid options");
    let held_off = poll(ATTEMPTS, "no answer", || async {
        match other.acquire(Acquire::new(TTL, 0, 1)).await {
            Err(e) if e.to_string().contains("held off") => Ok(e),
            Err(e) => Err(e.to_string()),
            Ok(g) => panic!("machine id {} granted on a wiped server", g.machine_id),
        }
    })
    .await;
    assert_eq!(held_off.kind(), Retry);
    // An operator initializes it again: the node that saw the floors written before still
    // holds off, for the longest session (its floors went back in time).
    StoreAdmin::migrate(&other).await.unwrap();
    let rewound = fails(s.acquire(Acquire::new(TTL, 0, 1)).await, Retry);
    assert!(
        rewound.to_string().contains("went back in time"),
        "{rewound}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_root_is_noticed() {
    let root = Root::new();
    let s = common::strategy(&root).await;
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();
    common::delete_all(&common::raw().await, &root.path)
        .await
        .expect("deleteall");
    let lost = fails(s.renew(&grant.lease, Renew::new(TTL, 1)).await, Lost);
    assert!(lost.to_string().contains("deleted"), "{lost}");
    let other = ZooKeeperStrategy::new(common::options(&root)).expect("valid options");
    let held_off = fails(other.acquire(Acquire::new(TTL, 0, 1)).await, Retry);
    assert!(held_off.to_string().contains("held off"), "{held_off}");
    // Still held off for the node that began it, and for this one.
    fails(s.acquire(Acquire::new(TTL, 0, 1)).await, Retry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_keeps_leases_through_member_leader_and_whole_ensemble_kills() {
    let mut ensemble = blocking(|| {
        OwnEnsemble::start_with_sessions(3, TICK, Duration::from_secs(1), Duration::from_secs(20))
    });
    let (_root, s) = own(&ensemble, Duration::from_secs(10)).await;
    let grant = s.acquire(Acquire::new(TTL, 0, 500)).await.unwrap();
    let session = grant.lease.session_id();
    let mut lease = grant.lease;

    let leader = blocking(|| ensemble.wait_leader());
    let follower = (leader + 1) % 3;
    blocking(|| ensemble.kill(follower));
    lease = renew_through(&s, &lease, "with a follower killed")
        .await
        .lease;
    blocking(|| ensemble.restart(follower));

    blocking(|| ensemble.kill(leader));
    lease = renew_through(&s, &lease, "with the leader killed")
        .await
        .lease;
    blocking(|| ensemble.restart(leader));
    lease = renew_through(&s, &lease, "after the leader's restart")
        .await
        .lease;

    blocking(|| ensemble.restart_all());
    lease = renew_through(&s, &lease, "after every member's restart")
        .await
        .lease;
    assert_eq!(lease.session_id(), session);
    let holders = StoreAdmin::holders(&s).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(StoreAdmin::free_count(&s).await.unwrap(), 511);
}
