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
    fn prefers_a_floor_below_the_clock_and_spreads_out() {
        let free: Vec<_> = (0..512).map(|n| (id(n), u64::from(n) * 10, ())).collect();
        let mut state = 1_u64;
        let mut random = |n: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            usize::try_from(state >> 33).unwrap() % n
        };
        // Only ID 0 and 1 are below 11.
        for _ in 0..50 {
            assert!(pick_free(&free, 11, &mut random).unwrap().0.get() < 2);
        }
        let picked: std::collections::BTreeSet<u16> = (0..100)
            .map(|_| pick_free(&free, 6_000, &mut random).unwrap().0.get())
            .collect();
        assert!(picked.len() > 50, "{picked:?}");
        // Every floor ahead: the lower of two random picks.
        let ahead = [(id(1), 900, ()), (id(2), 200, ())];
        let mut alternate = {
            let mut k = 0;
            move |n: usize| {
                k += 1;
                k % n
            }
        };
        assert_eq!(pick_free(&ahead, 100, &mut alternate).unwrap().0, id(2));
    }
}
