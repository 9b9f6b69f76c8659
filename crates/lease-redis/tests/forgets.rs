//! A server that forgets the leases while it stays up: the lease hash flushed (`FLUSHALL`),
//! deleted (`DEL` by a cleanup script) or evicted under a running holder. The server's uptime
//! and run ID do not change, so the restart guard (faults.rs) sees nothing; the hash's
//! initialization marker does.

use crate::common;

use std::fmt::Debug;
use std::time::{Duration, Instant};

use common::{Binary, Key, OwnServer, Server, connect, fails, occupy, options, raw, run, servers};
use lease_core::{Acquire, ErrorKind, LeaseError, Renew, StoreAdmin, Strategy};
use lease_redis::{AmnesiaGuard, RedisLeaseError, RedisOptions};
use nonce_core::{BootClock, Clock};

const MAX_LEASE: Duration = Duration::from_secs(4);
/// The amnesia hold-off of these options: the longest lease and twice the clock offset.
const HOLD_OFF: Duration = Duration::from_millis(4500);

fn guarded(key: &Key) -> RedisOptions {
    options(key)
        .with_amnesia_guard(AmnesiaGuard::HoldOff)
        .with_max_lease_duration(MAX_LEASE)
        .with_max_clock_offset(Duration::from_millis(250))
}

fn now_ms() -> u64 {
    BootClock::new().now_ms()
}

/// An acquisition of the longest lease at this machine's clock, with no floor.
fn acquire() -> Acquire {
    Acquire::new(MAX_LEASE, now_ms(), 0)
}

/// The error of an acquire held off for lost lease data; `what` if it was granted.
fn held_off<T: Debug>(
    context: &str,
    answer: Result<T, RedisLeaseError>,
    what: &str,
) -> RedisLeaseError {
    let error = answer.expect_err(what);
    assert_eq!(error.kind(), ErrorKind::Retry, "{context}: {error}");
    let missing = matches!(error, RedisLeaseError::LeaseDataMissing { .. });
    assert!(missing, "{context}: {error}");
    error
}

/// Node A holds an ID; the lease data vanishes by `wipe` (`DEL` of the lease hash, as a cleanup
/// script or an eviction does, or `FLUSHALL` on a server of the test's own); every other ID is
/// then held by someone else. Node B must not be handed A's ID while A may still generate with
/// it: B is held off for the hold-off, A's renewal is lost, and once the hold-off has passed B
/// gets the ID.
async fn lost_lease_data_is_held_off(server: &Server, wipe: &str) {
    common::wait_for_uptime(server, HOLD_OFF + Duration::from_secs(2)).await;
    let key = Key::new(server);
    let context = format!("{}, {wipe}", server.name);
    let a = connect(server, guarded(&key)).await;
    let b = connect(server, guarded(&key)).await;
    // A brand-new hash is held off like a lost one (nothing tells them apart), until `migrate`
    // initializes it: then acquisition works at once, and a second `migrate` changes nothing.
    let fresh = a.acquire(acquire()).await;
    held_off(&context, fresh, "acquired on a new store");
    let migration = a.migrate().await.unwrap().to_string();
    assert!(migration.contains(&key.name), "{context}: {migration}");
    a.acquire(acquire()).await.unwrap();
    a.migrate().await.unwrap();
    let held = a.acquire(acquire()).await.unwrap();
    let id = held.machine_id;

    let mut connection = raw(server).await;
    let n = if wipe == "DEL" { 2 } else { 1 };
    run::<()>(&mut connection, &[wipe, &key.name][..n]).await;
    let wiped = Instant::now();
    let others = (0..512u16).filter(|n| *n != id.get());
    occupy(&mut connection, &key, others).await;

    let what = "node B was handed the id node A still holds";
    let error = held_off(&context, b.acquire(acquire()).await, what);
    let message = error.to_string();
    let parts = "no initialization marker|FLUSHALL|nononce leases migrate".split('|');
    for part in parts.chain([key.name.as_str()]) {
        assert!(message.contains(part), "{context}: {part:?} in {message}");
    }

    // The holder learns at its next renewal and stops.
    let renewal = Renew::new(MAX_LEASE, now_ms() + 4000);
    fails(a.renew(&held.lease, renewal).await, ErrorKind::Lost);

    // Held off for the whole hold-off, counted from when the loss was found (after `wiped`);
    // then B is granted the only free ID.
    let granted = loop {
        match b.acquire(acquire()).await {
            Ok(grant) => break grant,
            Err(RedisLeaseError::LeaseDataMissing { .. }) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{context}: {e}"),
        }
    };
    let after = wiped.elapsed();
    assert!(
        after >= HOLD_OFF,
        "{context}: granted {after:?} after the loss"
    );
    assert_eq!(granted.machine_id, id, "{context}");
}

#[tokio::test]
async fn lease_data_deleted_or_flushed_under_a_holder_is_not_handed_out_again() {
    for server in servers() {
        lost_lease_data_is_held_off(&server, "DEL").await;
    }
    for binary in [Binary::Valkey, Binary::Redis8] {
        let own = OwnServer::start(binary, &[]);
        lost_lease_data_is_held_off(&own.server(), "FLUSHALL").await;
    }
}

/// With the guard off, a lost hash is not noticed: the documented trade of `AmnesiaGuard::Off`.
#[tokio::test]
async fn with_the_guard_off_a_lost_hash_goes_unnoticed() {
    let server = common::valkey();
    let key = Key::new(&server);
    let a = connect(&server, options(&key)).await;
    let b = connect(&server, options(&key)).await;
    let held = a.acquire(acquire()).await.unwrap();
    let mut connection = raw(&server).await;
    run::<()>(&mut connection, &["DEL", &key.name]).await;
    let others = (0..512u16).filter(|n| *n != held.machine_id.get());
    occupy(&mut connection, &key, others).await;
    let granted = b.acquire(acquire()).await.unwrap();
    assert_eq!(granted.machine_id, held.machine_id);
}

/// A server that may evict any key under memory pressure could evict the lease hash: refused,
/// naming the policy. `noeviction` and the `volatile-*` policies (which evict only keys with a
/// TTL of their own; the lease hash has none) are accepted.
#[tokio::test]
async fn a_server_that_may_evict_the_lease_hash_is_refused() {
    for binary in [Binary::Valkey, Binary::Redis8] {
        let own = OwnServer::start(binary, &["--maxmemory-policy", "allkeys-lru"]);
        let server = own.server();
        common::wait_for_uptime(&server, HOLD_OFF + Duration::from_secs(2)).await;
        let key = Key::new(&server);
        let node = connect(&server, guarded(&key)).await;
        node.migrate().await.unwrap();
        let error = fails(node.acquire(acquire()).await, ErrorKind::Misconfigured);
        let message = error.to_string();
        for part in ["allkeys-lru", "maxmemory-policy", "noeviction"] {
            assert!(message.contains(part), "{part:?} in {message}");
        }
        let mut connection = raw(&server).await;
        for accepted in ["volatile-lru", "volatile-ttl", "noeviction"] {
            let command = ["CONFIG", "SET", "maxmemory-policy", accepted];
            run::<()>(&mut connection, &command).await;
            let answer = node.acquire(acquire()).await;
            answer.unwrap_or_else(|e| panic!("{accepted}: {e}"));
        }
    }
}

/// A brand-new server, up for less than the hold-off, and a new hash: held off (a new hash and
/// a lost one look the same, and so do a new server and one restarted without its data) until
/// `migrate` initializes the hash, on this server process: then acquisition works at once, as
/// a server that started after the hash's initialization cannot have forgotten a lease of an
/// earlier one. A hash whose initialization names another process (a restart that kept the
/// data) is held off for the uptime, and a flushed one for its marker, as before.
#[tokio::test]
async fn a_new_server_leases_at_once_after_migrate() {
    // A hold-off of 80 s: the server stays younger than it for the whole test.
    let max_lease = Duration::from_secs(60);
    let long = |key: &Key| {
        guarded(key)
            .with_max_lease_duration(max_lease)
            .with_max_clock_offset(Duration::from_secs(10))
    };
    let acquire = || Acquire::new(max_lease, now_ms(), 0);
    for binary in [Binary::Valkey, Binary::Redis8] {
        let own = OwnServer::start(binary, &[]);
        let server = own.server();
        let context = format!("{binary:?}");
        let key = Key::new(&server);
        let node = connect(&server, long(&key)).await;
        let before = node.acquire(acquire()).await;
        fails(before, ErrorKind::Retry);
        node.migrate().await.unwrap();
        let held = node.acquire(acquire()).await;
        let held = held.unwrap_or_else(|e| panic!("{context}: held off after migrate: {e}"));

        // The same data on another process (a restart that kept it): the uptime guard.
        let mut connection = raw(&server).await;
        let earlier = "0123456789abcdef0123456789abcdef01234567";
        run::<()>(&mut connection, &["HSET", &key.name, "open_run", earlier]).await;
        let other = connect(&server, long(&key)).await;
        let error = fails(other.acquire(acquire()).await, ErrorKind::Retry);
        let uptime = matches!(error, RedisLeaseError::AmnesiaWindow { .. });
        assert!(uptime, "{context}: {error}");

        // Flushed: the marker and the run go with the hash, and the young server is held off.
        node.migrate().await.unwrap();
        other.acquire(acquire()).await.unwrap();
        run::<()>(&mut connection, &["FLUSHALL"]).await;
        let error = fails(other.acquire(acquire()).await, ErrorKind::Retry);
        let uptime = matches!(error, RedisLeaseError::AmnesiaWindow { .. });
        assert!(uptime, "{context}: {error}");
        let renewed = node
            .renew(&held.lease, Renew::new(max_lease, now_ms()))
            .await;
        fails(renewed, ErrorKind::Lost);
    }
}
