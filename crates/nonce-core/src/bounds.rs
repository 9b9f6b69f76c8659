//! The nonces of a time range: the smallest and largest nonce of each size whose timestamp
//! lies in it, for range scans of sortable nonces (`WHERE id BETWEEN lo AND hi`).
//!
//! A nonce's integer value (and its big-endian bytes) orders first by timestamp, so the nonces
//! whose timestamps lie in `[from, to]` are exactly those from the nonce of `from` with machine
//! ID 0 and count 0 to the nonce of `to` with the largest machine ID and count.
//!
//! The range selects by the timestamp a nonce carries. For a sortable nonce that is the
//! millisecond it was made in, read from the factory's clock, except where the factory runs
//! ahead of the clock, when it carries a later one:
//!
//! - a 96 or 128-bit sortable nonce made after 4,194,304 others in one millisecond (their
//!   22-bit count is used up) carries the next millisecond, and so on while the rate lasts;
//! - after a handover ([`Factory::enable_above`](crate::Factory::enable_above)), sortable
//!   nonces carry milliseconds past the floor until the clock reaches them (64-bit ones at most
//!   the floor's next millisecond, then they wait for the clock).
//!
//! A 64-bit sortable nonce never borrows from later milliseconds for its rate: past 8192 in a
//! millisecond it waits for the next. So a nonce made just before `to` may carry a timestamp
//! past it and fall outside the range, and one made just before `from` may fall inside; none
//! carries a timestamp earlier than the millisecond it was made in. Counter nonces carry the counter's timestamp, not their creation time, and
//! encrypted nonces no readable timestamp at all: ranges mean nothing for them.

use core::fmt;
use core::ops::RangeInclusive;

use crate::layout::{COUNT64_BITS, COUNT96_BITS, COUNT128_BITS, MAX_TIMESTAMP, count_max};
use crate::{MachineId, Nonce64, Nonce96, Nonce128};

/// Which end of a time range an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RangeEnd {
    /// The start, `from`.
    From,
    /// The end, `to`.
    To,
}

impl RangeEnd {
    /// `"from"` or `"to"`, as the bounds functions name their arguments.
    pub const fn name(self) -> &'static str {
        match self {
            Self::From => "from",
            Self::To => "to",
        }
    }
}

/// Why a time range has no bounds ([`Nonce64::bounds`] and its siblings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BoundsError {
    /// `from` is after `to`.
    Reversed {
        /// The start given, in Unix ms.
        from_unix_ms: u64,
        /// The end given, in Unix ms.
        to_unix_ms: u64,
    },
    /// An end is before the epoch: no nonce carries such a time.
    BeforeEpoch {
        /// Which end.
        end: RangeEnd,
        /// The time given, in Unix ms.
        unix_ms: u64,
        /// The epoch, in Unix ms.
        epoch_ms: u64,
    },
    /// An end is past the last millisecond a nonce carries from this epoch.
    PastMaxTimestamp {
        /// Which end.
        end: RangeEnd,
        /// The time given, in Unix ms.
        unix_ms: u64,
        /// The last millisecond a nonce carries, in Unix ms.
        last_unix_ms: u64,
    },
}

impl fmt::Display for BoundsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Reversed {
                from_unix_ms,
                to_unix_ms,
            } => write!(
                f,
                "the range starts at {from_unix_ms} (Unix ms), after its end {to_unix_ms}: give the earlier time as from"
            ),
            Self::BeforeEpoch {
                end,
                unix_ms,
                epoch_ms,
            } => write!(
                f,
                "{} {unix_ms} (Unix ms) is before the epoch {epoch_ms}, and no nonce carries an earlier time: give a time at or after the epoch, or the epoch the nonces were made with",
                end.name()
            ),
            Self::PastMaxTimestamp {
                end,
                unix_ms,
                last_unix_ms,
            } => write!(
                f,
                "{} {unix_ms} (Unix ms) is past {last_unix_ms}, the last millisecond a nonce carries from this epoch (42 bits of milliseconds): give a time up to then, or the epoch the nonces were made with",
                end.name()
            ),
        }
    }
}

impl core::error::Error for BoundsError {}

/// The timestamps (ms since the epoch) of `[from_unix_ms, to_unix_ms]`, checked.
fn timestamps(
    from_unix_ms: u64,
    to_unix_ms: u64,
    epoch_ms: u64,
) -> Result<(u64, u64), BoundsError> {
    if from_unix_ms > to_unix_ms {
        return Err(BoundsError::Reversed {
            from_unix_ms,
            to_unix_ms,
        });
    }
    let last_unix_ms = epoch_ms.saturating_add(MAX_TIMESTAMP);
    let timestamp = |end, unix_ms: u64| match unix_ms.checked_sub(epoch_ms) {
        None => Err(BoundsError::BeforeEpoch {
            end,
            unix_ms,
            epoch_ms,
        }),
        Some(ts) if ts > MAX_TIMESTAMP => Err(BoundsError::PastMaxTimestamp {
            end,
            unix_ms,
            last_unix_ms,
        }),
        Some(ts) => Ok(ts),
    };
    Ok((
        timestamp(RangeEnd::From, from_unix_ms)?,
        timestamp(RangeEnd::To, to_unix_ms)?,
    ))
}

macro_rules! bounds {
    ($($nonce:ident, $bits:literal, $count_bits:ident;)+) => {$(
        impl $nonce {
            #[doc = concat!("The smallest and largest ", $bits, "-bit nonce whose timestamp lies in")]
            /// `[from_unix_ms, to_unix_ms]` (both ends included, Unix ms), for nonces made with
            /// the epoch `epoch_ms`: the nonces of that time are exactly those the range
            /// contains (by integer value, which is also the order of their big-endian bytes).
            ///
            /// Meant for sortable nonces, whose timestamp is the millisecond they were made in
            /// except where the factory ran ahead of its clock: see the [module
            /// docs](crate::bounds) for when a nonce carries a later millisecond than it was
            /// made in.
            ///
            /// # Errors
            /// [`BoundsError`] when `from_unix_ms` is after `to_unix_ms`, before the epoch, or
            /// either end past the last millisecond a nonce carries from the epoch.
            ///
            /// ```
            #[doc = concat!("use nonce_core::{DEFAULT_EPOCH_MS, MachineId, ", stringify!($nonce), "};")]
            ///
            /// // 2026-12-01T10:00:00Z to 11:00:00Z.
            /// let (from, to) = (1_796_119_200_000, 1_796_122_800_000);
            #[doc = concat!("let hour = ", stringify!($nonce), "::bounds(from, to, DEFAULT_EPOCH_MS).unwrap();")]
            /// let id = MachineId::new(3).unwrap();
            #[doc = concat!("let at = |unix_ms: u64| ", stringify!($nonce), "::compose(unix_ms - DEFAULT_EPOCH_MS, id, 5).unwrap();")]
            /// assert!(hour.contains(&at(from)) && hour.contains(&at(to)));
            /// assert!(!hour.contains(&at(from - 1)) && !hour.contains(&at(to + 1)));
            #[doc = concat!("assert!(", stringify!($nonce), "::bounds(to, from, DEFAULT_EPOCH_MS).is_err());")]
            /// ```
            pub fn bounds(
                from_unix_ms: u64,
                to_unix_ms: u64,
                epoch_ms: u64,
            ) -> Result<RangeInclusive<Self>, BoundsError> {
                let (from, to) = timestamps(from_unix_ms, to_unix_ms, epoch_ms)?;
                let largest_id = MachineId::from_low_bits(u64::from(MachineId::MAX));
                // Both timestamps are checked against the limit `compose` checks, and the
                // counts are the field's own largest: these compose.
                let lo = Self::compose(from, MachineId::from_low_bits(0), 0);
                let hi = Self::compose(to, largest_id, count_max($count_bits));
                Ok(lo.expect("a checked timestamp")..=hi.expect("a checked timestamp"))
            }
        }
    )+};
}

bounds! {
    Nonce64, 64, COUNT64_BITS;
    Nonce96, 96, COUNT96_BITS;
    Nonce128, 128, COUNT128_BITS;
}
