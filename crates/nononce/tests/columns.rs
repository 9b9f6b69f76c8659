//! The sqlx column types on real databases: every nonce type written and read back equal, and
//! `ORDER BY` the column giving sortable nonces from real factories in their own order.
//!
//! PostgreSQL and MariaDB are the servers `NONONCE_TEST_POSTGRES_URL` and
//! `NONONCE_TEST_MYSQL_URL` name (local defaults otherwise); a server that does not answer
//! fails the test. SQLite runs in memory. Each test works in a temporary table of its own
//! connection, so tests run side by side.
#![cfg(any(
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite"
))]

use std::fmt::Debug;

use nononce::nonce::{
    DEFAULT_EPOCH_MS, Factory, FactoryConfig, MachineId, ManualClock, NO_DEADLINE, Nonce64,
};

/// A time well inside the default epoch's range, in Unix ms.
const T0: u64 = 1_800_000_000_000;
/// Machine IDs of the two factories whose nonces share a table: one of each half of the
/// 9-bit range, so both the high and the low bits of the field take part in the order.
const MACHINES: [u16; 2] = [3, 300];

/// Sortable nonces of two factories on one clock, over `millis` milliseconds from `start_ms`
/// (Unix ms), several per factory each millisecond; in creation order, one factory's after
/// the other's each millisecond. `make` is the call (`sortable64` and so on).
fn sortable<T>(
    start_ms: u64,
    millis: u64,
    make: impl Fn(&Factory<&ManualClock>) -> Result<T, nononce::nonce::Error>,
) -> Vec<(u16, T)> {
    let clock = ManualClock::new(start_ms);
    let factories: Vec<_> = MACHINES
        .iter()
        .map(|&id| {
            let f = Factory::new(&clock, FactoryConfig::new()).expect("default configuration");
            f.enable(MachineId::new(id).expect("below 512"), NO_DEADLINE)
                .expect("a fresh factory enables");
            (id, f)
        })
        .collect();
    let mut made = Vec::new();
    for _ in 0..millis {
        for (id, f) in &factories {
            for _ in 0..4 {
                made.push((*id, make(f).expect("a sortable nonce")));
            }
        }
        clock.advance(1);
    }
    made
}

/// Checks what `ORDER BY` the nonce column returned, `by_column`, against the nonces
/// `made`: the nonces' own order, and each factory's nonces in the order it made them.
fn assert_own_order<T: Ord + Clone + Debug>(made: &[(u16, T)], by_column: &[T]) {
    let mut sorted: Vec<T> = made.iter().map(|(_, n)| n.clone()).collect();
    sorted.sort();
    assert_eq!(
        by_column, sorted,
        "ORDER BY the column is the nonces' order"
    );
    for id in MACHINES {
        let created: Vec<&T> = made
            .iter()
            .filter(|(m, _)| *m == id)
            .map(|(_, n)| n)
            .collect();
        let listed: Vec<&T> = by_column.iter().filter(|n| created.contains(n)).collect();
        assert_eq!(listed, created, "machine {id}'s nonces in creation order");
    }
}

/// The nonces in a scrambled order to insert them in, so that neither the insertion order
/// nor a row ID gives `ORDER BY` its answer: a fixed stride through the list.
fn scrambled<T: Clone>(values: &[T]) -> Vec<T> {
    let len = values.len();
    let stride = (1..len).rev().find(|s| gcd(*s, len) == 1).unwrap_or(1);
    (0..len).map(|i| values[i * stride % len].clone()).collect()
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// 64-bit sortable nonces on both sides of timestamp 2^41: the later ones have the top bit
/// set. In creation order.
fn around_top_bit() -> Vec<(u16, Nonce64)> {
    let boundary = DEFAULT_EPOCH_MS + (1 << 41);
    let mut made = sortable(boundary - 2, 2, |f| f.sortable64());
    made.extend(sortable(boundary, 2, |f| f.sortable64()));
    assert!(
        made[..made.len() / 2]
            .iter()
            .all(|(_, n)| n.to_u64() >> 63 == 0)
    );
    assert!(
        made[made.len() / 2..]
            .iter()
            .all(|(_, n)| n.to_u64() >> 63 == 1)
    );
    made
}

/// The test helpers for one database: `$connect` opens a connection, `$p1` and `$p2` are its
/// first two placeholders.
macro_rules! database {
    ($db:ty, $conn:ty, $connect:expr, $p1:literal, $p2:literal) => {
        use super::*;
        use sqlx::{AssertSqlSafe, Connection as _, Decode, Encode, Type};

        /// A temporary table `nonces` of columns `position` and `nonce` (of `column_type`)
        /// on a new connection, holding `values` inserted out of order.
        async fn table_of<T>(column_type: &str, values: &[T]) -> $conn
        where
            T: for<'q> Encode<'q, $db> + Type<$db> + Clone + Send + Sync,
        {
            let mut conn: $conn = $connect.await;
            let create = format!(
                "CREATE TEMPORARY TABLE nonces (position BIGINT NOT NULL, nonce {column_type} NOT NULL)"
            );
            sqlx::query(AssertSqlSafe(create)).execute(&mut conn).await.unwrap();
            let positioned: Vec<(i64, T)> = (0_i64..).zip(values.iter().cloned()).collect();
            for (position, nonce) in scrambled(&positioned) {
                sqlx::query(concat!("INSERT INTO nonces (position, nonce) VALUES (", $p1, ", ", $p2, ")"))
                    .bind(position)
                    .bind(nonce)
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            conn
        }

        /// The column read as `T`, ordered by `order`.
        async fn read<T>(conn: &mut $conn, order: &'static str) -> Vec<T>
        where
            T: for<'r> Decode<'r, $db> + Type<$db> + Send + Unpin,
        {
            let sql = format!("SELECT nonce FROM nonces ORDER BY {order}");
            sqlx::query_scalar(AssertSqlSafe(sql)).fetch_all(conn).await.unwrap()
        }

        /// Writes the sortable nonces `made` to a column of `column_type`, checks they read back
        /// equal, and returns them as `ORDER BY` the column lists them.
        async fn round_trip<T>(column_type: &str, made: &[(u16, T)]) -> Vec<T>
        where
            T: for<'q> Encode<'q, $db> + for<'r> Decode<'r, $db> + Type<$db>,
            T: Clone + Send + Sync + Unpin + PartialEq + Debug,
        {
            let values: Vec<T> = made.iter().map(|(_, n)| n.clone()).collect();
            let mut conn = table_of(column_type, &values).await;
            assert_eq!(read::<T>(&mut conn, "position").await, values, "read back equal");
            read(&mut conn, "nonce").await
        }
    };
}

/// The server at `env`'s URL (or `default`) did not answer.
#[allow(dead_code)]
fn unreachable_server(what: &str, env: &str, e: impl std::fmt::Display) -> ! {
    panic!(
        "{what} at {env} (or its default) did not answer ({e}): start it (`cargo xtask test` does) or point {env} at a running server"
    )
}

#[cfg(feature = "sqlx-postgres")]
mod postgres {
    use nononce::nonce::{Nonce96, Nonce128};
    use sqlx::PgConnection;
    use sqlx::postgres::Postgres;

    async fn connect() -> PgConnection {
        const ENV: &str = "NONONCE_TEST_POSTGRES_URL";
        let url = std::env::var(ENV)
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        PgConnection::connect(&url)
            .await
            .unwrap_or_else(|e| super::unreachable_server("PostgreSQL", ENV, e))
    }

    database!(Postgres, PgConnection, connect(), "$1", "$2");

    #[tokio::test]
    async fn nonce64_as_bigint() {
        let made = sortable(T0, 3, |f| f.sortable64());
        assert_own_order(&made, &round_trip("BIGINT", &made).await);
    }

    /// `BIGINT` is signed: nonces with the top bit set (timestamps from 2^41 ms after the
    /// epoch on) are stored as negative numbers and sort before all others. They still read
    /// back unchanged.
    #[tokio::test]
    async fn bigint_sorts_nonces_with_the_top_bit_first() {
        let made = around_top_bit();
        let listed = round_trip("BIGINT", &made).await;
        let mut expected: Vec<Nonce64> = made.iter().map(|(_, n)| *n).collect();
        expected.sort_by_key(|n| n.to_u64().cast_signed());
        assert_eq!(listed, expected);
        let newer = made.len() / 2;
        assert!(listed[..newer].iter().all(|n| n.to_u64() >> 63 == 1));
    }

    #[tokio::test]
    async fn nonce96_as_bytea() {
        let made = sortable(T0, 3, |f| f.sortable96());
        assert_own_order(&made, &round_trip("BYTEA", &made).await);
    }

    #[tokio::test]
    async fn nonce128_as_bytea() {
        let made = sortable(T0, 3, |f| f.sortable128());
        assert_own_order(&made, &round_trip("BYTEA", &made).await);
    }

    /// A `UUID` column: written as `uuid::Uuid` (byte for byte, and the version 8 form), read
    /// back as `Nonce128` and as `Uuid`, sorted in the nonces' order in both forms.
    #[cfg(feature = "uuid")]
    #[tokio::test]
    async fn nonce128_as_uuid() {
        use uuid::Uuid;

        let made = sortable(T0, 3, |f| f.sortable128());
        let as_uuids: Vec<(u16, Uuid)> = made.iter().map(|(m, n)| (*m, Uuid::from(*n))).collect();
        let listed = round_trip("UUID", &as_uuids).await;
        let as_nonces: Vec<Nonce128> = listed.iter().map(|u| Nonce128::from(*u)).collect();
        assert_own_order(&made, &as_nonces);
        let values: Vec<Uuid> = as_uuids.iter().map(|(_, u)| *u).collect();
        let mut conn = table_of("UUID", &values).await;
        let read_as_nonces: Vec<Nonce128> = read(&mut conn, "position").await;
        assert_eq!(
            read_as_nonces,
            made.iter().map(|(_, n)| *n).collect::<Vec<_>>()
        );

        let v8 = sortable(T0, 3, |f| f.sortable_uuid_v8());
        let listed = round_trip("UUID", &v8).await;
        assert!(listed.iter().all(|u| u.get_version_num() == 8));
        assert_own_order(&v8, &listed);
    }

    /// Simple queries return the text format: `BYTEA` as `\x…` hex, `UUID` hyphenated.
    #[tokio::test]
    async fn text_format_values_decode() {
        use sqlx::Row as _;

        let mut conn = connect().await;
        let rows = sqlx::raw_sql(
            "SELECT '\\x000102030405060708090a0b'::bytea, '\\x000102030405060708090a0b0c0d0e0f'::bytea, \
             '00010203-0405-0607-0809-0a0b0c0d0e0f'::uuid, (-2)::bigint",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let row = &rows[0];
        let bytes: [u8; 16] = core::array::from_fn(|i| u8::try_from(i).unwrap());
        assert_eq!(row.get::<Nonce96, _>(0).as_bytes()[..], bytes[..12]);
        assert_eq!(row.get::<Nonce128, _>(1), Nonce128::from_bytes(bytes));
        assert_eq!(row.get::<Nonce128, _>(2), Nonce128::from_bytes(bytes));
        assert_eq!(row.get::<Nonce64, _>(3), Nonce64::from_u64(u64::MAX - 1));
    }

    /// A value of another length is a decode error naming both lengths, not a panic.
    #[tokio::test]
    async fn a_value_of_another_length_is_a_decode_error() {
        let mut conn = connect().await;
        let short = sqlx::query_scalar::<_, Nonce128>("SELECT '\\x0102'::bytea")
            .fetch_one(&mut conn)
            .await
            .unwrap_err();
        let message = short.to_string();
        assert!(
            message.contains("a 128-bit nonce is stored as 16 bytes, but the column value has 2"),
            "{message}"
        );
        let wrong_type =
            sqlx::query_scalar::<_, Nonce96>("SELECT '00010203-0405-0607-0809-0a0b0c0d0e0f'::uuid")
                .fetch_one(&mut conn)
                .await
                .unwrap_err();
        assert!(
            matches!(wrong_type, sqlx::Error::ColumnDecode { .. }),
            "{wrong_type}"
        );
    }
}

#[cfg(feature = "sqlx-mysql")]
mod mysql {
    use nononce::nonce::Nonce96;
    use sqlx::MySqlConnection;
    use sqlx::mysql::MySql;

    async fn connect() -> MySqlConnection {
        const ENV: &str = "NONONCE_TEST_MYSQL_URL";
        let url =
            std::env::var(ENV).unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
        MySqlConnection::connect(&url)
            .await
            .unwrap_or_else(|e| super::unreachable_server("MariaDB", ENV, e))
    }

    database!(MySql, MySqlConnection, connect(), "?", "?");

    /// `BIGINT UNSIGNED` holds the value as it is: the nonces past timestamp 2^41, top bit
    /// set, sort after the others as they should.
    #[tokio::test]
    async fn nonce64_as_bigint_unsigned() {
        let made = sortable(T0, 3, |f| f.sortable64());
        assert_own_order(&made, &round_trip("BIGINT UNSIGNED", &made).await);
        let made = around_top_bit();
        assert_own_order(&made, &round_trip("BIGINT UNSIGNED", &made).await);
    }

    #[tokio::test]
    async fn nonce96_as_binary12() {
        let made = sortable(T0, 3, |f| f.sortable96());
        assert_own_order(&made, &round_trip("BINARY(12)", &made).await);
    }

    #[tokio::test]
    async fn nonce128_as_binary16() {
        let made = sortable(T0, 3, |f| f.sortable128());
        assert_own_order(&made, &round_trip("BINARY(16)", &made).await);
    }

    /// A value of another length is a decode error naming both lengths, not a panic.
    #[tokio::test]
    async fn a_value_of_another_length_is_a_decode_error() {
        let mut conn = connect().await;
        let err = sqlx::query_scalar::<_, Nonce96>("SELECT CAST(X'0102' AS BINARY(2))")
            .fetch_one(&mut conn)
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("a 96-bit nonce is stored as 12 bytes, but the column value has 2"),
            "{message}"
        );
    }
}

#[cfg(feature = "sqlx-sqlite")]
mod sqlite {
    use nononce::nonce::Nonce128;
    use sqlx::SqliteConnection;
    use sqlx::sqlite::Sqlite;

    async fn connect() -> SqliteConnection {
        SqliteConnection::connect("sqlite::memory:")
            .await
            .expect("an in-memory SQLite database opens")
    }

    database!(Sqlite, SqliteConnection, connect(), "?1", "?2");

    #[tokio::test]
    async fn nonce64_as_integer() {
        let made = sortable(T0, 3, |f| f.sortable64());
        assert_own_order(&made, &round_trip("INTEGER", &made).await);
    }

    /// `INTEGER` is signed, as PostgreSQL's `BIGINT`: nonces with the top bit set sort first.
    #[tokio::test]
    async fn integer_sorts_nonces_with_the_top_bit_first() {
        let made = around_top_bit();
        let listed = round_trip("INTEGER", &made).await;
        let mut expected: Vec<Nonce64> = made.iter().map(|(_, n)| *n).collect();
        expected.sort_by_key(|n| n.to_u64().cast_signed());
        assert_eq!(listed, expected);
        let newer = made.len() / 2;
        assert!(listed[..newer].iter().all(|n| n.to_u64() >> 63 == 1));
    }

    #[tokio::test]
    async fn nonce96_as_blob() {
        let made = sortable(T0, 3, |f| f.sortable96());
        assert_own_order(&made, &round_trip("BLOB", &made).await);
    }

    #[tokio::test]
    async fn nonce128_as_blob() {
        let made = sortable(T0, 3, |f| f.sortable128());
        assert_own_order(&made, &round_trip("BLOB", &made).await);
    }

    /// A value of another length is a decode error naming both lengths, not a panic.
    #[tokio::test]
    async fn a_value_of_another_length_is_a_decode_error() {
        let mut conn = connect().await;
        let err = sqlx::query_scalar::<_, Nonce128>("SELECT X'0102'")
            .fetch_one(&mut conn)
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("a 128-bit nonce is stored as 16 bytes, but the column value has 2"),
            "{message}"
        );
    }
}
