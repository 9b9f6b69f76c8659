//! A server that forgets the leases while it stays up: the lease hash flushed (`FLUSHALL`),
//! deleted (`DEL` by a cleanup script) or evicted under a running holder. The server's uptime
//! and run ID do not change, so the restart guard (faults.rs) sees nothing; the hash's
//! initialization marker does.

use crate::common;

use std::time::{Duration, Instant};

use common::{Binary, Key, OwnServer, Server, occupy, options, raw, servers};
use lease_core::{Acquire, ErrorKind, LeaseError, Renew, StoreAdmin, Strategy};
use lease_redis::redis::{self, aio::MultiplexedConnection};
use lease_redis::{AmnesiaGuard, RedisLeaseError, RedisOptions, RedisStrategy};
use nonce_core::{BootClock, Clock};

const MAX_LEASE: Duration = Duration::from_secs(4);
const MAX_OFFSET: Duration = Duration::from_millis(250);
/// The amnesia hold-off of these options: the longest lease and twice the clock offset.
const HOLD_OFF: Duration = Duration::from_millis(4500);

fn guarded(key: &Key) -> RedisOptions {
    options(key)
        .with_amnesia_guard(AmnesiaGuard::HoldOff)
        .with_max_lease_duration(MAX_LEASE)
        .with_max_clock_offset(MAX_OFFSET)
}

async fn connect(server: &Server, options: RedisOptions) -> RedisStrategy {
    RedisStrategy::connect(&server.url, options)
        .await
        .expect("connect")
}

fn now_ms() -> u64 {
    BootClock::new().now_ms()
}

/// Waits until `server` has been up for longer than the hold-off (and the second its uptime
/// rounding costs), so that only the guard under test can hold an acquisition off.
async fn wait_for_uptime(server: &Server) {
    let mut connection = raw(server).await;
    loop {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut connection)
            .await
            .expect("INFO server");
        let uptime: u64 = info
            .lines()
            .find_map(|line| line.strip_prefix("uptime_in_seconds:"))
            .and_then(|s| s.trim().parse().ok())
            .expect("uptime_in_seconds");
        if Duration::from_secs(uptime) > HOLD_OFF + Duration::from_secs(2) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How the lease data goes away.
#[derive(Debug, Clone, Copy)]
enum Wipe {
    /// `DEL` of the lease hash (a cleanup script; eviction removes the key the same way).
    Del,
    /// `FLUSHALL` (only on a server of the test's own).
    FlushAll,
}

async fn wipe(connection: &mut MultiplexedConnection, key: &Key, how: Wipe) {
    match how {
        Wipe::Del => {
            let _: i64 = redis::cmd("DEL")
                .arg(&key.name)
                .query_async(connection)
                .await
                .expect("DEL");
        }
        Wipe::FlushAll => {
            let _: String = redis::cmd("FLUSHALL")
                .query_async(connection)
                .await
                .expect("FLUSHALL");
        }
    }
}

/// Node A holds an ID; the lease data vanishes; every other ID is then held by someone else.
/// Node B must not be handed A's ID while A may still generate with it: B is held off for the
/// hold-off, A's renewal is lost, and once the hold-off has passed B gets the ID.
async fn lost_lease_data_is_held_off(server: &Server, how: Wipe) {
    wait_for_uptime(server).await;
    let key = Key::new(server);
    let a = connect(server, guarded(&key)).await;
    let b = connect(server, guarded(&key)).await;
    // A new store: initialized once.
    a.migrate().await.unwrap();
    let held = a
        .acquire(Acquire::new(MAX_LEASE, now_ms(), 0))
        .await
        .unwrap();
    let id = held.machine_id;

    let mut connection = raw(server).await;
    wipe(&mut connection, &key, how).await;
    let wiped = Instant::now();
    occupy(
        &mut connection,
        &key,
        (0..512u16).filter(|n| *n != id.get()),
    )
    .await;

    let error = match b.acquire(Acquire::new(MAX_LEASE, now_ms(), 0)).await {
        Ok(grant) => panic!(
            "{}, {how:?}: node B was handed machine id {} while node A still holds {id:?}",
            server.name, grant.machine_id
        ),
        Err(error) => error,
    };
    assert_eq!(error.kind(), ErrorKind::Retry, "{}: {error}", server.name);
    assert!(
        matches!(error, RedisLeaseError::LeaseDataMissing { .. }),
        "{}: {error}",
        server.name
    );
    let message = error.to_string();
    for part in [
        "no initialization marker",
        &key.name,
        "FLUSHALL",
        "nononce leases migrate",
    ] {
        assert!(
            message.contains(part),
            "{}: {part:?} in {message}",
            server.name
        );
    }

    // The holder learns at its next renewal and stops.
    let lost = a
        .renew(&held.lease, Renew::new(MAX_LEASE, now_ms() + 4000))
        .await
        .unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::Lost, "{}: {lost}", server.name);

    // Held off for the whole hold-off, counted from when the loss was found (after `wiped`);
    // then B is granted the only free ID.
    let granted = loop {
        match b.acquire(Acquire::new(MAX_LEASE, now_ms(), 0)).await {
            Ok(grant) => break grant,
            Err(RedisLeaseError::LeaseDataMissing { .. }) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{}: {e}", server.name),
        }
    };
    assert!(
        wiped.elapsed() >= HOLD_OFF,
        "{}: granted {:?} after the loss, inside the {HOLD_OFF:?} hold-off",
        server.name,
        wiped.elapsed()
    );
    assert_eq!(granted.machine_id, id, "{}", server.name);
}

#[tokio::test]
async fn a_lease_hash_deleted_under_a_holder_is_not_handed_out_again() {
    for server in servers() {
        lost_lease_data_is_held_off(&server, Wipe::Del).await;
    }
}

#[tokio::test]
async fn flushall_under_a_holder_does_not_hand_its_id_out_again() {
    for binary in [Binary::Valkey, Binary::Redis8] {
        let own = OwnServer::start(binary, &[]);
        lost_lease_data_is_held_off(&own.server(), Wipe::FlushAll).await;
    }
}

/// A brand-new hash is held off like a lost one (nothing tells them apart), until `migrate`
/// initializes it: then acquisition works at once, and a second `migrate` changes nothing.
#[tokio::test]
async fn migrate_initializes_a_new_store_and_ends_its_hold_off() {
    for server in servers() {
        wait_for_uptime(&server).await;
        let key = Key::new(&server);
        let node = connect(&server, guarded(&key)).await;
        let error = node
            .acquire(Acquire::new(MAX_LEASE, now_ms(), 0))
            .await
            .expect_err("acquired on a store never initialized");
        assert!(
            matches!(error, RedisLeaseError::LeaseDataMissing { .. }),
            "{}: {error}",
            server.name
        );
        let migration = node.migrate().await.unwrap();
        assert!(
            migration.to_string().contains(&key.name),
            "{}: {migration}",
            server.name
        );
        node.acquire(Acquire::new(MAX_LEASE, now_ms(), 0))
            .await
            .unwrap();
        node.migrate().await.unwrap();
        node.acquire(Acquire::new(MAX_LEASE, now_ms(), 0))
            .await
            .unwrap();
    }
}

/// With the guard off, a lost hash is not noticed: the documented trade of `AmnesiaGuard::Off`.
#[tokio::test]
async fn with_the_guard_off_a_lost_hash_goes_unnoticed() {
    let server = common::valkey();
    let key = Key::new(&server);
    let a = connect(&server, options(&key)).await;
    let b = connect(&server, options(&key)).await;
    let held = a
        .acquire(Acquire::new(MAX_LEASE, now_ms(), 0))
        .await
        .unwrap();
    let mut connection = raw(&server).await;
    wipe(&mut connection, &key, Wipe::Del).await;
    occupy(
        &mut connection,
        &key,
        (0..512u16).filter(|n| *n != held.machine_id.get()),
    )
    .await;
    let granted = b
        .acquire(Acquire::new(MAX_LEASE, now_ms(), 0))
        .await
        .unwrap();
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
        wait_for_uptime(&server).await;
        let key = Key::new(&server);
        let node = connect(&server, guarded(&key)).await;
        node.migrate().await.unwrap();
        let error = node
            .acquire(Acquire::new(MAX_LEASE, now_ms(), 0))
            .await
            .expect_err("acquired on a server whose policy may evict the lease hash");
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{error}");
        let message = error.to_string();
        for part in ["allkeys-lru", "maxmemory-policy", "noeviction"] {
            assert!(message.contains(part), "{part:?} in {message}");
        }
        let mut connection = raw(&server).await;
        for accepted in ["volatile-lru", "volatile-ttl", "noeviction"] {
            let _: String = redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg(accepted)
                .query_async(&mut connection)
                .await
                .expect("CONFIG SET");
            node.acquire(Acquire::new(MAX_LEASE, now_ms(), 0))
                .await
                .unwrap_or_else(|e| panic!("{accepted}: {e}"));
        }
    }
}
