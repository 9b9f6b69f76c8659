//! The node file format: 32-byte little-endian records.
//!
//! Fixed-size records make a file cut by `kill -9` easy to read: a partial last record is
//! ignored. Losing the tail never creates a false duplicate, only fewer nonces checked.
//!
//! | bytes | field |
//! |---|---|
//! | 0 | tag |
//! | 1 | nonce kind |
//! | 2..4 | nonce bits, or machine ID |
//! | 4..8 | node index (start record) |
//! | 8..16 | local clock time, Unix ms (the factories' `BootClock`) |
//! | 16..32 | nonce value, deadline or epoch |

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
    /// Every kind, in record order.
    pub const ALL: [Kind; 3] = [Kind::Counter, Kind::Sortable, Kind::Encrypted];

    /// The name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Sortable => "sortable",
            Kind::Encrypted => "encrypted",
        }
    }

    const fn code(self) -> u8 {
        match self {
            Kind::Counter => 0,
            Kind::Sortable => 1,
            Kind::Encrypted => 2,
        }
    }

    const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Kind::Counter),
            1 => Some(Kind::Sortable),
            2 => Some(Kind::Encrypted),
            _ => None,
        }
    }
}

/// One event in a node file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The process started: its node index and the factory epoch.
    Start {
        /// Node index given by the orchestrator (stable across restarts).
        node: u32,
        /// Local time.
        at_ms: u64,
        /// The factory's epoch, to decode timestamps.
        epoch_ms: u64,
    },
    /// The lease layer is about to enable the factory with `machine_id` until `deadline_ms`.
    Enable {
        /// Local time before the factory was enabled.
        at_ms: u64,
        /// The leased ID.
        machine_id: u16,
        /// Exclusive deadline.
        deadline_ms: u64,
    },
    /// The lease layer is about to move the deadline.
    Extend {
        /// Local time.
        at_ms: u64,
        /// The new exclusive deadline.
        deadline_ms: u64,
    },
    /// The factory was disabled (recorded after it returned).
    Disable {
        /// Local time after the factory was disabled.
        at_ms: u64,
    },
    /// A nonce was produced.
    Nonce {
        /// Local time read right after it was produced.
        at_ms: u64,
        /// Generator.
        kind: Kind,
        /// 64, 96 or 128.
        bits: u16,
        /// The value as an integer.
        value: u128,
    },
    /// The conflict guard reported a conflict and signalled lease loss.
    Conflict {
        /// Local time.
        at_ms: u64,
    },
    /// Clean shutdown: the lease was released.
    End {
        /// Local time.
        at_ms: u64,
    },
}

impl Record {
    /// The local time of the record.
    pub const fn at_ms(&self) -> u64 {
        match *self {
            Record::Start { at_ms, .. }
            | Record::Enable { at_ms, .. }
            | Record::Extend { at_ms, .. }
            | Record::Disable { at_ms }
            | Record::Nonce { at_ms, .. }
            | Record::Conflict { at_ms }
            | Record::End { at_ms } => at_ms,
        }
    }

    /// The record's 32 bytes.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let (tag, kind, small, node, value) = match *self {
            Record::Start { node, epoch_ms, .. } => (1, 0, 0, node, u128::from(epoch_ms)),
            Record::Enable {
                machine_id,
                deadline_ms,
                ..
            } => (2, 0, machine_id, 0, u128::from(deadline_ms)),
            Record::Extend { deadline_ms, .. } => (3, 0, 0, 0, u128::from(deadline_ms)),
            Record::Disable { .. } => (4, 0, 0, 0, 0),
            Record::Nonce {
                kind, bits, value, ..
            } => (5, kind.code(), bits, 0, value),
            Record::Conflict { .. } => (6, 0, 0, 0, 0),
            Record::End { .. } => (7, 0, 0, 0, 0),
        };
        let mut out = [0u8; RECORD_LEN];
        out[0] = tag;
        out[1] = kind;
        out[2..4].copy_from_slice(&small.to_le_bytes());
        out[4..8].copy_from_slice(&node.to_le_bytes());
        out[8..16].copy_from_slice(&self.at_ms().to_le_bytes());
        out[16..32].copy_from_slice(&value.to_le_bytes());
        out
    }

    /// Parses 32 bytes; `None` for an unknown tag or kind.
    pub fn decode(bytes: &[u8; RECORD_LEN]) -> Option<Self> {
        let small = u16::from_le_bytes([bytes[2], bytes[3]]);
        let node = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        let mut at = [0u8; 8];
        at.copy_from_slice(&bytes[8..16]);
        let at_ms = u64::from_le_bytes(at);
        let mut v = [0u8; 16];
        v.copy_from_slice(&bytes[16..32]);
        let value = u128::from_le_bytes(v);
        let low = u64::try_from(value).unwrap_or(u64::MAX);
        Some(match bytes[0] {
            1 => Record::Start {
                node,
                at_ms,
                epoch_ms: low,
            },
            2 => Record::Enable {
                at_ms,
                machine_id: small,
                deadline_ms: low,
            },
            3 => Record::Extend {
                at_ms,
                deadline_ms: low,
            },
            4 => Record::Disable { at_ms },
            5 => Record::Nonce {
                at_ms,
                kind: Kind::from_code(bytes[1])?,
                bits: small,
                value,
            },
            6 => Record::Conflict { at_ms },
            7 => Record::End { at_ms },
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
        let mut filled = 0;
        while filled < RECORD_LEN {
            match reader.read(&mut buf[filled..]) {
                Ok(0) => return Ok(()),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
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
        let records = [
            Record::Start {
                node: 3,
                at_ms: 10,
                epoch_ms: 7,
            },
            Record::Enable {
                at_ms: 11,
                machine_id: 511,
                deadline_ms: 5000,
            },
            Record::Extend {
                at_ms: 12,
                deadline_ms: 6000,
            },
            Record::Nonce {
                at_ms: 13,
                kind: Kind::Encrypted,
                bits: 128,
                value: u128::MAX,
            },
            Record::Disable { at_ms: 14 },
            Record::Conflict { at_ms: 15 },
            Record::End { at_ms: 16 },
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
    }
}
