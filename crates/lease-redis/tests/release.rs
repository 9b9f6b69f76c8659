//! Release on real Valkey 9 and Redis 8 servers, as the hash shows it and a NoNoncense node
//! reads it: after a release and a late renewal, the ID's field carries the guard (not a new
//! lease) and the released floor, NoNoncense sees the ID taken and cannot claim it until the
//! guard ends, and then nothing of the lease is left. That the late renewal is lost, the retried
//! release harmless and the ID free after the guard for this crate's acquirers is
//! `lease-testkit`'s `renew_after_release` check (tests/conformance.rs).

use crate::common;

use std::time::Duration;

use common::{F, Key, hget, hpttl, occupy, raw, servers, strategy};
use lease_core::{Acquire, Release, Renew, Strategy};
use lease_redis::redis::{self, aio::MultiplexedConnection};
use lease_redis::{RedisLease, RedisStrategy};

/// The lease manager's default lease duration.
const LEASE: Duration = Duration::from_secs(8 * 3600);
const LEASE_MS: u64 = 8 * 3_600_000;
const GUARD: Duration = Duration::from_millis(400);
const GUARD_MS: i64 = 400;
/// The only free ID in these tests.
const ID: u16 = 100;

async fn acquire(s: &RedisStrategy) -> RedisLease {
    let grant = s.acquire(Acquire::new(LEASE, F, F + LEASE_MS)).await;
    grant.expect("acquire").lease
}

async fn release(s: &RedisStrategy, lease: &RedisLease) {
    s.release(lease, Release::new(GUARD, F + 12))
        .await
        .expect("release");
}

/// A renewal after the release, with a floor above the released one (its outcome is the
/// testkit's to check).
async fn late_renew(s: &RedisStrategy, lease: &RedisLease) {
    let renewal = s.renew(lease, Renew::new(LEASE, F + 2 * LEASE_MS)).await;
    assert!(renewal.is_err(), "a renewal after the release succeeded");
}

/// The IDs a NoNoncense node reads as taken (`leased_ids/1`): every field of `HKEYS` that does
/// not start with `token.` and is an integer.
async fn nononcense_taken(c: &mut MultiplexedConnection, key: &Key) -> Vec<i64> {
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&key.name)
        .query_async(c)
        .await
        .expect("HKEYS");
    let mut taken: Vec<i64> = fields
        .iter()
        .filter(|f| !f.starts_with("token."))
        .filter_map(|f| f.parse().ok())
        .collect();
    taken.sort_unstable();
    taken
}

/// A NoNoncense node's claim of `id`: `HSETEX FNX` of the ID field and its own marker.
async fn nononcense_claims(c: &mut MultiplexedConnection, key: &Key, id: u16) -> bool {
    let token = "nononcense0000000000000";
    let claimed: i64 = redis::cmd("HSETEX")
        .arg(&key.name)
        .arg("FNX")
        .arg("PX")
        .arg(60_000)
        .arg("FIELDS")
        .arg(2)
        .arg(id.to_string())
        .arg(token)
        .arg(format!("token.{id}.{token}"))
        .arg(id.to_string())
        .query_async(c)
        .await
        .expect("HSETEX FNX");
    claimed == 1
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
        release(&s, &lease).await;

        // After a late renewal the ID's field keeps the guard, not a new 8 h lease, and the
        // released floor.
        late_renew(&s, &lease).await;
        let ttl = hpttl(&mut c, &key, &ID.to_string()).await;
        assert!(
            (1..=GUARD_MS).contains(&ttl),
            "{name}: the released id has {ttl} ms left, not the guard"
        );
        assert_eq!(
            hget(&mut c, &key, &format!("floor.{ID}")).await,
            Some((F + 12).to_string()),
            "{name}: the late renewal moved the floor"
        );

        // Blocked during the guard for NoNoncense: the ID field is there, its claim fails.
        assert!(
            nononcense_taken(&mut c, &key)
                .await
                .contains(&i64::from(ID))
        );
        assert!(!nononcense_claims(&mut c, &key, ID).await, "{name}");

        // A retried release does not lengthen the guard.
        release(&s, &lease).await;
        let again = hpttl(&mut c, &key, &ID.to_string()).await;
        assert!((1..=ttl).contains(&again), "{name}: {again} after {ttl}");

        // Free after the guard, for NoNoncense too; nothing of the lease is left.
        tokio::time::sleep(GUARD + Duration::from_millis(150)).await;
        late_renew(&s, &lease).await;
        assert_eq!(hpttl(&mut c, &key, &ID.to_string()).await, -2, "{name}");
        assert_eq!(hpttl(&mut c, &key, &lease.marker()).await, -2, "{name}");
        assert!(
            !nononcense_taken(&mut c, &key)
                .await
                .contains(&i64::from(ID))
        );
        assert!(nononcense_claims(&mut c, &key, ID).await, "{name}");
    }
}

#[tokio::test]
async fn a_release_with_no_guard_leaves_nothing_in_the_hash() {
    for server in servers() {
        let name = server.name;
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        let s = strategy(&server, &key).await;
        let lease = acquire(&s).await;
        let id = lease.machine_id().to_string();
        s.release(&lease, Release::new(Duration::ZERO, F + 1))
            .await
            .unwrap();
        assert_eq!(hpttl(&mut c, &key, &id).await, -2, "{name}");
        late_renew(&s, &lease).await;
        assert_eq!(hpttl(&mut c, &key, &id).await, -2, "{name}");
        assert_eq!(hpttl(&mut c, &key, &lease.marker()).await, -2, "{name}");
    }
}
