//! A store that forgets the leases while it stays up: the prefix deleted
//! (`etcdctl del --prefix /nononce/leases/`) under a running holder. etcd's revision and
//! cluster ID do not go back, so the rewind check (faults.rs) sees nothing; the prefix's
//! initialization marker does.

use crate::common;

use std::time::Duration;

use common::{Prefix, now_ms, raw};
use lease_core::{
    Acquire, ErrorKind, LeaseError, MachineId, Migration, Renew, StoreAdmin, Strategy,
};
use lease_etcd::etcd_client::{Client, DeleteOptions};
use lease_etcd::{EtcdLeaseError, EtcdStrategy};

const TTL: Duration = Duration::from_secs(30);

/// An acquire of `TTL` at this machine's clock with a floor of `floor_ms`.
fn acquire(floor_ms: u64) -> Acquire {
    Acquire::new(TTL, now_ms(), floor_ms)
}

/// A renewal for `TTL` raising the floor to this machine's clock.
fn renew() -> Renew {
    Renew::new(TTL, now_ms())
}
/// Attempts at an acquire while a short hold-off runs out (etcd ends expired leases in a
/// sweep every 500 ms).
const ATTEMPTS: u32 = 200;

/// The hold-off's time left, from an acquire's answer; fails the test on any other answer.
fn held_off(answer: Result<lease_core::Grant<lease_etcd::EtcdLease>, EtcdLeaseError>) -> Duration {
    match answer {
        Ok(taken) => panic!(
            "machine id {} was handed out while the prefix must be held off",
            taken.machine_id
        ),
        Err(EtcdLeaseError::NotInitialized { remaining, prefix }) => {
            assert!(prefix.starts_with("/nononce-test/"), "{prefix}");
            remaining
        }
        Err(e) => panic!("not the hold-off: {e}"),
    }
}

/// The etcd lease and the time left of the prefix's hold-off key (`None` when it is absent).
async fn hold_off_key(client: &mut Client, prefix: &Prefix) -> Option<(i64, i64)> {
    let key = format!("{}hold-off", prefix.name);
    let answer = client.get(key.as_str(), None).await.expect("get");
    let lease = answer.kvs().first()?.lease();
    let ttl = client
        .lease_time_to_live(lease, None)
        .await
        .expect("ttl")
        .ttl();
    Some((lease, ttl))
}

/// Whether the prefix's initialization marker exists.
async fn marker(client: &mut Client, prefix: &Prefix) -> bool {
    let key = format!("{}initialized", prefix.name);
    let answer = client.get(key.as_str(), None).await.expect("get");
    answer.kvs().first().is_some_and(|kv| kv.lease() == 0)
}

/// Holds every ID except `free` with keys of a foreign owner (no lease).
async fn occupy_all_but(client: &mut Client, prefix: &Prefix, free: u16) {
    for id in (0..MachineId::COUNT).filter(|id| *id != free) {
        client
            .put(prefix.lease_key(id), "foreign", None)
            .await
            .expect("put");
    }
}

/// What an operator's `etcdctl del --prefix <prefix>` does.
async fn delete_prefix(client: &mut Client, prefix: &Prefix) {
    client
        .delete(
            prefix.name.as_str(),
            Some(DeleteOptions::new().with_prefix()),
        )
        .await
        .expect("delete the prefix");
}

/// A holder holds the only free ID; the prefix is deleted and the other IDs are taken again:
/// a second node's acquire must not be handed the held ID, and the holder's renewal is lost.
#[tokio::test]
async fn a_deleted_prefix_does_not_hand_a_held_id_out_again() {
    let prefix = Prefix::new();
    let holder = common::strategy(&prefix).await;
    let mut c = raw().await;
    occupy_all_but(&mut c, &prefix, 17).await;
    let grant = holder.acquire(acquire(now_ms())).await.unwrap();
    assert_eq!(grant.machine_id.get(), 17);

    delete_prefix(&mut c, &prefix).await;
    occupy_all_but(&mut c, &prefix, 17).await;
    let second = EtcdStrategy::new(common::options(&prefix)).unwrap();
    let e = match second.acquire(acquire(1)).await {
        Ok(taken) => panic!(
            "machine id {} held by a running node was handed out again after the prefix was deleted",
            taken.machine_id
        ),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::Retry, "{e}");
    // The hold-off is the amnesia hold-off (8 h and twice 1 h by default), in the store.
    let hold_off = common::options(&prefix).amnesia_hold_off();
    assert_eq!(hold_off, Duration::from_secs(10 * 3600));
    assert!(
        matches!(&e, EtcdLeaseError::NotInitialized { remaining, .. } if *remaining == hold_off),
        "{e}"
    );
    for needle in [
        "without its initialization marker",
        "etcdctl del --prefix",
        "nononce leases migrate --store",
        "max_clock_offset_s",
        &prefix.name,
    ] {
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
    let (_, ttl) = hold_off_key(&mut c, &prefix)
        .await
        .expect("the hold-off is recorded in the store");
    assert!(ttl > 10 * 3600 - 60 && ttl <= 10 * 3600, "{ttl}");
    assert!(marker(&mut c, &prefix).await, "the marker comes with it");
    // The holder finds out at its next renewal and stops.
    let e = holder.renew(&grant.lease, renew()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    // Still held off for every node.
    let third = EtcdStrategy::new(common::options(&prefix)).unwrap();
    let left = held_off(third.acquire(acquire(1)).await);
    assert!(
        left <= hold_off && left > hold_off - Duration::from_secs(60),
        "{left:?}"
    );
    held_off(second.acquire(acquire(1)).await);
    // Once every node is stopped, the operator initializes the prefix: usable at once.
    let done = StoreAdmin::migrate(&second).await.unwrap();
    assert!(
        matches!(&done, Migration::Initialized { marker, ended_hold_off: Some(left) }
            if marker.contains(&prefix.name) && *left <= hold_off && *left > hold_off - Duration::from_secs(60)),
        "{done:?}"
    );
    assert!(hold_off_key(&mut c, &prefix).await.is_none());
    let again = second.acquire(acquire(1)).await.unwrap();
    assert_eq!(again.machine_id.get(), 17);
}

/// A new prefix is held off until it is initialized; once `migrate` ran, it is usable at once.
#[tokio::test]
async fn a_new_prefix_is_usable_right_after_migrate() {
    let prefix = Prefix::new();
    let mut c = raw().await;
    let s = EtcdStrategy::new(common::options(&prefix)).unwrap();
    let done = StoreAdmin::migrate(&s).await.unwrap();
    assert!(
        matches!(&done, Migration::Initialized { marker, ended_hold_off: None }
            if *marker == format!("key `{}initialized`", prefix.name)),
        "{done:?}"
    );
    assert!(marker(&mut c, &prefix).await);
    let grant = s.acquire(acquire(1)).await.unwrap();
    s.renew(&grant.lease, renew()).await.unwrap();
    // Running it again (nodes may run) changes nothing for them.
    let done = StoreAdmin::migrate(&s).await.unwrap();
    assert!(
        matches!(
            done,
            Migration::Initialized {
                ended_hold_off: None,
                ..
            }
        ),
        "{done:?}"
    );
    s.renew(&grant.lease, renew()).await.unwrap();
    s.acquire(acquire(1)).await.unwrap();
    assert_eq!(s.free_count().await.unwrap(), 510);
    assert_eq!(s.holders().await.unwrap().len(), 2);

    // Not initialized: the first acquire begins the hold-off.
    let new = Prefix::new();
    let s = EtcdStrategy::new(common::options(&new)).unwrap();
    held_off(s.acquire(acquire(1)).await);
    assert!(hold_off_key(&mut c, &new).await.is_some());
}

/// With a short hold-off (a short longest lease, no clock offset), a deleted prefix heals by
/// itself: nothing is granted until the hold-off key has ended with its etcd lease, and by then
/// the holder's lease has ended too.
#[tokio::test]
async fn a_deleted_prefix_heals_by_itself_after_the_hold_off() {
    let prefix = Prefix::new();
    let short = common::options(&prefix)
        .with_max_lease_duration(Duration::from_secs(2))
        .with_max_clock_offset(Duration::ZERO);
    let holder = EtcdStrategy::new(short.clone()).unwrap();
    common::initialize(&holder).await;
    let mut c = raw().await;
    occupy_all_but(&mut c, &prefix, 17).await;
    let grant = holder.acquire(acquire(now_ms())).await.unwrap();
    assert_eq!(grant.machine_id.get(), 17);

    delete_prefix(&mut c, &prefix).await;
    occupy_all_but(&mut c, &prefix, 17).await;
    let second = EtcdStrategy::new(short).unwrap();
    held_off(second.acquire(acquire(1)).await);
    let (hold_off_lease, _) = hold_off_key(&mut c, &prefix).await.expect("recorded");
    let mut granted = None;
    for _ in 0..ATTEMPTS {
        match second.acquire(acquire(1)).await {
            Ok(g) => {
                granted = Some(g);
                break;
            }
            Err(EtcdLeaseError::NotInitialized { .. }) => {}
            Err(e) => panic!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let granted = granted.expect("the prefix heals once the hold-off ended");
    assert_eq!(granted.machine_id.get(), 17);
    // Granted only after both etcd leases ended: the hold-off's, and the holder's.
    for lease in [hold_off_lease, grant.lease.etcd_lease_id()] {
        let ttl = c.lease_time_to_live(lease, None).await.unwrap().ttl();
        assert_eq!(ttl, -1, "etcd lease {lease:x} still runs");
    }
    let e = holder.renew(&grant.lease, renew()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
}
