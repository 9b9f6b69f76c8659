-- nononce / NoNoncense machine-ID lease table for PostgreSQL.
-- Idempotent: safe to run again; adds any of the 512 rows that are missing, and the floor_ms
-- column to a table made before it existed.
-- expires_at holds UTC (timestamp without time zone); every query computes "now" as
-- CURRENT_TIMESTAMP AT TIME ZONE 'UTC', so the server's and session's TimeZone do not matter.
-- floor_ms is the timestamp floor (Unix ms): an upper bound of every nonce timestamp any holder
-- of the ID may have issued. It is not part of the lease: expiry and release leave it in place.
-- NoNoncense nodes ignore it.
--
-- nononce_coordinator records which server granted the leases of each lease table (system
-- identifier and timeline), so that a failover to a replica that missed lease writes is noticed
-- and acquisitions are held off. A table migrated here is recorded as granted by this server,
-- after it is seeded: the record also says that the table was seeded.
--
-- Rows that vanish from a seeded table while nodes run (TRUNCATE, DELETE) may belong to IDs still
-- in use. This file puts them back free: after such a loss, run SqlStrategy::migrate or
-- `nononce leases migrate` instead, which put them back blocked for the amnesia hold-off.
CREATE TABLE IF NOT EXISTS nononce_coordinator (
    lease_table varchar(130) PRIMARY KEY,
    server_identity text NOT NULL,
    since timestamp(6) NOT NULL,
    previous_identity text NULL
);
CREATE TABLE IF NOT EXISTS no_noncense_leases (
    id smallint PRIMARY KEY,
    token bytea NULL,
    expires_at timestamp(6) NOT NULL,
    lock_version integer NOT NULL DEFAULT 0,
    floor_ms bigint NOT NULL DEFAULT 0
);
ALTER TABLE no_noncense_leases ADD COLUMN IF NOT EXISTS floor_ms bigint NOT NULL DEFAULT 0;
INSERT INTO no_noncense_leases (id, token, expires_at, lock_version)
SELECT n, NULL, TIMESTAMP '1970-01-01 00:00:00', 0 FROM generate_series(0, 511) AS n
ON CONFLICT (id) DO NOTHING;
INSERT INTO nononce_coordinator (lease_table, server_identity, since)
SELECT 'no_noncense_leases', CASE WHEN pg_is_in_recovery() THEN NULL ELSE (SELECT system_identifier::text FROM pg_control_system()) || ':' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END, TIMESTAMP '1970-01-01 00:00:00'
ON CONFLICT (lease_table) DO NOTHING;
