//! SQLite's statements.

use super::{BLOCKED_SINCE_RESTORED, ClaimBatch, Common, Statement};
use crate::Dialect;
use crate::table::TableName;

/// The statements of one strategy on SQLite, which has neither the amnesia guard (no replicas)
/// nor a choice of acquisition (its writers are serialized).
pub(crate) struct SqliteQueries {
    pub common: Common,
    /// One write transaction that claims the preferred row (returning id, the floor before,
    /// the clock) and then raises its floor.
    pub claim_batch: ClaimBatch,
    /// The column names of the lease table.
    pub columns: Statement,
    /// Free rows, then the [`Rows`](crate::amnesia::Rows): rows present, rows blocked since
    /// they were put back, microseconds until the last is free.
    pub diagnose: Statement,
}

impl SqliteQueries {
    /// The statements for `table`; rows put back after they vanished are blocked for the
    /// `strftime` modifier `hold_off` (`+S.mmm seconds`).
    pub(crate) fn new(table: &TableName, hold_off: &str) -> Self {
        let t = table.quoted(Dialect::Sqlite);
        let q = Statement::new;
        let now = "strftime('%Y-%m-%d %H:%M:%f', 'now')";
        let now_ms = "CAST(round(unixepoch('now', 'subsec') * 1000) AS INTEGER)";
        let until = "strftime('%Y-%m-%d %H:%M:%f', 'now', ?)";
        let blocked = format!("{BLOCKED_SINCE_RESTORED} AND NOT (expires_at < {now})");
        let (schema, bare) = table.parts();
        let schema = schema.map_or_else(String::new, |schema| format!(", '{schema}'"));
        Self {
            common: Common {
                renew: q(format!(
                    "UPDATE {t} SET expires_at = {until}, lock_version = lock_version + 1, \
                     floor_ms = max(floor_ms, ?) WHERE id = ? AND token = ? RETURNING {now_ms}"
                )),
                release: q(format!(
                    "UPDATE {t} SET token = NULL, expires_at = min(expires_at, {until}), \
                     lock_version = lock_version + 1, floor_ms = ? \
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
                    "UPDATE {t} SET floor_ms = max(floor_ms, \
                     CAST(round(unixepoch(expires_at, 'subsec') * 1000) AS INTEGER)), \
                     token = NULL, expires_at = '1970-01-01 00:00:00.000', \
                     lock_version = lock_version + 1 WHERE id = ? AND NOT (expires_at < {now})"
                )),
                // The table exists, so it was seeded: SQLite creates and seeds it in one
                // transaction.
                restore: q(format!(
                    "WITH RECURSIVE seq (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < 511) \
                     INSERT INTO {t} (id, token, expires_at, lock_version) \
                     SELECT n, NULL, strftime('%Y-%m-%d %H:%M:%f', 'now', '{hold_off}'), 0 \
                     FROM seq WHERE true ON CONFLICT (id) DO NOTHING"
                )),
            },
            // The first update leaves floor_ms alone, so RETURNING shows the floor before;
            // the second raises it, in the same transaction. The token is ours alone.
            claim_batch: ClaimBatch(format!(
                "BEGIN IMMEDIATE; \
                 UPDATE {t} SET token = X'{{token}}', \
                 expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '{{amount}}'), \
                 lock_version = lock_version + 1 \
                 WHERE id = COALESCE((SELECT id FROM {t} WHERE expires_at < {now} \
                 AND floor_ms < {{now_ms}} ORDER BY id LIMIT 1), \
                 (SELECT id FROM {t} WHERE expires_at < {now} ORDER BY id LIMIT 1)) \
                 RETURNING id, floor_ms, {now_ms}; \
                 UPDATE {t} SET floor_ms = max(floor_ms, {{floor}}) WHERE token = X'{{token}}'; \
                 COMMIT"
            )),
            diagnose: q(format!(
                "SELECT (SELECT COUNT(*) FROM {t} WHERE expires_at < {now}), \
                 (SELECT COUNT(*) FROM {t}), \
                 (SELECT COUNT(*) FROM {t} WHERE {blocked}), \
                 (SELECT CAST(round((julianday(MAX(expires_at)) - julianday({now})) * 86400000.0) \
                 AS INTEGER) * 1000 FROM {t} WHERE {blocked})"
            )),
            columns: q(format!(
                "SELECT name FROM pragma_table_info('{bare}'{schema}) ORDER BY cid"
            )),
        }
    }
}
