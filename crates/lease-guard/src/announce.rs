//! What a node tells its peers about itself, and the wire format of the guard's own messages.

use core::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use lease_core::MachineId;

/// A random 128-bit value naming one run of one process.
///
/// Two processes never share a token, so the guard can tell "another node with my ID" from "a
/// second report about myself", and break ties between nodes that started in the same
/// millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceToken([u8; 16]);

impl InstanceToken {
    /// A fresh random token from the operating system's generator (via `rand`'s thread RNG).
    #[must_use]
    pub fn random() -> Self {
        Self(rand::random())
    }

    /// A token with the given bytes (tests, or a token persisted elsewhere).
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The token's bytes; tokens compare as these bytes, big-endian.
    #[must_use]
    pub const fn to_bytes(self) -> [u8; 16] {
        self.0
    }
}

impl fmt::Display for InstanceToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// What a node announces to its peers: its machine ID (if it has one), when it started and its
/// instance token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Announce {
    machine_id: Option<MachineId>,
    started_at_ms: u64,
    token: InstanceToken,
}

impl Announce {
    /// An announce for a node starting now: the start instant is the current wall-clock time in
    /// Unix milliseconds and the token is random.
    #[must_use]
    pub fn new(machine_id: Option<MachineId>) -> Self {
        let started_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, lease_core::time::millis);
        Self::from_parts(machine_id, started_at_ms, InstanceToken::random())
    }

    /// An announce with every field given.
    #[must_use]
    pub const fn from_parts(
        machine_id: Option<MachineId>,
        started_at_ms: u64,
        token: InstanceToken,
    ) -> Self {
        Self {
            machine_id,
            started_at_ms,
            token,
        }
    }

    /// The same node with another machine ID (or none).
    #[must_use]
    pub const fn with_machine_id(mut self, machine_id: Option<MachineId>) -> Self {
        self.machine_id = machine_id;
        self
    }

    /// The machine ID this node generates with, if any.
    #[must_use]
    pub const fn machine_id(&self) -> Option<MachineId> {
        self.machine_id
    }

    /// When the node started, in Unix milliseconds.
    #[must_use]
    pub const fn started_at_ms(&self) -> u64 {
        self.started_at_ms
    }

    /// The node's instance token.
    #[must_use]
    pub const fn token(&self) -> InstanceToken {
        self.token
    }

    /// Whether this node yields to `other` when both claim one ID: it started later, or in the
    /// same millisecond with the higher token.
    #[must_use]
    pub fn yields_to(&self, other: &Self) -> bool {
        (self.started_at_ms, self.token) > (other.started_at_ms, other.token)
    }
}

/// The guard's datagrams start with this magic (name and format version); anything else is
/// dropped.
pub(crate) const MAGIC: [u8; 4] = *b"NNG1";
/// A foca (SWIM membership) packet follows.
pub(crate) const KIND_MEMBERSHIP: u8 = 0;
/// "Here is my announce, send me yours."
pub(crate) const KIND_HELLO: u8 = 1;
/// "Here is mine", the reply to a hello.
pub(crate) const KIND_ACK: u8 = 2;

const NO_ID: u16 = u16::MAX;
/// Magic, kind, request number and announce.
pub(crate) const EXCHANGE_LEN: usize = MAGIC.len() + 1 + 8 + 2 + 8 + 16;

/// A hello or ack: the sender's current announce and the number of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exchange {
    pub(crate) kind: u8,
    pub(crate) request: u64,
    pub(crate) announce: Announce,
}

impl Exchange {
    pub(crate) fn encode(&self) -> [u8; EXCHANGE_LEN] {
        let mut out = [0; EXCHANGE_LEN];
        out[..4].copy_from_slice(&MAGIC);
        out[4] = self.kind;
        out[5..13].copy_from_slice(&self.request.to_be_bytes());
        let id = self.announce.machine_id.map_or(NO_ID, MachineId::get);
        out[13..15].copy_from_slice(&id.to_be_bytes());
        out[15..23].copy_from_slice(&self.announce.started_at_ms.to_be_bytes());
        out[23..39].copy_from_slice(&self.announce.token.0);
        out
    }

    /// `None` for anything that is not a well-formed hello or ack.
    pub(crate) fn decode(data: &[u8]) -> Option<Self> {
        if data.len() != EXCHANGE_LEN || data[..4] != MAGIC {
            return None;
        }
        let kind = data[4];
        if kind != KIND_HELLO && kind != KIND_ACK {
            return None;
        }
        let request = u64::from_be_bytes(data[5..13].try_into().ok()?);
        let id = u16::from_be_bytes(data[13..15].try_into().ok()?);
        let machine_id = if id == NO_ID {
            None
        } else {
            Some(MachineId::new(id).ok()?)
        };
        let started_at_ms = u64::from_be_bytes(data[15..23].try_into().ok()?);
        let token = InstanceToken(data[23..39].try_into().ok()?);
        Some(Self {
            kind,
            request,
            announce: Announce::from_parts(machine_id, started_at_ms, token),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn announce() -> impl Strategy<Value = Announce> {
        (
            proptest::option::of(0u16..=511),
            any::<u64>(),
            any::<[u8; 16]>(),
        )
            .prop_map(|(id, started, token)| {
                Announce::from_parts(
                    id.map(|id| MachineId::new(id).unwrap()),
                    started,
                    InstanceToken::from_bytes(token),
                )
            })
    }

    proptest! {
        #[test]
        fn exchange_round_trips(a in announce(), request in any::<u64>(), hello in any::<bool>()) {
            let kind = if hello { KIND_HELLO } else { KIND_ACK };
            let message = Exchange { kind, request, announce: a };
            prop_assert_eq!(Exchange::decode(&message.encode()), Some(message));
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Exchange::decode(&data);
        }

        #[test]
        fn exactly_one_of_two_instances_yields(a in announce(), b in announce()) {
            prop_assume!(a.token() != b.token());
            prop_assert!(a.yields_to(&b) != b.yields_to(&a));
        }
    }

    #[test]
    fn rejects_wrong_magic_kind_length_and_id() {
        let good = Exchange {
            kind: KIND_HELLO,
            request: 9,
            announce: Announce::from_parts(
                MachineId::new(7).ok(),
                1,
                InstanceToken::from_bytes([3; 16]),
            ),
        }
        .encode();
        assert!(Exchange::decode(&good).is_some());
        assert_eq!(Exchange::decode(&good[..EXCHANGE_LEN - 1]), None);
        // The magic, the kind and the machine ID (512) overwritten.
        let id = 512u16.to_be_bytes();
        for (at, bytes) in [(0, &b"X"[..]), (4, &[KIND_MEMBERSHIP]), (13, &id)] {
            let mut bad = good;
            bad[at..at + bytes.len()].copy_from_slice(bytes);
            assert_eq!(Exchange::decode(&bad), None, "{at}");
        }
    }

    #[test]
    fn later_start_yields_and_ties_go_to_the_lower_token() {
        let id = MachineId::new(7).ok();
        let early = Announce::from_parts(id, 1_000, InstanceToken::from_bytes([9; 16]));
        let late = Announce::from_parts(id, 2_000, InstanceToken::from_bytes([1; 16]));
        assert!(late.yields_to(&early));
        assert!(!early.yields_to(&late));
        let low = Announce::from_parts(id, 1_000, InstanceToken::from_bytes([1; 16]));
        assert!(early.yields_to(&low));
        assert!(!low.yields_to(&early));
    }

    #[test]
    fn token_displays_as_hex() {
        let mut bytes = [0; 16];
        bytes[15] = 0xab;
        assert_eq!(
            InstanceToken::from_bytes(bytes).to_string(),
            "000000000000000000000000000000ab"
        );
    }
}
