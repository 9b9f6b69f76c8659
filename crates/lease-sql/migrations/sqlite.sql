-- nononce machine-ID lease table for SQLite (an embedded lease store for one host's processes).
-- Idempotent: safe to run again; adds any of the 512 rows that are missing.
-- expires_at holds UTC text 'YYYY-MM-DD HH:MM:SS.SSS', written and compared only through
-- strftime('%Y-%m-%d %H:%M:%f', 'now', ...), SQLite's own millisecond clock.
-- floor_ms is the timestamp floor (Unix ms): an upper bound of every nonce timestamp any holder
-- of the ID may have issued. It is not part of the lease: expiry and release leave it in place.
-- SQLite has no ADD COLUMN IF NOT EXISTS: for a table made before floor_ms existed, run
--   ALTER TABLE no_noncense_leases ADD COLUMN floor_ms integer NOT NULL DEFAULT 0;
-- once (SqlStrategy::migrate checks PRAGMA table_info and does it for you).
-- Rows that vanish from the table while processes run (DELETE) may belong to IDs still in use.
-- This file puts them back free: after such a loss, run SqlStrategy::migrate or
-- `nononce leases migrate` instead, which put them back blocked for the longest lease.
CREATE TABLE IF NOT EXISTS no_noncense_leases (
    id integer PRIMARY KEY NOT NULL,
    token blob NULL,
    expires_at text NOT NULL,
    lock_version integer NOT NULL DEFAULT 0,
    floor_ms integer NOT NULL DEFAULT 0
);
WITH RECURSIVE seq (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < 511)
INSERT INTO no_noncense_leases (id, token, expires_at, lock_version)
SELECT n, NULL, '1970-01-01 00:00:00.000', 0 FROM seq WHERE true
ON CONFLICT (id) DO NOTHING;
