//! MySQL's and MariaDB's statements.

use std::time::Duration;

use sqlx::AssertSqlSafe;

use super::{AmnesiaQueries, BLOCKED_SINCE_RESTORED, ClaimBatch, Common, Statement, micros};
use crate::amnesia::MYSQL_IDENTITY;
use crate::table::TableName;
use crate::{AmnesiaGuard, Dialect};

/// The end of the locking read of a free row: the lowest that nobody else has locked.
const LOCK_LOWEST: &str = " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED";

/// The statements of one strategy on MySQL or MariaDB.
pub(crate) struct MySqlQueries {
    pub common: Common,
    pub amnesia: AmnesiaQueries,
    /// `SKIP LOCKED`: the locking read of free rows up to where the floor preference goes
    /// (see [`lock_free_row`](Self::lock_free_row)); returns id, lock_version, floor, clock (ms).
    lock_free: String,
    /// `SKIP LOCKED`: the claim of the locked row and `COMMIT`.
    pub claim_batch: ClaimBatch,
    /// Optimistic: up to `limit` free rows, the preferred first, in random order (params
    /// now_ms, limit): id, lock_version, floor, clock (ms).
    pub candidates: Statement,
    /// Optimistic: claim a row if its version is unchanged (params token, amount, floor, id,
    /// version); reports the clock (ms) as `last_insert_id`.
    pub claim_version: Statement,
}

impl MySqlQueries {
    pub(crate) fn new(table: &TableName, guard: AmnesiaGuard, hold_off: Duration) -> Self {
        let t = table.quoted(Dialect::MySql);
        let m = table.coordinator().quoted(Dialect::MySql);
        let key = table.literal();
        let max_us = micros(hold_off);
        let q = Statement::new;
        let now = "UTC_TIMESTAMP(6)";
        let now_ms = format!(
            "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {now}) DIV 1000 AS SIGNED)"
        );
        let until = format!("TIMESTAMPADD(MICROSECOND, ?, {now})");
        let blocked = format!("{BLOCKED_SINCE_RESTORED} AND NOT (expires_at < {now})");
        // The clock, reported in the OK packet without a result set (LAST_INSERT_ID(expr)
        // is documented to set what mysql_insert_id() returns); adds 0.
        let clock = format!("CAST(0 * LAST_INSERT_ID({now_ms}) AS SIGNED)");
        // Only in reads: a replicated write naming server variables would be evaluated
        // again, with the replica's values, under statement-based replication.
        let guard = match guard {
            AmnesiaGuard::HoldOff => format!(
                "EXISTS (SELECT 1 FROM {m} WHERE lease_table = {key} \
                 AND server_identity = {MYSQL_IDENTITY} \
                 AND since <= TIMESTAMPADD(MICROSECOND, -{max_us}, {now}))"
            ),
            AmnesiaGuard::Off => "TRUE".to_owned(),
        };
        let free = format!(
            "SELECT CAST(id AS SIGNED), CAST(lock_version AS SIGNED), \
             CAST(floor_ms AS SIGNED), {now_ms} FROM {t} \
             WHERE expires_at < {now} AND {guard}"
        );
        Self {
            common: Common {
                renew: q(format!(
                    "UPDATE {t} SET expires_at = {until}, lock_version = lock_version + 1 + {clock}, \
                     floor_ms = GREATEST(floor_ms, ?) WHERE id = ? AND token = ?"
                )),
                release: q(format!(
                    "UPDATE {t} SET token = NULL, expires_at = LEAST(expires_at, {until}), \
                     lock_version = lock_version + 1, floor_ms = ? \
                     WHERE id = ? AND token = ?"
                )),
                raise_floor: q(format!(
                    "UPDATE {t} SET lock_version = lock_version + 1, \
                     floor_ms = GREATEST(floor_ms, ?) WHERE id = ?"
                )),
                count_free: q(format!("SELECT COUNT(*) FROM {t} WHERE expires_at < {now}")),
                holders: q(format!(
                    "SELECT CAST(id AS SIGNED), token, \
                     CAST(TIMESTAMPDIFF(MICROSECOND, {now}, expires_at) AS SIGNED) \
                     FROM {t} WHERE NOT (expires_at < {now}) ORDER BY id"
                )),
                force_release: q(format!(
                    // MySQL assigns left to right, each seeing the ones before: the floor
                    // first, from the expiry it replaces.
                    "UPDATE {t} SET floor_ms = GREATEST(floor_ms, \
                     CAST(CEIL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at) / 1000) AS SIGNED)), \
                     token = NULL, expires_at = '1970-01-01 00:00:00', \
                     lock_version = lock_version + 1 WHERE id = ? AND NOT (expires_at < {now})"
                )),
                restore: q(format!(
                    "INSERT INTO {t} (id, token, expires_at, lock_version) \
                     WITH RECURSIVE seq (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < 511) \
                     SELECT n, NULL, TIMESTAMPADD(MICROSECOND, {max_us}, {now}), 0 FROM seq \
                     WHERE EXISTS (SELECT 1 FROM {m} WHERE lease_table = {key}) \
                     ON DUPLICATE KEY UPDATE id = id"
                )),
            },
            amnesia: AmnesiaQueries {
                diagnose: q(format!(
                    "SELECT CAST({MYSQL_IDENTITY} AS CHAR), CAST(m.server_identity AS CHAR), \
                     CAST(m.previous_identity AS CHAR), \
                     CAST(TIMESTAMPDIFF(MICROSECOND, {now}, \
                     TIMESTAMPADD(MICROSECOND, {max_us}, m.since)) AS SIGNED), \
                     (SELECT COUNT(*) FROM {t} WHERE expires_at < {now}), \
                     CAST(EXISTS (SELECT 1 FROM {t} WHERE lock_version <> 0 OR token IS NOT NULL) \
                     AS SIGNED), \
                     (SELECT COUNT(*) FROM {t}), \
                     (SELECT COUNT(*) FROM {t} WHERE {blocked}), \
                     (SELECT CAST(TIMESTAMPDIFF(MICROSECOND, {now}, MAX(expires_at)) AS SIGNED) \
                     FROM {t} WHERE {blocked}) \
                     FROM (SELECT 1) AS one LEFT JOIN {m} AS m ON m.lease_table = {key}"
                )),
                record: q(format!(
                    "INSERT INTO {m} (lease_table, server_identity, since) VALUES ({key}, ?, \
                     IF(?, '1970-01-01 00:00:00', {now})) \
                     ON DUPLICATE KEY UPDATE lease_table = lease_table"
                )),
                replace: q(format!(
                    "UPDATE {m} SET previous_identity = server_identity, server_identity = ?, \
                     since = {now} WHERE lease_table = {key} AND server_identity = ?"
                )),
            },
            candidates: q(format!("{free} ORDER BY floor_ms >= ?, RAND() LIMIT ?")),
            lock_free: free,
            claim_batch: ClaimBatch(format!(
                "UPDATE {t} SET token = X'{{token}}', \
                 expires_at = TIMESTAMPADD(MICROSECOND, {{amount}}, {now}), \
                 lock_version = lock_version + 1, floor_ms = GREATEST(floor_ms, {{floor}}) \
                 WHERE id = {{id}} AND lock_version = {{version}}; COMMIT"
            )),
            claim_version: q(format!(
                "UPDATE {t} SET token = ?, expires_at = {until}, \
                 lock_version = lock_version + 1 + {clock}, floor_ms = GREATEST(floor_ms, ?) \
                 WHERE id = ? AND lock_version = ?"
            )),
        }
    }

    /// The locking read of the lowest free row, with a floor below `below_ms` if given. Only
    /// the strategy's own number is spliced in, so the text stays safe.
    pub(crate) fn lock_free_row(&self, below_ms: Option<i64>) -> AssertSqlSafe<String> {
        let below = below_ms.map_or_else(String::new, |ms| format!(" AND floor_ms < {ms}"));
        AssertSqlSafe(format!("{}{below}{LOCK_LOWEST}", self.lock_free))
    }

    /// Isolation level, `START TRANSACTION` and [`lock_free_row`](Self::lock_free_row) with a
    /// floor below `below_ms`, as one round trip.
    pub(crate) fn begin_and_lock_free_row(&self, below_ms: i64) -> AssertSqlSafe<String> {
        let AssertSqlSafe(read) = self.lock_free_row(Some(below_ms));
        AssertSqlSafe(format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; {read}"
        ))
    }
}
