//! The factories `serve` generates with: one per kind served, each on a machine ID leased for
//! it alone. Counter and sortable nonces of one machine ID can be equal, and an encrypted nonce
//! can equal a plain one: one ID per kind keeps every kind's nonces apart from every other's.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nononce::nonce::Clock;
use nononce::{Base, Factory, FactoryClock, Nononce};

use super::args::ServeArgs;
use crate::codec::Kind;
use crate::lease::{Log, Watched};
use crate::output::Exit;

/// A kind's factory.
pub struct Worker {
    pub kind: Kind,
    pub factory: Arc<Factory<FactoryClock>>,
}

/// Every kind's factory, and the leases behind them.
pub struct Workers {
    workers: Vec<Worker>,
    leases: tokio::sync::Mutex<Vec<Held>>,
}

/// A kind's lease, and the log that tells how its release went.
struct Held {
    kind: Kind,
    nononce: Nononce<Watched>,
    log: Arc<Mutex<Log>>,
}

/// What became of a kind's machine ID at shutdown.
pub struct Released {
    pub kind: Kind,
    /// The ID held when the shutdown began; `None` when the kind held none.
    pub machine_id: Option<u16>,
    /// `None`: nothing was released (no lease held); `Err`: the store's answer, in the CLI's words.
    pub outcome: Option<Result<(), String>>,
}

impl Workers {
    /// Leases a machine ID for each kind in turn (waiting for each as `gen` does); on a
    /// failure, releases those already held.
    pub async fn start(
        store: &crate::store_arg::ChosenStore,
        kinds: &[Kind],
        args: &ServeArgs,
        key: Option<Vec<u8>>,
        quiet: bool,
    ) -> Result<Self, Exit> {
        let mut workers = Vec::new();
        let mut leases = Vec::new();
        for &kind in kinds {
            let base = if kind == Kind::Sortable {
                Base::Sortable
            } else {
                Base::Counter
            };
            let key = if kind == Kind::Encrypted {
                key.clone()
            } else {
                None
            };
            let options = crate::factory_options::options(&args.ciphers, key, args.epoch_ms)
                .with_kind64(base)
                .with_kind96(base)
                .with_kind128(base);
            match crate::lease::start_lease(store, kind.name(), options, quiet, None).await {
                Ok((nononce, log)) => {
                    let factory = Arc::clone(nononce.factory(kind.name()).expect("added above"));
                    workers.push(Worker { kind, factory });
                    leases.push(Held { kind, nononce, log });
                }
                Err(e) => {
                    for held in leases {
                        held.nononce.shutdown().await;
                    }
                    return Err(match e {
                        Exit::Fail(message) => Exit::Fail(format!("{}: {message}", kind.name())),
                        other => other,
                    });
                }
            }
        }
        Ok(Self {
            workers,
            leases: tokio::sync::Mutex::new(leases),
        })
    }

    /// The factory serving `kind`, when it is served.
    pub fn factory(&self, kind: Kind) -> Option<&Arc<Factory<FactoryClock>>> {
        self.workers
            .iter()
            .find(|w| w.kind == kind)
            .map(|w| &w.factory)
    }

    /// The kinds served, in the order of `--kinds`.
    pub fn all(&self) -> &[Worker] {
        &self.workers
    }

    /// `counter on machine id 3, sortable on machine id 4`.
    pub fn describe(&self) -> String {
        self.workers
            .iter()
            .map(|w| match w.factory.machine_id() {
                Some(id) => format!("{} on machine id {}", w.kind.name(), id.get()),
                None => format!("{} waiting for a machine id", w.kind.name()),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How long each kind's factory may still generate: `Err` with the reason when it may not.
    pub fn readiness(&self) -> Vec<(Kind, Result<Duration, &'static str>)> {
        self.workers
            .iter()
            .map(|w| (w.kind, time_left(&w.factory)))
            .collect()
    }

    /// Stops every factory, then releases its machine ID: what became of each. Later calls do
    /// nothing (and report nothing).
    pub async fn shutdown(&self) -> Vec<Released> {
        let leases = std::mem::take(&mut *self.leases.lock().await);
        let mut released = Vec::new();
        for held in leases {
            let machine_id = held.nononce.machine_id().map(|id| id.get());
            held.nononce.shutdown().await;
            let outcome = held
                .log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .released()
                .cloned();
            released.push(Released {
                kind: held.kind,
                machine_id,
                outcome,
            });
        }
        released
    }
}

/// How long `factory` may still generate under its lease.
pub fn time_left(factory: &Factory<FactoryClock>) -> Result<Duration, &'static str> {
    if !factory.is_enabled() {
        return Err("no machine-id lease held (the store is being asked for one)");
    }
    let now = factory.clock().exact_now_ms();
    match factory.deadline_ms() {
        Some(deadline) if deadline > now => Ok(Duration::from_millis(deadline - now)),
        _ => Err("the machine-id lease has reached its deadline (renewal pending)"),
    }
}
