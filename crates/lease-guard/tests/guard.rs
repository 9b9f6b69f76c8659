//! Several guards in one process, on real UDP sockets on 127.0.0.1.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::MachineId;
use lease_guard::{
    Announce, Conflict, ConflictGuard, GuardConfig, GuardError, InstanceToken, PeerCheck,
    PeerOutcome, Resolution, halt,
};
use lease_manager::LeaseState;
use nonce_core::{Error, Factory, FactoryConfig, ManualClock, NO_DEADLINE};

/// No wait in these tests lasts longer, so a failure cannot hang the suite.
const WAIT: Duration = Duration::from_secs(10);

fn config() -> GuardConfig {
    GuardConfig::new("127.0.0.1:0".parse().unwrap())
        .with_answer_timeout(Duration::from_millis(100))
        .with_rejoin_interval(Duration::from_millis(200))
}

fn announce(id: Option<u16>, started_at_ms: u64, token: u8) -> Announce {
    Announce::from_parts(
        id.map(|id| MachineId::new(id).unwrap()),
        started_at_ms,
        InstanceToken::from_bytes([token; 16]),
    )
}

/// A running guard with a factory it halts and a record of its conflict callbacks.
struct Node {
    guard: ConflictGuard,
    factory: Arc<Factory<ManualClock>>,
    conflicts: Arc<Mutex<Vec<Conflict>>>,
    checks: Mutex<tokio::sync::broadcast::Receiver<PeerCheck>>,
    seen: Mutex<Vec<PeerCheck>>,
}

impl Node {
    async fn start(local: Announce, seeds: &[&Node]) -> Self {
        let factory = Arc::new(
            Factory::new(ManualClock::new(1_800_000_000_000), FactoryConfig::new()).unwrap(),
        );
        if let Some(id) = local.machine_id() {
            factory.enable(id, NO_DEADLINE).unwrap();
        }
        let conflicts = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&conflicts);
        let stop = halt([Arc::clone(&factory)]);
        let config = config().with_seeds(seeds.iter().map(|node| node.guard.local_addr()));
        let guard = ConflictGuard::start(config, local, move |conflict| {
            stop(conflict);
            record.lock().unwrap().push(conflict);
        })
        .await
        .unwrap();
        Self {
            checks: Mutex::new(guard.subscribe()),
            guard,
            factory,
            conflicts,
            seen: Mutex::new(Vec::new()),
        }
    }

    fn conflicts(&self) -> Vec<Conflict> {
        self.conflicts.lock().unwrap().clone()
    }

    /// The latest outcome of checking `peer`.
    fn outcome(&self, peer: &Self) -> Option<PeerOutcome> {
        let token = peer.guard.local().token();
        self.guard
            .peers()
            .into_iter()
            .find(|check| check.peer.token() == token)
            .map(|check| check.outcome)
    }

    /// Whether any check of `peer` so far had `outcome` (the latest may differ: a node that
    /// yielded announces no ID and is checked again).
    fn saw(&self, peer: &Self, outcome: PeerOutcome) -> bool {
        let mut seen = self.seen.lock().unwrap();
        while let Ok(check) = self.checks.lock().unwrap().try_recv() {
            seen.push(check);
        }
        let token = peer.guard.local().token();
        seen.iter()
            .any(|check| check.peer.token() == token && check.outcome == outcome)
    }

    fn generates(&self) -> bool {
        self.factory.counter64().is_ok()
    }
}

/// Waits for `loser` to yield its ID to `winner` (once: its factory halted), and for `winner` to
/// see the conflict and keep generating; the loser's conflict is returned.
async fn yields(loser: &Node, winner: &Node) -> Conflict {
    until("the node to yield", || !loser.conflicts().is_empty()).await;
    until("the other node to see the conflict", || {
        winner.saw(loser, PeerOutcome::Conflict(Resolution::Remote))
    })
    .await;
    let conflicts = loser.conflicts();
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert_eq!(conflicts[0].remote, winner.guard.local());
    assert!(!loser.generates());
    assert!(winner.conflicts().is_empty());
    assert!(winner.generates());
    conflicts[0]
}

async fn shutdown(nodes: impl IntoIterator<Item = Node>) {
    for node in nodes {
        node.guard.shutdown().await;
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_later_node_or_in_a_tie_the_higher_token_yields_and_its_factories_stop() {
    let early = Node::start(announce(Some(7), 1_000, 9), &[]).await;
    let late = Node::start(announce(Some(7), 2_000, 1), &[&early]).await;
    let conflict = yields(&late, &early).await;
    assert_eq!(conflict.machine_id.get(), 7);
    assert_eq!(conflict.resolution, Resolution::Local);
    assert_eq!(conflict.remote_addr, early.guard.local_addr());
    assert!(!late.factory.is_enabled());
    assert_eq!(late.factory.counter64(), Err(Error::Disabled));
    // It no longer claims the ID.
    assert_eq!(late.guard.local().machine_id(), None);
    assert_eq!(early.guard.local().machine_id(), MachineId::new(7).ok());
    // The higher token starts the cluster; the lower one joins it in the same millisecond.
    let high = Node::start(announce(Some(3), 5_000, 0xf0), &[]).await;
    let low = Node::start(announce(Some(3), 5_000, 0x0f), &[&high]).await;
    yields(&high, &low).await;
    shutdown([late, early, high, low]).await;
}

#[tokio::test]
async fn distinct_ids_only_match() {
    let one = Node::start(announce(Some(1), 1_000, 1), &[]).await;
    let two = Node::start(announce(Some(2), 1_000, 2), &[&one]).await;
    // Knows only `two`: learns of `one` by gossip.
    let three = Node::start(announce(Some(3), 1_000, 3), &[&two]).await;
    let nodes = [&one, &two, &three];

    until("every node to check both others", || {
        nodes.iter().all(|node| node.guard.peers().len() == 2)
    })
    .await;
    for node in nodes {
        for check in node.guard.peers() {
            assert_eq!(check.outcome, PeerOutcome::Match, "{check:?}");
        }
        assert!(node.conflicts().is_empty());
        assert!(node.generates());
    }
    shutdown([one, two, three]).await;
}

#[tokio::test]
async fn a_later_joiner_is_checked_against_existing_members() {
    let first = Node::start(announce(Some(7), 1_000, 1), &[]).await;
    let other = Node::start(announce(Some(3), 2_000, 2), &[&first]).await;
    until("a two-node cluster", || first.outcome(&other).is_some()).await;

    // The duplicate knows only `other` and must find `first` through the membership.
    let duplicate = Node::start(announce(Some(7), 3_000, 3), &[&other]).await;
    yields(&duplicate, &first).await;
    assert!(other.conflicts().is_empty() && other.generates());
    shutdown([first, other, duplicate]).await;
}

#[tokio::test]
async fn a_changed_local_id_is_checked_again() {
    let five = Node::start(announce(Some(5), 1_000, 1), &[]).await;
    let six = Node::start(announce(Some(6), 2_000, 2), &[&five]).await;
    until("a match both ways", || {
        five.outcome(&six) == Some(PeerOutcome::Match)
            && six.outcome(&five) == Some(PeerOutcome::Match)
    })
    .await;

    // A dynamic strategy reacquired and (wrongly) got 5: the later node yields.
    six.guard.set_local(MachineId::new(5).ok());
    until("the later node to yield", || !six.conflicts().is_empty()).await;
    assert_eq!(six.conflicts()[0].machine_id.get(), 5);
    assert!(five.conflicts().is_empty());
    until("the yielded node to announce no id", || {
        six.guard.local().machine_id().is_none() && five.outcome(&six) == Some(PeerOutcome::Match)
    })
    .await;
    shutdown([five, six]).await;
}

#[tokio::test]
async fn a_node_without_an_id_reports_no_local_id_and_follows_the_lease_state() {
    let holder = Node::start(announce(Some(9), 1_000, 1), &[]).await;
    let follower = Node::start(announce(None, 2_000, 2), &[&holder]).await;
    let (states, receiver) = tokio::sync::watch::channel(LeaseState::Starting);
    follower.guard.follow(receiver);
    until("each node to check the other", || {
        follower.outcome(&holder) == Some(PeerOutcome::NoLocalId)
            && holder.outcome(&follower) == Some(PeerOutcome::Match)
    })
    .await;
    assert!(holder.conflicts().is_empty() && follower.conflicts().is_empty());
    assert!(holder.generates());

    let held = |id| LeaseState::Held {
        machine_id: MachineId::new(id).unwrap(),
        deadline_ms: 10,
    };
    states.send(held(9)).unwrap();
    until("the follower to yield", || !follower.conflicts().is_empty()).await;
    assert!(holder.conflicts().is_empty());

    // The manager reacquires another ID: the follower announces it.
    states.send(held(10)).unwrap();
    until("the new id", || {
        follower.guard.local().machine_id().map(MachineId::get) == Some(10)
            && holder.outcome(&follower) == Some(PeerOutcome::Match)
    })
    .await;
    assert_eq!(follower.conflicts().len(), 1);
    shutdown([holder, follower]).await;
}

#[tokio::test]
async fn shutdown_leaves_the_cluster_and_no_task_running() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let a = Node::start(announce(Some(1), 1_000, 1), &[]).await;
    let b = Node::start(announce(Some(2), 1_000, 2), &[&a]).await;
    until("a two-node cluster", || {
        a.outcome(&b).is_some() && b.outcome(&a).is_some()
    })
    .await;
    assert_eq!(metrics.num_alive_tasks(), before + 2);

    let a_addr = a.guard.local_addr();
    a.guard.shutdown().await;
    // `a` said goodbye: `b` drops it without waiting for failure detection.
    until("b to forget a", || b.guard.peers().is_empty()).await;
    b.guard.shutdown().await;

    assert_eq!(metrics.num_alive_tasks(), before);
    // The socket is closed: the port can be bound again.
    tokio::net::UdpSocket::bind(a_addr).await.unwrap();
}

#[tokio::test]
async fn start_reports_a_busy_port() {
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = ConflictGuard::start(GuardConfig::new(addr), announce(None, 0, 0), |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, GuardError::Bind { .. }));
    assert_eq!(
        err.to_string(),
        format!(
            "cannot bind the conflict guard to udp {addr}; choose a free port or another address"
        )
    );
}
