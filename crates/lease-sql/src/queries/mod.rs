//! The statements of one strategy (table, amnesia guard, hold-off), built once per setting:
//! one statement set per dialect, with a field for every statement that dialect runs and none
//! for those it lacks.
//!
//! Parameter order, on every dialect: claims `token, amount, floor[, id, version]`; renew and
//! release `amount, floor, id, token`. `amount` is microseconds (PostgreSQL, MySQL) or a
//! `strftime` modifier (SQLite).

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::sync::Arc;

use sqlx::AssertSqlSafe;

#[cfg(feature = "mysql")]
pub(crate) use mysql::MySqlQueries;
#[cfg(feature = "postgres")]
pub(crate) use postgres::PostgresQueries;
#[cfg(feature = "sqlite")]
pub(crate) use sqlite::SqliteQueries;

/// One statement's text, with parameters for every value a call passes. The text itself is
/// built only from constants, validated and quoted table names and the strategy's own numbers,
/// so it is safe to run as is.
pub(crate) struct Statement(Arc<str>);

impl Statement {
    fn new(text: String) -> Self {
        Self(text.into())
    }

    /// The text for sqlx (shared, not copied).
    pub(crate) fn sql(&self) -> AssertSqlSafe<Arc<str>> {
        AssertSqlSafe(Arc::clone(&self.0))
    }
}

/// The statements every dialect runs.
pub(crate) struct Common {
    /// Extend a lease and raise its floor (params amount, floor, id, token). PostgreSQL and
    /// SQLite return the clock (ms); MySQL reports it as `last_insert_id`.
    pub renew: Statement,
    /// Release with a guard, clear the token and set the floor (params amount, floor, id,
    /// token). The row stays held until the guard has passed (NoNoncense nodes look at
    /// `expires_at` only); without the token no late renewal can extend it.
    pub release: Statement,
    /// Raise an ID's floor, whoever holds it (params floor, id): the release of a lease that
    /// is no longer ours records what was issued under it, and touches nothing else. Bumps the
    /// version, so a claim that read the row's floor before this write loses its race.
    pub raise_floor: Statement,
    /// How many rows are free (expired).
    pub count_free: Statement,
    /// Held rows: id, token, microseconds left.
    pub holders: Statement,
    /// Free one held row at once, whoever holds it (param id), its floor raised to the end of
    /// the lease or block it ends (ms): a holder that still runs issues nothing past that,
    /// and a row put back blocked after it vanished carries no other floor.
    pub force_release: Statement,
    /// Put back the missing rows of a seeded table, blocked for the amnesia hold-off: no token,
    /// version 0, expiring at the database's now plus the hold-off (a NoNoncense node sees them
    /// taken too). PostgreSQL and MySQL/MariaDB add them only where the table has its
    /// coordinator record, which the migration writes once it has seeded the table.
    pub restore: Statement,
}

/// The amnesia guard's statements (PostgreSQL and MySQL/MariaDB; SQLite has no replicas).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) struct AmnesiaQueries {
    /// Identity now, recorded identity, previous identity, microseconds of hold-off left, free
    /// rows, whether any row was ever claimed, then the [`Rows`](crate::amnesia::Rows): rows
    /// present, rows blocked since they were put back, microseconds until the last is free.
    pub diagnose: Statement,
    /// Record the server for the table if nothing is recorded (params identity, trusted).
    pub record: Statement,
    /// Replace the recorded server (params new identity, recorded identity).
    pub replace: Statement,
}

/// A claim as multi-statement text (MySQL, SQLite), which takes no bound parameters: the values
/// go in through the placeholders `{token}` (hex), `{amount}`, `{floor}`, `{now_ms}`, `{id}` and
/// `{version}`.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
pub(crate) struct ClaimBatch(String);

#[cfg(any(feature = "mysql", feature = "sqlite"))]
impl ClaimBatch {
    /// The batch with its placeholders filled in: the token as hex, numbers, and `amount`, our
    /// own microseconds or `strftime` modifier. Nothing else is spliced, so the text stays safe.
    pub(crate) fn fill(
        &self,
        token: &[u8; 16],
        amount: &str,
        floor: i64,
        now_ms: i64,
        (id, version): (i64, i64),
    ) -> AssertSqlSafe<String> {
        let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
        AssertSqlSafe(
            self.0
                .replace("{token}", &hex)
                .replace("{amount}", amount)
                .replace("{floor}", &floor.to_string())
                .replace("{now_ms}", &now_ms.to_string())
                .replace("{id}", &id.to_string())
                .replace("{version}", &version.to_string()),
        )
    }
}

/// The condition on a lease row that [`Common::restore`] put back and that is still blocked.
const BLOCKED_SINCE_RESTORED: &str = "lock_version = 0 AND token IS NULL";

/// The amnesia hold-off in whole microseconds, as the guard's statements compare it.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn micros(hold_off: std::time::Duration) -> i64 {
    i64::try_from(hold_off.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(all(test, any(feature = "mysql", feature = "sqlite")))]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_filled_with_hex_and_numbers_only() {
        let batch = ClaimBatch(
            "SET token = X'{token}', amount = {amount}, floor = {floor}, now = {now_ms}, \
             id = {id}, version = {version}"
                .to_owned(),
        );
        let AssertSqlSafe(filled) = batch.fill(&[0xab; 16], "+1.500 seconds", 7, 8, (9, 10));
        assert_eq!(
            filled,
            format!(
                "SET token = X'{}', amount = +1.500 seconds, floor = 7, now = 8, id = 9, \
                 version = 10",
                "ab".repeat(16)
            )
        );
    }
}
