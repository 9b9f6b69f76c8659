-- nononce / NoNoncense machine-ID lease table for MySQL 8 and MariaDB 10.6+.
-- Idempotent: safe to run again; adds any of the 512 rows that are missing, and the floor_ms
-- column to a table made before it existed.
-- expires_at holds UTC as datetime(6) (no session time-zone conversion, no 2038 limit); every
-- query computes "now" as UTC_TIMESTAMP(6), so the server's and session's time_zone do not matter.
-- floor_ms is the timestamp floor (Unix ms): an upper bound of every nonce timestamp any holder
-- of the ID may have issued. It is not part of the lease: expiry and release leave it in place.
-- NoNoncense nodes ignore it.
--
-- nononce_coordinator records which server granted the leases of each lease table (server_id,
-- hostname and port), so that a failover to a replica that missed lease writes is noticed and
-- acquisitions are held off. A table migrated here is recorded as granted by this server, after
-- it is seeded: the record also says that the table was seeded (a first run cut off between the
-- CREATE TABLE, which commits by itself, and the seeding leaves no record). The identity goes
-- through a user variable, which statement-based replication copies as a value.
--
-- Rows that vanish from a seeded table while nodes run (TRUNCATE, DELETE) may belong to IDs still
-- in use. This file puts them back free: after such a loss, run SqlStrategy::migrate or
-- `nononce leases migrate` instead, which put them back blocked for the amnesia hold-off.
CREATE TABLE IF NOT EXISTS nononce_coordinator (
    lease_table varchar(130) NOT NULL PRIMARY KEY,
    server_identity varchar(255) NOT NULL,
    since datetime(6) NOT NULL,
    previous_identity varchar(255) NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS no_noncense_leases (
    id smallint NOT NULL PRIMARY KEY,
    token binary(16) NULL,
    expires_at datetime(6) NOT NULL,
    lock_version integer NOT NULL DEFAULT 0,
    floor_ms bigint NOT NULL DEFAULT 0
) ENGINE = InnoDB;
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: add floor_ms only where information_schema lacks it.
SET @nononce_ddl = (SELECT IF(COUNT(*) = 0, 'ALTER TABLE no_noncense_leases ADD COLUMN floor_ms bigint NOT NULL DEFAULT 0', 'DO 0') FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = 'no_noncense_leases' AND column_name = 'floor_ms');
PREPARE nononce_add_floor FROM @nononce_ddl;
EXECUTE nononce_add_floor;
DEALLOCATE PREPARE nononce_add_floor;
INSERT INTO no_noncense_leases (id, token, expires_at, lock_version)
WITH RECURSIVE seq (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < 511)
SELECT n, NULL, '1970-01-01 00:00:00', 0 FROM seq
ON DUPLICATE KEY UPDATE id = id;
SET @nononce_server = CONCAT(@@server_id, '/', @@hostname, ':', @@port);
INSERT INTO nononce_coordinator (lease_table, server_identity, since)
VALUES ('no_noncense_leases', @nononce_server, '1970-01-01 00:00:00')
ON DUPLICATE KEY UPDATE lease_table = lease_table;
