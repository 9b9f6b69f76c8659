//! The lease protocol on a real etcd: what each operation writes, lost versus retry, the
//! release guard, the timestamp floor's keys, the operator views and error kinds.

use crate::common;

use std::time::Duration;

use common::{Prefix, fails, now_ms, occupy_all_but, raw};
use lease_core::ErrorKind::{Exhausted, Lost, Misconfigured, Other, Retry};
use lease_core::{Acquire, Grant, MachineId, Release, Renew, Renewal, Strategy};
use lease_etcd::etcd_client::{Client, PutOptions};
use lease_etcd::{EtcdLease, EtcdLeaseError, EtcdOptions, EtcdStrategy, LostReason};

const TTL: Duration = Duration::from_secs(30);

/// Acquires for `requested` as the lease manager does: its clock as `now_ms`, and a floor of
/// the lease's deadline.
async fn acquire(
    s: &EtcdStrategy,
    requested: Duration,
) -> Result<Grant<EtcdLease>, EtcdLeaseError> {
    let now = now_ms();
    s.acquire(Acquire::new(requested, now, now + 20_000)).await
}

/// Renews for `TTL`, raising the floor to this machine's clock.
async fn renew(s: &EtcdStrategy, lease: &EtcdLease) -> Result<Renewal<EtcdLease>, EtcdLeaseError> {
    s.renew(lease, Renew::new(TTL, now_ms())).await
}

/// Releases with a guard of `guard` and this machine's clock as the floor.
async fn release(
    s: &EtcdStrategy,
    lease: &EtcdLease,
    guard: Duration,
) -> Result<(), EtcdLeaseError> {
    s.release(lease, Release::new(guard, now_ms())).await
}

async fn value(client: &mut Client, key: &str) -> Option<(String, i64, i64)> {
    let answer = client.get(key, None).await.expect("get");
    answer.kvs().first().map(|kv| {
        (
            kv.value_str().expect("utf-8").to_owned(),
            kv.lease(),
            kv.create_revision(),
        )
    })
}

/// The floor stored at `key`.
async fn floor(client: &mut Client, key: &str) -> String {
    value(client, key).await.expect("the floor key exists").0
}

/// Why the renewal of `lease` is refused as lost.
async fn lost(s: &EtcdStrategy, lease: &EtcdLease) -> LostReason {
    match fails(renew(s, lease).await, Lost) {
        EtcdLeaseError::Lost { reason, .. } => reason,
        e => panic!("{e}"),
    }
}

/// Deletes `key` and puts it again with `value` on etcd lease `lease`: another holding.
async fn recreate(client: &mut Client, key: &str, value: &str, lease: i64) {
    client.delete(key, None).await.unwrap();
    let on = Some(PutOptions::new().with_lease(lease));
    client.put(key, value, on).await.unwrap();
}

/// Granted TTL of an etcd lease (-1 once it is gone).
async fn granted_ttl(client: &mut Client, lease: i64) -> (i64, i64) {
    let answer = client.lease_time_to_live(lease, None).await.expect("ttl");
    (answer.granted_ttl(), answer.ttl())
}

#[tokio::test]
async fn acquire_claims_one_key_on_an_etcd_lease_of_whole_seconds() {
    let prefix = Prefix::new();
    let s = common::strategy(&prefix).await;
    let mut c = raw().await;
    // 4.7 s asks etcd for 4 s: never more than requested, and what etcd granted is reported.
    let grant = s
        .acquire(Acquire::new(Duration::from_millis(4700), now_ms(), 1234))
        .await
        .unwrap();
    assert_eq!(grant.ttl, Duration::from_secs(4));
    assert_eq!(grant.floor_ms, 0, "nothing stored before");
    assert_eq!(grant.coordinator_ms, None, "etcd reports no server clock");
    let lease = &grant.lease;
    assert_eq!(lease.machine_id(), grant.machine_id);
    assert_eq!(granted_ttl(&mut c, lease.etcd_lease_id()).await.0, 4);
    let (token, on, created) = value(&mut c, &prefix.lease_key(grant.machine_id.get()))
        .await
        .expect("the key exists");
    assert_eq!(token, lease.token());
    assert_eq!(on, lease.etcd_lease_id());
    assert_eq!(created, lease.revision());
    // The floor is written with the claim.
    let stored = floor(&mut c, &prefix.floor_key(grant.machine_id.get())).await;
    assert_eq!(stored, "00000000000000001234");

    fails(acquire(&s, Duration::from_millis(999)).await, Misconfigured);
}

#[tokio::test]
async fn renew_keeps_the_granted_ttl_and_is_idempotent() {
    let prefix = Prefix::new();
    let s = common::strategy(&prefix).await;
    let grant = acquire(&s, TTL).await.unwrap();
    // etcd renews a lease to the TTL it was granted with, whatever is asked now; a retried
    // renewal (its first answer lost) succeeds again.
    for asked in [Duration::from_secs(90), TTL] {
        let renewal = s.renew(&grant.lease, Renew::new(asked, now_ms())).await;
        let renewal = renewal.unwrap();
        assert_eq!(renewal.ttl, TTL, "{asked:?}");
        assert_eq!(renewal.lease, grant.lease);
    }
}

#[tokio::test]
async fn renew_is_lost_when_another_lease_holds_the_key() {
    let prefix = Prefix::new();
    let s = common::strategy(&prefix).await;
    let mut c = raw().await;
    let grant = s.acquire(Acquire::new(TTL, now_ms(), 1234)).await.unwrap();
    let key = prefix.lease_key(grant.machine_id.get());
    // Another holder's key on another lease, our etcd lease still alive.
    let other = c.lease_grant(60, None).await.unwrap().id();
    recreate(&mut c, &key, "other", other).await;
    let reason = lost(&s, &grant.lease).await;
    let taken = matches!(reason, LostReason::TakenOver { lease, .. } if lease == other);
    assert!(taken, "{reason}");
    // The other holder is untouched; our orphaned etcd lease is revoked; the floor is the
    // claim's, not raised by the renewal that was not ours.
    let floor_key = prefix.floor_key(grant.machine_id.get());
    assert_eq!(value(&mut c, &key).await.unwrap().1, other);
    assert_eq!(granted_ttl(&mut c, grant.lease.etcd_lease_id()).await.1, -1);
    assert_eq!(floor(&mut c, &floor_key).await, "00000000000000001234");
    // Releasing the stale handle leaves the other holder alone too, and lowers no floor.
    s.release(&grant.lease, Release::new(Duration::from_secs(1), 5))
        .await
        .unwrap();
    assert_eq!(value(&mut c, &key).await.unwrap().1, other);
    assert_eq!(floor(&mut c, &floor_key).await, "00000000000000001234");
    c.lease_revoke(other).await.unwrap();
}

#[tokio::test]
async fn renew_is_lost_when_the_etcd_lease_is_gone_or_the_key_deleted_or_created_again() {
    let prefix = Prefix::new();
    let s = common::strategy(&prefix).await;
    let mut c = raw().await;
    let grant = acquire(&s, TTL).await.unwrap();
    c.lease_revoke(grant.lease.etcd_lease_id()).await.unwrap();
    for _ in 0..2 {
        let reason = lost(&s, &grant.lease).await;
        assert!(matches!(reason, LostReason::LeaseGone { .. }), "{reason}");
    }

    // The etcd lease alive, its key deleted.
    let grant = acquire(&s, TTL).await.unwrap();
    let key = prefix.lease_key(grant.machine_id.get());
    c.delete(key.as_str(), None).await.unwrap();
    assert_eq!(lost(&s, &grant.lease).await, LostReason::KeyGone);

    // The same etcd lease, but a key created again: another holding.
    let grant = acquire(&s, TTL).await.unwrap();
    let key = prefix.lease_key(grant.machine_id.get());
    let lease = grant.lease.etcd_lease_id();
    recreate(&mut c, &key, "again", lease).await;
    let reason = lost(&s, &grant.lease).await;
    assert!(
        matches!(reason, LostReason::TakenOver { lease: l, revision }
            if l == lease && revision > grant.lease.revision()),
        "{reason}"
    );
}

#[tokio::test]
async fn an_unreachable_cluster_is_retry_not_lost() {
    let prefix = Prefix::new();
    let s = common::strategy(&prefix).await;
    let grant = acquire(&s, TTL).await.unwrap();
    let port = lease_testkit::ports::server_port().expect("a free loopback port");
    let nobody = [format!("http://127.0.0.1:{port}")];
    let dead = EtcdStrategy::new(common::options_at(&nobody, &prefix)).unwrap();
    fails(renew(&dead, &grant.lease).await, Retry);
    fails(acquire(&dead, TTL).await, Retry);
    fails(release(&dead, &grant.lease, TTL).await, Retry);
    // Nothing happened to the lease.
    renew(&s, &grant.lease).await.unwrap();
}

#[tokio::test]
async fn release_moves_the_key_onto_a_guard_lease_and_revokes_ours() {
    let prefix = Prefix::new();
    let s = common::strategy(&prefix).await;
    let mut c = raw().await;
    let grant = acquire(&s, TTL).await.unwrap();
    let key = prefix.lease_key(grant.machine_id.get());
    release(&s, &grant.lease, Duration::from_millis(2500))
        .await
        .unwrap();
    let (token, guard, created) = value(&mut c, &key).await.expect("still blocked");
    assert_eq!(token, grant.lease.token());
    assert_eq!(created, grant.lease.revision());
    assert_ne!(guard, grant.lease.etcd_lease_id());
    // Rounded up to whole seconds: blocked at least the guard.
    assert_eq!(granted_ttl(&mut c, guard).await.0, 3);
    assert_eq!(granted_ttl(&mut c, grant.lease.etcd_lease_id()).await.1, -1);
    // Released: renewing is lost, releasing again changes nothing.
    fails(renew(&s, &grant.lease).await, Lost);
    release(&s, &grant.lease, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(value(&mut c, &key).await.unwrap().1, guard);
    // The guard counts as held.
    assert_eq!(s.free_count().await.unwrap(), 511);
}

/// The floor is a key on no lease, its value 20 digits: written by the claim (see above), the
/// renewal and the release, left by a force release. What a floor means is lease-testkit's
/// floor checks', which the conformance tests run.
#[tokio::test]
async fn the_floor_is_a_key_without_lease_in_twenty_digits() {
    let prefix = Prefix::new();
    let s = common::strategy(&prefix).await;
    let mut c = raw().await;
    let grant = s.acquire(Acquire::new(TTL, now_ms(), 1234)).await.unwrap();
    let key = prefix.floor_key(grant.machine_id.get());
    s.renew(&grant.lease, Renew::new(TTL, 98_765))
        .await
        .unwrap();
    let (stored, lease, _) = value(&mut c, &key).await.unwrap();
    assert_eq!((stored.as_str(), lease), ("00000000000000098765", 0));
    s.release(&grant.lease, Release::new(Duration::from_secs(1), 50_000))
        .await
        .unwrap();
    assert!(s.force_release(grant.machine_id).await.unwrap());
    let (stored, lease, _) = value(&mut c, &key).await.unwrap();
    assert_eq!((stored.as_str(), lease), ("00000000000000050000", 0));
}

#[tokio::test]
async fn an_unreadable_floor_is_never_claimed_or_raised() {
    let prefix = Prefix::new();
    let s = common::strategy(&prefix).await;
    let mut c = raw().await;
    occupy_all_but(&mut c, &prefix, &[7]).await;
    let floor_key = prefix.floor_key(7);
    c.put(floor_key.as_str(), "soon", None).await.unwrap();
    let e = fails(acquire(&s, TTL).await, Other);
    assert!(
        matches!(&e, EtcdLeaseError::UnreadableFloor { id, value, .. } if id.get() == 7 && value == "soon"),
        "{e}"
    );
    assert_eq!(floor(&mut c, &floor_key).await, "soon");
    // Held, then made unreadable: its renewal cannot raise it, and leaves it as it is.
    c.delete(floor_key.as_str(), None).await.unwrap();
    let grant = acquire(&s, TTL).await.unwrap();
    assert_eq!(grant.machine_id.get(), 7);
    c.put(floor_key.as_str(), "soon", None).await.unwrap();
    let e = renew(&s, &grant.lease).await.unwrap_err();
    assert!(matches!(e, EtcdLeaseError::UnreadableFloor { .. }), "{e}");
    assert_eq!(floor(&mut c, &floor_key).await, "soon");
    // Exhausted once that ID is taken too.
    fails(acquire(&s, TTL).await, Exhausted);
}

#[tokio::test]
async fn operator_views() {
    let prefix = Prefix::new();
    let s = common::strategy(&prefix).await;
    let mut c = raw().await;
    assert_eq!(s.free_count().await.unwrap(), 512);
    assert!(s.holders().await.unwrap().is_empty());
    let a = acquire(&s, TTL).await.unwrap();
    let b = acquire(&s, Duration::from_secs(60)).await.unwrap();
    c.put(prefix.lease_key(511), "foreign-holder", None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let holders = s.holders().await.unwrap();
    let mut expected = vec![
        (a.machine_id, a.lease.token()[..8].to_owned()),
        (b.machine_id, b.lease.token()[..8].to_owned()),
        (MachineId::new(511).unwrap(), "foreign-".to_owned()),
    ];
    expected.sort();
    let got: Vec<_> = holders
        .iter()
        .map(|h| (h.machine_id, h.token_prefix.clone()))
        .collect();
    assert_eq!(got, expected);
    for h in &holders {
        if h.machine_id == a.machine_id {
            assert!(h.expires_in <= TTL && h.expires_in >= TTL - Duration::from_secs(5));
        } else if h.machine_id == b.machine_id {
            assert!(h.expires_in > TTL);
        } else {
            assert_eq!(h.expires_in, Duration::MAX, "a key without a lease");
        }
    }
    assert_eq!(s.free_count().await.unwrap(), 509);
}

#[tokio::test]
async fn two_prefixes_do_not_see_each_other() {
    let (p1, p2) = (Prefix::new(), Prefix::new());
    let mut c = raw().await;
    occupy_all_but(&mut c, &p1, &[]).await;
    let s1 = common::strategy(&p1).await;
    let s2 = common::strategy(&p2).await;
    fails(acquire(&s1, TTL).await, Exhausted);
    acquire(&s2, TTL).await.unwrap();
    assert_eq!(s1.free_count().await.unwrap(), 0);
    assert_eq!(s2.free_count().await.unwrap(), 511);
}

/// A server of its own with authentication on: a wrong password and a user without access to
/// the prefix fail startup (`Misconfigured`), the right user works.
#[tokio::test]
async fn authentication_errors_are_misconfigured() {
    let cluster = common::OwnCluster::start(1);
    let endpoints = cluster.endpoints();
    let mut c = common::raw_at(&endpoints).await;
    c.user_add("root", "root-pw", None).await.unwrap();
    c.user_grant_role("root", "root").await.unwrap();
    c.user_add("outsider", "outsider-pw", None).await.unwrap();
    c.auth_enable().await.unwrap();
    let prefix = Prefix::at(endpoints.clone());
    let with = |user: &str, password: &str| {
        EtcdStrategy::new(common::options_at(&endpoints, &prefix).with_user(user, password))
            .unwrap()
    };

    for (user, password) in [("root", "wrong"), ("outsider", "outsider-pw")] {
        fails(acquire(&with(user, password), TTL).await, Misconfigured);
    }
    let root = with("root", "root-pw");
    common::initialize(&root).await;
    let grant = acquire(&root, TTL).await.unwrap();
    renew(&root, &grant.lease).await.unwrap();
    release(&root, &grant.lease, Duration::from_secs(1))
        .await
        .unwrap();
    // Without credentials on a cluster that requires them.
    let anonymous = EtcdStrategy::new(common::options_at(&endpoints, &prefix)).unwrap();
    fails(acquire(&anonymous, TTL).await, Misconfigured);
}

#[tokio::test]
async fn urls_and_options_are_checked() {
    fails(EtcdStrategy::from_url("etcd://nohost"), Misconfigured);
    let s = EtcdStrategy::from_url("etcd://127.0.0.1:2390,127.0.0.1:2391/my/ids").unwrap();
    assert_eq!(s.options().prefix(), "/my/ids/");
    assert_eq!(
        s.options().endpoints(),
        ["http://127.0.0.1:2390", "http://127.0.0.1:2391"]
    );
    let options = EtcdOptions::new(["http://h:1"]).with_acquire_attempts(0);
    fails(EtcdStrategy::new(options), Misconfigured);
    // An https endpoint without the `tls` feature cannot be served.
    #[cfg(not(feature = "tls"))]
    {
        let s = EtcdStrategy::new(EtcdOptions::new(["https://127.0.0.1:1"])).unwrap();
        fails(acquire(&s, TTL).await, Misconfigured);
    }
}

#[test]
fn terms_whose_grants_fall_below_the_minimum_ttl_are_refused() {
    use lease_manager::LeaseConfig;
    let options = EtcdOptions::new(["http://h:1"]);
    let defaults = LeaseConfig::default().terms();
    let s = EtcdStrategy::new(options.clone()).unwrap();
    s.check_terms(&defaults).unwrap();
    let capped = options.with_max_lease_duration(Duration::from_secs(20));
    let capped = EtcdStrategy::new(capped).unwrap();
    let e = fails(capped.check_terms(&defaults), Misconfigured);
    assert_eq!(
        e.to_string(),
        "invalid lease-etcd options: leases would be granted 20s (the lease duration 28800s, at \
         most max_lease_duration 20s, in whole seconds as etcd grants them), below the lease \
         manager's min_ttl (30s): raise EtcdOptions::max_lease_duration or the lease duration, \
         or lower LeaseConfig::with_min_ttl"
    );
    // 30.5 s is granted as 30 s: still the default minimum.
    let config = LeaseConfig::default().with_lease_duration(Duration::from_millis(30_500));
    s.check_terms(&config.terms()).unwrap();
    assert_eq!(
        s.profile(),
        lease_core::Profile::new("etcd").recording_floor()
    );
}
