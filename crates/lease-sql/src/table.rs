//! Lease table names: validated, then quoted for each dialect.

use crate::{Dialect, SqlError};

/// The default table name, shared with NoNoncense.
pub const DEFAULT_TABLE: &str = "no_noncense_leases";

/// A validated table name: `table` or `schema.table`, each part a lowercase identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableName(String);

impl TableName {
    pub(crate) fn new(name: &str) -> Result<Self, SqlError> {
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
            Err(SqlError::InvalidTableName(name.to_owned()))
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
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
                matches!(TableName::new(bad), Err(SqlError::InvalidTableName(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn quotes_per_dialect() {
        let t = TableName::new("app.leases").unwrap();
        assert_eq!(t.quoted(Dialect::Postgres), "\"app\".\"leases\"");
        assert_eq!(t.quoted(Dialect::MySql), "`app`.`leases`");
        assert_eq!(t.quoted(Dialect::Sqlite), "\"app\".\"leases\"");
    }
}
