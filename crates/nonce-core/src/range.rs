//! Runs of consecutive counter nonces, reserved in one step: for a caller that hands the run
//! to someone else to write out (a service answers a request for a million nonces with one
//! range, and its client expands it).

use core::num::NonZeroU64;

use machine_id::MachineId;

use crate::clock::Clock;
use crate::error::Error;
use crate::factory::{Counter, Factory};
use crate::kind::Kind;
use crate::layout::{self, COUNT64_BITS, COUNT96_BITS, MAX_TIMESTAMP};

/// The width of a 128-bit nonce's count field (its counter never carries into the timestamp).
const COUNT128_BITS: u32 = 77;

/// A run of `len` consecutive counter nonces of one size, reserved at once and issued to the
/// caller: every nonce of it is unique as the factory's own calls are.
///
/// The nonce at index `i` has the machine ID, and the timestamp and count of the sum
/// `(timestamp << count_bits | first_count) + i`: the count runs on from `first_count` and
/// carries into the timestamp, as the factory's counter does. [`nth`](Self::nth) computes it.
///
/// ```
/// use core::num::NonZeroU64;
/// use nonce_core::{FactoryConfig, ManualClock, MachineId, NO_DEADLINE};
///
/// let clock = ManualClock::new(1_800_000_000_000);
/// let factory = FactoryConfig::<&[u8]>::default().build(clock).unwrap();
/// factory.enable(MachineId::new(7).unwrap(), NO_DEADLINE).unwrap();
/// let range = factory.counter_range96(NonZeroU64::new(1_000_000).unwrap()).unwrap();
/// assert_eq!((range.bits(), range.len(), range.machine_id().get()), (96, 1_000_000, 7));
/// // The next 96-bit counter nonce comes after the range.
/// let next = factory.counter96().unwrap().to_u128();
/// assert_eq!(range.last(), range.nth(999_999).unwrap());
/// assert!(next > range.last());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterRange {
    bits: u16,
    machine_id: MachineId,
    timestamp_ms: u64,
    first_count: u64,
    len: u64,
}

impl CounterRange {
    /// The nonces' size: 64, 96 or 128.
    pub const fn bits(&self) -> u16 {
        self.bits
    }

    /// The machine ID every nonce of the range carries.
    pub const fn machine_id(&self) -> MachineId {
        self.machine_id
    }

    /// The first nonce's timestamp, in milliseconds since the factory's epoch.
    pub const fn timestamp_ms(&self) -> u64 {
        self.timestamp_ms
    }

    /// The first nonce's count field.
    pub const fn first_count(&self) -> u64 {
        self.first_count
    }

    /// How many nonces the range holds (at least one).
    #[allow(clippy::len_without_is_empty)] // never empty
    pub const fn len(&self) -> u64 {
        self.len
    }

    /// The width of the count field: 13 (64 bits), 45 (96) or 77 (128).
    pub const fn count_bits(&self) -> u32 {
        match self.bits {
            64 => COUNT64_BITS,
            96 => COUNT96_BITS,
            _ => COUNT128_BITS,
        }
    }

    /// The nonce at index `i` as an integer (a 64-bit one in the low bits), or `None` past the
    /// end.
    #[allow(clippy::cast_possible_truncation)] // each part is masked to its field
    pub fn nth(&self, i: u64) -> Option<u128> {
        if i >= self.len {
            return None;
        }
        let id = self.machine_id.get();
        let bits = self.count_bits();
        // Fits: a range never carries past `MAX_TIMESTAMP` (checked when it was reserved).
        let sum = ((u128::from(self.timestamp_ms) << bits) | u128::from(self.first_count))
            + u128::from(i);
        let mask = (1u128 << bits) - 1;
        let (ts, count) = ((sum >> bits) as u64, sum & mask);
        Some(match self.bits {
            64 => u128::from(layout::pack64(ts, id, count as u64)),
            96 => layout::pack96(ts, id, count as u64),
            _ => ((u128::from(ts)) << 86) | (u128::from(id) << COUNT128_BITS) | count,
        })
    }

    /// The first nonce as an integer.
    pub fn first(&self) -> u128 {
        self.nth(0).unwrap_or_default()
    }

    /// The last nonce as an integer.
    pub fn last(&self) -> u128 {
        self.nth(self.len - 1).unwrap_or_default()
    }
}

impl<C: Clock> Factory<C> {
    /// Reserves up to `want` consecutive 64-bit counter nonces that may be issued now: a
    /// 64-bit count runs 8192 per millisecond and never ahead of the clock, so a range ends
    /// with the last millisecond the clock has reached, and holds fewer than `want` when the
    /// counter is that close to it (at least one: with none free, it waits for the clock as
    /// [`counter64`](Self::counter64) does).
    ///
    /// # Errors
    /// As [`counter64`](Self::counter64).
    pub fn counter_range64(&self, want: NonZeroU64) -> Result<CounterRange, Error> {
        self.counted((|| {
            let (snap, first, len) = match self.reserve64(want.get(), Kind::COUNTER64)? {
                Some(run) => run,
                None => {
                    // The shared counter, not this thread's block: a block taken here for one
                    // value would leave the rest of it to this thread's later calls, which a
                    // caller of ranges may never make, and the counter would run ahead of what
                    // is issued.
                    let nonce = self.shared_counter64(Kind::COUNTER64)?;
                    let d = nonce.decode(0);
                    return Ok(CounterRange {
                        bits: 64,
                        machine_id: d.machine_id,
                        timestamp_ms: d.timestamp_ms,
                        first_count: d.count,
                        len: 1,
                    });
                }
            };
            Ok(CounterRange {
                bits: 64,
                machine_id: MachineId::from_low_bits(u64::from(snap.machine_id)),
                timestamp_ms: first >> COUNT64_BITS,
                first_count: first & ((1 << COUNT64_BITS) - 1),
                len,
            })
        })())
    }

    /// Reserves `n` consecutive 96-bit counter nonces in one step, on the counter 96- and
    /// 128-bit counter nonces share.
    ///
    /// # Errors
    /// As [`counter96`](Self::counter96); [`Error::LeaseExpired`] also when the range's last
    /// nonce would carry its timestamp to the lease's deadline (the range is then dropped).
    pub fn counter_range96(&self, n: NonZeroU64) -> Result<CounterRange, Error> {
        self.counted((|| {
            let (snap, first) = self.reserve(Counter::C96, Kind::COUNTER96, n.get())?;
            let last = first
                .checked_add(n.get() - 1)
                .ok_or(Error::TimestampOverflow)?;
            // The last value carries furthest: checking its timestamp checks them all.
            Self::split96(&snap, last)?;
            let (timestamp_ms, first_count) = Self::split96(&snap, first)?;
            Ok(CounterRange {
                bits: 96,
                machine_id: MachineId::from_low_bits(u64::from(snap.machine_id)),
                timestamp_ms,
                first_count,
                len: n.get(),
            })
        })())
    }

    /// Reserves `n` consecutive 128-bit counter nonces in one step, on the counter 96- and
    /// 128-bit counter nonces share.
    ///
    /// # Errors
    /// As [`counter128`](Self::counter128).
    pub fn counter_range128(&self, n: NonZeroU64) -> Result<CounterRange, Error> {
        self.counted((|| {
            let (snap, first) = self.reserve(Counter::C96, Kind::COUNTER128, n.get())?;
            Self::check_ts(snap.init_ts, &snap)?;
            // The count field is 77 bits wide: a 64-bit counter value never carries out of it.
            first
                .checked_add(n.get() - 1)
                .ok_or(Error::TimestampOverflow)?;
            debug_assert!(snap.init_ts <= MAX_TIMESTAMP);
            Ok(CounterRange {
                bits: 128,
                machine_id: MachineId::from_low_bits(u64::from(snap.machine_id)),
                timestamp_ms: snap.init_ts,
                first_count: first,
                len: n.get(),
            })
        })())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FactoryConfig, ManualClock, NO_DEADLINE};

    const T0: u64 = 1_800_000_000_000;

    fn n(v: u64) -> NonZeroU64 {
        NonZeroU64::new(v).unwrap()
    }

    fn factory(clock: ManualClock) -> Factory<ManualClock> {
        let f = Factory::new(clock, FactoryConfig::new()).unwrap();
        f.enable(MachineId::new(300).unwrap(), NO_DEADLINE).unwrap();
        f
    }

    /// Every nonce of a range differs from every nonce the factory issues before or after it.
    #[test]
    fn ranges_and_single_calls_never_meet() {
        let f = factory(ManualClock::new(T0));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3 {
            assert!(seen.insert(f.counter96().unwrap().to_u128()));
            let r = f.counter_range96(n(10_000)).unwrap();
            assert_eq!(r.machine_id().get(), 300);
            for i in 0..r.len() {
                assert!(seen.insert(r.nth(i).unwrap()), "96-bit value {i} repeated");
            }
            let r = f.counter_range128(n(10_000)).unwrap();
            for i in 0..r.len() {
                assert!(seen.insert(r.nth(i).unwrap() | (1 << 127)));
            }
            assert!(seen.insert(f.counter128().unwrap().to_u128() | (1 << 127)));
        }
        assert_eq!(seen.len(), 60_006);
    }

    /// The nonces a range describes are the ones the factory's calls would have issued: the
    /// same layout, and the count carrying into the timestamp.
    #[test]
    fn nth_follows_the_counter_and_carries_into_the_timestamp() {
        let f = factory(ManualClock::new(T0));
        let r = f.counter_range96(n(3)).unwrap();
        let next = f.counter96().unwrap().to_u128();
        assert_eq!(r.nth(2).unwrap() + 1, next);
        assert_eq!(r.nth(3), None);
        let carry = CounterRange {
            bits: 96,
            machine_id: MachineId::new(5).unwrap(),
            timestamp_ms: 10,
            first_count: (1 << COUNT96_BITS) - 1,
            len: 2,
        };
        let (a, b) = (carry.first(), carry.last());
        let (da, db) = (
            crate::Nonce96::from_u128(a).unwrap().decode(0),
            crate::Nonce96::from_u128(b).unwrap().decode(0),
        );
        assert_eq!((da.timestamp_ms, da.count), (10, (1 << COUNT96_BITS) - 1));
        assert_eq!((db.timestamp_ms, db.count, db.machine_id.get()), (11, 0, 5));
    }

    /// A 64-bit range never runs ahead of the clock: asked for more than the clock has
    /// admitted, it holds fewer; at least one, after the clock moved on.
    #[test]
    fn a_64_bit_range_stops_at_the_clock() {
        let f = factory(ManualClock::new(T0));
        let r = f.counter_range64(n(1_000_000)).unwrap();
        assert!(r.len() < 1_000_000 && r.len() >= 1, "{}", r.len());
        let now_ts = T0 - crate::DEFAULT_EPOCH_MS;
        let last = crate::Nonce64::from_u64(u64::try_from(r.last()).unwrap()).decode(0);
        assert!(last.timestamp_ms <= now_ts);
        // The next single call comes after the range.
        f.clock().advance(1);
        let next = f.counter64().unwrap().to_u64();
        assert!(u128::from(next) > r.last());
    }

    /// A range whose last nonce would carry its timestamp to the deadline is refused.
    #[test]
    fn a_96_bit_range_past_the_deadline_is_refused() {
        let f = Factory::new(ManualClock::new(T0), FactoryConfig::new()).unwrap();
        let deadline = T0 + 2;
        f.enable(MachineId::new(1).unwrap(), deadline).unwrap();
        let whole_ms = 1u64 << COUNT96_BITS;
        assert_eq!(f.counter_range96(n(3 * whole_ms)), Err(Error::LeaseExpired));
        f.disable();
        assert_eq!(f.counter_range128(n(1)), Err(Error::Disabled));
        assert_eq!(f.counter_range64(n(1)), Err(Error::Disabled));
    }
}
