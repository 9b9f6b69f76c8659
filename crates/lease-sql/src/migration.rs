//! The shipped migrations, per dialect.

use crate::Dialect;
use crate::table::{COORDINATOR_TABLE, DEFAULT_TABLE, TableName};

const POSTGRES: &str = include_str!("../migrations/postgres.sql");
const MYSQL: &str = include_str!("../migrations/mysql.sql");
const SQLITE: &str = include_str!("../migrations/sqlite.sql");

/// The migration that creates and seeds table `no_noncense_leases` for `dialect`, as shipped in
/// the crate's `migrations/` directory: run it with your migration tool, or call
/// [`SqlStrategy::migrate`](crate::SqlStrategy::migrate).
///
/// It is idempotent (`CREATE TABLE IF NOT EXISTS`, the `floor_ms` column added where it is
/// missing, and an insert of the 512 rows that skips those present). On PostgreSQL and
/// MySQL/MariaDB it also creates table `nononce_coordinator` and records the current server as
/// the one that granted the table's leases (see "Coordinator amnesia" in the crate docs). SQLite
/// cannot add a column conditionally in plain SQL: the file says what to run once on a table
/// made before `floor_ms` existed, and [`SqlStrategy::migrate`](crate::SqlStrategy::migrate)
/// does it by itself. For another table name, replace `no_noncense_leases` (in the string
/// literals too).
///
/// The file puts rows missing from the table back free. After rows vanished from a table in use
/// (`TRUNCATE`, `DELETE`), run [`SqlStrategy::migrate`](crate::SqlStrategy::migrate) instead,
/// which puts them back blocked for the amnesia hold-off (see "Deleted rows" in the crate docs).
#[must_use]
pub const fn migration_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => POSTGRES,
        Dialect::MySql => MYSQL,
        Dialect::Sqlite => SQLITE,
    }
}

/// The migration's statements for `table`: comments dropped, split at `;`, the names replaced
/// (identifiers quoted, string literals as literals). The statement that starts (SQLite: whose
/// insert starts) `INSERT INTO <table> (id, token, expires_at, lock_version)` seeds the rows; on
/// PostgreSQL and MySQL/MariaDB the coordinator record comes after it.
pub(crate) fn statements(dialect: Dialect, table: &TableName) -> Vec<String> {
    let (schema, bare) = table.parts();
    // The information_schema lookup names schema and table apart.
    let columns_of = |schema: &str| format!("table_schema = {schema} AND table_name = '{bare}'");
    let replacements = [
        (
            format!("table_schema = DATABASE() AND table_name = '{DEFAULT_TABLE}'"),
            columns_of(&schema.map_or_else(|| "DATABASE()".to_owned(), |s| format!("'{s}'"))),
        ),
        (format!("'{DEFAULT_TABLE}'"), table.literal()),
        (
            COORDINATOR_TABLE.to_owned(),
            table.coordinator().quoted(dialect),
        ),
        (DEFAULT_TABLE.to_owned(), table.quoted(dialect)),
    ];
    migration_sql(dialect)
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| replace_all(s, &replacements))
        .collect()
}

/// Replaces every pattern in one pass, earlier patterns first at each position, so a
/// replacement is never replaced again.
fn replace_all(text: &str, replacements: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for (from, to) in replacements {
            if let Some(after) = rest.strip_prefix(from.as_str()) {
                out.push_str(to);
                rest = after;
                continue 'outer;
            }
        }
        let mut chars = rest.chars();
        out.extend(chars.next());
        rest = chars.as_str();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_creates_then_seeds_with_the_names_replaced() {
        let table = TableName::new("app.my_leases").unwrap();
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            let statements = statements(dialect, &table);
            let create = format!("CREATE TABLE IF NOT EXISTS {}", table.quoted(dialect));
            assert!(
                statements.iter().any(|s| s.starts_with(&create)),
                "{dialect}: {statements:#?}"
            );
            let seed_prefix = format!(
                "INSERT INTO {} (id, token, expires_at, lock_version)",
                table.quoted(dialect)
            );
            let seeds: Vec<_> = statements
                .iter()
                .filter(|s| s.contains(&seed_prefix))
                .collect();
            assert_eq!(seeds.len(), 1, "{dialect}: {statements:#?}");
            let seed = seeds[0];
            assert!(seed.contains("511"), "{dialect}");
            for s in &statements {
                assert!(!s.contains(DEFAULT_TABLE), "{s}");
            }
            let floor = statements.iter().find(|s| s.starts_with(&create)).unwrap();
            assert!(floor.contains("floor_ms"), "{dialect}: {floor}");
        }
    }

    #[test]
    fn servers_record_who_granted_the_leases() {
        let table = TableName::new("app.my_leases").unwrap();
        for dialect in [Dialect::Postgres, Dialect::MySql] {
            let statements = statements(dialect, &table);
            let coordinator = table.coordinator().quoted(dialect);
            assert!(
                statements[0].starts_with(&format!("CREATE TABLE IF NOT EXISTS {coordinator}")),
                "{dialect}: the coordinator table comes first"
            );
            let record = statements
                .iter()
                .position(|s| s.starts_with(&format!("INSERT INTO {coordinator}")))
                .unwrap();
            assert!(
                statements[record].contains("'app.my_leases'"),
                "{}",
                statements[record]
            );
            assert_eq!(
                record,
                statements.len() - 1,
                "{dialect}: the record, which says the table was seeded, comes last"
            );
        }
        let pg = statements(Dialect::Postgres, &table).join(";\n");
        // The migration records the server as the guard identifies it.
        #[cfg(feature = "postgres")]
        assert!(pg.contains(crate::amnesia::POSTGRES_IDENTITY), "{pg}");
        assert!(pg.contains("ADD COLUMN IF NOT EXISTS floor_ms"), "{pg}");
        let my = statements(Dialect::MySql, &table).join(";\n");
        #[cfg(feature = "mysql")]
        assert!(my.contains(crate::amnesia::MYSQL_IDENTITY), "{my}");
        assert!(
            my.contains("table_schema = 'app' AND table_name = 'my_leases'"),
            "{my}"
        );
        assert!(my.contains("'ALTER TABLE `app`.`my_leases` ADD COLUMN floor_ms"));
        let plain = statements(Dialect::MySql, &TableName::new("leases").unwrap()).join(";\n");
        assert!(plain.contains("table_schema = DATABASE() AND table_name = 'leases'"));
        assert!(plain.contains("VALUES ('leases', @nononce_server"));
    }

    #[test]
    fn sqlite_has_no_coordinator_table() {
        let statements = statements(Dialect::Sqlite, &TableName::new("leases").unwrap());
        assert_eq!(statements.len(), 2);
        assert!(!statements.join(" ").contains(COORDINATOR_TABLE));
    }

    #[test]
    fn replacements_are_not_replaced_again() {
        let r = [
            ("ab".to_owned(), "b".to_owned()),
            ("b".to_owned(), "c".to_owned()),
        ];
        assert_eq!(replace_all("abb", &r), "bc");
    }
}
