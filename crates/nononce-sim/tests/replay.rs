//! One recorded sequence of operations (acquire, renew, release and expiry, with their
//! timings) replayed against each model and against the real server it models: the outcomes
//! must be the same (granted, lost, exhausted; which ID, symbolically, where the store picks it
//! at random; the floors; whether the coordinator's clock came back). etcd has a sequence of its
//! own, timed around its whole-second leases, its 2 s minimum TTL and its lessor's sweep. For
//! etcd and Redis the client is the backend's own strategy on both sides, so what they compare
//! is the server model with the server.
//!
//! The servers are the ones `cargo xtask test` and `cargo xtask with-services` start
//! (`NONONCE_TEST_POSTGRES_URL`, `NONONCE_TEST_VALKEY_URL`, `NONONCE_TEST_REDIS8_URL`,
//! `NONONCE_TEST_ETCD_ENDPOINTS`, with the same defaults as the backends' own tests). A server
//! that does not answer fails the test.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{Acquire, LeaseError, MachineId, Release, Renew, StoreAdmin, Strategy};
use lease_etcd::etcd_client::{self, DeleteOptions, GetOptions};
use lease_etcd::{EtcdOptions, EtcdStrategy};
use lease_redis::redis;
use lease_redis::{AmnesiaGuard, RedisOptions, RedisStrategy};
use lease_sql::SqlStrategy;
use lease_sql::sqlx::{self, AssertSqlSafe};
use nononce_sim::Guards;
use nononce_sim::clock::START_UNIX_MS;
use nononce_sim::model::{ClockFn, EtcdStore, RedisStore, SqlStore};

/// Floors far below any real clock, as the conformance suite's.
const F: u64 = 1_000_000;
const LONG: Duration = Duration::from_secs(60);
/// What each acquire and renewal asks for, and each release's guard.
#[derive(Debug, Clone, Copy)]
struct Timing {
    ttl: Duration,
    guard: Duration,
}

/// For SQL and Redis: between a renewal and the last step that needs its lease alive come two
/// acquires, which took over 2 s against a server shared with a full suite run: 5 s leases.
const TIMING: Timing = Timing {
    ttl: Duration::from_secs(5),
    guard: Duration::from_secs(2),
};

/// For etcd: whole seconds, its 2 s minimum TTL and a 1 s guard, as [`etcd_script`] is timed.
const ETCD_TIMING: Timing = Timing {
    ttl: Duration::from_secs(2),
    guard: Duration::from_millis(1000),
};
/// IDs held by a filler for the whole script, so exactly two are handed around.
const FILLED: usize = 510;

#[derive(Debug, Clone, Copy)]
enum Op {
    /// `who` acquires with the acquirer's clock at `now` and a floor.
    Acquire {
        who: usize,
        now: u64,
        floor: u64,
    },
    Renew {
        who: usize,
        floor: u64,
    },
    Release {
        who: usize,
        floor: u64,
    },
    /// The lease `who` holds ends in the store, as if its TTL had run out.
    Expire {
        who: usize,
    },
    Sleep(Duration),
}

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const D: usize = 3;
const E: usize = 4;

const fn acquire(who: usize, now: u64, floor: u64) -> Op {
    Op::Acquire { who, now, floor }
}

const fn renew(who: usize, floor: u64) -> Op {
    Op::Renew { who, floor }
}

const fn release(who: usize, floor: u64) -> Op {
    Op::Release { who, floor }
}

fn script() -> Vec<Op> {
    vec![
        acquire(A, 0, F + 100),
        acquire(B, 0, F + 200),
        acquire(C, 0, F + 300),
        renew(A, F + 150),
        renew(A, F + 120),
        release(A, F + 160),
        // Within the guard: nothing free.
        acquire(C, 0, F + 300),
        Op::Sleep(TIMING.guard + Duration::from_millis(300)),
        // A's ID, with the floor its release set; B's ID is still held.
        acquire(C, F + 170, F + 400),
        Op::Expire { who: B },
        // B's ID, with the floor B's acquire raised it to.
        acquire(D, F + 170, F + 250),
        // Taken over: lost, and lost again when retried; B's release changes nothing.
        renew(B, F + 900),
        renew(B, F + 900),
        release(B, F + 1),
        renew(D, F + 260),
        release(D, F + 500),
        // A renewal reaching the server after the release is lost: SQL cleared the token,
        // Redis deleted the marker; a second release changes nothing.
        renew(D, F + 510),
        release(D, F + 500),
        // C's lease runs out and nobody takes its ID.
        Op::Sleep(TIMING.ttl + Duration::from_millis(300)),
        // SQL revives an untaken expired lease (the renewal matches the token); Redis lost the
        // fields with their TTL.
        renew(C, F + 450),
        // A clock between the two floors prefers the ID whose floor it has passed, if free.
        acquire(E, F + 480, F + 600),
        acquire(A, F + 480, F + 700),
        acquire(B, F + 480, F + 800),
    ]
}

/// The sequence for etcd. Its leases are whole seconds of at least 2 s (the guard of 1 s is
/// granted as 2 s), and its leader ends an expired lease within half a second: a step that needs
/// a lease alive comes at most 1.7 s after its last grant or keep-alive, one that needs it ended
/// at least 2.9 s after.
fn etcd_script() -> Vec<Op> {
    let ms = Duration::from_millis;
    vec![
        acquire(A, 0, F + 100),
        acquire(B, 0, F + 200),
        acquire(C, 0, F + 300),
        renew(A, F + 150),
        renew(A, F + 120),
        release(A, F + 160),
        // Within the guard: nothing free.
        acquire(C, 0, F + 300),
        Op::Sleep(ms(1300)),
        renew(B, F + 250),
        // Past the guard asked for, within the 2 s etcd granted: still nothing free.
        acquire(C, F + 170, F + 400),
        Op::Sleep(ms(1700)),
        renew(B, F + 260),
        // A's ID, with the floor its release set.
        acquire(C, F + 170, F + 400),
        Op::Expire { who: B },
        // B's ID, with the floor B's renewal raised it to.
        acquire(D, F + 170, F + 250),
        // Its etcd lease is gone: lost, and lost again when retried; B's release of the lost
        // lease only raises the floor, so a lower one changes nothing.
        renew(B, F + 900),
        renew(B, F + 900),
        release(B, F + 1),
        renew(D, F + 270),
        release(D, F + 500),
        // A renewal after the release: its etcd lease was revoked. A second release changes
        // nothing; B's release of its lost lease with a higher floor raises it.
        renew(D, F + 510),
        release(D, F + 500),
        release(B, F + 600),
        // C's lease and D's guard run out.
        Op::Sleep(ms(3000)),
        renew(C, F + 450),
        // A clock between the two floors prefers the ID whose floor it has passed.
        acquire(E, F + 480, F + 600),
        acquire(A, F + 480, F + 700),
        acquire(B, F + 480, F + 800),
    ]
}

/// Names IDs by order of first appearance: stores that pick at random still compare.
#[derive(Default)]
struct Names(BTreeMap<u16, usize>);

impl Names {
    fn name(&mut self, id: MachineId) -> String {
        let next = self.0.len();
        let n = *self.0.entry(id.get()).or_insert(next);
        format!("#{n}")
    }
}

fn describe<E: LeaseError>(e: &E) -> String {
    format!("error {}", e.kind())
}

/// Plays `script` on strategies from `node`; `expire` ends a lease in the store. Returns one
/// line per operation, plus the literal IDs granted.
async fn play<S, N, X, XF>(
    (timing, script): (Timing, Vec<Op>),
    node: N,
    expire: X,
) -> (Vec<String>, Vec<u16>)
where
    S: Strategy,
    N: Fn() -> S,
    X: Fn(MachineId) -> XF,
    XF: Future<Output = ()>,
{
    let filler = node();
    let mut fillers = Vec::new();
    for _ in 0..FILLED {
        match filler.acquire(Acquire::new(LONG, 0, 0)).await {
            Ok(grant) => fillers.push(grant),
            Err(e) => panic!("filling the store: {}", describe(&e)),
        }
    }
    let actors: Vec<S> = (0..5).map(|_| node()).collect();
    let mut leases: Vec<Option<(S::Lease, MachineId)>> = (0..5).map(|_| None).collect();
    let mut names = Names::default();
    let mut out = Vec::new();
    let mut ids = Vec::new();
    for op in script {
        let line = match op {
            Op::Acquire { who, now, floor } => {
                match actors[who]
                    .acquire(Acquire::new(timing.ttl, now, floor))
                    .await
                {
                    Ok(g) => {
                        ids.push(g.machine_id.get());
                        let line = format!(
                            "granted {} floor {} ttl {:?} clock {}",
                            names.name(g.machine_id),
                            g.floor_ms,
                            g.ttl,
                            g.coordinator_ms.is_some()
                        );
                        leases[who] = Some((g.lease, g.machine_id));
                        line
                    }
                    Err(e) => describe(&e),
                }
            }
            Op::Renew { who, floor } => match leases[who].as_ref() {
                None => "no lease".to_owned(),
                Some((lease, _)) => match actors[who]
                    .renew(lease, Renew::new(timing.ttl, floor))
                    .await
                {
                    Ok(r) => format!(
                        "renewed ttl {:?} clock {}",
                        r.ttl,
                        r.coordinator_ms.is_some()
                    ),
                    Err(e) => describe(&e),
                },
            },
            Op::Release { who, floor } => match leases[who].as_ref() {
                None => "no lease".to_owned(),
                Some((lease, _)) => {
                    match actors[who]
                        .release(lease, Release::new(timing.guard, floor))
                        .await
                    {
                        Ok(()) => "released".to_owned(),
                        Err(e) => describe(&e),
                    }
                }
            },
            Op::Expire { who } => match leases[who].as_ref() {
                None => "no lease".to_owned(),
                Some((_, id)) => {
                    expire(*id).await;
                    "expired".to_owned()
                }
            },
            Op::Sleep(d) => {
                tokio::time::sleep(d).await;
                "slept".to_owned()
            }
        };
        if std::env::var_os("NONONCE_SIM_REPLAY_DEBUG").is_some() {
            eprintln!("{op:?}: {line}");
        }
        out.push(format!("{op:?}: {line}"));
    }
    drop(fillers);
    (out, ids)
}

/// Runs the model's replay on a paused runtime of its own.
fn on_model<F: Future<Output = (Vec<String>, Vec<u16>)>>(
    f: impl FnOnce(ClockFn) -> F,
) -> (Vec<String>, Vec<u16>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let start = tokio::time::Instant::now();
        let clock: ClockFn = Arc::new(move || {
            START_UNIX_MS + u64::try_from(start.elapsed().as_millis()).unwrap_or(0)
        });
        f(clock).await
    })
}

fn on_server<F: Future<Output = (Vec<String>, Vec<u16>)>>(f: F) -> (Vec<String>, Vec<u16>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn compare(what: &str, model: &[String], real: &[String]) {
    let mut report = String::new();
    let mut same = model.len() == real.len();
    for (i, (m, r)) in model.iter().zip(real).enumerate() {
        let mark = if m == r { "  " } else { "!!" };
        same &= m == r;
        report.push_str(&format!("{mark} {i:>2} model: {m}\n{mark}    real:  {r}\n"));
    }
    assert!(same, "{what}: the model and the server disagree:\n{report}");
}

/// The model's guards for a replay: the real strategies run without the amnesia guard (a
/// test server may have been up for less than the longest lease).
const REPLAY_GUARDS: Guards = Guards {
    amnesia: false,
    ..Guards::ALL
};

fn suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}{:x}", std::process::id(), nanos & 0xffff_ffff)
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

#[test]
fn sql_model_replays_like_postgres() {
    let (model, model_ids) = on_model(|clock| async move {
        let store = SqlStore::new(clock, Duration::from_secs(8 * 3600)).with_guards(REPLAY_GUARDS);
        let expire = |id| {
            store.expire(id);
            async {}
        };
        play((TIMING, script()), || store.strategy(), expire).await
    });
    let url = env_or(
        "NONONCE_TEST_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/test",
    );
    let table = format!("nononce_sim_{}", suffix());
    let (real, real_ids) = on_server(async {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "PostgreSQL at {url} did not answer ({e}): start it (`cargo xtask test` does) \
                     or point NONONCE_TEST_POSTGRES_URL at a running server"
                )
            });
        let strategy = SqlStrategy::connect_lazy(&url)
            .and_then(|s| s.with_table(&table))
            .expect("strategy")
            .with_amnesia_guard(lease_sql::AmnesiaGuard::Off);
        strategy
            .migrate()
            .await
            .expect("migrate the replay's table");
        let expire = |id: MachineId| {
            let pool = pool.clone();
            let sql = format!(
                "UPDATE {table} SET expires_at = (CURRENT_TIMESTAMP AT TIME ZONE 'UTC') \
                 - INTERVAL '1 second' WHERE id = $1"
            );
            async move {
                sqlx::query(AssertSqlSafe(sql))
                    .bind(i16::try_from(id.get()).unwrap_or(-1))
                    .execute(&pool)
                    .await
                    .expect("expire");
            }
        };
        let played = play((TIMING, script()), || strategy.clone(), expire).await;
        for sql in [
            format!("DROP TABLE {table}"),
            format!("DELETE FROM nononce_coordinator WHERE lease_table = '{table}'"),
        ] {
            let _ = sqlx::query(AssertSqlSafe(sql)).execute(&pool).await;
        }
        played
    });
    compare("postgres", &model, &real);
    // SkipLocked claims the lowest free row: the IDs themselves agree too.
    assert_eq!(model_ids, real_ids);
    assert!(
        model
            .iter()
            .any(|l| l.contains("Renew { who: 2") && l.ends_with("clock true"))
    );
}

fn redis_replay(name: &str, var: &str, default: &str) {
    let (model, _) = on_model(|clock| async move {
        let store =
            RedisStore::new(clock, Duration::from_secs(8 * 3600)).with_guards(REPLAY_GUARDS);
        let expire = |id| {
            store.expire(id);
            async {}
        };
        play((TIMING, script()), || store.strategy(), expire).await
    });
    let url = env_or(var, default);
    let key = format!("nononce_sim_{}", suffix());
    let (real, _) = on_server(async {
        let client = redis::Client::open(url.as_str()).expect("redis url");
        let connect = client.get_multiplexed_async_connection();
        let mut raw = match tokio::time::timeout(Duration::from_secs(5), connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => panic!(
                "{name} at {url} did not answer ({e}): run `cargo xtask test`, which starts it"
            ),
            Err(_) => panic!(
                "{name} at {url} did not answer within 5 s: run `cargo xtask test`, which starts it"
            ),
        };
        let options = RedisOptions::new()
            .with_key(key.clone())
            .with_amnesia_guard(AmnesiaGuard::Off);
        let strategy = Arc::new(
            RedisStrategy::connect(&url, options)
                .await
                .expect("redis strategy"),
        );
        let expire = |id: MachineId| {
            let mut connection = raw.clone();
            let key = key.clone();
            async move {
                let fields: Vec<String> = redis::cmd("HKEYS")
                    .arg(&key)
                    .query_async(&mut connection)
                    .await
                    .expect("HKEYS");
                let marker = format!("token.{id}.");
                let mut del = redis::cmd("HDEL");
                del.arg(&key).arg(id.get().to_string());
                for field in fields.iter().filter(|f| f.starts_with(&marker)) {
                    del.arg(field);
                }
                let _: i64 = del.query_async(&mut connection).await.expect("HDEL");
            }
        };
        let played = play((TIMING, script()), || Arc::clone(&strategy), expire).await;
        let _: Result<i64, _> = redis::cmd("DEL").arg(&key).query_async(&mut raw).await;
        played
    });
    compare(name, &model, &real);
    assert!(
        model
            .iter()
            .any(|l| l.contains("Renew { who: 2") && l.ends_with("error lost"))
    );
}

#[test]
fn redis_model_replays_like_valkey_9() {
    redis_replay(
        "valkey 9",
        "NONONCE_TEST_VALKEY_URL",
        "redis://127.0.0.1:6390",
    );
}

#[test]
fn redis_model_replays_like_redis_8() {
    redis_replay(
        "redis 8",
        "NONONCE_TEST_REDIS8_URL",
        "redis://127.0.0.1:6391",
    );
}

#[test]
fn etcd_model_replays_like_etcd() {
    let (model, _) = on_model(|clock| async move {
        let store = EtcdStore::new(clock, Duration::from_secs(8 * 3600));
        let expire = |id| {
            store.expire(id);
            async {}
        };
        play(
            (ETCD_TIMING, etcd_script()),
            || store.real_strategy(),
            expire,
        )
        .await
    });
    let endpoints: Vec<String> = env_or("NONONCE_TEST_ETCD_ENDPOINTS", "http://127.0.0.1:2390")
        .split(',')
        .map(str::to_owned)
        .collect();
    let prefix = format!("/nononce-sim/{}/", suffix());
    let (real, _) = on_server(async {
        let connect = async {
            let mut client = etcd_client::Client::connect(&endpoints, None).await?;
            client.status().await?;
            Ok::<_, etcd_client::Error>(client)
        };
        let client = match tokio::time::timeout(Duration::from_secs(10), connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => panic!(
                "etcd at {endpoints:?} did not answer ({e}): run `cargo xtask test`, which starts it"
            ),
            Err(_) => panic!(
                "etcd at {endpoints:?} did not answer within 10 s: run `cargo xtask test`, which \
                 starts it"
            ),
        };
        let options = EtcdOptions::new(endpoints.clone()).with_prefix(prefix.clone());
        let strategy =
            Arc::new(EtcdStrategy::with_client(client.clone(), options).expect("etcd strategy"));
        // A new prefix: initialized, as a new store is (`leases migrate`).
        strategy.migrate().await.expect("initialize the prefix");
        // As lease-etcd's conformance harness: revoke the lease the key is on, as its expiry
        // would; a key on no lease is deleted.
        let expire = |id: MachineId| {
            let mut client = client.clone();
            let key = format!("{prefix}{id}");
            async move {
                let answer = client.get(key.as_str(), None).await.expect("get");
                if let Some(kv) = answer.kvs().first() {
                    if kv.lease() == 0 {
                        client.delete(key.as_str(), None).await.expect("delete");
                    } else {
                        client.lease_revoke(kv.lease()).await.expect("revoke");
                    }
                }
            }
        };
        let played = play(
            (ETCD_TIMING, etcd_script()),
            || Arc::clone(&strategy),
            expire,
        )
        .await;
        let mut client = client.clone();
        let keys = client
            .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
            .await
            .expect("the replay's keys");
        let mut leases: Vec<i64> = keys.kvs().iter().map(|kv| kv.lease()).collect();
        leases.sort_unstable();
        leases.dedup();
        for lease in leases.into_iter().filter(|l| *l != 0) {
            let _ = client.lease_revoke(lease).await;
        }
        let _ = client
            .delete(prefix.as_str(), Some(DeleteOptions::new().with_prefix()))
            .await;
        played
    });
    compare("etcd", &model, &real);
    // The 2 s minimum TTL kept A's ID blocked past the 1 s guard asked for; a lease whose TTL
    // ran out is not revived.
    assert!(
        model
            .iter()
            .any(|l| l.starts_with("Acquire { who: 2, now: 1000170") && l.ends_with("exhausted"))
    );
    assert!(
        model
            .iter()
            .any(|l| l.contains("Renew { who: 2") && l.ends_with("error lost"))
    );
    // B's release of its lost lease raised the floor A is granted with.
    assert!(model.last().is_some_and(|l| l.ends_with("error exhausted")));
    assert!(
        model
            .iter()
            .any(|l| l.contains("Acquire { who: 0, now: 1000480") && l.contains("floor 1000600"))
    );
}
