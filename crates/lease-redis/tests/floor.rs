//! The timestamp floor on real Valkey 9 and Redis 8 servers as Redis stores it: the field
//! `floor.<id>` without a TTL, compared as a number, beside the lease's fields (whose TTL each
//! renewal sets, at most `max_lease_duration`); a capped grant's floor, the server's clock,
//! unreadable floors, lost races and the round trips per operation.
//! What the floor means (raised by acquire and renew, set by release, kept through expiry and
//! force release, preferred below the acquirer's clock, out of a stale holder's reach) is
//! lease-testkit's floor checks', which the conformance tests run.

use crate::common;

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{
    F, Key, fails, hget, hkeys, hpttl, occupy, options, raw, run, servers, strategy, ttls_within,
};
use lease_core::{Acquire, ErrorKind, LeaseError, Release, Renew, StoreAdmin, Strategy};
use lease_redis::redis::{
    self, Cmd, Pipeline, RedisFuture, Value, aio::ConnectionLike, aio::MultiplexedConnection,
};
use lease_redis::{AmnesiaGuard, RedisLeaseError, RedisStrategy};

const HOUR: Duration = Duration::from_secs(3600);
const HOUR_MS: i64 = 3_600_000;

fn floor_field(id: impl Display) -> String {
    format!("floor.{id}")
}

/// The floor stored for `id`, in a field without a TTL.
async fn floor(c: &mut MultiplexedConnection, key: &Key, id: impl Display) -> Option<String> {
    let field = floor_field(id);
    let stored = hget(c, key, &field).await;
    let ttl = hpttl(c, key, &field).await;
    assert_eq!(ttl, if stored.is_some() { -1 } else { -2 }, "{field}");
    stored
}

async fn set_floor(c: &mut MultiplexedConnection, key: &Key, id: u16, value: &str) {
    run::<i64>(c, &["HSET", &key.name, &floor_field(id), value]).await;
}

/// The server's clock in Unix ms.
async fn server_ms(c: &mut MultiplexedConnection) -> u64 {
    let (seconds, micros): (u64, u64) = run(c, &["TIME"]).await;
    seconds * 1000 + micros / 1000
}

#[tokio::test]
async fn the_floor_is_a_field_without_ttl_beside_the_lease_fields() {
    for server in servers() {
        let name = server.name;
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        let s = strategy(&server, &key).await;
        let grant = s.acquire(Acquire::new(HOUR, F, F + 100)).await.unwrap();
        assert_eq!(grant.ttl, HOUR);
        let id = grant.machine_id;
        let lease_fields = [id.to_string(), grant.lease.marker()];
        assert_eq!(floor(&mut c, &key, id).await, Some((F + 100).to_string()));
        ttls_within(&mut c, &key, &lease_fields, HOUR_MS - 5000..=HOUR_MS).await;
        let minute = Duration::from_secs(60);
        let renewal = s.renew(&grant.lease, Renew::new(minute, F + 10)).await;
        let renewal = renewal.unwrap();
        assert_eq!((renewal.lease, renewal.ttl), (grant.lease.clone(), minute));
        ttls_within(&mut c, &key, &lease_fields, 55_000..=60_000).await;
        let token = hget(&mut c, &key, &lease_fields[0]).await;
        assert_eq!(token.as_deref(), Some(grant.lease.token()), "{name}");
        // Longer than max_lease_duration is shortened to it.
        let capped = options(&key).with_max_lease_duration(Duration::from_secs(10));
        let capped = RedisStrategy::connect(&server.url, capped).await.unwrap();
        let renewal = capped.renew(&grant.lease, Renew::new(HOUR, F + 11)).await;
        assert_eq!(renewal.unwrap().ttl, Duration::from_secs(10), "{name}");
        ttls_within(&mut c, &key, &lease_fields, 1..=10_000).await;
        // Released: the floor as given, the ID field for the guard, the marker gone (no
        // renewal can follow).
        s.release(
            &grant.lease,
            Release::new(Duration::from_millis(400), F + 12),
        )
        .await
        .unwrap();
        assert_eq!(floor(&mut c, &key, id).await, Some((F + 12).to_string()));
        let ttl = hpttl(&mut c, &key, &lease_fields[0]).await;
        assert!((1..=400).contains(&ttl), "{name}: {ttl}");
        assert_eq!(hpttl(&mut c, &key, &lease_fields[1]).await, -2, "{name}");

        // However a lease ends (a release with no guard, a force release, its TTL), only the
        // floor field is left, and the lost lease's renewal or release writes nothing.
        for end in ["release", "force release", "expiry"] {
            let key = Key::new(&server);
            let s = strategy(&server, &key).await;
            let ttl = if end == "expiry" { 150 } else { 3_600_000 };
            let grant = s
                .acquire(Acquire::new(Duration::from_millis(ttl), F, F + 1))
                .await
                .unwrap();
            let id = grant.machine_id;
            match end {
                "release" => s
                    .release(&grant.lease, Release::new(Duration::ZERO, F + 2))
                    .await
                    .unwrap(),
                "force release" => assert!(s.force_release(id).await.unwrap()),
                _ => tokio::time::sleep(Duration::from_millis(300)).await,
            }
            let stored = Some((F + u64::from(end == "release") + 1).to_string());
            for lost in [false, true] {
                if lost {
                    let e = s.renew(&grant.lease, Renew::new(HOUR, F + 99)).await;
                    assert_eq!(e.unwrap_err().kind(), ErrorKind::Lost, "{name}: {end}");
                    s.release(&grant.lease, Release::new(Duration::from_secs(5), 3))
                        .await
                        .unwrap();
                }
                assert_eq!(
                    hkeys(&mut c, &key).await,
                    [floor_field(id)],
                    "{name}: {end}"
                );
                assert_eq!(floor(&mut c, &key, id).await, stored, "{name}: {end}");
            }
        }

        // Floors compare as numbers, whatever their lengths: the larger of stored and given
        // stays, and the grant reports the stored one.
        for (stored, given, after) in [
            (999, 1000, 1000_u64),
            (10_000_000_000_000, 9_999_999_999_999, 10_000_000_000_000),
            (0, 7, 7),
        ] {
            let key = Key::new(&server);
            occupy(&mut c, &key, (0..512).filter(|&i| i != 42)).await;
            set_floor(&mut c, &key, 42, &stored.to_string()).await;
            let s = strategy(&server, &key).await;
            let grant = s.acquire(Acquire::new(HOUR, 1, given)).await.unwrap();
            assert_eq!((grant.machine_id.get(), grant.floor_ms), (42, stored));
            assert_eq!(floor(&mut c, &key, 42).await, Some(after.to_string()));
        }
        // A bound beyond 19 digits is stored as the largest 19-digit one, still above any
        // timestamp a nonce can carry; a floor of 0 (nothing known) writes no field.
        for (given, stored) in [(u64::MAX, Some("9999999999999999999")), (0, None)] {
            let key = Key::new(&server);
            let s = strategy(&server, &key).await;
            let grant = s.acquire(Acquire::new(HOUR, 1, given)).await.unwrap();
            let field = floor(&mut c, &key, grant.machine_id).await;
            assert_eq!(field.as_deref(), stored, "{name}");
        }
    }
}

/// A grant shortened by `max_lease_duration` records the floor of the TTL it got: the lease
/// manager's bound is `sent + requested - margin`, its deadline at most `sent + granted -
/// margin`, so the stored floor is the bound less `requested - granted`.
#[tokio::test]
async fn a_capped_grant_records_the_floor_of_the_ttl_it_got() {
    const EIGHT_HOURS: Duration = Duration::from_secs(8 * 3600);
    const H: u64 = HOUR_MS as u64;
    for server in servers() {
        let name = server.name;
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        occupy(&mut c, &key, (0..512).filter(|&i| i != 7)).await;
        let s = RedisStrategy::connect(&server.url, options(&key).with_max_lease_duration(HOUR))
            .await
            .unwrap();
        let grant = s
            .acquire(Acquire::new(EIGHT_HOURS, F, F + 8 * HOUR_MS as u64))
            .await
            .unwrap();
        assert_eq!(grant.machine_id.get(), 7);
        assert_eq!(grant.ttl, HOUR, "{name}");
        assert_eq!(
            floor(&mut c, &key, 7).await,
            Some((F + HOUR_MS as u64).to_string()),
            "{name}: acquire"
        );

        // Renewals: shortened like the grant; a request within the cap records the bound as
        // given; still only ever raised (a shortened bound below the stored floor leaves it).
        for (requested, bound, stored, what) in [
            (EIGHT_HOURS, 10 + 8 * H, 10 + H, "renew"),
            (HOUR, 20 + H, 20 + H, "renew within the cap"),
            (EIGHT_HOURS, 8 * H, 20 + H, "lowered"),
        ] {
            let bound = F + bound;
            let renewal = s.renew(&grant.lease, Renew::new(requested, bound)).await;
            assert_eq!(renewal.unwrap().ttl, HOUR, "{name}: {what}");
            let stored = Some((F + stored).to_string());
            assert_eq!(floor(&mut c, &key, 7).await, stored, "{name}: {what}");
        }
    }
}

/// The same through a real lease manager (default timing: 8 h asked, 10 s margin) that
/// crashes: the floor it leaves is about an hour ahead of its clock, not eight.
#[tokio::test]
async fn a_crashed_manager_on_a_capped_strategy_leaves_the_floor_of_its_grant() {
    use lease_manager::LeaseManager;
    use nonce_core::{BootClock, Clock};
    for server in servers() {
        let name = server.name;
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        occupy(&mut c, &key, (0..512).filter(|&i| i != 8)).await;
        let s = RedisStrategy::connect(&server.url, options(&key).with_max_lease_duration(HOUR))
            .await
            .unwrap();
        let clock = BootClock::new();
        let before = clock.now_ms();
        let manager = LeaseManager::builder(s)
            .with_clock(clock)
            .start()
            .await
            .unwrap();
        let after = clock.now_ms();
        assert_eq!(
            manager.machine_id().map(lease_core::MachineId::get),
            Some(8)
        );
        drop(manager);
        let stored: u64 = floor(&mut c, &key, 8).await.unwrap().parse().unwrap();
        let margin = 10_000;
        assert!(
            before + HOUR_MS as u64 - margin <= stored && stored <= after + HOUR_MS as u64 - margin,
            "{name}: floor {stored} ms, {} ms ahead of the node's clock",
            stored.saturating_sub(after)
        );
    }
}

/// Asserts that `at`, the server's clock as `what` read it, lies between `before` and now.
async fn read_between(c: &mut MultiplexedConnection, what: &str, at: Option<u64>, before: u64) {
    let (at, after) = (at.expect(what), server_ms(c).await);
    assert!(
        before <= at && at <= after,
        "{what}: {before} <= {at} <= {after}"
    );
}

#[tokio::test]
async fn the_grant_and_renewal_carry_the_servers_clock() {
    for server in servers() {
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        let s = strategy(&server, &key).await;
        let before = server_ms(&mut c).await;
        let grant = s.acquire(Acquire::new(HOUR, F, F)).await.unwrap();
        let what = format!("{}: acquire", server.name);
        read_between(&mut c, &what, grant.coordinator_ms, before).await;
        let before = server_ms(&mut c).await;
        let renewal = s.renew(&grant.lease, Renew::new(HOUR, F)).await.unwrap();
        let what = format!("{}: renew", server.name);
        read_between(&mut c, &what, renewal.coordinator_ms, before).await;

        // With the amnesia guard off, no clock offset is asked for.
        assert_eq!(grant.max_clock_offset, None);
        assert_eq!(renewal.max_clock_offset, None);
    }
}

#[tokio::test]
async fn an_unreadable_floor_is_never_claimed_and_never_overwritten_by_a_renewal() {
    for server in servers() {
        let name = server.name;
        let mut c = raw(&server).await;
        for garbage in "soon|-5|+5|05| 5|1e12|12345678901234567890|".split('|') {
            let key = Key::new(&server);
            occupy(&mut c, &key, (0..512).filter(|&i| i != 3 && i != 4)).await;
            set_floor(&mut c, &key, 3, garbage).await;
            let s = strategy(&server, &key).await;
            // 4 is taken, never 3.
            let grant = s.acquire(Acquire::new(HOUR, F, F)).await.unwrap();
            assert_eq!(grant.machine_id.get(), 4, "{name}: {garbage:?}");
            let error = fails(s.acquire(Acquire::new(HOUR, F, F)).await, ErrorKind::Other);
            assert!(
                matches!(&error, RedisLeaseError::UnreadableFloor { id, value, .. }
                    if id.get() == 3 && value == garbage),
                "{name}: {error}"
            );
            assert!(error.to_string().contains("floor.3"), "{error}");
            assert_eq!(
                hget(&mut c, &key, "3").await,
                None,
                "{name}: {garbage:?} claimed"
            );
            assert_eq!(floor(&mut c, &key, 3).await.as_deref(), Some(garbage));
        }

        // The script checks the floor itself, for a field that turns unreadable after the read.
        let key = Key::new(&server);
        occupy(&mut c, &key, (0..512).filter(|&i| i != 3)).await;
        let racer = Racer::new(&server, &key, 1, Steal::CorruptFloor).await;
        let s = RedisStrategy::with_connection(racer, options(&key)).unwrap();
        let error = s.acquire(Acquire::new(HOUR, F, F)).await.unwrap_err();
        assert!(
            matches!(error, RedisLeaseError::UnreadableFloor { .. }),
            "{name}: {error}"
        );
        assert_eq!(hget(&mut c, &key, "3").await, None);

        // A holder's renewal leaves an unreadable floor as it is; its release replaces it.
        let key = Key::new(&server);
        let s = strategy(&server, &key).await;
        let grant = s.acquire(Acquire::new(HOUR, F, F)).await.unwrap();
        let id = grant.machine_id.get();
        set_floor(&mut c, &key, id, "garbage").await;
        s.renew(&grant.lease, Renew::new(HOUR, F + 1))
            .await
            .unwrap();
        assert_eq!(
            floor(&mut c, &key, id).await.as_deref(),
            Some("garbage"),
            "{name}"
        );
        s.release(&grant.lease, Release::new(Duration::from_millis(1), F + 2))
            .await
            .unwrap();
        assert_eq!(
            floor(&mut c, &key, id).await,
            Some((F + 2).to_string()),
            "{name}"
        );
    }
}

/// What the [`Racer`] does just before an acquire script reaches the server.
#[derive(Clone, Copy)]
enum Steal {
    /// A competitor claims the chosen ID.
    Claim,
    /// Somebody writes garbage into the chosen ID's floor.
    CorruptFloor,
}

/// A real connection that interferes just before each of the first `steals` acquire scripts
/// (`EVALSHA <sha> 1 <key> <id> <token> <ttl> <floor> <run id> <hold-off>`) reaches the server,
/// and counts what it sends: one request or one pipeline is one round trip.
#[derive(Clone)]
struct Racer {
    inner: MultiplexedConnection,
    competitor: MultiplexedConnection,
    key: String,
    what: Steal,
    steals: Arc<AtomicU32>,
    claims: Arc<AtomicU32>,
    round_trips: Arc<AtomicU32>,
}

impl Racer {
    async fn new(server: &common::Server, key: &Key, steals: u32, what: Steal) -> Self {
        Self {
            inner: raw(server).await,
            competitor: raw(server).await,
            key: key.name.clone(),
            what,
            steals: Arc::new(AtomicU32::new(steals)),
            claims: Arc::new(AtomicU32::new(0)),
            round_trips: Arc::new(AtomicU32::new(0)),
        }
    }
}

impl ConnectionLike for Racer {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.round_trips.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let args: Vec<Vec<u8>> = cmd
                .args_iter()
                .map(|arg| match arg {
                    redis::Arg::Simple(bytes) => bytes.to_vec(),
                    _ => Vec::new(),
                })
                .collect();
            // Only acquire scripts go through a racer in these tests.
            if args.first().map(Vec::as_slice) == Some(b"EVALSHA") && args.len() == 10 {
                self.claims.fetch_add(1, Ordering::SeqCst);
                let steal = self
                    .steals
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if steal {
                    let id = &args[4];
                    let (field, value) = match self.what {
                        Steal::Claim => (id.clone(), b"competitor".to_vec()),
                        Steal::CorruptFloor => {
                            ([b"floor.".as_slice(), id].concat(), b"garbage".to_vec())
                        }
                    };
                    let _: i64 = redis::cmd("HSET")
                        .arg(&self.key)
                        .arg(field)
                        .arg(value)
                        .query_async(&mut self.competitor)
                        .await?;
                }
            }
            self.inner.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.round_trips.fetch_add(1, Ordering::SeqCst);
        self.inner.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[tokio::test]
async fn lost_races_are_retried_bounded_and_write_no_floor() {
    for server in servers() {
        // Load the script, so that every EVALSHA the racer counts is a claim that ran.
        let warm_up = Key::new(&server);
        strategy(&server, &warm_up)
            .await
            .acquire(Acquire::new(HOUR, F, F))
            .await
            .unwrap();
        for (steals, attempts, succeeds) in
            [(2, 3, true), (3, 3, false), (4, 5, true), (5, 5, false)]
        {
            let key = Key::new(&server);
            let racer = Racer::new(&server, &key, steals, Steal::Claim).await;
            let claims = Arc::clone(&racer.claims);
            let s = RedisStrategy::with_connection(
                racer,
                options(&key).with_acquire_attempts(attempts),
            )
            .unwrap();
            let result = s.acquire(Acquire::new(HOUR, F, F + 1)).await;
            let mut c = raw(&server).await;
            let all: Vec<String> = hkeys(&mut c, &key).await;
            let floors: Vec<&String> = all.iter().filter(|f| f.starts_with("floor.")).collect();
            if succeeds {
                let grant = result.unwrap();
                assert_eq!(claims.load(Ordering::SeqCst), steals + 1, "{}", server.name);
                assert_eq!(
                    hget(&mut c, &key, &grant.machine_id.to_string())
                        .await
                        .as_deref(),
                    Some(grant.lease.token())
                );
                // Only the won ID has a floor: a lost claim raises nothing.
                assert_eq!(floors, [&floor_field(grant.machine_id)], "{}", server.name);
            } else {
                let error = fails(result, ErrorKind::Conflict);
                assert!(
                    matches!(error, RedisLeaseError::Conflict { attempts: a } if a == attempts),
                    "{error}"
                );
                assert_eq!(claims.load(Ordering::SeqCst), attempts, "{}", server.name);
                assert!(floors.is_empty(), "{}: {floors:?}", server.name);
                // Only the competitor's ID fields.
                assert_eq!(all.len(), steals as usize, "{all:?}");
            }
        }
    }
}

/// `INFO commandstats` as (command, calls), without the `CONFIG RESETSTAT` that cleared them
/// (`INFO` itself is counted after it answers).
async fn commandstats(c: &mut MultiplexedConnection) -> Vec<(String, u64)> {
    let info: String = run(c, &["INFO", "commandstats"]).await;
    let mut stats: Vec<(String, u64)> = info
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .filter(|(name, _)| name != "config|resetstat")
        .collect();
    stats.sort();
    stats
}

/// Round trips per operation, counted on the connection, and what the server ran, from
/// `INFO commandstats` of a server of this test's own (so no other test's commands count).
#[tokio::test]
async fn round_trips_per_operation() {
    for binary in [common::Binary::Valkey, common::Binary::Redis8] {
        let own = common::OwnServer::start(binary, &[]);
        let server = own.server();
        let key = Key::new(&server);
        let mut c = raw(&server).await;
        // The amnesia guard is on: wait until the server has been up longer than the hold-off
        // (1.5 s, plus a second for the rounding of its uptime).
        common::wait_for_uptime(&server, Duration::from_secs(2)).await;
        let connection = Racer::new(&server, &key, 0, Steal::Claim).await;
        let round_trips = Arc::clone(&connection.round_trips);
        let guarded = options(&key)
            .with_amnesia_guard(AmnesiaGuard::HoldOff)
            .with_max_lease_duration(Duration::from_secs(1))
            .with_max_clock_offset(Duration::from_millis(250));
        let s = RedisStrategy::with_connection(connection, guarded).unwrap();
        // A new hash: initialized first (its round trips are not what this test counts).
        s.migrate().await.unwrap();
        round_trips.store(0, Ordering::SeqCst);
        let count = |what: &str, expected: u32| {
            let n = round_trips.swap(0, Ordering::SeqCst);
            assert_eq!(n, expected, "{binary:?}: {what}");
        };
        let second = Duration::from_secs(1);

        // First use: EVALSHA answers NOSCRIPT, the script is loaded and run again.
        run::<()>(&mut c, &["CONFIG", "RESETSTAT"]).await;
        let grant = s.acquire(Acquire::new(second, F, F)).await.unwrap();
        count(
            "first acquire (INFO+HGETALL, EVALSHA, SCRIPT LOAD, EVALSHA)",
            4,
        );
        let renewal = s.renew(&grant.lease, Renew::new(second, F)).await.unwrap();
        count("first renew (EVALSHA, SCRIPT LOAD, EVALSHA)", 3);
        s.release(&renewal.lease, Release::new(second, F))
            .await
            .unwrap();
        count("first release (EVALSHA, SCRIPT LOAD, EVALSHA)", 3);

        // From then on. Rising floors, so that each operation writes one.
        run::<()>(&mut c, &["CONFIG", "RESETSTAT"]).await;
        let grant = s.acquire(Acquire::new(second, F, F + 1)).await.unwrap();
        count("acquire", 2);
        s.renew(&grant.lease, Renew::new(second, F + 2))
            .await
            .unwrap();
        count("renew", 1);
        s.release(&grant.lease, Release::new(second, F + 3))
            .await
            .unwrap();
        count("release", 1);
        let seen = commandstats(&mut c).await;
        let expected: Vec<(String, u64)> = [
            ("evalsha", 3),
            ("hdel", 1),
            // The acquire script's floor and initialization marker, the renew script's floor.
            ("hget", 3),
            ("hgetall", 1),
            ("hset", 3),
            ("hsetex", 3),
            // One with the read, one in the acquire script (the same server process?).
            ("info", 2),
            ("time", 2),
        ]
        .into_iter()
        .map(|(n, c)| (n.to_owned(), c))
        .collect();
        assert_eq!(seen, expected, "{binary:?}: INFO commandstats");
    }
}
