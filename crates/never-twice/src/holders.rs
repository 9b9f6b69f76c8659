//! Two holders of one machine ID whose timestamps overlap.

use std::collections::HashSet;

use nonce_core::MachineId;

/// The timestamps one holder issued under one machine ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The holder: one lease of one process, numbered by the harness.
    pub holder: u32,
    /// The node (or process) it belongs to.
    pub node: u16,
    /// Its lowest timestamp, in the floors' terms.
    pub lo: u64,
    /// Its highest.
    pub hi: u64,
}

impl Range {
    /// Whether the two ranges share a timestamp.
    #[must_use]
    pub const fn overlaps(&self, other: &Self) -> bool {
        self.lo <= other.hi && other.lo <= self.hi
    }
}

/// Two holders' ranges of one machine ID that overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlap {
    /// The machine ID.
    pub id: u16,
    /// The range it overlaps, of the holder recorded before.
    pub earlier: Range,
    /// The range just extended.
    pub range: Range,
}

/// Per machine ID, the timestamp range of every holder, checked against each other as they
/// grow.
#[derive(Debug)]
pub struct Holders {
    ranges: Vec<Vec<Range>>,
    // Holder pairs already reported.
    overlapping: HashSet<(u32, u32)>,
}

impl Default for Holders {
    fn default() -> Self {
        Self::new()
    }
}

impl Holders {
    /// No holder yet.
    #[must_use]
    pub fn new() -> Self {
        Self {
            ranges: vec![Vec::new(); usize::from(MachineId::COUNT)],
            overlapping: HashSet::new(),
        }
    }

    /// Extends the range of `holder` (of `node`) on `id` to cover `lo..=hi` and checks it
    /// against every other holder of `id`. `slot` is where the holder's range is kept: `None`
    /// for a holder's first call, then the caller keeps what this call leaves in it.
    ///
    /// # Errors
    /// The range overlaps another holder's: reported once per pair of holders.
    pub fn issued(
        &mut self,
        slot: &mut Option<(u16, usize)>,
        holder: u32,
        node: u16,
        id: u16,
        lo: u64,
        hi: u64,
    ) -> Result<(), Overlap> {
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
        let range = list[index];
        let clash = list
            .iter()
            .find(|r| r.holder != holder && r.overlaps(&range))
            .copied();
        match clash {
            Some(earlier)
                if self
                    .overlapping
                    .insert((earlier.holder.min(holder), earlier.holder.max(holder))) =>
            {
                Err(Overlap { id, earlier, range })
            }
            _ => Ok(()),
        }
    }

    /// The ranges of `id` that cover timestamp `ts`.
    pub fn covering(&self, id: u16, ts: u64) -> impl Iterator<Item = &Range> {
        self.ranges[usize::from(id & MachineId::MAX)]
            .iter()
            .filter(move |r| r.lo <= ts && ts <= r.hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_holders_are_reported_once() {
        let mut h = Holders::new();
        let (mut a, mut b) = (None, None);
        assert!(h.issued(&mut a, 1, 0, 7, 10, 20).is_ok());
        assert!(h.issued(&mut b, 2, 1, 7, 21, 30).is_ok());
        let overlap = h.issued(&mut a, 1, 0, 7, 10, 21).unwrap_err();
        assert_eq!(overlap.id, 7);
        assert_eq!((overlap.earlier.holder, overlap.earlier.lo), (2, 21));
        assert_eq!((overlap.range.holder, overlap.range.hi), (1, 21));
        assert!(h.issued(&mut a, 1, 0, 7, 10, 25).is_ok());
    }

    #[test]
    fn one_holder_never_overlaps_itself_nor_other_ids() {
        let mut h = Holders::new();
        let (mut a, mut b) = (None, None);
        assert!(h.issued(&mut a, 1, 0, 7, 10, 20).is_ok());
        assert!(h.issued(&mut a, 1, 0, 7, 15, 30).is_ok());
        assert!(h.issued(&mut b, 2, 1, 8, 10, 30).is_ok());
        // The holder's range grew to cover both calls.
        assert_eq!(
            h.covering(7, 25).map(|r| (r.lo, r.hi)).collect::<Vec<_>>(),
            [(10, 30)]
        );
        assert_eq!(h.covering(7, 31).count(), 0);
        // A new holder on the ID is a new range, even of the same node.
        let mut c = None;
        assert!(h.issued(&mut c, 3, 0, 7, 30, 31).is_err());
    }
}
