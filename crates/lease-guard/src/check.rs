//! Comparing a peer's announce with our own.

use core::fmt;
use std::net::SocketAddr;

use lease_core::MachineId;

use crate::Announce;

/// Which node gives up the machine ID when two share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// This node started later (or in the same millisecond with the higher token): it stops using
    /// the ID.
    Local,
    /// The peer started later: the peer stops, this node keeps going.
    Remote,
}

impl Resolution {
    /// `"local"` or `"remote"`, as in the telemetry events.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Remote => "remote",
        }
    }
}

/// The result of checking one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerOutcome {
    /// No conflict: the peer uses another machine ID, or none, or is this very instance.
    Match,
    /// The peer claims this node's machine ID.
    Conflict(Resolution),
    /// This node has no machine ID, so there is nothing to compare.
    NoLocalId,
}

impl PeerOutcome {
    /// `"match"`, `"conflict"` or `"no_local_id"`, as in the telemetry events.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Match => "match",
            Self::Conflict(_) => "conflict",
            Self::NoLocalId => "no_local_id",
        }
    }
}

/// Compares a peer's announce with ours.
///
/// A conflict needs the same machine ID under two different instance tokens; the one that
/// [yields](Announce::yields_to) resolves it.
#[must_use]
pub fn check(local: &Announce, peer: &Announce) -> PeerOutcome {
    let Some(id) = local.machine_id() else {
        return PeerOutcome::NoLocalId;
    };
    if peer.machine_id() != Some(id) || peer.token() == local.token() {
        return PeerOutcome::Match;
    }
    if local.yields_to(peer) {
        PeerOutcome::Conflict(Resolution::Local)
    } else {
        PeerOutcome::Conflict(Resolution::Remote)
    }
}

/// The latest check of one peer, as listed by [`ConflictGuard::peers`](crate::ConflictGuard::peers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCheck {
    /// The address the peer's answer came from.
    pub addr: SocketAddr,
    /// What the peer announced.
    pub peer: Announce,
    /// What this node announced when it checked.
    pub local: Announce,
    /// The result.
    pub outcome: PeerOutcome,
}

/// Two running instances claim one machine ID; passed to the guard's `on_conflict` callback on
/// the node that must stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict {
    /// The shared machine ID.
    pub machine_id: MachineId,
    /// This node's announce.
    pub local: Announce,
    /// The other node's announce.
    pub remote: Announce,
    /// The other node's address.
    pub remote_addr: SocketAddr,
    /// Which of the two stops.
    pub resolution: Resolution,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "machine id {} is also used by the node at {} (instance {}, started at {} ms, this \
             node at {} ms); ",
            self.machine_id,
            self.remote_addr,
            self.remote.token(),
            self.remote.started_at_ms(),
            self.local.started_at_ms(),
        )?;
        match self.resolution {
            Resolution::Local => f.write_str("this node started later and stops using it"),
            Resolution::Remote => f.write_str("that node started later and stops using it"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InstanceToken;

    fn node(id: Option<u16>, started: u64, token: u8) -> Announce {
        Announce::from_parts(
            id.map(|id| MachineId::new(id).unwrap()),
            started,
            InstanceToken::from_bytes([token; 16]),
        )
    }

    #[test]
    fn outcomes() {
        let me = node(Some(7), 2_000, 1);
        assert_eq!(check(&me, &node(Some(8), 1_000, 2)), PeerOutcome::Match);
        assert_eq!(check(&me, &node(None, 1_000, 2)), PeerOutcome::Match);
        // A second report about this very instance is not a conflict.
        assert_eq!(check(&me, &me), PeerOutcome::Match);
        assert_eq!(
            check(&me, &node(Some(7), 1_000, 2)),
            PeerOutcome::Conflict(Resolution::Local)
        );
        assert_eq!(
            check(&me, &node(Some(7), 3_000, 0)),
            PeerOutcome::Conflict(Resolution::Remote)
        );
        assert_eq!(
            check(&node(None, 1, 1), &node(Some(7), 1, 2)),
            PeerOutcome::NoLocalId
        );
    }

    #[test]
    fn conflict_message_names_both_nodes_and_who_stops() {
        let conflict = Conflict {
            machine_id: MachineId::new(7).unwrap(),
            local: node(Some(7), 2_000, 1),
            remote: node(Some(7), 1_000, 0xab),
            remote_addr: "127.0.0.1:4000".parse().unwrap(),
            resolution: Resolution::Local,
        };
        assert_eq!(
            conflict.to_string(),
            "machine id 7 is also used by the node at 127.0.0.1:4000 (instance \
             abababababababababababababababab, started at 1000 ms, this node at 2000 ms); this \
             node started later and stops using it"
        );
    }
}
