-- nononce / NoNoncense machine-ID lease table for PostgreSQL.
-- Idempotent: safe to run again; adds any of the 512 rows that are missing.
-- expires_at holds UTC (timestamp without time zone); every query computes "now" as
-- CURRENT_TIMESTAMP AT TIME ZONE 'UTC', so the server's and session's TimeZone do not matter.
CREATE TABLE IF NOT EXISTS no_noncense_leases (
    id smallint PRIMARY KEY,
    token bytea NULL,
    expires_at timestamp(6) NOT NULL,
    lock_version integer NOT NULL DEFAULT 0
);
INSERT INTO no_noncense_leases (id, token, expires_at, lock_version)
SELECT n, NULL, TIMESTAMP '1970-01-01 00:00:00', 0 FROM generate_series(0, 511) AS n
ON CONFLICT (id) DO NOTHING;
