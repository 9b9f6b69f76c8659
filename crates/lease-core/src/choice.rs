//! Which free machine ID an acquire tries, for strategies that read the free IDs and their
//! timestamp floors before they claim one.
//!
//! ```
//! use lease_core::{MachineId, pick_free};
//!
//! let id = |n| MachineId::new(n).unwrap();
//! // IDs 1 and 2 are free; 1's floor is ahead of the acquirer's clock (100), 2's is not.
//! let free = [(id(1), 500, ()), (id(2), 50, ())];
//! let mut first = |_n: usize| 0;
//! assert_eq!(pick_free(&free, 100, &mut first).unwrap().0, id(2));
//! assert_eq!(pick_free::<()>(&[], 100, &mut first), None);
//! ```

use machine_id::MachineId;

/// The free ID an acquire tries: a random one among the free IDs whose floor is below `now_ms`
/// (the acquirer's clock); when there is none, the lower-floored of two random free IDs. Nodes
/// starting together spread out instead of all aiming at the lowest ID, and a factory starts as
/// little ahead of its clock as the choice allows.
///
/// `free` holds each free ID with its stored floor (0 when none) and what the strategy needs to
/// claim it (a version, a revision); `random(n)` picks in `0..n`.
pub fn pick_free<T: Copy>(
    free: &[(MachineId, u64, T)],
    now_ms: u64,
    random: &mut impl FnMut(usize) -> usize,
) -> Option<(MachineId, u64, T)> {
    let below: Vec<_> = free
        .iter()
        .filter(|(_, floor, _)| *floor < now_ms)
        .collect();
    if !below.is_empty() {
        return Some(*below[random(below.len())]);
    }
    if free.is_empty() {
        return None;
    }
    let a = free[random(free.len())];
    let b = free[random(free.len())];
    Some(if b.1 < a.1 { b } else { a })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u16) -> MachineId {
        MachineId::new(n).unwrap()
    }

    #[test]
    fn an_id_whose_floor_is_below_now_is_preferred() {
        let free = [(1, 500), (2, 99), (3, 100), (4, 700)].map(|(n, floor)| (id(n), floor, ()));
        // A "random" source that walks through every index in turn.
        let mut next = 0;
        let mut random = move |n: usize| {
            next += 1;
            (next - 1) % n
        };
        for _ in 0..20 {
            assert_eq!(pick_free(&free, 100, &mut random).unwrap().0, id(2));
        }
        // Every ID below now is a candidate, chosen at random.
        let mut seen: Vec<u16> = (0..20)
            .map(|_| pick_free(&free, 600, &mut random).unwrap().0.get())
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, [1, 2, 3]);
        assert_eq!(pick_free::<()>(&[], 100, &mut random), None);

        // With every floor ahead, the lower of two random picks wins.
        let free = [(1, 500), (2, 300), (3, 900)].map(|(n, floor)| (id(n), floor, ()));
        let mut answers = [0, 1, 2, 0, 1, 2].into_iter();
        let mut random = |n: usize| {
            let i = answers.next().unwrap();
            assert!(i < n);
            i
        };
        // (500, 300) -> 2; (900, 500) -> 1; (300, 900) -> 2.
        assert_eq!(pick_free(&free, 100, &mut random).unwrap().0, id(2));
        assert_eq!(pick_free(&free, 100, &mut random).unwrap().0, id(1));
        assert_eq!(pick_free(&free, 100, &mut random).unwrap().0, id(2));
    }
}
