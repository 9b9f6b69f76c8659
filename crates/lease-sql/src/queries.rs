//! The statements of one strategy (dialect, table, amnesia guard, longest lease), built once.

use std::sync::Arc;
use std::time::Duration;

use crate::amnesia::{MYSQL_IDENTITY, POSTGRES_IDENTITY};
use crate::table::TableName;
use crate::{AmnesiaGuard, Dialect};

/// The statements for one dialect and table. Fields a dialect does not use are empty.
///
/// Parameter order, on every dialect: claims `token, amount, floor[, id, version]`; renew and
/// release `amount, floor, id, token`. `amount` is microseconds (PostgreSQL, MySQL) or a
/// `strftime` modifier (SQLite).
// Which fields are read depends on the dialect features enabled.
#[cfg_attr(
    not(all(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) struct Queries {
    /// PostgreSQL: claim the preferred free row in one statement; params token, amount, floor,
    /// now_ms; returns id, the floor before, the database clock (ms).
    pub claim_preferred: Arc<str>,
    /// MySQL: text of the locking read of the lowest free row, up to where the floor
    /// preference goes (`AND floor_ms < n`); returns id, lock_version, floor, clock (ms).
    pub lock_head: Arc<str>,
    /// MySQL: the rest of the locking read (`ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`).
    pub lock_tail: Arc<str>,
    /// The claim as multi-statement text with placeholders `{token}` (hex), `{amount}`,
    /// `{floor}`, `{now_ms}`, `{id}` and `{version}`. MySQL: the claim of the locked row and
    /// `COMMIT`. SQLite: one write transaction that claims the preferred row (returning id, the
    /// floor before, the clock) and then raises its floor.
    pub claim_batch: Arc<str>,
    /// Up to `limit` free rows, the preferred first, in random order (params now_ms, limit):
    /// id, lock_version, floor, clock (ms).
    pub candidates: Arc<str>,
    /// Claim a row if its version is unchanged (params token, amount, floor, id, version);
    /// PostgreSQL returns the clock (ms), MySQL reports it as `last_insert_id`.
    pub claim_version: Arc<str>,
    /// Extend a lease and raise its floor (params amount, floor, id, token); the clock (ms) as
    /// for `claim_version` (SQLite: returned too).
    pub renew: Arc<str>,
    /// Release with a guard, clear the token and set the floor unless it is NULL (params
    /// amount, floor, id, token). The row stays held until the guard has passed (NoNoncense
    /// nodes look at `expires_at` only); without the token no late renewal can extend it.
    pub release: Arc<str>,
    /// Raise an ID's floor, whoever holds it (params floor, id): the release of a lease that
    /// is no longer ours records what was issued under it, and touches nothing else. Bumps the
    /// version, so a claim that read the row's floor before this write loses its race.
    pub raise_floor: Arc<str>,
    pub count_free: Arc<str>,
    /// Held rows: id, token, microseconds left.
    pub holders: Arc<str>,
    /// Free one held row at once, whoever holds it.
    pub force_release: Arc<str>,
    /// Identity now, recorded identity, previous identity, microseconds of hold-off left, free
    /// rows, whether any row was ever claimed.
    pub diagnose: Arc<str>,
    /// Record the server for the table if nothing is recorded (params identity, trusted).
    pub record: Arc<str>,
    /// Replace the recorded server (params new identity, recorded identity).
    pub replace: Arc<str>,
    /// SQLite: the column names of the lease table.
    pub columns: Arc<str>,
}

impl Queries {
    pub(crate) fn new(
        dialect: Dialect,
        table: &TableName,
        guard: AmnesiaGuard,
        hold_off: Duration,
    ) -> Self {
        let t = table.quoted(dialect);
        let m = table.coordinator().quoted(dialect);
        let key = table.literal();
        let max_us = i64::try_from(hold_off.as_micros()).unwrap_or(i64::MAX);
        let q = |s: String| Arc::<str>::from(s);
        let none = || Arc::<str>::from("");
        match dialect {
            Dialect::Postgres => {
                let now = "(CURRENT_TIMESTAMP AT TIME ZONE 'UTC')";
                let now_ms = "floor(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP) * 1000)::bigint";
                let until = |p: &str| format!("({now} + {p}::bigint * INTERVAL '1 microsecond')");
                let guard = match guard {
                    AmnesiaGuard::HoldOff => format!(
                        "EXISTS (SELECT 1 FROM {m} WHERE lease_table = {key} \
                         AND server_identity = {POSTGRES_IDENTITY} \
                         AND since <= {now} - INTERVAL '{max_us} microseconds')"
                    ),
                    AmnesiaGuard::Off => "true".to_owned(),
                };
                // The lowest free row below the acquirer's clock, else the lowest free row: two
                // index scans in ID order, the second run only if the first finds nothing
                // (the executor pulls rows on demand), each locking only the row it returns.
                let free = |preferred: &str| {
                    format!(
                        "SELECT id, floor_ms FROM {t} WHERE expires_at < {now} AND {guard}{preferred} \
                         ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
                    )
                };
                let preferred = free(" AND (floor_ms < $4::bigint OR $4::bigint = 0)");
                let any = free("");
                Self {
                    claim_preferred: q(format!(
                        "UPDATE {t} AS l SET token = $1, expires_at = {}, \
                         lock_version = l.lock_version + 1, floor_ms = GREATEST(l.floor_ms, $3::bigint) \
                         FROM (SELECT * FROM ({preferred}) AS a \
                         UNION ALL SELECT * FROM ({any}) AS b LIMIT 1) AS c \
                         WHERE l.id = c.id RETURNING l.id::bigint, c.floor_ms, {now_ms}",
                        until("$2")
                    )),
                    lock_head: none(),
                    lock_tail: none(),
                    claim_batch: none(),
                    candidates: q(format!(
                        "SELECT id::bigint, lock_version::bigint, floor_ms, {now_ms} FROM {t} \
                         WHERE expires_at < {now} AND {guard} \
                         ORDER BY (floor_ms >= $1::bigint), random() LIMIT $2"
                    )),
                    claim_version: q(format!(
                        "UPDATE {t} SET token = $1, expires_at = {}, lock_version = lock_version + 1, \
                         floor_ms = GREATEST(floor_ms, $3::bigint) \
                         WHERE id = $4 AND lock_version = $5 AND {guard} RETURNING {now_ms}",
                        until("$2")
                    )),
                    renew: q(format!(
                        "UPDATE {t} SET expires_at = {}, lock_version = lock_version + 1, \
                         floor_ms = GREATEST(floor_ms, $2::bigint) \
                         WHERE id = $3 AND token = $4 RETURNING {now_ms}",
                        until("$1")
                    )),
                    release: q(format!(
                        "UPDATE {t} SET token = NULL, expires_at = LEAST(expires_at, {}), \
                         lock_version = lock_version + 1, floor_ms = COALESCE($2::bigint, floor_ms) \
                         WHERE id = $3 AND token = $4",
                        until("$1")
                    )),
                    raise_floor: q(format!(
                        "UPDATE {t} SET lock_version = lock_version + 1, \
                         floor_ms = GREATEST(floor_ms, $1::bigint) WHERE id = $2"
                    )),
                    count_free: q(format!("SELECT COUNT(*) FROM {t} WHERE expires_at < {now}")),
                    holders: q(format!(
                        "SELECT id::bigint, token, \
                         (EXTRACT(EPOCH FROM (expires_at - {now})) * 1000000)::bigint \
                         FROM {t} WHERE NOT (expires_at < {now}) ORDER BY id"
                    )),
                    force_release: q(format!(
                        "UPDATE {t} SET token = NULL, expires_at = TIMESTAMP '1970-01-01 00:00:00', \
                         lock_version = lock_version + 1 WHERE id = $1 AND NOT (expires_at < {now})"
                    )),
                    diagnose: q(format!(
                        "SELECT {POSTGRES_IDENTITY}, m.server_identity, m.previous_identity, \
                         floor(EXTRACT(EPOCH FROM (m.since + INTERVAL '{max_us} microseconds' - {now})) \
                         * 1000000)::bigint, \
                         (SELECT COUNT(*) FROM {t} WHERE expires_at < {now}), \
                         EXISTS (SELECT 1 FROM {t} WHERE lock_version <> 0 OR token IS NOT NULL) \
                         FROM (SELECT 1) AS one LEFT JOIN {m} AS m ON m.lease_table = {key}"
                    )),
                    record: q(format!(
                        "INSERT INTO {m} (lease_table, server_identity, since) VALUES ({key}, $1, \
                         CASE WHEN $2 THEN TIMESTAMP '1970-01-01 00:00:00' ELSE {now} END) \
                         ON CONFLICT (lease_table) DO NOTHING"
                    )),
                    replace: q(format!(
                        "UPDATE {m} SET previous_identity = server_identity, server_identity = $1, \
                         since = {now} WHERE lease_table = {key} AND server_identity = $2"
                    )),
                    columns: none(),
                }
            }
            Dialect::MySql => {
                let now = "UTC_TIMESTAMP(6)";
                let now_ms = format!(
                    "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {now}) DIV 1000 AS SIGNED)"
                );
                let until = format!("TIMESTAMPADD(MICROSECOND, ?, {now})");
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
                Self {
                    claim_preferred: none(),
                    lock_head: q(format!(
                        "SELECT CAST(id AS SIGNED), CAST(lock_version AS SIGNED), \
                         CAST(floor_ms AS SIGNED), {now_ms} FROM {t} \
                         WHERE expires_at < {now} AND {guard}"
                    )),
                    lock_tail: q(" ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED".to_owned()),
                    claim_batch: q(format!(
                        "UPDATE {t} SET token = X'{{token}}', \
                         expires_at = TIMESTAMPADD(MICROSECOND, {{amount}}, {now}), \
                         lock_version = lock_version + 1, floor_ms = GREATEST(floor_ms, {{floor}}) \
                         WHERE id = {{id}} AND lock_version = {{version}}; COMMIT"
                    )),
                    candidates: q(format!(
                        "SELECT CAST(id AS SIGNED), CAST(lock_version AS SIGNED), \
                         CAST(floor_ms AS SIGNED), {now_ms} FROM {t} \
                         WHERE expires_at < {now} AND {guard} ORDER BY floor_ms >= ?, RAND() LIMIT ?"
                    )),
                    claim_version: q(format!(
                        "UPDATE {t} SET token = ?, expires_at = {until}, \
                         lock_version = lock_version + 1 + {clock}, floor_ms = GREATEST(floor_ms, ?) \
                         WHERE id = ? AND lock_version = ?"
                    )),
                    renew: q(format!(
                        "UPDATE {t} SET expires_at = {until}, lock_version = lock_version + 1 + {clock}, \
                         floor_ms = GREATEST(floor_ms, ?) WHERE id = ? AND token = ?"
                    )),
                    release: q(format!(
                        "UPDATE {t} SET token = NULL, expires_at = LEAST(expires_at, {until}), \
                         lock_version = lock_version + 1, floor_ms = COALESCE(?, floor_ms) \
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
                        "UPDATE {t} SET token = NULL, expires_at = '1970-01-01 00:00:00', \
                         lock_version = lock_version + 1 WHERE id = ? AND NOT (expires_at < {now})"
                    )),
                    diagnose: q(format!(
                        "SELECT CAST({MYSQL_IDENTITY} AS CHAR), CAST(m.server_identity AS CHAR), \
                         CAST(m.previous_identity AS CHAR), \
                         CAST(TIMESTAMPDIFF(MICROSECOND, {now}, \
                         TIMESTAMPADD(MICROSECOND, {max_us}, m.since)) AS SIGNED), \
                         (SELECT COUNT(*) FROM {t} WHERE expires_at < {now}), \
                         CAST(EXISTS (SELECT 1 FROM {t} WHERE lock_version <> 0 OR token IS NOT NULL) \
                         AS SIGNED) \
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
                    columns: none(),
                }
            }
            Dialect::Sqlite => {
                let now = "strftime('%Y-%m-%d %H:%M:%f', 'now')";
                let now_ms = "CAST(round(unixepoch('now', 'subsec') * 1000) AS INTEGER)";
                let until = "strftime('%Y-%m-%d %H:%M:%f', 'now', ?)";
                Self {
                    claim_preferred: none(),
                    lock_head: none(),
                    lock_tail: none(),
                    // The first update leaves floor_ms alone, so RETURNING shows the floor before;
                    // the second raises it, in the same transaction. The token is ours alone.
                    claim_batch: q(format!(
                        "BEGIN IMMEDIATE; \
                         UPDATE {t} SET token = X'{{token}}', \
                         expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '{{amount}}'), \
                         lock_version = lock_version + 1 \
                         WHERE id = COALESCE((SELECT id FROM {t} WHERE expires_at < {now} \
                         AND (floor_ms < {{now_ms}} OR {{now_ms}} = 0) ORDER BY id LIMIT 1), \
                         (SELECT id FROM {t} WHERE expires_at < {now} ORDER BY id LIMIT 1)) \
                         RETURNING id, floor_ms, {now_ms}; \
                         UPDATE {t} SET floor_ms = max(floor_ms, {{floor}}) WHERE token = X'{{token}}'; \
                         COMMIT"
                    )),
                    candidates: none(),
                    claim_version: none(),
                    renew: q(format!(
                        "UPDATE {t} SET expires_at = {until}, lock_version = lock_version + 1, \
                         floor_ms = max(floor_ms, ?) WHERE id = ? AND token = ? RETURNING {now_ms}"
                    )),
                    release: q(format!(
                        "UPDATE {t} SET token = NULL, expires_at = min(expires_at, {until}), \
                         lock_version = lock_version + 1, floor_ms = coalesce(?, floor_ms) \
                         WHERE id = ? AND token = ?"
                    )),
                    raise_floor: q(format!(
                        "UPDATE {t} SET lock_version = lock_version + 1, \
                         floor_ms = max(floor_ms, ?) WHERE id = ?"
                    )),
                    count_free: q(format!("SELECT COUNT(*) FROM {t} WHERE expires_at < {now}")),
                    holders: q(format!(
                        "SELECT id, token, \
                         CAST(round((julianday(expires_at) - julianday({now})) * 86400000.0) AS INTEGER) * 1000 \
                         FROM {t} WHERE NOT (expires_at < {now}) ORDER BY id"
                    )),
                    force_release: q(format!(
                        "UPDATE {t} SET token = NULL, expires_at = '1970-01-01 00:00:00.000', \
                         lock_version = lock_version + 1 WHERE id = ? AND NOT (expires_at < {now})"
                    )),
                    diagnose: none(),
                    record: none(),
                    replace: none(),
                    columns: q(match table.parts() {
                        (Some(schema), bare) => format!(
                            "SELECT name FROM pragma_table_info('{bare}', '{schema}') ORDER BY cid"
                        ),
                        (None, bare) => {
                            format!("SELECT name FROM pragma_table_info('{bare}') ORDER BY cid")
                        }
                    }),
                }
            }
        }
    }
}
