//! Lease table names: validated, then quoted for each dialect.

use crate::{Dialect, SqlLeaseError};

/// The default table name, shared with NoNoncense.
pub const DEFAULT_TABLE: &str = "no_noncense_leases";

/// The coordinator table: which database server granted the leases of each lease table, and
/// since when (PostgreSQL and MySQL/MariaDB; see "Coordinator amnesia" in the crate docs). It
/// lives in the lease table's schema.
pub const COORDINATOR_TABLE: &str = "nononce_coordinator";

/// A validated table name: `table` or `schema.table`, each part a lowercase identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableName(String);

impl TableName {
    pub(crate) fn new(name: &str) -> Result<Self, SqlLeaseError> {
        let valid_part = |part: &str| {
            let mut chars = part.chars();
            matches!(chars.next(), Some('a'..='z' | '_'))
                && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
                && part.len() <= 63
        };
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() <= 2 && parts.iter().all(|p| valid_part(p)) {
            Ok(Self(name.to_owned()))
        } else {
            Err(SqlLeaseError::InvalidTableName(name.to_owned()))
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the coordinator table's own name (in any schema).
    pub(crate) fn is_coordinator(&self) -> bool {
        self.0.rsplit('.').next() == Some(COORDINATOR_TABLE)
    }

    /// The coordinator table in this table's schema.
    pub(crate) fn coordinator(&self) -> Self {
        match self.0.split_once('.') {
            Some((schema, _)) => Self(format!("{schema}.{COORDINATOR_TABLE}")),
            None => Self(COORDINATOR_TABLE.to_owned()),
        }
    }

    /// The name as an SQL string literal (safe: validated above), the coordinator table's key.
    pub(crate) fn literal(&self) -> String {
        format!("'{}'", self.0)
    }

    /// The schema (if the name has one) and the bare table name.
    pub(crate) fn parts(&self) -> (Option<&str>, &str) {
        match self.0.split_once('.') {
            Some((schema, table)) => (Some(schema), table),
            None => (None, &self.0),
        }
    }

    /// The name quoted for `dialect` (safe to splice into SQL: validated above).
    pub(crate) fn quoted(&self, dialect: Dialect) -> String {
        let quote = match dialect {
            Dialect::MySql => '`',
            Dialect::Postgres | Dialect::Sqlite => '"',
        };
        self.0
            .split('.')
            .map(|part| format!("{quote}{part}{quote}"))
            .collect::<Vec<_>>()
            .join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_identifiers_and_schema_names() {
        for ok in [
            "no_noncense_leases",
            "_x",
            "a1",
            "app.leases",
            &"a".repeat(63),
        ] {
            assert!(TableName::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_anything_that_could_break_out_of_a_quoted_name() {
        for bad in [
            "",
            "1abc",
            "Leases",
            "a-b",
            "a b",
            "a;drop table x",
            "a\"b",
            "a`b",
            "a.b.c",
            ".a",
            "a.",
            &"a".repeat(64),
        ] {
            assert!(
                matches!(TableName::new(bad), Err(SqlLeaseError::InvalidTableName(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_coordinator_table_lives_in_the_lease_tables_schema() {
        let t = TableName::new("app.leases").unwrap();
        assert_eq!(t.coordinator().as_str(), "app.nononce_coordinator");
        assert_eq!(t.literal(), "'app.leases'");
        assert_eq!(t.parts(), (Some("app"), "leases"));
        let t = TableName::new("leases").unwrap();
        assert_eq!(t.coordinator().as_str(), COORDINATOR_TABLE);
        assert_eq!(t.parts(), (None, "leases"));
        assert!(!t.is_coordinator());
        assert!(
            TableName::new("x.nononce_coordinator")
                .unwrap()
                .is_coordinator()
        );
    }

    #[test]
    fn quotes_per_dialect() {
        let t = TableName::new("app.leases").unwrap();
        assert_eq!(t.quoted(Dialect::Postgres), "\"app\".\"leases\"");
        assert_eq!(t.quoted(Dialect::MySql), "`app`.`leases`");
        assert_eq!(t.quoted(Dialect::Sqlite), "\"app\".\"leases\"");
    }
}
