//! What a factory has generated and refused, for metrics, at no cost to the nonce path.
//!
//! Nothing here runs per nonce. The values issued are read off the generators themselves: the
//! 64-bit counter and the 96/128-bit counter count up from each generation's start, and what
//! earlier generations took is added up when an enable resets them; the sortable state is
//! closed once per millisecond (the call that moves it to a new millisecond adds up the one it
//! leaves). Per-thread blocks and handles give back what they reserved and did not use when
//! they are refilled or dropped. Refusals are counted where they happen, on paths a nonce
//! that is issued never takes: the throttle's clock reading, the first claim of a kind, and
//! the refused call's own error.

use crate::kind::{Base, Kind};
// Core's atomics even under loom: the tallies take no part in what the model checks (which
// values are issued), and each atomic access in the model multiplies its interleavings.
use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::Relaxed;

/// The generators of a factory, each shared by the sizes it issues: counter nonces of 96 and
/// 128 bits draw on one counter, sortable nonces of every size on one state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Generator {
    /// The 64-bit counter: counter64 nonces, and the encrypted nonces made from them
    /// (`encrypted64`, `encrypted96` under Blowfish or 3DES, with [`Base::Counter`]).
    Counter64,
    /// The 96/128-bit counter: counter96 and counter128 nonces, ranges of them, and the
    /// encrypted nonces made from them.
    Counter96And128,
    /// The sortable state: sortable nonces of every size, and the encrypted nonces made from
    /// them.
    Sortable,
}

impl Generator {
    /// Every generator, in a fixed order.
    pub const ALL: [Self; 3] = [Self::Counter64, Self::Counter96And128, Self::Sortable];

    /// The kind of base nonce the generator makes.
    pub const fn base(self) -> Base {
        match self {
            Self::Counter64 | Self::Counter96And128 => Base::Counter,
            Self::Sortable => Base::Sortable,
        }
    }

    /// The base sizes (64, 96, 128) the generator can serve.
    const fn serves(self, bits: u16) -> bool {
        match self {
            Self::Counter64 => bits == 64,
            Self::Counter96And128 => bits != 64,
            Self::Sortable => true,
        }
    }
}

/// A factory's generation counts since it was built ([`Factory::stats`](crate::Factory::stats)):
/// each only grows, so a metrics exporter can publish them as counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GenerationStats {
    /// Values taken from the 64-bit counter: one per nonce issued, a range's length, and the
    /// values per-thread blocks hold and have not handed out yet (at most 8192 per thread and
    /// generator; given back when the block is refilled, or a handle is dropped).
    pub counter64: u64,
    /// Values taken from the 96/128-bit counter, counted as `counter64`.
    pub counter96_128: u64,
    /// Counts taken from the sortable state, counted as `counter64`.
    pub sortable: u64,
    /// Calls the throttle held back: the generator was ahead of the clock (64-bit counter
    /// nonces past what the clock has reached, sortable64 past 8192 in a millisecond) and the
    /// call waited for the clock or, on a clock that cannot wait, returned
    /// [`Error::WouldBlock`](crate::Error::WouldBlock).
    pub throttled: u64,
    /// Calls refused with [`Error::KindConflict`](crate::Error::KindConflict), by base size:
    /// 64, 96 and 128 bits.
    pub kind_conflicts: [u64; 3],
    /// Calls refused with [`Error::LeaseExpired`](crate::Error::LeaseExpired): the nonce would
    /// have carried a timestamp at or past the lease deadline.
    pub lease_expired: u64,
    /// The kind each base size (64, 96, 128 bits) is claimed for, if any.
    pub kinds: [Option<Base>; 3],
}

impl GenerationStats {
    /// The values taken from `generator`.
    pub const fn taken(&self, generator: Generator) -> u64 {
        match generator {
            Generator::Counter64 => self.counter64,
            Generator::Counter96And128 => self.counter96_128,
            Generator::Sortable => self.sortable,
        }
    }

    /// The base sizes `generator` issues in this factory: those claimed for its kind. Usually
    /// one; a factory that issues, say, counter96 and counter128 nonces has both on one
    /// counter, and its count is theirs together.
    pub fn sizes(&self, generator: Generator) -> impl Iterator<Item = u16> + '_ {
        [64, 96, 128]
            .into_iter()
            .zip(self.kinds)
            .filter(move |&(bits, kind)| generator.serves(bits) && kind == Some(generator.base()))
            .map(|(bits, _)| bits)
    }
}

/// The factory's tallies: each written only off the nonce path, with relaxed adds.
pub(crate) struct Tally {
    /// Values the 64-bit counter took in generations an enable has ended.
    pub(crate) counter64_ended: AtomicU64,
    /// As `counter64_ended`, for the 96/128-bit counter.
    pub(crate) counter96_ended: AtomicU64,
    /// Counts the sortable state took in milliseconds it has left, less one per generation
    /// start (which the state records as a count taken); starts at -1 (wrapping) for the
    /// state a new factory holds.
    pub(crate) sortable_closed: AtomicU64,
    /// Values per-thread blocks and handles took and gave back unused, per generator.
    pub(crate) unused: [AtomicU64; 3],
    pub(crate) throttled: AtomicU64,
    pub(crate) kind_conflicts: [AtomicU64; 3],
    pub(crate) lease_expired: AtomicU64,
}

impl Tally {
    pub(crate) fn new() -> Self {
        Self {
            counter64_ended: AtomicU64::new(0),
            counter96_ended: AtomicU64::new(0),
            sortable_closed: AtomicU64::new(u64::MAX),
            unused: core::array::from_fn(|_| AtomicU64::new(0)),
            throttled: AtomicU64::new(0),
            kind_conflicts: core::array::from_fn(|_| AtomicU64::new(0)),
            lease_expired: AtomicU64::new(0),
        }
    }

    /// Values of `generator` a block or handle took and will never hand out.
    #[cold]
    pub(crate) fn give_back(&self, generator: Generator, values: u64) {
        if values != 0 {
            self.unused[generator as usize].fetch_add(values, Relaxed);
        }
    }

    #[cold]
    pub(crate) fn throttled(&self) {
        self.throttled.fetch_add(1, Relaxed);
    }

    #[cold]
    pub(crate) fn kind_conflict(&self, kind: Kind) {
        let size = match kind.bits {
            64 => 0,
            96 => 1,
            _ => 2,
        };
        self.kind_conflicts[size].fetch_add(1, Relaxed);
    }

    /// Counts a refused call by its error; only lease-deadline refusals are counted here
    /// (the throttle and kind conflicts are counted where they are found).
    #[cold]
    #[inline(never)]
    pub(crate) fn refused(&self, error: crate::Error) {
        if error == crate::Error::LeaseExpired {
            self.lease_expired.fetch_add(1, Relaxed);
        }
    }
}
