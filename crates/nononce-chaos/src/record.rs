//! The node file format: 32-byte little-endian records.
//!
//! Fixed-size records make a file cut by `kill -9` easy to read: a partial last record is
//! ignored. Losing the tail never creates a false duplicate, only fewer nonces checked.
//!
//! Every record carries a [`Stamp`]: the node's own clock (the clock its factories and lease
//! manager read) and the offset of that clock from the machine's clock when it was read, so the
//! checker judges a node's windows on the node's clock and compares nodes on the machine's.
//!
//! | bytes | field |
//! |---|---|
//! | 0 | tag |
//! | 1 | nonce kind |
//! | 2..4 | nonce bits, or machine ID |
//! | 4..8 | clock offset, ms (`i32`: node clock minus machine clock) |
//! | 8..16 | node clock, Unix ms |
//! | 16..32 | nonce value; deadline (low 8 bytes) and floor (high 8); epoch and node index; or the offset before a clock step |

use std::io::{self, Read};

/// Size of one record in bytes.
pub const RECORD_LEN: usize = 32;

/// Which generator made a nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `counterNN`: the timestamp is the counter's.
    Counter,
    /// `sortableNN`: the timestamp is the creation time.
    Sortable,
    /// `encryptedNN(Base::Counter)`: a counter nonce under the chaos key.
    Encrypted,
}

impl Kind {
    /// Every kind, in record order: a record codes a kind as its index here.
    pub const ALL: [Kind; 3] = [Kind::Counter, Kind::Sortable, Kind::Encrypted];

    /// The name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Sortable => "sortable",
            Kind::Encrypted => "encrypted",
        }
    }
}

/// When a record was made: the node's clock and its offset from the machine's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    /// The node's clock, Unix ms.
    pub at_ms: u64,
    /// Node clock minus machine clock, ms, when `at_ms` was read.
    pub offset_ms: i32,
}

impl Stamp {
    /// A stamp from a reading and the offset it was read with (clamped to `i32`).
    pub fn new(at_ms: u64, offset_ms: i64) -> Self {
        Self {
            at_ms,
            offset_ms: i32::try_from(offset_ms.clamp(i32::MIN.into(), i32::MAX.into()))
                .unwrap_or(0),
        }
    }

    /// The machine's clock at this stamp: comparable across nodes and across clock steps.
    pub fn machine_ms(&self) -> u64 {
        crate::clock::apply(self.at_ms, -i64::from(self.offset_ms))
    }
}

/// One event in a node file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The process started: its node index and the factory epoch.
    Start {
        /// Node index given by the orchestrator (stable across restarts).
        node: u32,
        /// When.
        at: Stamp,
        /// The factories' epoch, to decode timestamps.
        epoch_ms: u64,
    },
    /// The lease layer is about to enable the factories with `machine_id` until `deadline_ms`,
    /// every timestamp strictly above `floor_ms`.
    Enable {
        /// Before the factories were enabled.
        at: Stamp,
        /// The leased ID.
        machine_id: u16,
        /// The timestamp floor the lease came with (0: none).
        floor_ms: u64,
        /// Exclusive deadline (node clock).
        deadline_ms: u64,
    },
    /// The lease layer is about to move the deadline.
    Extend {
        /// When.
        at: Stamp,
        /// The new exclusive deadline.
        deadline_ms: u64,
    },
    /// The factories were disabled (recorded after they returned).
    Disable {
        /// After the factories were disabled.
        at: Stamp,
    },
    /// The generator starts a batch: read before any nonce of the batch was asked for, so
    /// every nonce after it in the file (up to the next tick) was produced no earlier.
    Tick {
        /// When.
        at: Stamp,
    },
    /// A nonce was produced.
    Nonce {
        /// Read right after it was produced.
        at: Stamp,
        /// Generator.
        kind: Kind,
        /// 64, 96 or 128.
        bits: u16,
        /// The value as an integer.
        value: u128,
    },
    /// The conflict guard reported a conflict and signalled lease loss.
    Conflict {
        /// When.
        at: Stamp,
    },
    /// The node's clock was stepped back (a fault): `at` carries the new offset.
    ClockStep {
        /// Right after the step.
        at: Stamp,
        /// The offset before the step.
        from_offset_ms: i64,
    },
    /// Clean shutdown: the lease was released.
    End {
        /// When.
        at: Stamp,
    },
}

impl Record {
    /// The stamp of the record.
    pub const fn stamp(&self) -> Stamp {
        match *self {
            Record::Start { at, .. }
            | Record::Enable { at, .. }
            | Record::Extend { at, .. }
            | Record::Disable { at }
            | Record::Tick { at }
            | Record::Nonce { at, .. }
            | Record::Conflict { at }
            | Record::ClockStep { at, .. }
            | Record::End { at } => at,
        }
    }

    /// The record's 32 bytes.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let pair = |low: u64, high: u64| u128::from(low) | (u128::from(high) << 64);
        let (tag, kind, small, value) = match *self {
            Record::Start { node, epoch_ms, .. } => (1, 0, 0, pair(epoch_ms, u64::from(node))),
            Record::Enable {
                machine_id,
                floor_ms,
                deadline_ms,
                ..
            } => (2, 0, machine_id, pair(deadline_ms, floor_ms)),
            Record::Extend { deadline_ms, .. } => (3, 0, 0, u128::from(deadline_ms)),
            Record::Disable { .. } => (4, 0, 0, 0),
            Record::Nonce {
                kind, bits, value, ..
            } => (5, kind as u8, bits, value),
            Record::Conflict { .. } => (6, 0, 0, 0),
            Record::End { .. } => (7, 0, 0, 0),
            Record::Tick { .. } => (8, 0, 0, 0),
            Record::ClockStep { from_offset_ms, .. } => {
                (9, 0, 0, u128::from(from_offset_ms.cast_unsigned()))
            }
        };
        let at = self.stamp();
        let mut out = [0u8; RECORD_LEN];
        out[0] = tag;
        out[1] = kind;
        out[2..4].copy_from_slice(&small.to_le_bytes());
        out[4..8].copy_from_slice(&at.offset_ms.to_le_bytes());
        out[8..16].copy_from_slice(&at.at_ms.to_le_bytes());
        out[16..32].copy_from_slice(&value.to_le_bytes());
        out
    }

    /// Parses 32 bytes; `None` for an unknown tag or kind.
    pub fn decode(bytes: &[u8; RECORD_LEN]) -> Option<Self> {
        let small = u16::from_le_bytes([bytes[2], bytes[3]]);
        let offset_ms = i32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        let (at_ms, value) = bytes[8..].split_at(8);
        let at = Stamp {
            at_ms: u64::from_le_bytes(at_ms.try_into().ok()?),
            offset_ms,
        };
        let value = u128::from_le_bytes(value.try_into().ok()?);
        #[allow(clippy::cast_possible_truncation)] // the two halves, on purpose
        let (low, high) = (value as u64, (value >> 64) as u64);
        Some(match bytes[0] {
            1 => Record::Start {
                node: u32::try_from(high).ok()?,
                at,
                epoch_ms: low,
            },
            2 => Record::Enable {
                at,
                machine_id: small,
                floor_ms: high,
                deadline_ms: low,
            },
            3 => Record::Extend {
                at,
                deadline_ms: low,
            },
            4 => Record::Disable { at },
            5 => Record::Nonce {
                at,
                kind: *Kind::ALL.get(usize::from(bytes[1]))?,
                bits: small,
                value,
            },
            6 => Record::Conflict { at },
            7 => Record::End { at },
            8 => Record::Tick { at },
            9 => Record::ClockStep {
                at,
                from_offset_ms: low.cast_signed(),
            },
            _ => return None,
        })
    }
}

/// Reads records until the end of `reader`; a partial last record (a killed writer) is
/// dropped. Errors on an unknown record, which means the file is not a node file.
pub fn read_all(
    mut reader: impl Read,
    mut each: impl FnMut(Record) -> io::Result<()>,
) -> io::Result<()> {
    let mut buf = [0u8; RECORD_LEN];
    loop {
        match reader.read_exact(&mut buf) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let record = Record::decode(&buf).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "unknown record tag or kind")
        })?;
        each(record)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_torn_tail_is_dropped() {
        let at = |at_ms, offset_ms| Stamp { at_ms, offset_ms };
        let records = [
            Record::Start {
                node: 3,
                at: at(10, -3_600_000),
                epoch_ms: 7,
            },
            Record::Enable {
                at: at(11, 15_000),
                machine_id: 511,
                floor_ms: 4000,
                deadline_ms: 5000,
            },
            Record::Extend {
                at: at(12, 0),
                deadline_ms: 6000,
            },
            Record::Tick { at: at(13, 1) },
            Record::Nonce {
                at: at(13, 1),
                kind: Kind::Encrypted,
                bits: 128,
                value: u128::MAX,
            },
            Record::Disable { at: at(14, 2) },
            Record::Conflict { at: at(15, 3) },
            Record::ClockStep {
                at: at(16, -2000),
                from_offset_ms: -500,
            },
            Record::End { at: at(17, 4) },
        ];
        let mut bytes: Vec<u8> = records.iter().flat_map(Record::encode).collect();
        bytes.extend_from_slice(&[5, 0, 64]); // torn write
        let mut back = Vec::new();
        read_all(&bytes[..], |r| {
            back.push(r);
            Ok(())
        })
        .unwrap();
        assert_eq!(back, records);
        assert_eq!(at(10_000, -3_000).machine_ms(), 13_000);
        assert_eq!(Stamp::new(5, i64::MIN).offset_ms, i32::MIN);
    }
}
