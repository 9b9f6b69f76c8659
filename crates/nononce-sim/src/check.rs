//! The invariant, checked on every nonce, as `never-twice` judges it.
//!
//! 1. No two nonces of one kind and size are equal, whoever issued them.
//! 2. Every nonce lies in a window its node held: its machine ID is the one the node's
//!    factories were enabled with, its timestamp strictly above the granted floor and below the
//!    deadline in force when it was issued.
//! 3. Per machine ID, the timestamp ranges issued under different holders (one lease of one
//!    process) never overlap: the hazard behind a duplicate, caught even when no two values
//!    happen to collide.
//!
//! Here the failures are counted and worded for the seed's report.

use never_twice::{Holders, Issued, Kind, Seen, Window};
use nonce_core::Error;

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
#[derive(Debug, Default)]
pub struct Checker {
    seen: Seen<Kind>,
    holders: Holders,
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
}

impl Checker {
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
        let Issued { value, ts, id, .. } = issued;
        self.nonces += 1;
        if self.seen.insert(kind, value, ()).is_err() {
            self.duplicates += 1;
            let other = self
                .holders
                .covering(id, ts)
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
        if !window.is_some_and(|w| w.allows(&issued)) {
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
        self.holders
            .issued(slot, holder, node, id, lo, hi)
            .map_err(|o| {
                self.overlaps += 1;
                let (a, b) = (o.earlier, o.range);
                Violation::Overlap(format!(
                    "machine id {id}: holder {} of node {} issued timestamps [{}, {}], holder {} of \
                     node {} [{}, {}]",
                    a.holder, a.node, a.lo, a.hi, b.holder, b.node, b.lo, b.hi
                ))
            })
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

    fn at(value: u128, ts: u64) -> Issued {
        Issued {
            value,
            id: 1,
            ts,
            unix_ms: ts,
        }
    }

    #[test]
    fn each_failure_is_counted_and_a_node_without_a_window_issues_outside_it() {
        let mut c = Checker::default();
        let w = Some(Window {
            id: 1,
            floor: 10,
            deadline: 100,
        });
        assert!(c.nonce(0, w, Kind::Counter96, at(1, 50)).is_ok());
        assert!(matches!(
            c.nonce(1, w, Kind::Counter96, at(1, 50)),
            Err(Violation::Duplicate(_))
        ));
        assert!(matches!(
            c.nonce(0, None, Kind::Counter96, at(2, 50)),
            Err(Violation::OutOfWindow(_))
        ));
        let (mut a, mut b) = (None, None);
        assert!(c.range(&mut a, 1, 0, 1, 10, 20).is_ok());
        assert!(matches!(
            c.range(&mut b, 2, 1, 1, 20, 30),
            Err(Violation::Overlap(_))
        ));
        assert_eq!(
            (c.nonces, c.duplicates, c.out_of_window, c.overlaps),
            (3, 1, 1, 1)
        );
    }
}
