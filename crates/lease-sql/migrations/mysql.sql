-- nononce / NoNoncense machine-ID lease table for MySQL 8 and MariaDB 10.6+.
-- Idempotent: safe to run again; adds any of the 512 rows that are missing.
-- expires_at holds UTC as datetime(6) (no session time-zone conversion, no 2038 limit); every
-- query computes "now" as UTC_TIMESTAMP(6), so the server's and session's time_zone do not matter.
CREATE TABLE IF NOT EXISTS no_noncense_leases (
    id smallint NOT NULL PRIMARY KEY,
    token binary(16) NULL,
    expires_at datetime(6) NOT NULL,
    lock_version integer NOT NULL DEFAULT 0
) ENGINE = InnoDB;
INSERT INTO no_noncense_leases (id, token, expires_at, lock_version)
WITH RECURSIVE seq (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < 511)
SELECT n, NULL, '1970-01-01 00:00:00', 0 FROM seq
ON DUPLICATE KEY UPDATE id = id;
