//! Database URLs in errors: a URL is never shown with its password (`user:***@host`), in the
//! message, the `Debug` form or the source chain. Nothing here connects (the lazy pools only
//! need a Tokio runtime).
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use lease_core::{ErrorKind, LeaseError};
use lease_manager::Failure;
use lease_sql::{SqlLeaseError, SqlStrategy};

const SECRET: &str = "s3cr3t-pw";

/// Everything a log line could show of `error`.
fn shown(error: &SqlLeaseError) -> String {
    format!("{error} | {error:?} | {}", Failure::from_error(error))
}

fn refused(url: &str) -> SqlLeaseError {
    SqlStrategy::connect_lazy(url).expect_err(url)
}

#[tokio::test]
async fn an_unsupported_url_is_shown_without_its_password() {
    for (url, expected) in [
        (
            format!("postgress://app:{SECRET}@db.internal:5432/app"),
            "postgress://app:***@db.internal:5432/app".to_owned(),
        ),
        (
            format!("mssql://sa:{SECRET}@db/app?encrypt=true"),
            "mssql://sa:***@db/app?encrypt=true".to_owned(),
        ),
        // A password given as a query option.
        (
            format!("postgress://app@db/app?sslmode=require&password={SECRET}"),
            "postgress://app@db/app?sslmode=require&password=***".to_owned(),
        ),
        // Characters a URL should have percent-encoded do not leak either.
        (
            format!("redis://:{SECRET}?x@cache:6379"),
            "redis://:***@cache:6379".to_owned(),
        ),
        (
            format!("pg://app:{SECRET}/x@db/app"),
            "pg://app:***@db/app".to_owned(),
        ),
    ] {
        let error = refused(&url);
        assert!(
            matches!(error, SqlLeaseError::UnsupportedUrl(_)),
            "{error:?}"
        );
        assert_eq!(error.kind(), ErrorKind::Misconfigured);
        let text = shown(&error);
        assert!(!text.contains(SECRET), "{text}");
        assert!(text.contains(&expected), "{expected}: {text}");
    }
    // Without a password the URL is shown as given.
    let text = shown(&refused("postgress://app@db/app"));
    assert!(text.contains("`postgress://app@db/app`"), "{text}");
}

/// A URL the driver cannot parse, or with an option of ours it refuses, is refused without
/// its password.
#[tokio::test]
async fn refused_urls_do_not_repeat_the_password() {
    for url in [
        format!("postgres://app:{SECRET}@db:notaport/app"),
        format!("mysql://root:{SECRET}@db:99999/app"),
        format!("mariadb://root:{SECRET}@db:x/app"),
        format!("postgres://app:{SECRET}@db/app?sslmode=nonsense"),
        format!("sqlite://leases.db?mode=nonsense&x={SECRET}"),
        format!("postgres://app:{SECRET}@db/app?tabel=x"),
        format!("mysql://root:{SECRET}@db/app?max_lease_s=1h"),
        format!("mysql://root:{SECRET}@db/app?amnesia_guard=maybe"),
        format!("postgres://app:{SECRET}@db/app?table=no;drop"),
        // A password option misspelt: named, its value not shown.
        format!("postgres://app@db/app?pasword={SECRET}"),
    ] {
        let error = refused(&url);
        assert_eq!(error.kind(), ErrorKind::Misconfigured, "{error:?}");
        let text = shown(&error);
        assert!(!text.contains(SECRET), "{url}: {text}");
    }
}
