//! The amnesia guard: noticing that the database server behind the pool is not the one that
//! granted the table's leases (failover to a replica that missed lease writes), and that rows
//! of a seeded lease table vanished while the server stayed up (`TRUNCATE`, `DELETE`).

use std::time::Duration;

use lease_core::MachineId;

/// How the strategy defends against a database server that lost lease writes: a failover to an
/// asynchronous replica that had not received them, or a restore into a new cluster; and
/// against rows of the lease table deleted while the server stayed up. See the crate docs,
/// "Coordinator amnesia" and "Deleted rows".
///
/// The server check applies to PostgreSQL and MySQL/MariaDB (SQLite has no replicas); the
/// deleted-rows check to every dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AmnesiaGuard {
    /// Every claim checks, in the same statement (PostgreSQL) or transaction (MySQL/MariaDB),
    /// that the server is the one recorded as having granted the table's leases. When it is
    /// not, the new server is recorded, and acquisition answers
    /// [`SqlLeaseError::ServerChanged`](crate::SqlLeaseError::ServerChanged) (kind `Retry`) until
    /// the hold-off after that ([`SqlStrategy::amnesia_hold_off`](crate::SqlStrategy::amnesia_hold_off):
    /// `max_lease_duration`, by when every lease the old server granted has expired, and twice
    /// the clock offset nodes are held to, by when a successor's clock has passed every
    /// timestamp those leases may have carried).
    ///
    /// Rows missing from a seeded table (deleted while nodes may hold their IDs) are put back
    /// blocked until the same hold-off from then, by the migration or by an acquisition that
    /// found nothing, which answers
    /// [`SqlLeaseError::RowsDeleted`](crate::SqlLeaseError::RowsDeleted) (kind `Retry`) while
    /// they are blocked.
    ///
    /// Renewals are never held off.
    #[default]
    HoldOff,
    /// No check: only for deployments in which every acknowledged write survives a failover
    /// (synchronous replication to every server that can be promoted, or no failover at all),
    /// and nobody deletes rows of the lease table. Missing rows are put back free, as before
    /// the check existed, so an ID whose row was deleted while its holder runs is handed out
    /// again at once.
    Off,
}

/// The server's identity on PostgreSQL: system identifier and timeline (hex, from the WAL file
/// name of the current insert position). A promoted replica keeps the system identifier and
/// starts a new timeline; a new cluster (a dump restored, `pg_upgrade`) has a new system
/// identifier. `NULL` on a server in recovery (a standby), which cannot grant leases anyway.
/// Needs no privilege beyond a login.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_IDENTITY: &str = "CASE WHEN pg_is_in_recovery() THEN NULL ELSE (SELECT system_identifier::text FROM pg_control_system()) || ':' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END";

/// The server's identity on MySQL/MariaDB: `server_id` (distinct on every member of a
/// replication topology), host name and port.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL_IDENTITY: &str = "CONCAT(@@server_id, '/', @@hostname, ':', @@port)";

/// What the lease table's rows say when a guarded claim found nothing: whether rows vanished
/// from the (seeded) table, and whether rows put back after that are still blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    /// How many rows the table has.
    pub present: i64,
    /// Rows put back blocked and not yet free: no token, never claimed (version 0), expiry
    /// ahead. A seeded row expires in 1970; a claimed one has a higher version.
    pub blocked: i64,
    /// Microseconds until the last of them is free.
    pub blocked_remaining_us: Option<i64>,
}

/// What to do about [`Rows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowsVerdict {
    /// Rows are missing: put them back blocked, hold off.
    Missing { missing: u64, blocked: u64 },
    /// Rows put back earlier are still blocked: hold off for what remains.
    Blocked { blocked: u64, remaining: Duration },
    /// Every row is there, none blocked by a restore.
    Intact,
}

impl Rows {
    pub(crate) fn verdict(self) -> RowsVerdict {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        let missing = u64::from(MachineId::COUNT).saturating_sub(count(self.present));
        if missing > 0 {
            return RowsVerdict::Missing {
                missing,
                blocked: count(self.blocked),
            };
        }
        match self.blocked_remaining_us.map(count) {
            Some(us) if us > 0 && self.blocked > 0 => RowsVerdict::Blocked {
                blocked: count(self.blocked),
                remaining: Duration::from_micros(us),
            },
            _ => RowsVerdict::Intact,
        }
    }
}

/// What the database said about the server and the table when a guarded claim found nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    /// The server's identity now (`None` on a PostgreSQL standby).
    pub current: Option<String>,
    /// The identity recorded for the table, if any.
    pub recorded: Option<String>,
    /// The identity recorded before it.
    pub previous: Option<String>,
    /// Microseconds until the hold-off of the recorded identity ends (negative: it ended).
    pub remaining_us: Option<i64>,
    /// Free rows.
    pub free: i64,
    /// Whether any row of the table was ever claimed.
    pub claimed: bool,
    /// What the rows say.
    pub rows: Rows,
}

/// What to do about a [`Diagnosis`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A standby: nothing can be claimed here.
    Standby,
    /// No record and no lease ever granted: record the server as trusted, claim again.
    Trust { current: String },
    /// No record, but leases were granted before: record the server from now on, hold off.
    RecordAndHoldOff { current: String },
    /// Another server is recorded: record this one from now on, hold off.
    Changed { recorded: String, current: String },
    /// This server was recorded recently: hold off for what remains.
    HoldOff {
        previous: Option<String>,
        current: String,
        remaining: Duration,
    },
    /// The server check passed: the claim found no free row, or lost a race; what the rows
    /// say is for [`Rows::verdict`].
    Passed { free: i64, rows: Rows },
}

impl Diagnosis {
    pub(crate) fn verdict(self) -> Verdict {
        let Some(current) = self.current else {
            return Verdict::Standby;
        };
        match self.recorded {
            None if self.claimed => Verdict::RecordAndHoldOff { current },
            None => Verdict::Trust { current },
            Some(recorded) if recorded != current => Verdict::Changed { recorded, current },
            Some(_) => match self.remaining_us.and_then(|us| u64::try_from(us).ok()) {
                Some(us) if us > 0 => Verdict::HoldOff {
                    previous: self.previous,
                    current,
                    remaining: Duration::from_micros(us),
                },
                _ => Verdict::Passed {
                    free: self.free,
                    rows: self.rows,
                },
            },
        }
    }
}

#[cfg(test)]
const INTACT: Rows = Rows {
    present: 512,
    blocked: 0,
    blocked_remaining_us: None,
};

#[cfg(test)]
mod rows_tests {
    use super::*;

    #[test]
    fn rows_verdicts() {
        for (rows, verdict) in [
            (INTACT, RowsVerdict::Intact),
            (
                Rows {
                    present: 0,
                    ..INTACT
                },
                RowsVerdict::Missing {
                    missing: 512,
                    blocked: 0,
                },
            ),
            (
                Rows {
                    present: 511,
                    blocked: 2,
                    blocked_remaining_us: Some(9),
                },
                RowsVerdict::Missing {
                    missing: 1,
                    blocked: 2,
                },
            ),
            (
                Rows {
                    blocked: 512,
                    blocked_remaining_us: Some(1_500_000),
                    ..INTACT
                },
                RowsVerdict::Blocked {
                    blocked: 512,
                    remaining: Duration::from_millis(1500),
                },
            ),
        ] {
            assert_eq!(rows.verdict(), verdict, "{rows:?}");
        }
    }
}

#[cfg(all(test, any(feature = "postgres", feature = "mysql")))]
mod tests {
    use super::*;

    fn diagnosis() -> Diagnosis {
        Diagnosis {
            current: Some("7:00000002".into()),
            recorded: Some("7:00000002".into()),
            previous: Some("7:00000001".into()),
            remaining_us: Some(-5),
            free: 3,
            claimed: true,
            rows: INTACT,
        }
    }

    #[test]
    fn verdicts() {
        assert_eq!(
            diagnosis().verdict(),
            Verdict::Passed {
                free: 3,
                rows: INTACT
            }
        );
        let standby = Diagnosis {
            current: None,
            ..diagnosis()
        };
        assert_eq!(standby.verdict(), Verdict::Standby);
        let unrecorded = Diagnosis {
            recorded: None,
            remaining_us: None,
            ..diagnosis()
        };
        assert_eq!(
            unrecorded.clone().verdict(),
            Verdict::RecordAndHoldOff {
                current: "7:00000002".into()
            }
        );
        let fresh = Diagnosis {
            claimed: false,
            ..unrecorded
        };
        assert_eq!(
            fresh.verdict(),
            Verdict::Trust {
                current: "7:00000002".into()
            }
        );
        let changed = Diagnosis {
            recorded: Some("7:00000001".into()),
            ..diagnosis()
        };
        assert_eq!(
            changed.verdict(),
            Verdict::Changed {
                recorded: "7:00000001".into(),
                current: "7:00000002".into()
            }
        );
        let recent = Diagnosis {
            remaining_us: Some(1_500_000),
            ..diagnosis()
        };
        assert_eq!(
            recent.verdict(),
            Verdict::HoldOff {
                previous: Some("7:00000001".into()),
                current: "7:00000002".into(),
                remaining: Duration::from_millis(1500)
            }
        );
    }
}
