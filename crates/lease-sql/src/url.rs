//! lease-sql's own query options in a database URL, split off before the driver parses it.

use std::time::Duration;

use crate::{AmnesiaGuard, Dialect, SqlLeaseError};

/// lease-sql's options from a URL's query.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct UrlOptions {
    pub table: Option<String>,
    pub max_lease_duration: Option<Duration>,
    pub amnesia_guard: Option<AmnesiaGuard>,
    pub max_clock_offset: Option<Duration>,
}

/// The query options sqlx 0.9 reads for each dialect: those an unknown option's error names,
/// and their other spellings.
fn driver_options(dialect: Dialect) -> (&'static str, &'static [&'static str]) {
    match dialect {
        Dialect::Postgres => (
            "sslmode, sslrootcert, sslcert, sslkey, statement-cache-capacity, host, hostaddr, port, dbname, user, password, application_name, options",
            &["ssl-mode", "ssl-root-cert", "ssl-ca", "ssl-cert", "ssl-key"],
        ),
        Dialect::MySql => (
            "ssl-mode, ssl-ca, ssl-cert, ssl-key, charset, collation, statement-cache-capacity, socket, timezone",
            &["sslmode", "sslca", "sslcert", "sslkey", "time-zone"],
        ),
        Dialect::Sqlite => ("mode, cache, immutable, vfs", &[]),
    }
}

/// The value of option `key` as whole seconds.
fn seconds(key: &str, value: &str) -> Result<Duration, SqlLeaseError> {
    value.parse().map(Duration::from_secs).map_err(|_| {
        SqlLeaseError::InvalidOption(format!(
            "{key}=`{value}` in the database url is not a whole number of seconds"
        ))
    })
}

/// Splits lease-sql's options (`table`, `max_lease_s`, `amnesia_guard`, `max_clock_offset_s`)
/// off `url`, returning
/// the URL for the driver and the options.
///
/// # Errors
/// [`SqlLeaseError::UnknownUrlOption`] for an option neither lease-sql nor the driver reads,
/// [`SqlLeaseError::InvalidOption`] for a bad value.
pub(crate) fn split(url: &str, dialect: Dialect) -> Result<(String, UrlOptions), SqlLeaseError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), UrlOptions::default()));
    };
    let mut options = UrlOptions::default();
    let mut kept = Vec::new();
    let (listed, aliases) = driver_options(dialect);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "table" => options.table = Some(value.to_owned()),
            "max_lease_s" => options.max_lease_duration = Some(seconds(key, value)?),
            "max_clock_offset_s" => options.max_clock_offset = Some(seconds(key, value)?),
            "amnesia_guard" => {
                options.amnesia_guard = Some(match value {
                    "off" => AmnesiaGuard::Off,
                    "hold_off" => AmnesiaGuard::HoldOff,
                    _ => {
                        return Err(SqlLeaseError::InvalidOption(format!(
                            "amnesia_guard=`{value}` in the database url: use off or hold_off"
                        )));
                    }
                });
            }
            key if listed.split(", ").any(|option| option == key)
                || aliases.contains(&key)
                || (dialect == Dialect::Postgres && key.starts_with("options[")) =>
            {
                kept.push(pair);
            }
            _ => {
                return Err(SqlLeaseError::UnknownUrlOption {
                    option: key.to_owned(),
                    driver: listed,
                });
            }
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, options))
}

/// `url` as it may be shown in a message or a log line: the password replaced by `***`
/// (`postgres://app:***@db/app`), and so is the value of a `password=` query option.
///
/// Conservative with URLs that should have percent-encoded their password: everything between
/// the first `:` after the scheme and the last `@` is hidden, so a raw `/`, `?` or `@` in a
/// password does not leak the rest of it (at worst more than the password is hidden). A URL
/// without a password is returned as it is.
///
/// ```
/// assert_eq!(
///     lease_sql::redacted_url("postgres://app:secret@db.internal:5432/app?sslmode=require"),
///     "postgres://app:***@db.internal:5432/app?sslmode=require"
/// );
/// assert_eq!(
///     lease_sql::redacted_url("postgres://app@db/app?password=secret"),
///     "postgres://app@db/app?password=***"
/// );
/// assert_eq!(lease_sql::redacted_url("sqlite://leases.db"), "sqlite://leases.db");
/// ```
#[must_use]
pub fn redacted_url(url: &str) -> String {
    let split_at = url
        .find("://")
        .map(|i| i + 3)
        .or_else(|| url.find(':').map(|i| i + 1))
        .unwrap_or(0);
    let (scheme, rest) = url.split_at(split_at);
    let rest = match (rest.find(':'), rest.rfind('@')) {
        (Some(colon), Some(at)) if colon < at => {
            format!("{}:***{}", &rest[..colon], &rest[at..])
        }
        _ => rest.to_owned(),
    };
    let rest = match rest.split_once('?') {
        Some((before, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.to_ascii_lowercase().contains("password") => {
                        format!("{key}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{before}?{}", pairs.join("&"))
        }
        None => rest,
    };
    format!("{scheme}{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        for (url, shown) in [
            (
                "postgres://app:pw@db:5432/app",
                "postgres://app:***@db:5432/app",
            ),
            ("postgres://app:@db/app", "postgres://app:***@db/app"),
            ("mysql://root:p%40ss@db/app", "mysql://root:***@db/app"),
            ("mysql://root:p@ss@db/app", "mysql://root:***@db/app"),
            ("redis://:pw@cache:6379/0", "redis://:***@cache:6379/0"),
            ("postgres://app:p/w?x@db/app", "postgres://app:***@db/app"),
            (
                "postgres://db/app?user=app&Password=pw&sslmode=require",
                "postgres://db/app?user=app&Password=***&sslmode=require",
            ),
            ("mysql:root:pw@db", "mysql:root:***@db"),
            // Nothing to hide.
            ("postgres://app@db:5432/app", "postgres://app@db:5432/app"),
            (
                "postgres://db:5432/app?sslmode=require",
                "postgres://db:5432/app?sslmode=require",
            ),
            ("sqlite://leases.db?mode=rwc", "sqlite://leases.db?mode=rwc"),
            ("sqlite::memory:", "sqlite::memory:"),
            ("", ""),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
        }
    }

    #[test]
    fn own_options_are_split_off_and_driver_options_kept() {
        let (url, options) = split(
            "postgres://u@h/db?sslmode=require&amnesia_guard=off&max_lease_s=300&table=app.leases&application_name=x&max_clock_offset_s=90",
            Dialect::Postgres,
        )
        .unwrap();
        assert_eq!(url, "postgres://u@h/db?sslmode=require&application_name=x");
        assert_eq!(
            options,
            UrlOptions {
                table: Some("app.leases".into()),
                max_lease_duration: Some(Duration::from_secs(300)),
                amnesia_guard: Some(AmnesiaGuard::Off),
                max_clock_offset: Some(Duration::from_secs(90)),
            }
        );
        let (url, options) = split("mysql://root@h/db", Dialect::MySql).unwrap();
        assert_eq!(url, "mysql://root@h/db");
        assert_eq!(options, UrlOptions::default());
        let (url, options) =
            split("mysql://root@h/db?amnesia_guard=hold_off", Dialect::MySql).unwrap();
        assert_eq!(url, "mysql://root@h/db");
        assert_eq!(options.amnesia_guard, Some(AmnesiaGuard::HoldOff));
        let (url, _) = split("sqlite://x.db?mode=rwc&max_lease_s=5", Dialect::Sqlite).unwrap();
        assert_eq!(url, "sqlite://x.db?mode=rwc");
    }

    #[test]
    fn unknown_options_and_bad_values_are_named() {
        let e = split("postgres://h/db?amnesia=off", Dialect::Postgres).unwrap_err();
        assert!(
            matches!(&e, SqlLeaseError::UnknownUrlOption { option, .. } if option == "amnesia")
        );
        let text = e.to_string();
        assert!(text.contains("`amnesia`"), "{text}");
        assert!(text.contains("amnesia_guard"), "{text}");
        assert!(text.contains("sslmode"), "{text}");
        // A driver option of another dialect is unknown here.
        let e = split("mysql://h/db?application_name=x", Dialect::MySql).unwrap_err();
        assert!(e.to_string().contains("`application_name`"), "{e}");
        let e = split("mysql://h/db?max_lease_s=1h", Dialect::MySql).unwrap_err();
        assert!(e.to_string().contains("max_lease_s=`1h`"), "{e}");
        let e = split("mysql://h/db?amnesia_guard=no", Dialect::MySql).unwrap_err();
        assert!(e.to_string().contains("use off or hold_off"), "{e}");
    }
}
