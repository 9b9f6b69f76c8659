//! `nononce bounds`: the nonces it prints decode to the range's ends, `BETWEEN` them selects
//! exactly the sortable nonces of the range in PostgreSQL and SQLite, and bad input is one
//! line naming the option, status 2.

use crate::common;

use common::*;
use nononce::nonce::{Base, Factory, FactoryConfig, MachineId, ManualClock, NO_DEADLINE};
use nononce::sql::sqlx;
use nononce::{Nonce64, Nonce96, Nonce128};
use sqlx::AssertSqlSafe;

const FROM: &str = "2026-12-01T10:00:00Z";
const TO: &str = "2026-12-01T11:00:00Z";
/// FROM and TO in Unix ms.
const FROM_MS: u64 = 1_796_119_200_000;
const TO_MS: u64 = FROM_MS + 3_600_000;

fn bounds(args: &[&str]) -> (String, String) {
    let out = run_ok(&[&["bounds", "--from", FROM, "--to", TO], args].concat());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{args:?}: {out}");
    (lines[0].to_owned(), lines[1].to_owned())
}

/// `decode --format json` of a nonce, given its size.
fn decoded(nonce: &str, bits: &str, epoch_ms: &str) -> serde_json::Value {
    let out = run_ok(&[
        "decode",
        nonce,
        "--input",
        "hex",
        "--bits",
        bits,
        "--epoch-ms",
        epoch_ms,
        "--format",
        "json",
    ]);
    serde_json::from_str(&out).unwrap()
}

#[test]
fn an_hour_of_64_bit_nonces_is_two_nonces() {
    let out = ok(&format!("bounds --from {FROM} --to {TO} --bits 64"));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines
            .iter()
            .all(|l| l.len() == 16 && l.bytes().all(|b| b.is_ascii_hexdigit())),
        "{out}"
    );
    assert!(lines[0] < lines[1], "{out}");
}

/// The first nonce has the start's time, machine ID 0 and count 0; the last the end's time and
/// the largest machine ID and count: in every size, format and epoch.
#[test]
fn the_nonces_are_the_ends_of_the_range() {
    let max_count = [("64", 8191u64), ("96", (1 << 45) - 1), ("128", u64::MAX)];
    for (bits, max_count) in max_count {
        for epoch in ["1735689600000", "1700000000000"] {
            let hex = bounds(&["--bits", bits, "--epoch-ms", epoch]);
            for format in ["int", "base64url"] {
                let other = bounds(&["--bits", bits, "--epoch-ms", epoch, "--format", format]);
                for (h, o) in [(&hex.0, &other.0), (&hex.1, &other.1)] {
                    let input = if format == "int" { "int" } else { "base64url" };
                    let again = run_ok(&["decode", o, "--input", input, "--bits", bits]);
                    assert_eq!(
                        again,
                        run_ok(&["decode", h, "--input", "hex", "--bits", bits]),
                        "{bits} {format}"
                    );
                }
            }
            let (lo, hi) = (decoded(&hex.0, bits, epoch), decoded(&hex.1, bits, epoch));
            assert_eq!(lo["time"], "2026-12-01T10:00:00.000Z", "{bits}");
            assert_eq!(hi["time"], "2026-12-01T11:00:00.000Z", "{bits}");
            assert_eq!((&lo["machine_id"], &lo["count"]), (&0.into(), &0.into()));
            assert_eq!(hi["machine_id"], 511);
            assert_eq!(hi["count"].as_u64(), Some(max_count), "{bits}");
        }
    }
}

/// Offsets and fractions: the same instant however written; fractions rounded inward.
#[test]
fn times_are_rfc_3339_rounded_inward() {
    let same = run_ok(&[
        "bounds",
        "--from",
        "2026-12-01T11:00:00+01:00",
        "--to",
        "2026-12-01T12:00:00.000+01:00",
    ]);
    assert_eq!(same, ok(&format!("bounds --from {FROM} --to {TO}")));
    let inward = run_ok(&[
        "bounds",
        "--from",
        "2026-12-01T09:59:59.9990001Z",
        "--to",
        "2026-12-01T11:00:00.0009999Z",
    ]);
    let lines: Vec<&str> = inward.lines().collect();
    let lo = decoded(lines[0], "64", "1735689600000");
    let hi = decoded(lines[1], "64", "1735689600000");
    assert_eq!(lo["time"], "2026-12-01T10:00:00.000Z");
    assert_eq!(hi["time"], "2026-12-01T11:00:00.000Z");
}

#[test]
fn bad_input_names_the_option_and_the_fix() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--from", TO, "--to", FROM],
            &["--from", "after --to", "earlier"],
        ),
        (
            &["--from", "2024-12-31T23:59:59Z", "--to", TO],
            &[
                "--from 2024-12-31T23:59:59Z",
                "before the epoch 2025-01-01T00:00:00.000Z",
            ],
        ),
        (
            &["--from", "1969-12-31T23:59:59Z", "--to", TO],
            &[
                "--from 1969-12-31T23:59:59Z",
                "before the epoch",
                "--epoch-ms",
            ],
        ),
        (
            &["--from", FROM, "--to", "2164-05-15T07:35:11.104Z"],
            &["--to", "past 2164-05-15T07:35:11.103Z", "earlier --to"],
        ),
        (
            &[
                "--from",
                "2026-12-01T10:00:00.0001Z",
                "--to",
                "2026-12-01T10:00:00.0002Z",
            ],
            &["no whole millisecond", "widen"],
        ),
        (
            &["--from", "yesterday", "--to", TO],
            &["--from", "RFC 3339", "2026-12-01T10:00:00Z"],
        ),
        (
            &["--from", "2026-12-01 10:00:00", "--to", TO],
            &["--from", "RFC 3339"],
        ),
        (
            &["--from", FROM, "--to", TO, "--bits", "32"],
            &["--bits", "64, 96 or 128"],
        ),
        (
            &["--from", FROM, "--to", TO, "--format", "oct"],
            &["--format", "hex"],
        ),
        (
            &["--from", FROM, "--to", TO, "--epoch-ms", "soon"],
            &["--epoch-ms"],
        ),
        (&["--from", FROM], &["--to"]),
    ];
    for (args, says) in cases {
        let out = run(&[&["bounds"], *args].concat());
        let err = assert_one_line_exit(&out, &format!("{args:?}"), 2);
        for s in *says {
            assert!(err.contains(s), "{args:?}: {err} lacks {s:?}");
        }
    }
    // An epoch later than the range: the epoch the nonces were made with is the fix.
    let out = run(&[
        "bounds",
        "--from",
        FROM,
        "--to",
        TO,
        "--epoch-ms",
        "1800000000000",
    ]);
    let err = assert_one_line_exit(&out, "late epoch", 2);
    assert!(err.contains("--epoch-ms 1800000000000"), "{err}");
}

/// A nonce stored in a test table: its 64-bit integer, its 64, 96 and 128-bit big-endian
/// bytes, and whether it was made inside the hour.
type Row = (u64, [Vec<u8>; 3], bool);

/// The smallest and largest nonce of the hour as big-endian bytes.
type ByteBounds = (Vec<u8>, Vec<u8>);

/// Sortable nonces made at `times` (Unix ms) by factories on machine IDs 0 and 511, a few
/// per millisecond, with whether each time lies in the hour.
fn sortable_nonces(times: &[u64]) -> Vec<Row> {
    let mut out = Vec::new();
    for machine_id in [0, 511] {
        let clock = ManualClock::new(times[0]);
        let config = FactoryConfig::new()
            .with_kind64(Base::Sortable)
            .with_kind96(Base::Sortable)
            .with_kind128(Base::Sortable);
        let f = Factory::new(&clock, config).unwrap();
        f.enable(MachineId::new(machine_id).unwrap(), NO_DEADLINE)
            .unwrap();
        for &t in times {
            clock.set(t);
            for _ in 0..3 {
                let n64: Nonce64 = f.sortable64().unwrap();
                let n96: Nonce96 = f.sortable96().unwrap();
                let n128: Nonce128 = f.sortable128().unwrap();
                let bytes = [
                    n64.to_bytes().to_vec(),
                    n96.to_bytes().to_vec(),
                    n128.to_bytes().to_vec(),
                ];
                out.push((n64.to_u64(), bytes, (FROM_MS..=TO_MS).contains(&t)));
            }
        }
    }
    out
}

/// The times around the hour the nonces are made at: each end, a millisecond either side,
/// and well inside and outside.
fn times() -> Vec<u64> {
    vec![
        FROM_MS - 3_600_000,
        FROM_MS - 1,
        FROM_MS,
        FROM_MS + 1,
        FROM_MS + 1_800_000,
        TO_MS - 1,
        TO_MS,
        TO_MS + 1,
        TO_MS + 86_400_000,
    ]
}

/// The hour's bounds as `--format int` (64 bits) and as big-endian bytes (from hex).
fn sql_bounds() -> (i64, i64, Vec<ByteBounds>) {
    let (lo, hi) = bounds(&["--bits", "64", "--format", "int"]);
    let int = |s: &str| i64::try_from(s.parse::<u64>().unwrap()).unwrap();
    let bytes = |bits: &str| {
        let (lo, hi) = bounds(&["--bits", bits]);
        (hex_bytes(&lo), hex_bytes(&hi))
    };
    (
        int(&lo),
        int(&hi),
        vec![bytes("64"), bytes("96"), bytes("128")],
    )
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// What the test expects a query to select: the rows made inside the hour, by row number.
fn inside(nonces: &[Row]) -> Vec<i64> {
    (0..)
        .zip(nonces)
        .filter(|(_, (_, _, inside))| *inside)
        .map(|(i, _)| i)
        .collect()
}

/// 64-bit nonces as BIGINT and every size as BYTEA: `BETWEEN` the printed bounds selects
/// exactly the nonces made in the hour.
#[tokio::test(flavor = "multi_thread")]
async fn between_the_bounds_selects_the_hour_in_postgres() {
    let pool = sqlx::PgPool::connect(&pg_url()).await.unwrap();
    let table = format!("bounds_test_{}", std::process::id());
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {table} (row_no bigint, id64 bigint, b64 bytea, b96 bytea, b128 bytea)"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let nonces = sortable_nonces(&times());
    for (i, (n64, [b64, b96, b128], _)) in (0i64..).zip(&nonces) {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} VALUES ($1, $2, $3, $4, $5)"
        )))
        .bind(i)
        .bind(i64::try_from(*n64).unwrap())
        .bind(b64)
        .bind(b96)
        .bind(b128)
        .execute(&pool)
        .await
        .unwrap();
    }
    let (lo, hi, byte_bounds) = sql_bounds();
    let selected: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT row_no FROM {table} WHERE id64 BETWEEN $1 AND $2 ORDER BY row_no"
    )))
    .bind(lo)
    .bind(hi)
    .fetch_all(&pool)
    .await
    .unwrap();
    let expected = inside(&nonces);
    assert_eq!(selected, expected);
    for (column, (lo, hi)) in ["b64", "b96", "b128"].iter().zip(&byte_bounds) {
        let selected: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT row_no FROM {table} WHERE {column} BETWEEN $1 AND $2 ORDER BY row_no"
        )))
        .bind(lo)
        .bind(hi)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(selected, expected, "{column}");
    }
    sqlx::query(AssertSqlSafe(format!("DROP TABLE {table}")))
        .execute(&pool)
        .await
        .unwrap();
    // Inside and outside are both there: the test could fail.
    assert!(!expected.is_empty() && expected.len() < nonces.len());
}

/// The same in SQLite: INTEGER and BLOB.
#[tokio::test(flavor = "multi_thread")]
async fn between_the_bounds_selects_the_hour_in_sqlite() {
    let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
    sqlx::query("CREATE TABLE t (row_no INTEGER, id64 INTEGER, b64 BLOB, b96 BLOB, b128 BLOB)")
        .execute(&pool)
        .await
        .unwrap();
    let nonces = sortable_nonces(&times());
    for (i, (n64, [b64, b96, b128], _)) in (0i64..).zip(&nonces) {
        sqlx::query("INSERT INTO t VALUES (?, ?, ?, ?, ?)")
            .bind(i)
            .bind(i64::try_from(*n64).unwrap())
            .bind(b64)
            .bind(b96)
            .bind(b128)
            .execute(&pool)
            .await
            .unwrap();
    }
    let (lo, hi, byte_bounds) = sql_bounds();
    let expected = inside(&nonces);
    let selected: Vec<i64> =
        sqlx::query_scalar("SELECT row_no FROM t WHERE id64 BETWEEN ? AND ? ORDER BY row_no")
            .bind(lo)
            .bind(hi)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(selected, expected);
    for (column, (lo, hi)) in ["b64", "b96", "b128"].iter().zip(&byte_bounds) {
        let selected: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT row_no FROM t WHERE {column} BETWEEN ? AND ? ORDER BY row_no"
        )))
        .bind(lo)
        .bind(hi)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(selected, expected, "{column}");
    }
    assert!(!expected.is_empty() && expected.len() < nonces.len());
}
