//! The shipped migrations, per dialect.

use crate::Dialect;
use crate::table::{DEFAULT_TABLE, TableName};

const POSTGRES: &str = include_str!("../migrations/postgres.sql");
const MYSQL: &str = include_str!("../migrations/mysql.sql");
const SQLITE: &str = include_str!("../migrations/sqlite.sql");

/// The migration that creates and seeds table `no_noncense_leases` for `dialect`, as shipped in
/// the crate's `migrations/` directory: run it with your migration tool, or call
/// [`SqlStrategy::migrate`](crate::SqlStrategy::migrate).
///
/// It is idempotent (`CREATE TABLE IF NOT EXISTS`, and an insert of the 512 rows that skips
/// those present). For another table name, replace `no_noncense_leases`.
#[must_use]
pub const fn migration_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => POSTGRES,
        Dialect::MySql => MYSQL,
        Dialect::Sqlite => SQLITE,
    }
}

/// The migration's statements for `table`: comments dropped, split at `;`, the table name
/// replaced. The first statement creates the table.
pub(crate) fn statements(dialect: Dialect, table: &TableName) -> Vec<String> {
    let quoted = table.quoted(dialect);
    migration_sql(dialect)
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.replace(DEFAULT_TABLE, &quoted))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_creates_then_seeds_with_the_table_name_replaced() {
        let table = TableName::new("app.my_leases").unwrap();
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            let statements = statements(dialect, &table);
            assert_eq!(statements.len(), 2, "{dialect}");
            assert!(statements[0].starts_with("CREATE TABLE IF NOT EXISTS"));
            assert!(statements[1].contains("INSERT INTO"));
            assert!(statements[1].contains("511"));
            for s in &statements {
                assert!(!s.contains(DEFAULT_TABLE), "{s}");
                assert!(s.contains(&table.quoted(dialect)), "{s}");
            }
        }
    }
}
