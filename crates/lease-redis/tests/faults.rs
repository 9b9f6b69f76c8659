//! Faults with real servers: a restart that forgets every lease (the amnesia guard), and the
//! lease manager handing an ID from one node to the next without overlap.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    Binary, Key, OwnServer, acquire, connect, fails, hkeys, occupy, options, raw, renew, run,
};
use lease_core::{ErrorKind, LeaseError, MachineId, StoreAdmin, Strategy};
use lease_manager::{LeaseConfig, LeaseManager, LeaseTarget, LossReason};
use lease_redis::redis::aio::{ConnectionLike, MultiplexedConnection};
use lease_redis::redis::{Cmd, Pipeline, RedisFuture, Value};
use lease_redis::{AmnesiaGuard, RedisLeaseError, RedisOptions, RedisStrategy};
use nonce_core::{BootClock, Clock, Factory, FactoryConfig};

/// Lease timing in seconds instead of hours.
fn short_config() -> LeaseConfig {
    LeaseConfig::default()
        .with_lease_duration(Duration::from_secs(6))
        .with_renew_interval(Duration::from_secs(2))
        .with_min_ttl(Duration::from_secs(3))
        .with_margin(Duration::from_secs(1))
        .with_acquire_timeout(Some(Duration::from_secs(30)))
}

/// `key`'s options with the amnesia guard holding off for `max_lease` and `max_offset`.
fn guarded(key: &Key, max_lease: Duration, max_offset: Duration) -> RedisOptions {
    options(key)
        .with_amnesia_guard(AmnesiaGuard::HoldOff)
        .with_max_lease_duration(max_lease)
        .with_max_clock_offset(max_offset)
}

#[tokio::test]
async fn restart_without_persistence_loses_leases_and_holds_acquirers_off() {
    let (max_lease, max_offset) = (Duration::from_secs(3), Duration::from_millis(750));
    // The longest lease, and twice the clock offset a forgotten holder may have had.
    let hold_off = max_lease + 2 * max_offset;
    let mut own = OwnServer::start(Binary::Valkey, &[]);
    let server = own.server();
    let key = Key::new(&server);

    // A server up for less than the hold-off may have forgotten some: hold off.
    let node_a = connect(&server, guarded(&key, max_lease, max_offset)).await;
    // A store initialized once (tested in forgets.rs), on an earlier server process: this one
    // kept the data of a restart. (Initialized on this process, it would answer at once.)
    node_a.migrate().await.unwrap();
    let mut connection = raw(&server).await;
    let earlier = "0123456789abcdef0123456789abcdef01234567";
    run::<()>(&mut connection, &["HSET", &key.name, "open_run", earlier]).await;
    let error = fails(node_a.acquire(acquire(max_lease)).await, ErrorKind::Retry);
    let is = matches!(error, RedisLeaseError::AmnesiaWindow { .. });
    assert!(is, "{error}");
    for part in ["up for only", "twice the largest clock offset"] {
        assert!(error.to_string().contains(part), "{part:?} in {error}");
    }

    tokio::time::sleep(hold_off + Duration::from_millis(2300)).await;
    let held = node_a.acquire(acquire(max_lease)).await.unwrap();
    // Grants read on the server's clock ask the manager to keep the node within the offset.
    assert_eq!(held.max_clock_offset, Some(max_offset));
    let renewed = node_a.renew(&held.lease, renew(max_lease)).await.unwrap();
    assert_eq!(renewed.max_clock_offset, Some(max_offset));

    own.restart();
    let restarted = Instant::now();

    // The holder's next renewal: uncertain while the connection is re-made, then lost.
    let mut renewal = node_a.renew(&held.lease, renew(max_lease)).await;
    while matches!(&renewal, Err(e) if e.kind() == ErrorKind::Retry) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        renewal = node_a.renew(&held.lease, renew(max_lease)).await;
    }
    fails(renewal, ErrorKind::Lost);

    // A new node is held off by the server's uptime; the old one also by the run id change.
    let node_b = connect(&server, guarded(&key, max_lease, max_offset)).await;
    let error = node_b.acquire(acquire(max_lease)).await.unwrap_err();
    let is = matches!(error, RedisLeaseError::AmnesiaWindow { .. });
    assert!(is, "{error}");
    let error = node_a.acquire(acquire(max_lease)).await.unwrap_err();
    let is = matches!(error, RedisLeaseError::ServerChanged { .. });
    assert!(is, "{error}");

    // Once every lease the old server could have granted has run out, and the clock offsets
    // its holders may have had, acquisition resumes.
    while restarted.elapsed() < hold_off - Duration::from_millis(300) {
        let result = node_b.acquire(acquire(max_lease)).await;
        fails(result, ErrorKind::Retry);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The server reports its uptime in whole seconds and the guard subtracts one, so
    // acquisition resumes between the hold-off and two seconds after it (from the server's
    // start, a little before `restarted`): wait for it, held off ("retry") until then.
    let resumed_by = hold_off + Duration::from_secs(3);
    loop {
        match node_b.acquire(acquire(max_lease)).await {
            Ok(_) => break,
            Err(e) if e.kind() == ErrorKind::Retry && restarted.elapsed() < resumed_by => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!(
                "still held off {:?} after the restart: {e}",
                restarted.elapsed()
            ),
        }
    }
    node_a.acquire(acquire(max_lease)).await.unwrap();
}

/// A nonce factory target that also records when it was switched on and off.
struct Recorded {
    factory: Factory<BootClock>,
    clock: BootClock,
    /// (enabled at, deadline) per enable, and disable times.
    enables: Mutex<Vec<(u64, u64)>>,
    disables: Mutex<Vec<u64>>,
}

impl Recorded {
    fn new(offset: u64) -> Arc<Self> {
        let clock = BootClock::with_offset(offset);
        Arc::new(Self {
            factory: Factory::new(clock, FactoryConfig::new()).unwrap(),
            clock,
            enables: Mutex::default(),
            disables: Mutex::default(),
        })
    }

    /// A lease manager on `strategy` with the short timing, on this target's clock.
    async fn manage(self: &Arc<Self>, strategy: RedisStrategy) -> LeaseManager<RedisStrategy> {
        let builder = LeaseManager::builder(strategy).with_config(short_config());
        let builder = builder.with_clock(self.clock).with_target(self.clone());
        builder.start().await.unwrap()
    }

    fn enabled(&self, i: usize) -> (u64, u64) {
        self.enables.lock().unwrap()[i]
    }
}

impl LeaseTarget for Recorded {
    fn enable(&self, machine_id: MachineId, floor_ms: u64, deadline_ms: u64) {
        let mut enables = self.enables.lock().unwrap();
        enables.push((self.clock.now_ms(), deadline_ms));
        LeaseTarget::enable(&self.factory, machine_id, floor_ms, deadline_ms);
    }
    fn extend_deadline(&self, deadline_ms: u64) {
        if let Some(last) = self.enables.lock().unwrap().last_mut() {
            last.1 = deadline_ms;
        }
        LeaseTarget::extend_deadline(&self.factory, deadline_ms);
    }
    fn disable(&self) {
        self.disables.lock().unwrap().push(self.clock.now_ms());
        LeaseTarget::disable(&self.factory);
    }
    fn issued_up_to_ms(&self) -> u64 {
        LeaseTarget::issued_up_to_ms(&self.factory)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_hands_an_id_over_without_overlap() {
    let server = common::valkey();
    let key = Key::new(&server);
    let mut c = raw(&server).await;
    // One free ID, so the second node must wait for the first one's.
    occupy(&mut c, &key, (0..512).filter(|&i| i != 77)).await;
    let offset = BootClock::new().offset_ms();
    let id = |target: &Recorded| target.factory.machine_id().map(MachineId::get);

    // Graceful: A shuts down (disable, then release with the 1 s guard); B takes over.
    let a = Recorded::new(offset);
    let manager_a = a.manage(connect(&server, options(&key)).await).await;
    assert_eq!(id(&a), Some(77));
    let first_a = a.factory.counter64();
    first_a.expect("A generates while it holds the lease");

    let b = Recorded::new(offset);
    let b_strategy = connect(&server, options(&key)).await;
    let starting_b = tokio::spawn({
        let b = Arc::clone(&b);
        async move { b.manage(b_strategy).await }
    });
    // A keeps renewing past several of B's attempts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(b.enables.lock().unwrap().is_empty());
    manager_a.shutdown().await;
    let a_off = *a.disables.lock().unwrap().last().unwrap();
    assert!(a.factory.counter64().is_err(), "A generates after shutdown");
    // The release recorded exactly what A issued as the ID's floor.
    let a_issued = a.factory.issued_up_to_ms();
    let floor = common::hget(&mut c, &key, "floor.77").await;
    assert_eq!(floor, Some(a_issued.to_string()));

    let manager_b = starting_b.await.unwrap();
    assert_eq!(id(&b), Some(77));
    let (b_on, _) = b.enabled(0);
    let after = b_on - a_off;
    assert!(after >= 1000, "B enabled {after} ms after A disabled");
    let first_b = b.factory.counter64().expect("B generates");
    let b_ms = first_b.decode(b.factory.epoch_ms()).unix_ms;
    assert!(b_ms > a_issued, "B starts above A's floor");

    // Crash: B's manager is dropped without release; C may only start after B's lease expired
    // on the server, and so after B's own local deadline.
    let (_, b_deadline) = *b.enables.lock().unwrap().last().unwrap();
    drop(manager_b);
    let c_target = Recorded::new(offset);
    let manager_c = c_target.manage(connect(&server, options(&key)).await).await;
    assert_eq!(id(&c_target), Some(77));
    let (c_on, _) = c_target.enabled(0);
    assert!(
        c_on >= b_deadline,
        "C at {c_on}, before B's deadline {b_deadline}"
    );
    manager_c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_stops_generating_after_a_restart_and_waits_out_the_amnesia_window() {
    let mut own = OwnServer::start(Binary::Redis8, &[]);
    let server = own.server();
    let key = Key::new(&server);
    let guarded = guarded(&key, Duration::from_secs(6), Duration::from_millis(500));
    let target = Recorded::new(BootClock::new().offset_ms());
    let losses: Arc<Mutex<Vec<LossReason>>> = Arc::default();
    let lost = Arc::clone(&losses);
    // Startup waits out the fresh server's window itself (acquire errors are Retry).
    let manager = LeaseManager::builder(connect(&server, guarded).await)
        .with_config(short_config())
        .with_clock(target.clock)
        .with_target(target.clone())
        .with_on_lease_lost(move |reason| lost.lock().unwrap().push(reason.clone()))
        .start()
        .await
        .unwrap();
    own.restart();
    let restarted_at = target.clock.now_ms();

    // Lost at the next renewal (every 2 s at most): a confirmed loss, before the local
    // deadline, not the deadline running out.
    while target.disables.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let disabled_at = target.disables.lock().unwrap()[0];
    let (_, deadline_ms) = *target.enables.lock().unwrap().last().unwrap();
    assert!(
        disabled_at < deadline_ms,
        "disabled at {disabled_at}, not before the local deadline {deadline_ms}"
    );
    let losses = losses.lock().unwrap().clone();
    let confirmed = matches!(losses.first(), Some(LossReason::Lost(_)));
    assert!(confirmed, "{losses:?}");
    assert!(target.factory.counter64().is_err());
    // Re-enabled only once every lease of the old server has expired.
    while target.enables.lock().unwrap().len() < 2 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (again, _) = target.enabled(1);
    let after = again - restarted_at;
    assert!(after >= 7000, "re-enabled {after} ms after the restart");
    target.factory.counter64().expect("generates again");
    manager.shutdown().await;
}

/// A connection that answers its first request from server `a` and every later one from server
/// `b`: a restart (or failover) landing between an acquire's check of the server and its claim.
#[derive(Clone)]
struct SwappedAfterFirst {
    a: MultiplexedConnection,
    b: MultiplexedConnection,
    requests: Arc<AtomicUsize>,
}

impl SwappedAfterFirst {
    fn next(&mut self) -> &mut MultiplexedConnection {
        let first = self.requests.fetch_add(1, Ordering::SeqCst) == 0;
        if first { &mut self.a } else { &mut self.b }
    }
}

impl ConnectionLike for SwappedAfterFirst {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.next().req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.next().req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.a.get_db()
    }
}

#[tokio::test]
async fn a_server_swapped_between_the_check_and_the_claim_is_not_claimed_on() {
    let (max_lease, max_offset) = (Duration::from_secs(1), Duration::from_millis(100));
    let own_a = OwnServer::start(Binary::Valkey, &[]);
    let own_b = OwnServer::start(Binary::Valkey, &[]);
    // Both up for longer than the hold-off: each alone would pass the uptime check, which
    // reads whole seconds and counts one less.
    tokio::time::sleep(max_lease + 2 * max_offset + Duration::from_millis(2300)).await;
    let (server_a, server_b) = (own_a.server(), own_b.server());
    let key = Key::new(&server_a);
    let connection = SwappedAfterFirst {
        a: raw(&server_a).await,
        b: raw(&server_b).await,
        requests: Arc::default(),
    };
    let guarded = guarded(&key, max_lease, max_offset);
    let strategy = RedisStrategy::with_connection(connection, guarded).unwrap();
    let error = fails(strategy.acquire(acquire(max_lease)).await, ErrorKind::Retry);
    let is = matches!(error, RedisLeaseError::ServerChanged { .. });
    assert!(is, "{error}");
    let fields = hkeys(&mut raw(&server_b).await, &key).await;
    assert!(
        fields.is_empty(),
        "claimed on the second server: {fields:?}"
    );
}
