//! A store that forgets the leases while it stays up: the prefix deleted
//! (`etcdctl del --prefix /nononce/leases/`) under a running holder. etcd's revision and
//! cluster ID do not go back, so the rewind check (faults.rs) sees nothing; the prefix's
//! initialization marker does.

use crate::common;

use std::time::Duration;

use common::{Prefix, fails, now_ms, poll, raw};
use lease_core::{Acquire, ErrorKind, Grant, Migration, Renew};
use lease_core::{StoreAdmin, Strategy};
use lease_etcd::etcd_client::{Client, DeleteOptions};
use lease_etcd::{EtcdLease, EtcdLeaseError, EtcdStrategy};

const TTL: Duration = Duration::from_secs(30);

/// An acquire of `TTL` at this machine's clock with a floor of `floor_ms`.
fn acquire(floor_ms: u64) -> Acquire {
    Acquire::new(TTL, now_ms(), floor_ms)
}

/// A renewal for `TTL` raising the floor to this machine's clock.
fn renew() -> Renew {
    Renew::new(TTL, now_ms())
}

/// The hold-off's time left, from an acquire's answer; fails the test on any other answer.
fn held_off(answer: Result<Grant<EtcdLease>, EtcdLeaseError>) -> Duration {
    match answer {
        Ok(taken) => panic!("{} handed out while held off", taken.machine_id),
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
    let ttl = client.lease_time_to_live(lease, None).await.expect("ttl");
    Some((lease, ttl.ttl()))
}

/// Whether the prefix's initialization marker exists.
async fn marker(client: &mut Client, prefix: &Prefix) -> bool {
    let key = format!("{}initialized", prefix.name);
    let answer = client.get(key.as_str(), None).await.expect("get");
    answer.kvs().first().is_some_and(|kv| kv.lease() == 0)
}

/// `holder` is handed 17, the only free ID; then the prefix is deleted (what an operator's
/// `etcdctl del --prefix <prefix>` does) and the other IDs are taken again.
async fn prefix_deleted_under(
    s: &EtcdStrategy,
    c: &mut Client,
    prefix: &Prefix,
) -> Grant<EtcdLease> {
    common::occupy_all_but(c, prefix, &[17]).await;
    let grant = s.acquire(acquire(now_ms())).await.unwrap();
    assert_eq!(grant.machine_id.get(), 17);
    let all = Some(DeleteOptions::new().with_prefix());
    let deleted = c.delete(prefix.name.as_str(), all).await;
    deleted.expect("delete the prefix");
    common::occupy_all_but(c, prefix, &[17]).await;
    grant
}

/// A holder holds the only free ID; the prefix is deleted and the other IDs are taken again:
/// a second node's acquire must not be handed the held ID, and the holder's renewal is lost.
#[tokio::test]
async fn a_deleted_prefix_does_not_hand_a_held_id_out_again() {
    let prefix = Prefix::new();
    let holder = common::strategy(&prefix).await;
    let mut c = raw().await;
    let grant = prefix_deleted_under(&holder, &mut c, &prefix).await;
    let second = EtcdStrategy::new(common::options(&prefix)).unwrap();
    // A held ID is not handed out again after the prefix was deleted.
    let e = fails(second.acquire(acquire(1)).await, ErrorKind::Retry);
    // The hold-off is the amnesia hold-off (8 h and twice 1 h by default), in the store.
    let hold_off = common::options(&prefix).amnesia_hold_off();
    assert_eq!(hold_off, Duration::from_secs(10 * 3600));
    let whole =
        matches!(&e, EtcdLeaseError::NotInitialized { remaining, .. } if *remaining == hold_off);
    assert!(whole, "{e}");
    let needles = "without its initialization marker|etcdctl del --prefix|max_clock_offset_s";
    let needles = needles
        .split('|')
        .chain(["nononce leases migrate --store", &prefix.name]);
    for needle in needles {
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
    let recorded = hold_off_key(&mut c, &prefix).await;
    let (_, ttl) = recorded.expect("the hold-off is recorded in the store");
    assert!(ttl > 10 * 3600 - 60 && ttl <= 10 * 3600, "{ttl}");
    assert!(marker(&mut c, &prefix).await, "the marker comes with it");
    // The holder finds out at its next renewal and stops.
    fails(holder.renew(&grant.lease, renew()).await, ErrorKind::Lost);
    // Still held off for every node.
    let third = EtcdStrategy::new(common::options(&prefix)).unwrap();
    let left = held_off(third.acquire(acquire(1)).await);
    let recent = |left: Duration| left <= hold_off && left > hold_off - Duration::from_secs(60);
    assert!(recent(left), "{left:?}");
    held_off(second.acquire(acquire(1)).await);
    // Once every node is stopped, the operator initializes the prefix: usable at once.
    let done = StoreAdmin::migrate(&second).await.unwrap();
    assert!(
        matches!(&done, Migration::Initialized { marker, ended_hold_off: Some(left) }
            if marker.contains(&prefix.name) && recent(*left)),
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
    let name = format!("key `{}initialized`", prefix.name);
    assert!(
        matches!(&done, Migration::Initialized { marker, ended_hold_off: None } if *marker == name),
        "{done:?}"
    );
    assert!(marker(&mut c, &prefix).await);
    let grant = s.acquire(acquire(1)).await.unwrap();
    s.renew(&grant.lease, renew()).await.unwrap();
    // Running it again (nodes may run) changes nothing for them.
    let done = StoreAdmin::migrate(&s).await.unwrap();
    let none = Migration::Initialized {
        marker: name,
        ended_hold_off: None,
    };
    assert_eq!(done, none);
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
    let holder = common::initialized(short.clone()).await;
    let mut c = raw().await;
    let grant = prefix_deleted_under(&holder, &mut c, &prefix).await;
    let second = EtcdStrategy::new(short).unwrap();
    held_off(second.acquire(acquire(1)).await);
    let (hold_off_lease, _) = hold_off_key(&mut c, &prefix).await.expect("recorded");
    // Attempts while the short hold-off runs out (etcd ends expired leases in a sweep every
    // 500 ms).
    let granted = poll(200, "the prefix heals once the hold-off ended", || async {
        match second.acquire(acquire(1)).await {
            Err(e) if !matches!(e, EtcdLeaseError::NotInitialized { .. }) => panic!("{e}"),
            answer => answer,
        }
    })
    .await;
    assert_eq!(granted.machine_id.get(), 17);
    // Granted only after both etcd leases ended: the hold-off's, and the holder's.
    for lease in [hold_off_lease, grant.lease.etcd_lease_id()] {
        let ttl = c.lease_time_to_live(lease, None).await.unwrap().ttl();
        assert_eq!(ttl, -1, "etcd lease {lease:x} still runs");
    }
    fails(holder.renew(&grant.lease, renew()).await, ErrorKind::Lost);
}
