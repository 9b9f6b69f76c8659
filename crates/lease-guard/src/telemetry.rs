//! `tracing` events of the guard (feature `tracing`); without the feature these do nothing.

use std::net::SocketAddr;

use crate::{Conflict, PeerCheck};

/// A peer was checked (emitted when the result or either announce changed).
pub(crate) fn peer_checked(check: &PeerCheck) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        outcome = check.outcome.as_str(),
        peer = %check.addr,
        peer_machine_id = check.peer.machine_id().map(lease_core::MachineId::get),
        machine_id = check.local.machine_id().map(lease_core::MachineId::get),
        peer_instance = %check.peer.token(),
        "peer checked"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = check;
}

/// Two instances share a machine ID.
pub(crate) fn conflict(conflict: &Conflict) {
    #[cfg(feature = "tracing")]
    tracing::error!(
        resolution = conflict.resolution.as_str(),
        machine_id = conflict.machine_id.get(),
        peer = %conflict.remote_addr,
        peer_instance = %conflict.remote.token(),
        peer_started_at_ms = conflict.remote.started_at_ms(),
        started_at_ms = conflict.local.started_at_ms(),
        "machine id conflict"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = conflict;
}

/// A peer never answered; gossip alone does not stop a node.
pub(crate) fn unanswered(addr: SocketAddr, attempts: u32) {
    #[cfg(feature = "tracing")]
    tracing::debug!(peer = %addr, attempts, "peer did not answer the conflict check");
    #[cfg(not(feature = "tracing"))]
    let _ = (addr, attempts);
}

/// Something went wrong that the guard survives (a send failed, a packet was malformed).
pub(crate) fn ignored(what: &'static str, error: &dyn core::fmt::Display) {
    #[cfg(feature = "tracing")]
    tracing::trace!(error = %error, "conflict guard ignored: {what}");
    #[cfg(not(feature = "tracing"))]
    let _ = (what, error);
}
