//! The invariant, checked on every nonce.
//!
//! 1. No two nonces of one kind and size are equal, whoever issued them: one set per kind.
//! 2. Every nonce lies in a window its node held: its machine ID is the one the node's
//!    factories were enabled with, its timestamp strictly above the granted floor and below the
//!    deadline in force when it was issued.
//! 3. Per machine ID, the timestamp ranges issued under different holders (one lease of one
//!    process) never overlap: the hazard behind a duplicate, caught even when no two values
//!    happen to collide.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use nonce_core::{Clock, Error, Factory, MachineId};

/// One nonce kind and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `counter64`.
    Counter64,
    /// `sortable64`.
    Sortable64,
    /// `counter96`.
    Counter96,
    /// `sortable96`.
    Sortable96,
    /// `counter128`.
    Counter128,
    /// `sortable128`.
    Sortable128,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Self; 6] = [
        Self::Counter64,
        Self::Sortable64,
        Self::Counter96,
        Self::Sortable96,
        Self::Counter128,
        Self::Sortable128,
    ];

    const fn index(self) -> usize {
        match self {
            Self::Counter64 => 0,
            Self::Sortable64 => 1,
            Self::Counter96 => 2,
            Self::Sortable96 => 3,
            Self::Counter128 => 4,
            Self::Sortable128 => 5,
        }
    }

    /// Name as the factory method.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Counter64 => "counter64",
            Self::Sortable64 => "sortable64",
            Self::Counter96 => "counter96",
            Self::Sortable96 => "sortable96",
            Self::Counter128 => "counter128",
            Self::Sortable128 => "sortable128",
        }
    }

    /// One nonce from `factory`, as the checker sees it ([`Issued`]).
    ///
    /// # Errors
    /// The factory's refusal.
    pub fn generate<C: Clock>(self, factory: &Factory<C>) -> Result<Issued, Error> {
        let epoch = factory.epoch_ms();
        Ok(match self {
            Self::Counter64 => {
                let n = factory.counter64()?;
                Issued::new(u128::from(n.to_u64()), &n.decode(epoch))
            }
            Self::Sortable64 => {
                let n = factory.sortable64()?;
                Issued::new(u128::from(n.to_u64()), &n.decode(epoch))
            }
            Self::Counter96 => {
                let n = factory.counter96()?;
                Issued::new(n.to_u128(), &n.decode(epoch))
            }
            Self::Sortable96 => {
                let n = factory.sortable96()?;
                Issued::new(n.to_u128(), &n.decode(epoch))
            }
            Self::Counter128 => {
                let n = factory.counter128()?;
                Issued::new(n.to_u128(), &n.decode(epoch))
            }
            Self::Sortable128 => {
                let n = factory.sortable128()?;
                Issued::new(n.to_u128(), &n.decode(epoch))
            }
        })
    }
}

/// One nonce as the checker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Issued {
    /// Its value.
    pub value: u128,
    /// Its timestamp in the floors' terms (as the nonce carries it, plus the default epoch: the
    /// Unix millisecond on the default epoch): what holders on different epochs compare.
    pub ts: u64,
    /// Its Unix millisecond (its factory's epoch plus its timestamp).
    pub unix_ms: u64,
    /// Its machine ID.
    pub id: u16,
}

impl Issued {
    fn new(value: u128, d: &nonce_core::Decoded) -> Self {
        Self {
            value,
            ts: d.timestamp_ms.saturating_add(nonce_core::DEFAULT_EPOCH_MS),
            unix_ms: d.unix_ms,
            id: d.machine_id.get(),
        }
    }
}

/// The kinds one factory issues: one per size, as a factory requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KindSet {
    /// counter64, sortable96, counter128.
    A,
    /// sortable64, counter96, sortable128.
    B,
}

impl KindSet {
    /// The three kinds.
    #[must_use]
    pub const fn kinds(self) -> [Kind; 3] {
        match self {
            Self::A => [Kind::Counter64, Kind::Sortable96, Kind::Counter128],
            Self::B => [Kind::Sortable64, Kind::Counter96, Kind::Sortable128],
        }
    }
}

/// What a node's factories were last enabled with (deadline as last extended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The machine ID.
    pub id: u16,
    /// Timestamps must be strictly above this (the floors' terms).
    pub floor: u64,
    /// And strictly below this.
    pub deadline: u64,
}

/// A fast hasher for nonce values (the murmur3 finaliser over both halves).
#[derive(Debug, Default, Clone, Copy)]
pub struct Mix(u64);

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    #[allow(clippy::cast_possible_truncation)]
    fn write_u128(&mut self, v: u128) {
        let (lo, hi) = (v as u64, (v >> 64) as u64);
        self.0 = lo ^ hi.rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Set = HashSet<u128, BuildHasherDefault<Mix>>;

/// The timestamps one holder issued under one machine ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The holder (one lease of one process).
    pub holder: u32,
    /// Its node.
    pub node: u16,
    /// Lowest timestamp (Unix ms).
    pub lo: u64,
    /// Highest timestamp.
    pub hi: u64,
}

/// A failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A value issued twice.
    Duplicate(String),
    /// A nonce outside its node's window.
    OutOfWindow(String),
    /// Two holders' timestamp ranges of one ID overlap.
    Overlap(String),
    /// A factory refused in a way that should be impossible.
    Unexpected(String),
}

impl Violation {
    /// The description.
    #[must_use]
    pub fn message(&self) -> &str {
        match self {
            Self::Duplicate(m) | Self::OutOfWindow(m) | Self::Overlap(m) | Self::Unexpected(m) => m,
        }
    }
}

/// Every nonce of a run, checked as it is issued.
#[derive(Debug)]
pub struct Checker {
    seen: Vec<Set>,
    ranges: Vec<Vec<Range>>,
    /// Nonces checked.
    pub nonces: u64,
    /// Values seen twice.
    pub duplicates: u64,
    /// Nonces outside their window.
    pub out_of_window: u64,
    /// Pairs of holders of one ID whose ranges overlap.
    pub overlaps: u64,
    /// Unexpected factory errors.
    pub unexpected: u64,
    overlapping: HashSet<(u32, u32)>,
}

impl Default for Checker {
    fn default() -> Self {
        Self::new()
    }
}

impl Checker {
    /// An empty checker.
    #[must_use]
    pub fn new() -> Self {
        Self {
            seen: (0..Kind::ALL.len()).map(|_| Set::default()).collect(),
            ranges: vec![Vec::new(); usize::from(MachineId::COUNT)],
            nonces: 0,
            duplicates: 0,
            out_of_window: 0,
            overlaps: 0,
            unexpected: 0,
            overlapping: HashSet::new(),
        }
    }

    /// Checks one nonce of `node` issued under `window` (the factories' window at the time).
    ///
    /// # Errors
    /// The violations it shows.
    pub fn nonce(
        &mut self,
        node: u16,
        window: Option<Window>,
        kind: Kind,
        issued: Issued,
    ) -> Result<(), Violation> {
        let Issued {
            value,
            ts,
            unix_ms,
            id,
        } = issued;
        self.nonces += 1;
        if !self.seen[kind.index()].insert(value) {
            self.duplicates += 1;
            let other = self.ranges[usize::from(id & MachineId::MAX)]
                .iter()
                .filter(|r| r.lo <= ts && ts <= r.hi)
                .map(|r| {
                    format!(
                        "holder {} of node {} [{}, {}]",
                        r.holder, r.node, r.lo, r.hi
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            return Err(Violation::Duplicate(format!(
                "duplicate {} {value:#x} (machine id {id}, timestamp {ts}) from node {node}; \
                 ranges covering it: {other}",
                kind.name()
            )));
        }
        // The floor in the floors' terms, the deadline on the node's clock.
        let inside = window.is_some_and(|w| w.id == id && w.floor < ts && unix_ms < w.deadline);
        if !inside {
            self.out_of_window += 1;
            return Err(Violation::OutOfWindow(format!(
                "node {node} issued {} with machine id {id} and timestamp {ts} outside its \
                 window {window:?}",
                kind.name()
            )));
        }
        Ok(())
    }

    /// Extends the range of `holder` (of `node`) on `id` to cover `lo..=hi` and checks it
    /// against every other holder of `id`. `slot` remembers where the holder's range is.
    ///
    /// # Errors
    /// An overlap with another holder.
    pub fn range(
        &mut self,
        slot: &mut Option<(u16, usize)>,
        holder: u32,
        node: u16,
        id: u16,
        lo: u64,
        hi: u64,
    ) -> Result<(), Violation> {
        let list = &mut self.ranges[usize::from(id & MachineId::MAX)];
        let index = match *slot {
            Some((slot_id, i))
                if slot_id == id && list.get(i).is_some_and(|r| r.holder == holder) =>
            {
                let r = &mut list[i];
                r.lo = r.lo.min(lo);
                r.hi = r.hi.max(hi);
                i
            }
            _ => {
                list.push(Range {
                    holder,
                    node,
                    lo,
                    hi,
                });
                *slot = Some((id, list.len() - 1));
                list.len() - 1
            }
        };
        let mine = list[index];
        let clash = list
            .iter()
            .find(|r| r.holder != holder && r.lo <= mine.hi && mine.lo <= r.hi)
            .copied();
        if let Some(other) = clash {
            let pair = (other.holder.min(holder), other.holder.max(holder));
            if self.overlapping.insert(pair) {
                self.overlaps += 1;
                return Err(Violation::Overlap(format!(
                    "machine id {id}: holder {} of node {} issued timestamps [{}, {}], holder {} of \
                     node {} [{}, {}]",
                    other.holder, other.node, other.lo, other.hi, holder, node, mine.lo, mine.hi
                )));
            }
        }
        Ok(())
    }

    /// Records a factory error that should never happen.
    pub fn unexpected(&mut self, node: u16, kind: Kind, error: &Error) -> Violation {
        self.unexpected += 1;
        Violation::Unexpected(format!("node {node}: {} failed: {error:?}", kind.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A nonce on the default epoch, where both timestamps agree.
    fn at(value: u128, ts: u64, id: u16) -> Issued {
        Issued {
            value,
            ts,
            unix_ms: ts,
            id,
        }
    }

    fn w(id: u16) -> Option<Window> {
        Some(Window {
            id,
            floor: 10,
            deadline: 100,
        })
    }

    #[test]
    fn a_repeated_value_is_a_duplicate_of_its_kind_only() {
        let mut c = Checker::new();
        assert!(c.nonce(0, w(1), Kind::Counter64, at(5, 50, 1)).is_ok());
        assert!(c.nonce(1, w(1), Kind::Sortable64, at(5, 50, 1)).is_ok());
        assert!(matches!(
            c.nonce(1, w(1), Kind::Counter64, at(5, 50, 1)),
            Err(Violation::Duplicate(_))
        ));
        assert_eq!(c.duplicates, 1);
    }

    #[test]
    fn windows_are_strict() {
        let mut c = Checker::new();
        for (v, ts, id) in [(1, 10, 1), (2, 100, 1), (3, 50, 2)] {
            assert!(matches!(
                c.nonce(0, w(1), Kind::Counter96, at(v, ts, id)),
                Err(Violation::OutOfWindow(_))
            ));
        }
        assert!(c.nonce(0, None, Kind::Counter96, at(4, 50, 1)).is_err());
        assert_eq!(c.out_of_window, 4);
    }

    #[test]
    fn overlapping_holders_are_reported_once() {
        let mut c = Checker::new();
        let (mut a, mut b) = (None, None);
        assert!(c.range(&mut a, 1, 0, 7, 10, 20).is_ok());
        assert!(c.range(&mut b, 2, 1, 7, 21, 30).is_ok());
        assert!(c.range(&mut a, 1, 0, 7, 10, 21).is_err());
        assert!(c.range(&mut a, 1, 0, 7, 10, 25).is_ok());
        assert_eq!(c.overlaps, 1);
    }
}
