//! PostgreSQL's statements.

use std::time::Duration;

use super::{AmnesiaQueries, BLOCKED_SINCE_RESTORED, Common, Statement, micros};
use crate::amnesia::POSTGRES_IDENTITY;
use crate::table::TableName;
use crate::{AmnesiaGuard, Dialect};

/// The statements of one strategy on PostgreSQL.
pub(crate) struct PostgresQueries {
    pub common: Common,
    pub amnesia: AmnesiaQueries,
    /// `SKIP LOCKED`: claim the preferred free row in one statement; params token, amount,
    /// floor, now_ms; returns id, the floor before, the database clock (ms).
    pub claim_preferred: Statement,
    /// Optimistic: up to `limit` free rows, the preferred first, in random order (params
    /// now_ms, limit): id, lock_version, floor, clock (ms).
    pub candidates: Statement,
    /// Optimistic: claim a row if its version is unchanged (params token, amount, floor, id,
    /// version); returns the clock (ms).
    pub claim_version: Statement,
}

impl PostgresQueries {
    pub(crate) fn new(table: &TableName, guard: AmnesiaGuard, hold_off: Duration) -> Self {
        let t = table.quoted(Dialect::Postgres);
        let m = table.coordinator().quoted(Dialect::Postgres);
        let key = table.literal();
        let max_us = micros(hold_off);
        let q = Statement::new;
        let now = "(CURRENT_TIMESTAMP AT TIME ZONE 'UTC')";
        let blocked = format!("{BLOCKED_SINCE_RESTORED} AND NOT (expires_at < {now})");
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
        let preferred = free(" AND floor_ms < $4::bigint");
        let any = free("");
        Self {
            common: Common {
                renew: q(format!(
                    "UPDATE {t} SET expires_at = {}, lock_version = lock_version + 1, \
                     floor_ms = GREATEST(floor_ms, $2::bigint) \
                     WHERE id = $3 AND token = $4 RETURNING {now_ms}",
                    until("$1")
                )),
                release: q(format!(
                    "UPDATE {t} SET token = NULL, expires_at = LEAST(expires_at, {}), \
                     lock_version = lock_version + 1, floor_ms = $2::bigint \
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
                    "UPDATE {t} SET \
                     floor_ms = GREATEST(floor_ms, ceil(EXTRACT(EPOCH FROM expires_at) * 1000)::bigint), \
                     token = NULL, expires_at = TIMESTAMP '1970-01-01 00:00:00', \
                     lock_version = lock_version + 1 WHERE id = $1 AND NOT (expires_at < {now})"
                )),
                restore: q(format!(
                    "INSERT INTO {t} (id, token, expires_at, lock_version) \
                     SELECT n, NULL, {now} + INTERVAL '{max_us} microseconds', 0 \
                     FROM generate_series(0, 511) AS n \
                     WHERE EXISTS (SELECT 1 FROM {m} WHERE lease_table = {key}) \
                     ON CONFLICT (id) DO NOTHING"
                )),
            },
            amnesia: AmnesiaQueries {
                diagnose: q(format!(
                    "SELECT {POSTGRES_IDENTITY}, m.server_identity, m.previous_identity, \
                     floor(EXTRACT(EPOCH FROM (m.since + INTERVAL '{max_us} microseconds' - {now})) \
                     * 1000000)::bigint, \
                     (SELECT COUNT(*) FROM {t} WHERE expires_at < {now}), \
                     EXISTS (SELECT 1 FROM {t} WHERE lock_version <> 0 OR token IS NOT NULL), \
                     (SELECT COUNT(*) FROM {t}), \
                     (SELECT COUNT(*) FROM {t} WHERE {blocked}), \
                     (SELECT floor(EXTRACT(EPOCH FROM (MAX(expires_at) - {now})) * 1000000)::bigint \
                     FROM {t} WHERE {blocked}) \
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
            },
            claim_preferred: q(format!(
                "UPDATE {t} AS l SET token = $1, expires_at = {}, \
                 lock_version = l.lock_version + 1, floor_ms = GREATEST(l.floor_ms, $3::bigint) \
                 FROM (SELECT * FROM ({preferred}) AS a \
                 UNION ALL SELECT * FROM ({any}) AS b LIMIT 1) AS c \
                 WHERE l.id = c.id RETURNING l.id::bigint, c.floor_ms, {now_ms}",
                until("$2")
            )),
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
        }
    }
}
