//! The wire protocol against real Valkey 9 and Redis 8 servers (and Redis 7 for "unsupported").
//! What the floors do is in floor.rs.

use crate::common;

use std::time::Duration;

use common::{
    F, Key, acquire, hget, hpttl, occupy, options, raw, release, renew, servers, strategy,
};
use lease_core::{ErrorKind, LeaseError, Strategy};
use lease_manager::{LeaseConfig, LeaseManager, StartError};
use lease_redis::redis;
use lease_redis::{RedisLeaseError, RedisOptions, RedisStrategy};

const HOUR: Duration = Duration::from_secs(3600);

fn kind<T: std::fmt::Debug>(result: Result<T, RedisLeaseError>) -> ErrorKind {
    result.expect_err("expected an error").kind()
}

#[tokio::test]
async fn wire_format_matches_nononcense() {
    for server in servers() {
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        let s = strategy(&server, &key).await;
        let grant = s.acquire(acquire(HOUR)).await.unwrap();
        let id = grant.machine_id.to_string();
        let token = grant.lease.token().to_owned();
        assert_eq!(token.len(), 22);
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&key.name)
            .query_async(&mut c)
            .await
            .unwrap();
        let mut all = all;
        all.sort();
        // NoNoncense's two lease fields, and this crate's floor.
        let mut expected = vec![
            (id.clone(), token.clone()),
            (format!("token.{id}.{token}"), id.clone()),
            (format!("floor.{id}"), F.to_string()),
        ];
        expected.sort();
        assert_eq!(all, expected, "{}", server.name);
        assert_eq!(grant.ttl, HOUR);
        assert_eq!(grant.lease.marker(), format!("token.{id}.{token}"));
    }
}

#[tokio::test]
async fn first_free_id_and_ids_of_every_digit_length() {
    for server in servers() {
        for free in [0u16, 5, 55, 300, 505, 511] {
            let key = Key::new(&server);
            let mut c = raw(&server).await;
            occupy(&mut c, &key, (0..512).filter(|&i| i != free)).await;
            let s = strategy(&server, &key).await;
            let grant = s.acquire(acquire(HOUR)).await.unwrap();
            assert_eq!(grant.machine_id.get(), free, "{}", server.name);
            // Now every ID is taken.
            assert_eq!(
                kind(s.acquire(acquire(HOUR)).await),
                ErrorKind::Exhausted,
                "{}",
                server.name
            );
        }
    }
}

#[tokio::test]
async fn markers_and_foreign_fields_never_block_an_id() {
    for server in servers() {
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        // Fields that contain digits but are not ID fields.
        let foreign = [
            "token.3.abc",
            "token.300",
            "007",
            "00",
            "512",
            "1000",
            "-1",
            "+2",
            "4a",
            "name",
            " 6",
        ];
        // Floor fields name an ID too, and block it no more than the rest.
        let floors = ["floor.8", "floor.0"];
        let mut cmd = redis::cmd("HSET");
        cmd.arg(&key.name);
        for field in foreign {
            cmd.arg(field).arg("x");
        }
        for field in floors {
            cmd.arg(field).arg("5");
        }
        let _: i64 = cmd.query_async(&mut c).await.unwrap();
        let s = strategy(&server, &key).await;
        let mut ids = Vec::new();
        for _ in 0..512 {
            ids.push(
                s.acquire(acquire(HOUR))
                    .await
                    .expect("every id is free")
                    .machine_id
                    .get(),
            );
        }
        ids.sort_unstable();
        assert_eq!(ids, (0..512).collect::<Vec<u16>>(), "{}", server.name);
        let error = s.acquire(acquire(HOUR)).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Exhausted);
        assert!(error.to_string().contains(&key.name), "{error}");
        // The foreign fields are untouched; the floors were raised by the claims of their IDs.
        for field in foreign {
            assert_eq!(
                hget(&mut c, &key, field).await.as_deref(),
                Some("x"),
                "{field}"
            );
        }
        for field in floors {
            assert_eq!(
                hget(&mut c, &key, field).await,
                Some(F.to_string()),
                "{field}"
            );
        }
    }
}

#[tokio::test]
async fn renew_extends_both_fields() {
    for server in servers() {
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        let s = strategy(&server, &key).await;
        let grant = s.acquire(acquire(Duration::from_secs(2))).await.unwrap();
        let id = grant.machine_id.to_string();
        let marker = grant.lease.marker();
        for field in [&id, &marker] {
            let ttl = hpttl(&mut c, &key, field).await;
            assert!((1..=2000).contains(&ttl), "{field}: {ttl}");
        }
        let renewal = s
            .renew(&grant.lease, renew(Duration::from_secs(60)))
            .await
            .unwrap();
        assert_eq!(renewal.lease, grant.lease);
        assert_eq!(renewal.ttl, Duration::from_secs(60));
        for field in [&id, &marker] {
            let ttl = hpttl(&mut c, &key, field).await;
            assert!(
                (55_000..=60_000).contains(&ttl),
                "{}: {field}: {ttl}",
                server.name
            );
        }
        assert_eq!(
            hget(&mut c, &key, &id).await.as_deref(),
            Some(grant.lease.token())
        );
        // Longer than max_lease_duration is shortened to it.
        let capped = RedisStrategy::connect(
            &server.url,
            options(&key).with_max_lease_duration(Duration::from_secs(10)),
        )
        .await
        .unwrap();
        assert_eq!(
            capped.renew(&grant.lease, renew(HOUR)).await.unwrap().ttl,
            Duration::from_secs(10)
        );
        assert!(hpttl(&mut c, &key, &marker).await <= 10_000);
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
        let old = s
            .acquire(acquire(Duration::from_millis(150)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let new = s.acquire(acquire(Duration::from_secs(30))).await.unwrap();
        assert_eq!(old.machine_id, new.machine_id);
        assert_ne!(old.lease.token(), new.lease.token());

        assert_eq!(
            kind(s.renew(&old.lease, renew(HOUR)).await),
            ErrorKind::Lost
        );
        s.release(&old.lease, release(Duration::from_millis(1)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            hget(&mut c, &key, "9").await.as_deref(),
            Some(new.lease.token())
        );
        let ttl = hpttl(&mut c, &key, &new.lease.marker()).await;
        assert!(
            (25_000..=30_000).contains(&ttl),
            "{}: new owner's ttl changed: {ttl}",
            server.name
        );
        assert_eq!(hpttl(&mut c, &key, &old.lease.marker()).await, -2);
        s.renew(&new.lease, renew(Duration::from_secs(30)))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn transport_errors_are_retry() {
    let server = common::valkey();
    let key = Key::new(&server);
    let held = strategy(&server, &key)
        .await
        .acquire(acquire(HOUR))
        .await
        .unwrap();
    let closed = format!(
        "redis://127.0.0.1:{}",
        lease_testkit::ports::server_port().expect("a free loopback port")
    );
    let s = RedisStrategy::connect(
        &closed,
        options(&key).with_connection_timeout(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let error = s.acquire(acquire(HOUR)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Retry, "{error}");
    assert_eq!(
        kind(s.renew(&held.lease, renew(HOUR)).await),
        ErrorKind::Retry
    );
    assert_eq!(
        kind(
            s.release(&held.lease, release(Duration::from_secs(1)))
                .await
        ),
        ErrorKind::Retry
    );

    // A server that dies under a held lease.
    let mut own = common::OwnServer::start(common::Binary::Valkey, &[]);
    let own_key = Key::new(&own.server());
    let s = strategy(&own.server(), &own_key).await;
    let grant = s.acquire(acquire(HOUR)).await.unwrap();
    own.kill();
    let error = s.renew(&grant.lease, renew(HOUR)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Retry, "{error}");
}

#[tokio::test]
async fn redis_7_is_unsupported_at_the_first_acquire() {
    let server = common::redis7();
    let key = Key::new(&server);
    let s = strategy(&server, &key).await;
    let error = s.acquire(acquire(HOUR)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
    let message = error.to_string();
    assert!(
        message.contains("Redis 8") && message.contains("Valkey 9"),
        "{message}"
    );
    // Renew and release of a lease from elsewhere: unsupported too (their scripts' HSETEX is
    // an unknown command).
    let valkey_key = Key::new(&common::valkey());
    let held = strategy(&common::valkey(), &valkey_key)
        .await
        .acquire(acquire(HOUR))
        .await
        .unwrap();
    let error = s.renew(&held.lease, renew(HOUR)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
    let error = s
        .release(&held.lease, release(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
    assert!(error.to_string().contains("Valkey 9"), "{error}");
    // The lease manager fails startup at once (a fatal error, not a timeout after retries);
    // with no acquire timeout, retrying would never end.
    let config = LeaseConfig::default().with_acquire_timeout(None);
    let result = LeaseManager::builder(s).with_config(config).start().await;
    assert!(
        matches!(
            result,
            Err(StartError::Acquire(lease_manager::AcquireError::Fatal(_)))
        ),
        "{:?}",
        result.err()
    );
}

#[tokio::test]
async fn a_key_of_another_type_is_misconfigured() {
    for server in servers() {
        let name = server.name;
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        let _: () = redis::cmd("SET")
            .arg(&key.name)
            .arg("x")
            .query_async(&mut c)
            .await
            .unwrap();
        let s = strategy(&server, &key).await;
        let error = s.acquire(acquire(HOUR)).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{name}: {error}");
        // Renew and release on it too (their scripts' HSETEX fails).
        let lease = strategy(&server, &Key::new(&server))
            .await
            .acquire(acquire(HOUR))
            .await
            .unwrap()
            .lease;
        let error = s.renew(&lease, renew(HOUR)).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{name}: {error}");
        let error = s
            .release(&lease, release(Duration::from_secs(1)))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{name}: {error}");
        assert!(error.to_string().contains("not a hash"), "{name}: {error}");
        // With the amnesia guard on, the first read is a pipeline (INFO server + HGETALL): its
        // failure is classified by the command that failed.
        let guarded = RedisStrategy::connect(
            &server.url,
            options(&key).with_amnesia_guard(lease_redis::AmnesiaGuard::HoldOff),
        )
        .await
        .unwrap();
        let error = guarded.acquire(acquire(HOUR)).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{name}: {error}");
        assert!(error.to_string().contains("not a hash"), "{name}: {error}");
    }
}

#[tokio::test]
async fn bad_urls_and_options_are_misconfigured() {
    let error = RedisStrategy::connect("http://x", RedisOptions::new())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misconfigured);
    let error = RedisStrategy::connect(
        "redis://127.0.0.1:6390",
        RedisOptions::new().with_acquire_attempts(0),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misconfigured);
    assert!(error.to_string().contains("acquire_attempts"), "{error}");
}

#[tokio::test]
async fn missing_replica_confirmation_is_retry() {
    for server in servers() {
        let key = Key::new(&server);
        let s = RedisStrategy::connect(
            &server.url,
            options(&key).with_wait_for_replicas(1, Duration::from_millis(100)),
        )
        .await
        .unwrap();
        let error = s.acquire(acquire(HOUR)).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Retry, "{error}");
        assert!(
            matches!(
                error,
                RedisLeaseError::Replicas {
                    acknowledged: 0,
                    required: 1,
                    ..
                }
            ),
            "{error}"
        );
    }
}

#[tokio::test]
async fn replica_confirmation_with_a_real_replica() {
    let primary = common::OwnServer::start(common::Binary::Valkey, &[]);
    let replica_of = primary.port.to_string();
    let replica = common::OwnServer::start(
        common::Binary::Valkey,
        &["--replicaof", "127.0.0.1", &replica_of],
    );
    let key = Key::new(&primary.server());
    let s = RedisStrategy::connect(
        &primary.server().url,
        options(&key).with_wait_for_replicas(1, Duration::from_secs(5)),
    )
    .await
    .unwrap();
    // The replica may still be syncing: retry briefly, as the manager would.
    let mut grant = None;
    for _ in 0..50 {
        match s.acquire(acquire(HOUR)).await {
            Ok(g) => {
                grant = Some(g);
                break;
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Retry, "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let grant = grant.expect("replica confirmed");
    let mut r = raw(&replica.server()).await;
    assert_eq!(
        hget(&mut r, &key, &grant.machine_id.to_string())
            .await
            .as_deref(),
        Some(grant.lease.token())
    );
    s.renew(&grant.lease, renew(HOUR)).await.unwrap();
}

#[tokio::test]
async fn operators_see_holders_and_free_a_dead_nodes_id() {
    for server in servers() {
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        let s = strategy(&server, &key).await;
        let a = s.acquire(acquire(HOUR)).await.unwrap();
        let b = s.acquire(acquire(Duration::from_secs(60))).await.unwrap();
        // A foreign field never shows up as a holder.
        let _: () = redis::cmd("HSET")
            .arg(&key.name)
            .arg("note")
            .arg("x")
            .query_async(&mut c)
            .await
            .unwrap();
        let holders = s.holders().await.unwrap();
        assert_eq!(holders.len(), 2);
        let mut ids = vec![a.machine_id, b.machine_id];
        ids.sort();
        assert_eq!(
            holders.iter().map(|h| h.machine_id).collect::<Vec<_>>(),
            ids
        );
        for h in &holders {
            let lease = if h.machine_id == a.machine_id {
                &a.lease
            } else {
                &b.lease
            };
            assert!(lease.token().starts_with(&h.token_prefix) && h.token_prefix.len() == 8);
            let max = if h.machine_id == a.machine_id {
                HOUR
            } else {
                Duration::from_secs(60)
            };
            assert!(
                h.expires_in <= max && h.expires_in > max - Duration::from_secs(5),
                "{h:?}"
            );
        }
        assert!(s.force_release(a.machine_id).await.unwrap());
        assert!(
            !s.force_release(a.machine_id).await.unwrap(),
            "already free"
        );
        assert_eq!(s.holders().await.unwrap().len(), 1);
        assert_eq!(kind(s.renew(&a.lease, renew(HOUR)).await), ErrorKind::Lost);
        assert!(
            s.renew(&b.lease, renew(HOUR)).await.is_ok(),
            "the other holder is untouched"
        );
    }
}
