//! Release on real Valkey 9 and Redis 8 servers, as the hash shows it and a NoNoncense node
//! reads it: after a release and a late renewal, the ID's field carries the guard (not a new
//! lease) and the released floor, NoNoncense sees the ID taken and cannot claim it until the
//! guard ends, and then nothing of the lease is left. That the late renewal is lost, the retried
//! release harmless and the ID free after the guard for this crate's acquirers is
//! `lease-testkit`'s `renew_after_release` check (tests/conformance.rs).

use crate::common;

use std::time::Duration;

use common::{F, Key, hget, hkeys, hpttl, occupy, raw, run, servers, strategy};
use lease_core::{Acquire, Release, Renew, Strategy};
use lease_redis::redis::aio::MultiplexedConnection;
use lease_redis::{RedisLease, RedisStrategy};

/// The lease manager's default lease duration.
const LEASE: Duration = Duration::from_secs(8 * 3600);
const LEASE_MS: u64 = 8 * 3_600_000;
const GUARD: Duration = Duration::from_millis(400);
/// The only free ID in these tests.
const ID: u16 = 100;

async fn acquire(s: &RedisStrategy) -> RedisLease {
    let grant = s.acquire(Acquire::new(LEASE, F, F + LEASE_MS)).await;
    grant.expect("acquire").lease
}

async fn release(s: &RedisStrategy, lease: &RedisLease, guard: Duration, floor_ms: u64) {
    let released = s.release(lease, Release::new(guard, floor_ms)).await;
    released.expect("release");
}

/// A renewal after the release, with a floor above the released one (its outcome is the
/// testkit's to check).
async fn late_renew(s: &RedisStrategy, lease: &RedisLease) {
    let renewal = s.renew(lease, Renew::new(LEASE, F + 2 * LEASE_MS)).await;
    assert!(renewal.is_err(), "a renewal after the release succeeded");
}

/// Whether a NoNoncense node reads `ID` as taken (`leased_ids/1`: every field of `HKEYS` that
/// does not start with `token.` and is an integer).
async fn nononcense_sees_taken(c: &mut MultiplexedConnection, key: &Key) -> bool {
    let fields = hkeys(c, key).await;
    let mut taken = fields.iter().filter(|f| !f.starts_with("token."));
    taken.any(|f| f.parse() == Ok(ID))
}

/// A NoNoncense node's claim of `ID`: `HSETEX FNX` of the ID field and its own marker.
async fn nononcense_claims(c: &mut MultiplexedConnection, key: &Key) -> bool {
    let (id, token) = (ID.to_string(), "nononcense0000000000000");
    let marker = format!("token.{id}.{token}");
    let fields = [&id, token, &marker, &id];
    let command = ["HSETEX", &key.name, "FNX", "PX", "60000", "FIELDS", "2"];
    run::<i64>(c, &[&command[..], &fields].concat()).await == 1
}

#[tokio::test]
async fn a_released_id_in_the_hash_and_for_nononcense() {
    for server in servers() {
        let name = server.name;
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        occupy(&mut c, &key, (0..512).filter(|&i| i != ID)).await;
        let s = strategy(&server, &key).await;
        let lease = acquire(&s).await;
        assert_eq!(lease.machine_id().get(), ID);
        release(&s, &lease, GUARD, F + 12).await;

        // After a late renewal the ID's field keeps the guard, not a new 8 h lease, and the
        // released floor.
        late_renew(&s, &lease).await;
        let ttl = hpttl(&mut c, &key, &ID.to_string()).await;
        assert!(
            (1..=400).contains(&ttl),
            "{name}: {ttl} ms left, not the guard"
        );
        let floor = hget(&mut c, &key, &format!("floor.{ID}")).await;
        assert_eq!(floor, Some((F + 12).to_string()), "{name}: the floor moved");

        // Blocked during the guard for NoNoncense: the ID field is there, its claim fails.
        assert!(nononcense_sees_taken(&mut c, &key).await, "{name}");
        assert!(!nononcense_claims(&mut c, &key).await, "{name}");

        // A retried release does not lengthen the guard.
        release(&s, &lease, GUARD, F + 12).await;
        let again = hpttl(&mut c, &key, &ID.to_string()).await;
        assert!((1..=ttl).contains(&again), "{name}: {again} after {ttl}");

        // Free after the guard, for NoNoncense too; nothing of the lease is left.
        tokio::time::sleep(GUARD + Duration::from_millis(150)).await;
        late_renew(&s, &lease).await;
        assert_eq!(hpttl(&mut c, &key, &ID.to_string()).await, -2, "{name}");
        assert_eq!(hpttl(&mut c, &key, &lease.marker()).await, -2, "{name}");
        assert!(!nononcense_sees_taken(&mut c, &key).await, "{name}");
        assert!(nononcense_claims(&mut c, &key).await, "{name}");
    }
}
