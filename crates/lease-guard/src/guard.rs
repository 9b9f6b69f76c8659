//! The guard: a tokio task that owns the UDP socket and the SWIM membership.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use foca::{
    AccumulatingRuntime, Config as FocaConfig, Foca, Identity, NoCustomBroadcast,
    OwnedNotification, PostcardCodec, Timer,
};
use lease_core::MachineId;
use lease_manager::{LeaseState, LeaseTarget};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use tokio::net::UdpSocket;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::announce::{EXCHANGE_LEN, Exchange, KIND_ACK, KIND_HELLO, KIND_MEMBERSHIP, MAGIC};
use crate::{Announce, Conflict, GuardConfig, GuardError, InstanceToken, PeerCheck, PeerOutcome};
use crate::{Resolution, check, telemetry};

/// The largest datagram the guard reads; foca itself stays under 1400 bytes.
const MAX_DATAGRAM: usize = 2048;
/// Once in a cluster, the seeds are announced to every this many rejoin intervals.
const CONNECTED_REJOIN_EVERY: u64 = 30;
/// Check results kept for slow [`ConflictGuard::subscribe`] receivers.
const CHECKS_BACKLOG: usize = 256;

type OnConflict = Arc<dyn Fn(Conflict) + Send + Sync>;

/// A membership identity: where a node is and which run of it this is. The machine ID is not
/// part of it: it is only ever believed from the node itself (see [`Exchange`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct NodeId {
    addr: SocketAddr,
    started_at_ms: u64,
    token: [u8; 16],
    /// Bumped when the cluster declared this identity down and the node rejoins.
    bump: u32,
}

impl NodeId {
    /// A seed we know only the address of; any real identity at that address replaces it.
    const fn seed(addr: SocketAddr) -> Self {
        Self {
            addr,
            started_at_ms: 0,
            token: [0; 16],
            bump: 0,
        }
    }
}

impl Identity for NodeId {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(Self {
            bump: self.bump.wrapping_add(1),
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The newer run at an address wins: a restarted process replaces its old self.
    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        (self.started_at_ms, self.bump, self.token)
            > (adversary.started_at_ms, adversary.bump, adversary.token)
    }
}

enum Command {
    SetLocal(Option<MachineId>),
    Follow(watch::Receiver<LeaseState>),
    Shutdown,
}

struct Shared {
    local: Mutex<Announce>,
    peers: Mutex<HashMap<InstanceToken, PeerCheck>>,
    checks: broadcast::Sender<PeerCheck>,
}

impl Shared {
    fn local(&self) -> std::sync::MutexGuard<'_, Announce> {
        self.local.lock().unwrap_or_else(PoisonError::into_inner)
    }
    fn peers(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceToken, PeerCheck>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running conflict guard.
///
/// It joins the other nodes over UDP (SWIM gossip via `foca`), asks every member it learns of
/// for its announce, answers theirs, and calls `on_conflict` when another running instance claims
/// this node's machine ID and this node must yield. See the [crate docs](crate).
///
/// Dropping the guard stops it abruptly; [`shutdown`](Self::shutdown) leaves the cluster first.
pub struct ConflictGuard {
    commands: mpsc::UnboundedSender<Command>,
    shared: Arc<Shared>,
    addr: SocketAddr,
    task: Option<JoinHandle<()>>,
}

impl ConflictGuard {
    /// Binds the socket, joins through the seeds and starts checking peers.
    ///
    /// `on_conflict` runs on the guard's task when this node must stop using its ID; it must be
    /// quick and must not block (typically `lease_lost` on the lease manager, or [`halt`]).
    /// After it runs the guard announces no machine ID until [`set_local`](Self::set_local)
    /// (or the [followed](Self::follow) lease) gives it one again.
    ///
    /// Must be called within a tokio runtime.
    ///
    /// # Errors
    /// [`GuardError`] for invalid settings or an address that cannot be bound.
    pub async fn start(
        config: GuardConfig,
        local: Announce,
        on_conflict: impl Fn(Conflict) + Send + Sync + 'static,
    ) -> Result<Self, GuardError> {
        config.validate()?;
        let bind_error = |source| GuardError::Bind {
            addr: config.bind,
            source,
        };
        let socket = UdpSocket::bind(config.bind).await.map_err(bind_error)?;
        let bound = socket.local_addr().map_err(bind_error)?;
        let addr = config.advertise.unwrap_or(bound);

        let identity = NodeId {
            addr,
            started_at_ms: local.started_at_ms(),
            token: local.token().to_bytes(),
            bump: 1,
        };
        let size =
            std::num::NonZeroU32::new(config.cluster_size).unwrap_or(std::num::NonZeroU32::MIN);
        let foca = Foca::new(
            identity,
            FocaConfig::new_lan(size),
            rand::make_rng::<StdRng>(),
            PostcardCodec,
        );
        let shared = Arc::new(Shared {
            local: Mutex::new(local),
            peers: Mutex::new(HashMap::new()),
            checks: broadcast::channel(CHECKS_BACKLOG).0,
        });
        let (commands, receiver) = mpsc::unbounded_channel();
        let seeds = config
            .seeds
            .iter()
            .copied()
            .filter(|seed| *seed != addr && *seed != bound)
            .collect();
        let node = Node {
            foca,
            runtime: AccumulatingRuntime::new(),
            timers: BTreeMap::new(),
            timer_seq: 0,
            pending: HashMap::new(),
            next_request: 0,
            local,
            shared: Arc::clone(&shared),
            on_conflict: Arc::new(on_conflict),
            answer_timeout: config.answer_timeout,
            attempts: config.attempts,
            seeds,
        };
        let task = tokio::spawn(node.run(socket, receiver, config.rejoin_interval));
        Ok(Self {
            commands,
            shared,
            addr,
            task: Some(task),
        })
    }

    /// The address peers reach this node at (the advertise address, or the bound one).
    #[must_use]
    pub const fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What this node currently announces.
    #[must_use]
    pub fn local(&self) -> Announce {
        *self.shared.local()
    }

    /// Changes the machine ID this node announces (after a dynamic strategy acquired another,
    /// or `None` while it holds none) and checks every known peer again. The start instant and
    /// instance token stay those of the process.
    pub fn set_local(&self, machine_id: Option<MachineId>) {
        let _ = self.commands.send(Command::SetLocal(machine_id));
    }

    /// Keeps the announced machine ID in step with a lease manager's state
    /// (`LeaseManager::watch_state`): the ID while [`LeaseState::Held`], none otherwise.
    /// Replaces any state followed before.
    pub fn follow(&self, states: watch::Receiver<LeaseState>) {
        let _ = self.commands.send(Command::Follow(states));
    }

    /// The latest check of every peer that answered and has not left, in no particular order.
    #[must_use]
    pub fn peers(&self) -> Vec<PeerCheck> {
        self.shared.peers().values().copied().collect()
    }

    /// Every new check result from now on: a peer checked for the first time, or with another
    /// outcome or announce than before. A receiver that falls more than 256 results behind
    /// loses the oldest ([`broadcast::error::RecvError::Lagged`]).
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<PeerCheck> {
        self.shared.checks.subscribe()
    }

    /// Leaves the cluster and waits for the guard's task to end; the socket is closed when
    /// this returns.
    pub async fn shutdown(mut self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ConflictGuard {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl core::fmt::Debug for ConflictGuard {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ConflictGuard")
            .field("addr", &self.addr)
            .field("local", &self.local())
            .finish_non_exhaustive()
    }
}

/// The default action without a lease manager: switch `targets` (nonce factories) off for good
/// when this node must yield its ID.
///
/// ```
/// # use std::sync::Arc;
/// # use nonce_core::{Factory, FactoryConfig, ManualClock};
/// # use lease_core::MachineId;
/// # use lease_guard::{Announce, Conflict, InstanceToken, Resolution};
/// let factory = Arc::new(Factory::new(ManualClock::new(1_800_000_000_000), FactoryConfig::new()).unwrap());
/// factory.enable(MachineId::new(7).unwrap(), nonce_core::NO_DEADLINE).unwrap();
/// let on_conflict = lease_guard::halt([Arc::clone(&factory)]);
/// # let node = |t| Announce::from_parts(MachineId::new(7).ok(), t, InstanceToken::from_bytes([0; 16]));
/// # let conflict = Conflict {
/// #     machine_id: MachineId::new(7).unwrap(),
/// #     local: node(2),
/// #     remote: node(1),
/// #     remote_addr: "127.0.0.1:4950".parse().unwrap(),
/// #     resolution: Resolution::Local,
/// # };
/// // What the guard does when this node must yield:
/// on_conflict(conflict);
/// assert!(!factory.is_enabled());
/// ```
pub fn halt<T>(targets: impl IntoIterator<Item = T>) -> impl Fn(Conflict) + Send + Sync + 'static
where
    T: LeaseTarget + 'static,
{
    let targets: Vec<T> = targets.into_iter().collect();
    move |_conflict| {
        for target in &targets {
            target.disable();
        }
    }
}

enum TimerEvent {
    Membership(Timer<NodeId>),
    Retry(u64),
}

struct Pending {
    addr: SocketAddr,
    attempts_left: u32,
}

struct Node {
    foca: Foca<NodeId, PostcardCodec, StdRng, NoCustomBroadcast>,
    runtime: AccumulatingRuntime<NodeId>,
    timers: BTreeMap<(Instant, u64), TimerEvent>,
    timer_seq: u64,
    pending: HashMap<u64, Pending>,
    next_request: u64,
    local: Announce,
    shared: Arc<Shared>,
    on_conflict: OnConflict,
    answer_timeout: Duration,
    attempts: u32,
    seeds: Vec<SocketAddr>,
}

impl Node {
    async fn run(
        mut self,
        socket: UdpSocket,
        mut commands: mpsc::UnboundedReceiver<Command>,
        rejoin_interval: Duration,
    ) {
        let mut buf = vec![0; MAX_DATAGRAM];
        let mut rejoin = tokio::time::interval(rejoin_interval);
        rejoin.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut rejoin_ticks: u64 = 0;
        let mut follow: Option<watch::Receiver<LeaseState>> = None;
        let mut followed: Option<Option<MachineId>> = None;

        loop {
            let next_timer = self.timers.first_key_value().map(|((at, _), _)| *at);
            // Never polled while no timer is due.
            let timer = tokio::time::sleep_until(next_timer.unwrap_or_else(Instant::now));
            tokio::select! {
                command = commands.recv() => match command {
                    None | Some(Command::Shutdown) => break,
                    Some(Command::SetLocal(id)) => self.set_local(&socket, id).await,
                    Some(Command::Follow(mut states)) => {
                        let id = states.borrow_and_update().machine_id();
                        follow = Some(states);
                        followed = Some(id);
                        self.set_local(&socket, id).await;
                    }
                },
                received = socket.recv_from(&mut buf) => match received {
                    Ok((len, from)) => self.on_datagram(&socket, &buf[..len], from).await,
                    // For example an ICMP "port unreachable" reported on the next call.
                    Err(error) => telemetry::ignored("receive failed", &error),
                },
                () = timer, if next_timer.is_some() => {
                    self.fire_timers(&socket).await;
                }
                _ = rejoin.tick() => {
                    if self.foca.num_members() == 0 || rejoin_ticks.is_multiple_of(CONNECTED_REJOIN_EVERY) {
                        self.announce_to_seeds(&socket).await;
                    }
                    rejoin_ticks = rejoin_ticks.wrapping_add(1);
                }
                changed = changed(follow.as_mut()) => match follow.as_mut() {
                    Some(states) if changed => {
                        let id = states.borrow_and_update().machine_id();
                        // Renewals change the state but not the ID: only act on a new ID.
                        if followed != Some(id) {
                            followed = Some(id);
                            self.set_local(&socket, id).await;
                        }
                    }
                    // The manager is gone.
                    _ => follow = None,
                },
            }
        }

        if let Err(error) = self.foca.leave_cluster(&mut self.runtime) {
            telemetry::ignored("leaving the cluster failed", &error);
        }
        self.send_membership(&socket).await;
    }

    async fn set_local(&mut self, socket: &UdpSocket, machine_id: Option<MachineId>) {
        if self.local.machine_id() == machine_id {
            return;
        }
        self.local = self.local.with_machine_id(machine_id);
        *self.shared.local() = self.local;
        // Everyone checks us again, and we them, with fresh answers.
        let members: Vec<SocketAddr> = self.foca.iter_members().map(|m| m.id().addr).collect();
        for addr in members {
            self.hello(socket, addr).await;
        }
    }

    async fn announce_to_seeds(&mut self, socket: &UdpSocket) {
        for seed in self.seeds.clone() {
            if let Err(error) = self.foca.announce(NodeId::seed(seed), &mut self.runtime) {
                telemetry::ignored("announce failed", &error);
            }
        }
        self.drain(socket).await;
    }

    async fn on_datagram(&mut self, socket: &UdpSocket, data: &[u8], from: SocketAddr) {
        if data.len() < MAGIC.len() + 1 || data[..MAGIC.len()] != MAGIC {
            return;
        }
        if data[MAGIC.len()] == KIND_MEMBERSHIP {
            if let Err(error) = self
                .foca
                .handle_data(&data[MAGIC.len() + 1..], &mut self.runtime)
            {
                telemetry::ignored("membership packet", &error);
            }
            self.drain(socket).await;
            return;
        }
        let Some(exchange) = Exchange::decode(data) else {
            return;
        };
        match exchange.kind {
            KIND_HELLO => {
                let ack = Exchange {
                    kind: KIND_ACK,
                    request: exchange.request,
                    announce: self.local,
                };
                send(socket, &ack.encode(), from).await;
                self.observe(socket, from, exchange.announce).await;
            }
            KIND_ACK => {
                // Only answers to our own questions count.
                if self.pending.remove(&exchange.request).is_none() {
                    return;
                }
                self.observe(socket, from, exchange.announce).await;
            }
            _ => {}
        }
    }

    /// A peer told us its announce directly: this is the only evidence the guard acts on.
    async fn observe(&mut self, socket: &UdpSocket, addr: SocketAddr, peer: Announce) {
        if peer.token() == self.local.token() {
            return;
        }
        let outcome = check(&self.local, &peer);
        let entry = PeerCheck {
            addr,
            peer,
            local: self.local,
            outcome,
        };
        if self.shared.peers().insert(peer.token(), entry) == Some(entry) {
            return;
        }
        telemetry::peer_checked(&entry);
        // Nobody listening is fine.
        let _ = self.shared.checks.send(entry);
        let (PeerOutcome::Conflict(resolution), Some(machine_id)) =
            (outcome, self.local.machine_id())
        else {
            return;
        };
        let conflict = Conflict {
            machine_id,
            local: self.local,
            remote: peer,
            remote_addr: addr,
            resolution,
        };
        telemetry::conflict(&conflict);
        if resolution == Resolution::Local {
            (self.on_conflict)(conflict);
            self.set_local(socket, None).await;
        }
    }

    async fn hello(&mut self, socket: &UdpSocket, addr: SocketAddr) {
        let request = self.next_request;
        self.next_request = self.next_request.wrapping_add(1);
        self.pending.insert(
            request,
            Pending {
                addr,
                attempts_left: self.attempts - 1,
            },
        );
        self.send_hello(socket, request, addr).await;
    }

    async fn send_hello(&mut self, socket: &UdpSocket, request: u64, addr: SocketAddr) {
        let hello = Exchange {
            kind: KIND_HELLO,
            request,
            announce: self.local,
        };
        send(socket, &hello.encode(), addr).await;
        let at = Instant::now() + self.answer_timeout;
        self.schedule(at, TimerEvent::Retry(request));
    }

    fn schedule(&mut self, at: Instant, event: TimerEvent) {
        self.timer_seq = self.timer_seq.wrapping_add(1);
        self.timers.insert((at, self.timer_seq), event);
    }

    async fn fire_timers(&mut self, socket: &UdpSocket) {
        let now = Instant::now();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            match entry.remove() {
                TimerEvent::Membership(timer) => {
                    if let Err(error) = self.foca.handle_timer(timer, &mut self.runtime) {
                        telemetry::ignored("membership timer", &error);
                    }
                    self.drain(socket).await;
                }
                TimerEvent::Retry(request) => {
                    let Some(pending) = self.pending.get_mut(&request) else {
                        continue;
                    };
                    let addr = pending.addr;
                    if pending.attempts_left == 0 {
                        self.pending.remove(&request);
                        telemetry::unanswered(addr, self.attempts);
                    } else {
                        pending.attempts_left -= 1;
                        self.send_hello(socket, request, addr).await;
                    }
                }
            }
        }
    }

    async fn send_membership(&mut self, socket: &UdpSocket) {
        while let Some((to, data)) = self.runtime.to_send() {
            let mut packet = Vec::with_capacity(MAGIC.len() + 1 + data.len());
            packet.extend_from_slice(&MAGIC);
            packet.push(KIND_MEMBERSHIP);
            packet.extend_from_slice(&data);
            send(socket, &packet, to.addr).await;
        }
    }

    /// Carries out what foca asked for: packets, timers, membership changes.
    async fn drain(&mut self, socket: &UdpSocket) {
        self.send_membership(socket).await;
        let now = Instant::now();
        while let Some((after, timer)) = self.runtime.to_schedule() {
            self.schedule(now + after, TimerEvent::Membership(timer));
        }
        while let Some(notification) = self.runtime.to_notify() {
            match notification {
                OwnedNotification::MemberUp(member) => self.hello(socket, member.addr).await,
                OwnedNotification::Rename(old, new) => {
                    self.forget(&old);
                    self.hello(socket, new.addr).await;
                }
                OwnedNotification::MemberDown(member) => self.forget(&member),
                _ => {}
            }
        }
    }

    fn forget(&self, member: &NodeId) {
        let token = InstanceToken::from_bytes(member.token);
        self.shared.peers().remove(&token);
    }
}

/// Resolves `true` on a change, `false` once the sender is gone; never without a receiver.
async fn changed(states: Option<&mut watch::Receiver<LeaseState>>) -> bool {
    match states {
        Some(states) => states.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

async fn send(socket: &UdpSocket, data: &[u8], to: SocketAddr) {
    debug_assert!(data.len() <= MAX_DATAGRAM.max(EXCHANGE_LEN));
    if let Err(error) = socket.send_to(data, to).await {
        telemetry::ignored("send failed", &error);
    }
}
