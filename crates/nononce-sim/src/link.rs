//! The simulated network's end in a node: a [`Link`] whose calls wait for the simulator.
//!
//! A call's future, when first polled, puts its request in the outbox and waits; the
//! simulator takes the outbox, carries each request through the simulated network to the
//! coordinator model and the reply back, and hands the reply to the link, then polls the
//! future again. Only the reply to the request being awaited is taken: late and duplicated
//! replies, and replies to a call that was dropped, are ignored.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use nonce_core::Clock;

use crate::clock::SimClock;
use crate::model::{Link, NetError, Reply, Request};

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    outbox: Vec<(u64, Request)>,
    awaiting: Option<u64>,
    reply: Option<(u64, Result<Reply, NetError>)>,
}

/// A node's link to the coordinator in the simulation.
#[derive(Debug, Clone)]
pub struct SimLink {
    state: Arc<Mutex<State>>,
    clock: SimClock,
}

impl SimLink {
    /// A link whose client clock is `clock`.
    #[must_use]
    pub fn new(clock: SimClock) -> Self {
        Self {
            state: Arc::default(),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The requests sent since the last call, with their IDs.
    pub fn take_outbox(&self) -> Vec<(u64, Request)> {
        std::mem::take(&mut self.lock().outbox)
    }

    /// Hands over the reply to request `id`; whether it was the one awaited.
    pub fn deliver(&self, id: u64, reply: Result<Reply, NetError>) -> bool {
        let mut state = self.lock();
        if state.awaiting == Some(id) {
            state.awaiting = None;
            state.reply = Some((id, reply));
            true
        } else {
            false
        }
    }

    /// Forgets the call in progress (it timed out or was dropped).
    pub fn reset(&self) {
        let mut state = self.lock();
        state.awaiting = None;
        state.reply = None;
        state.outbox.clear();
    }
}

/// One request in flight.
struct Call {
    link: SimLink,
    request: Option<Request>,
    id: Option<u64>,
}

impl Future for Call {
    type Output = Result<Reply, NetError>;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut state = this.link.lock();
        match this.id {
            None => {
                let id = state.next_id;
                state.next_id += 1;
                if let Some(request) = this.request.take() {
                    state.outbox.push((id, request));
                }
                state.awaiting = Some(id);
                this.id = Some(id);
                Poll::Pending
            }
            Some(id) => match state.reply.take() {
                Some((got, reply)) if got == id => Poll::Ready(reply),
                other => {
                    state.reply = other;
                    Poll::Pending
                }
            },
        }
    }
}

impl Link for SimLink {
    fn exchange(&self, request: Request) -> impl Future<Output = Result<Reply, NetError>> + Send {
        Call {
            link: self.clone(),
            request: Some(request),
            id: None,
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }
}
