//! The wire protocol against real Valkey 9 and Redis 8 servers (and Redis 7 for "unsupported").
//! What the floors do is in floor.rs.

use crate::common;

use std::time::Duration;

use common::{
    Binary, F, Key, OwnServer, Server, acquire, connect, fails, hget, hkeys, hpttl, occupy,
    options, poll, raw, release, renew, run, servers, strategy, ttls_within,
};
use lease_core::{ErrorKind, Grant, LeaseError, Strategy};
use lease_manager::{AcquireError, LeaseConfig, LeaseManager, StartError};
use lease_redis::RedisLeaseError as E;
use lease_redis::{AmnesiaGuard, RedisLease, RedisOptions, RedisStrategy};

const HOUR: Duration = Duration::from_secs(3600);

/// An acquire, and the renewal and release of `lease` (held elsewhere), all fail with `kind`
/// on `s`: the acquire's error and the release's.
async fn every_request_fails(s: &RedisStrategy, lease: &RedisLease, kind: ErrorKind) -> [E; 2] {
    let acquired = fails(s.acquire(acquire(HOUR)).await, kind);
    fails(s.renew(lease, renew(HOUR)).await, kind);
    let released = s.release(lease, release(Duration::from_secs(1))).await;
    [acquired, fails(released, kind)]
}

/// A lease on a hash of `server` (`key`), held for an hour.
async fn held(server: &Server, key: &Key) -> Grant<RedisLease> {
    let s = strategy(server, key).await;
    s.acquire(acquire(HOUR)).await.expect("acquire")
}

#[tokio::test]
async fn wire_format_matches_nononcense() {
    for server in servers() {
        let key = Key::new(&server);
        let s = strategy(&server, &key).await;
        let grant = s.acquire(acquire(HOUR)).await.unwrap();
        let (id, token) = (grant.machine_id.to_string(), grant.lease.token().to_owned());
        assert_eq!(token.len(), 22);
        let mut all: Vec<(String, String)> =
            run(&mut raw(&server).await, &["HGETALL", &key.name]).await;
        all.sort();
        // NoNoncense's two lease fields, and this crate's floor.
        let marker = format!("token.{id}.{token}");
        let mut expected = vec![
            (id.clone(), token),
            (marker.clone(), id.clone()),
            (format!("floor.{id}"), F.to_string()),
        ];
        expected.sort();
        assert_eq!(all, expected, "{}", server.name);
        assert_eq!(grant.ttl, HOUR);
        assert_eq!(grant.lease.marker(), marker);
    }
}

#[tokio::test]
async fn first_free_id_and_ids_of_every_digit_length() {
    for server in servers() {
        for free in [0u16, 5, 55, 300, 505, 511] {
            let key = Key::new(&server);
            let others = (0..512).filter(|&i| i != free);
            occupy(&mut raw(&server).await, &key, others).await;
            let s = strategy(&server, &key).await;
            let grant = s.acquire(acquire(HOUR)).await.unwrap();
            assert_eq!(grant.machine_id.get(), free, "{}", server.name);
            // Now every ID is taken.
            fails(s.acquire(acquire(HOUR)).await, ErrorKind::Exhausted);
        }
    }
}

#[tokio::test]
async fn markers_and_foreign_fields_never_block_an_id() {
    for server in servers() {
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        // Fields that contain digits but are not ID fields.
        let foreign = "token.3.abc|token.300|007|00|512|1000|-1|+2|4a|name| 6";
        let foreign: Vec<&str> = foreign.split('|').collect();
        // Floor fields name an ID too, and block it no more than the rest.
        let floors = ["floor.8", "floor.0"];
        let mut command = vec!["HSET", &key.name];
        command.extend(foreign.iter().flat_map(|field| [*field, "x"]));
        command.extend(floors.iter().flat_map(|field| [*field, "5"]));
        run::<i64>(&mut c, &command).await;
        let s = strategy(&server, &key).await;
        let mut ids = Vec::new();
        for _ in 0..512 {
            let grant = s.acquire(acquire(HOUR)).await.expect("every id is free");
            ids.push(grant.machine_id.get());
        }
        ids.sort_unstable();
        assert_eq!(ids, (0..512).collect::<Vec<u16>>(), "{}", server.name);
        let error = fails(s.acquire(acquire(HOUR)).await, ErrorKind::Exhausted);
        assert!(error.to_string().contains(&key.name), "{error}");
        // The foreign fields are untouched; the floors were raised by the claims of their IDs.
        for field in foreign {
            let value = hget(&mut c, &key, field).await;
            assert_eq!(value.as_deref(), Some("x"), "{field}");
        }
        for field in floors {
            let value = hget(&mut c, &key, field).await;
            assert_eq!(value, Some(F.to_string()), "{field}");
        }
    }
}

#[tokio::test]
async fn renew_and_release_never_touch_another_owners_lease() {
    for server in servers() {
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        // Only ID 9 is free, so the second owner gets the first owner's ID.
        occupy(&mut c, &key, (0..512).filter(|&i| i != 9)).await;
        let s = strategy(&server, &key).await;
        let old = s.acquire(acquire(Duration::from_millis(150))).await;
        let old = old.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let new = s.acquire(acquire(Duration::from_secs(30))).await.unwrap();
        assert_eq!(old.machine_id, new.machine_id);
        assert_ne!(old.lease.token(), new.lease.token());

        fails(s.renew(&old.lease, renew(HOUR)).await, ErrorKind::Lost);
        let released = s.release(&old.lease, release(Duration::from_millis(1)));
        released.await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let token = hget(&mut c, &key, "9").await;
        assert_eq!(token.as_deref(), Some(new.lease.token()));
        // The new owner's TTL is unchanged, the old owner's marker gone.
        ttls_within(&mut c, &key, &[new.lease.marker()], 25_000..=30_000).await;
        assert_eq!(hpttl(&mut c, &key, &old.lease.marker()).await, -2);
        let renewal = s.renew(&new.lease, renew(Duration::from_secs(30)));
        renewal.await.unwrap();
    }
}

#[tokio::test]
async fn transport_errors_are_retry() {
    let server = common::valkey();
    let key = Key::new(&server);
    let held = held(&server, &key).await;
    let port = lease_testkit::ports::server_port().expect("a free loopback port");
    let closed = options(&key).with_connection_timeout(Duration::from_millis(300));
    let url = format!("redis://127.0.0.1:{port}");
    let s = RedisStrategy::connect(&url, closed).await.unwrap();
    every_request_fails(&s, &held.lease, ErrorKind::Retry).await;

    // A server that dies under a held lease.
    let mut own = OwnServer::start(Binary::Valkey, &[]);
    let s = strategy(&own.server(), &Key::new(&own.server())).await;
    let grant = s.acquire(acquire(HOUR)).await.unwrap();
    own.kill();
    fails(s.renew(&grant.lease, renew(HOUR)).await, ErrorKind::Retry);
}

#[tokio::test]
async fn redis_7_is_unsupported_at_the_first_acquire() {
    let (redis7, valkey) = (common::redis7(), common::valkey());
    let (key, valkey_key) = (Key::new(&redis7), Key::new(&valkey));
    let s = strategy(&redis7, &key).await;
    let held = held(&valkey, &valkey_key).await;
    // Renew and release of a lease from elsewhere: unsupported too (their scripts' HSETEX is
    // an unknown command).
    let [acquired, released] = every_request_fails(&s, &held.lease, ErrorKind::Unsupported).await;
    let message = acquired.to_string();
    let named = message.contains("Redis 8") && message.contains("Valkey 9");
    assert!(named, "{message}");
    assert!(released.to_string().contains("Valkey 9"), "{released}");
    // The lease manager fails startup at once (a fatal error, not a timeout after retries);
    // with no acquire timeout, retrying would never end.
    let config = LeaseConfig::default().with_acquire_timeout(None);
    let result = LeaseManager::builder(s).with_config(config).start().await;
    assert!(
        matches!(result, Err(StartError::Acquire(AcquireError::Fatal(_)))),
        "{:?}",
        result.err()
    );
}

#[tokio::test]
async fn a_key_of_another_type_is_misconfigured() {
    for server in servers() {
        let name = server.name;
        let (key, other) = (Key::new(&server), Key::new(&server));
        run::<()>(&mut raw(&server).await, &["SET", &key.name, "x"]).await;
        let s = strategy(&server, &key).await;
        // Renew and release on it too (their scripts' HSETEX fails).
        let lease = held(&server, &other).await.lease;
        let [_, released] = every_request_fails(&s, &lease, ErrorKind::Misconfigured).await;
        let said = released.to_string().contains("not a hash");
        assert!(said, "{name}: {released}");
        // With the amnesia guard on, the first read is a pipeline (INFO server + HGETALL): its
        // failure is classified by the command that failed.
        let guarded = options(&key).with_amnesia_guard(AmnesiaGuard::HoldOff);
        let answer = connect(&server, guarded).await.acquire(acquire(HOUR)).await;
        let error = fails(answer, ErrorKind::Misconfigured);
        assert!(error.to_string().contains("not a hash"), "{name}: {error}");
    }
}

#[tokio::test]
async fn bad_urls_and_options_are_misconfigured() {
    let url = RedisStrategy::connect("http://x", RedisOptions::new()).await;
    fails(url, ErrorKind::Misconfigured);
    let options = RedisOptions::new().with_acquire_attempts(0);
    let error = RedisStrategy::connect("redis://127.0.0.1:6390", options).await;
    let error = fails(error, ErrorKind::Misconfigured);
    assert!(error.to_string().contains("acquire_attempts"), "{error}");
}

#[tokio::test]
async fn missing_replica_confirmation_is_retry() {
    for server in servers() {
        let key = Key::new(&server);
        let replicas = options(&key).with_wait_for_replicas(1, Duration::from_millis(100));
        let s = connect(&server, replicas).await;
        let error = fails(s.acquire(acquire(HOUR)).await, ErrorKind::Retry);
        let answered = matches!(
            error,
            E::Replicas {
                acknowledged: 0,
                required: 1,
                ..
            }
        );
        assert!(answered, "{error}");
    }
}

#[tokio::test]
async fn replica_confirmation_with_a_real_replica() {
    let primary = OwnServer::start(Binary::Valkey, &[]);
    let of = primary.port.to_string();
    let replica = OwnServer::start(Binary::Valkey, &["--replicaof", "127.0.0.1", &of]);
    let key = Key::new(&primary.server());
    let replicas = options(&key).with_wait_for_replicas(1, Duration::from_secs(5));
    let s = connect(&primary.server(), replicas).await;
    // The replica may still be syncing: retry briefly, as the manager would.
    let grant = poll(50, "replica confirmed", || async {
        let answer = s.acquire(acquire(HOUR)).await;
        if let Err(e) = &answer {
            assert_eq!(e.kind(), ErrorKind::Retry, "{e}");
        }
        answer
    })
    .await;
    let id = grant.machine_id.to_string();
    let copied = hget(&mut raw(&replica.server()).await, &key, &id).await;
    assert_eq!(copied.as_deref(), Some(grant.lease.token()));
    s.renew(&grant.lease, renew(HOUR)).await.unwrap();
}

#[tokio::test]
async fn operators_see_holders_and_free_a_dead_nodes_id() {
    for server in servers() {
        let key = Key::new(&server);
        let s = strategy(&server, &key).await;
        let a = s.acquire(acquire(HOUR)).await.unwrap();
        let b = s.acquire(acquire(Duration::from_secs(60))).await.unwrap();
        // A foreign field never shows up as a holder.
        run::<()>(&mut raw(&server).await, &["HSET", &key.name, "note", "x"]).await;
        let holders = s.holders().await.unwrap();
        assert_eq!(holders.len(), 2);
        let mut expected = [(&a, HOUR), (&b, Duration::from_secs(60))];
        expected.sort_by_key(|(grant, _)| grant.machine_id);
        for (h, (grant, max)) in holders.iter().zip(expected) {
            assert_eq!(h.machine_id, grant.machine_id);
            assert!(grant.lease.token().starts_with(&h.token_prefix) && h.token_prefix.len() == 8);
            let least = max - Duration::from_secs(5);
            assert!(h.expires_in <= max && h.expires_in > least, "{h:?}");
        }
        // Freeing one (the answers of a second force release are lease-testkit's operator
        // check, tests/conformance.rs) leaves the other.
        assert!(s.force_release(a.machine_id).await.unwrap());
        assert_eq!(s.holders().await.unwrap().len(), 1);
        fails(s.renew(&a.lease, renew(HOUR)).await, ErrorKind::Lost);
        let renewed = s.renew(&b.lease, renew(HOUR)).await;
        assert!(renewed.is_ok(), "the other holder is untouched");
    }
}

/// A lease manager refuses, before any lease, a configuration the options cannot serve.
#[tokio::test]
async fn a_max_lease_below_the_minimum_ttl_fails_start_before_any_grant() {
    let server = common::valkey();
    let key = Key::new(&server);
    let options = options(&key).with_max_lease_duration(Duration::from_secs(10));
    let strategy = connect(&server, options).await;
    // The default minimum TTL is 30 s: every 10 s grant would be refused.
    let error = LeaseManager::builder(strategy)
        .with_config(LeaseConfig::default())
        .start()
        .await
        .err()
        .expect("start must fail");
    let StartError::Strategy(failure) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(failure.kind, ErrorKind::Misconfigured);
    assert!(failure.reason.contains("max_lease_duration"), "{failure}");
    assert!(failure.reason.contains("min_ttl"), "{failure}");
    let fields = hkeys(&mut raw(&server).await, &key).await;
    assert!(fields.is_empty(), "nothing was claimed: {fields:?}");
}
