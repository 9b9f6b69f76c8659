#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod holders;
mod kind;
mod seen;

pub use holders::{Holders, Overlap, Range};
pub use kind::Kind;
pub use seen::Seen;

use lease_manager::floor_terms;
use nonce_core::Decoded;

/// One nonce as the judgement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Issued {
    /// Its value, as issued (for an encrypted nonce, the encrypted value).
    pub value: u128,
    /// Its machine ID.
    pub id: u16,
    /// Its timestamp in the floors' terms (the timestamp it carries plus the default epoch):
    /// what holders on different epochs compare, and what floors are.
    pub ts: u64,
    /// Its Unix millisecond (its factory's epoch plus its timestamp): the holder's clock when it
    /// was issued, which the deadline bounds.
    pub unix_ms: u64,
}

impl Issued {
    /// `value`, whose fields are `decoded` with its factory's epoch `epoch_ms` (for an encrypted
    /// nonce, the fields of its decryption).
    #[must_use]
    pub fn new(value: u128, decoded: &Decoded, epoch_ms: u64) -> Self {
        Self {
            value,
            id: decoded.machine_id.get(),
            ts: floor_terms(decoded.unix_ms, epoch_ms),
            unix_ms: decoded.unix_ms,
        }
    }
}

/// What a holder's factories were enabled with: the window every nonce it issues must lie in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The machine ID.
    pub id: u16,
    /// The floor the lease came with, in the floors' terms: timestamps must be strictly above.
    pub floor: u64,
    /// The deadline the factories were last given, on the holder's clock: timestamps must be
    /// strictly below.
    pub deadline: u64,
}

impl Window {
    /// Whether `nonce` lies in the window: its ID, a timestamp above the floor (compared in the
    /// floors' terms) and below the deadline (compared on the holder's clock).
    #[must_use]
    pub const fn allows(&self, nonce: &Issued) -> bool {
        self.id == nonce.id && self.floor < nonce.ts && nonce.unix_ms < self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nonce_core::{DEFAULT_EPOCH_MS, Factory, FactoryConfig, MachineId, ManualClock};

    /// A nonce on the default epoch, where both timestamps agree.
    fn at(value: u128, ts: u64, id: u16) -> Issued {
        Issued {
            value,
            ts,
            unix_ms: ts,
            id,
        }
    }

    #[test]
    fn windows_are_strict() {
        let w = Window {
            id: 1,
            floor: 10,
            deadline: 100,
        };
        assert!(w.allows(&at(0, 11, 1)));
        assert!(w.allows(&at(0, 99, 1)));
        for (ts, id) in [(10, 1), (100, 1), (50, 2)] {
            assert!(!w.allows(&at(0, ts, id)), "{ts} {id}");
        }
    }

    #[test]
    fn the_floor_is_compared_in_the_floors_terms_and_the_deadline_on_the_clock() {
        // A factory on an epoch 5 s later than the default: its timestamps, in the floors'
        // terms, lie 5 s behind its clock.
        let epoch = DEFAULT_EPOCH_MS + 5_000;
        let now = epoch + 60_000;
        let clock = ManualClock::new(now);
        let factory = Factory::new(clock, FactoryConfig::new().with_epoch_ms(epoch)).unwrap();
        let id = MachineId::new(3).unwrap();
        factory.enable_above(id, 0, now + 1_000).unwrap();
        let n = factory.sortable64().unwrap();
        let issued = Issued::new(u128::from(n.to_u64()), &n.decode(epoch), epoch);
        assert_eq!(issued.unix_ms, now);
        assert_eq!(issued.ts, now - 5_000);
        assert_eq!(issued.id, 3);
        let window = |floor, deadline| Window {
            id: 3,
            floor,
            deadline,
        };
        // A floor 2 s behind its clock is above its timestamps in the floors' terms.
        assert!(!window(now - 2_000, now + 1_000).allows(&issued));
        assert!(window(now - 5_001, now + 1_000).allows(&issued));
        // The deadline is on its clock: 1 ms after the clock reading allows it, the reading
        // itself does not.
        assert!(window(0, now + 1).allows(&issued));
        assert!(!window(0, now).allows(&issued));
    }
}
