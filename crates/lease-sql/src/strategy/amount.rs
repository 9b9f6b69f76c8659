//! Lease durations as each database applies them.

use std::time::Duration;

use lease_core::time::millis;

use crate::{Dialect, SqlLeaseError};

/// The longest lease duration the strategy accepts.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// A lease duration as the database applies it: whole microseconds (PostgreSQL, MySQL) or
/// milliseconds (SQLite).
pub(super) struct Amount {
    /// The duration the database will actually add, reported as the granted TTL.
    pub(super) applied: Duration,
}

impl Amount {
    pub(super) fn new(requested: Duration, dialect: Dialect) -> Result<Self, SqlLeaseError> {
        if requested > MAX_DURATION {
            return Err(SqlLeaseError::DurationTooLong(requested));
        }
        let applied = match dialect {
            Dialect::Sqlite => Duration::from_millis(millis(requested)),
            Dialect::Postgres | Dialect::MySql => {
                Duration::from_micros(u64::try_from(requested.as_micros()).unwrap_or(u64::MAX))
            }
        };
        Ok(Self { applied })
    }

    /// Whole microseconds, the parameter of PostgreSQL's and MySQL's statements.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(super) fn micros(&self) -> i64 {
        i64::try_from(self.applied.as_micros()).unwrap_or(i64::MAX)
    }

    /// The `strftime` modifier `+S.mmm seconds`, the parameter of SQLite's statements.
    #[cfg(feature = "sqlite")]
    pub(super) fn modifier(&self) -> String {
        let ms = millis(self.applied);
        format!("+{}.{:03} seconds", ms / 1000, ms % 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_whole_microseconds_or_milliseconds() {
        let d = Duration::from_nanos(1_234_567_891);
        let pg = Amount::new(d, Dialect::Postgres).unwrap();
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        assert_eq!(pg.micros(), 1_234_567);
        assert_eq!(pg.applied, Duration::from_micros(1_234_567));
        let lite = Amount::new(d, Dialect::Sqlite).unwrap();
        assert_eq!(lite.applied, Duration::from_millis(1_234));
        #[cfg(feature = "sqlite")]
        assert_eq!(lite.modifier(), "+1.234 seconds");
        assert!(matches!(
            Amount::new(MAX_DURATION + Duration::from_secs(1), Dialect::MySql),
            Err(SqlLeaseError::DurationTooLong(_))
        ));
    }
}
