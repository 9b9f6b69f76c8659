//! The amnesia guard: noticing that the database server behind the pool is not the one that
//! granted the table's leases (failover to a replica that missed lease writes).

#[cfg(any(feature = "postgres", feature = "mysql"))]
use std::time::Duration;

/// How the strategy defends against a database server that lost lease writes: a failover to an
/// asynchronous replica that had not received them, or a restore into a new cluster. See the
/// crate docs, "Coordinator amnesia".
///
/// Applies to PostgreSQL and MySQL/MariaDB; SQLite has no replicas and ignores it.
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
    /// Renewals are never held off.
    #[default]
    HoldOff,
    /// No check: only for deployments in which every acknowledged write survives a failover
    /// (synchronous replication to every server that can be promoted, or no failover at all).
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

/// What the database said about the server and the table when a guarded claim found nothing.
#[cfg(any(feature = "postgres", feature = "mysql"))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Diagnosis {
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
}

/// What to do about a [`Diagnosis`].
#[cfg(any(feature = "postgres", feature = "mysql"))]
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
    /// The guard passed: the claim found no free row, or lost a race.
    Passed { free: i64 },
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
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
                _ => Verdict::Passed { free: self.free },
            },
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
        }
    }

    #[test]
    fn verdicts() {
        assert_eq!(diagnosis().verdict(), Verdict::Passed { free: 3 });
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
