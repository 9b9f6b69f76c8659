//! `nononce serve` over gRPC, from another language: Python's grpcio, through
//! `tests/python/grpc_client.py`, which compiles `proto/nononce/v1/nonces.proto` at test time.
//! Every call, its errors, a cancelled stream, and two servers on one PostgreSQL store handing
//! out four million distinct nonces to gRPC and HTTP clients at once.
//!
//! Needs `NONONCE_TEST_PYTHONPATH` (grpcio, grpcio-tools, protobuf): run under
//! `cargo xtask with-services`.

use std::collections::HashSet;
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::common::serve::{Served, get};
use crate::common::*;

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/grpc_client.py");
const PROTO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proto");

/// The nonce of the command's `--help` examples.
const EXAMPLE: &str = "03be4cb500002000";

/// `python3` with the test packages on its path.
fn python() -> Command {
    let path = std::env::var("NONONCE_TEST_PYTHONPATH").unwrap_or_else(|_| {
        panic!(
            "NONONCE_TEST_PYTHONPATH is not set: run the tests under `cargo xtask with-services`, which installs grpcio and sets it"
        )
    });
    let mut python = Command::new("python3");
    python.env("PYTHONPATH", path);
    python
}

/// Runs the Python client's `command ARGS` against `served`, feeding it `stdin`: its stdout.
fn client(served: &Served, command: &str, args: &[&str], stdin: &str) -> String {
    let out_dir = tempfile::tempdir().unwrap();
    let mut child = python()
        .arg(CLIENT)
        .arg(PROTO_DIR)
        .arg(out_dir.path())
        .arg(served.addr())
        .arg(command)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "grpc_client.py {command} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Makes `calls` (`{"method", "request"}` each) from Python: one result per call, `{"ok": ...}`
/// or `{"code", "message", "received"}`.
fn grpc_calls(served: &Served, calls: &Value) -> Vec<Value> {
    let out = client(served, "calls", &[], &calls.to_string());
    let results: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), calls.as_array().unwrap().len(), "{out}");
    results
}

/// The machine ID `served` holds for `kind`, from `/readyz`.
fn leased_id(served: &Served, kind: &str) -> u64 {
    let ready = served.json("/readyz");
    let lease = ready["leases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} lease: {ready}"));
    lease["machine_id"].as_u64().unwrap()
}

/// A call's successful answer.
fn ok<'a>(result: &'a Value, what: &str) -> &'a Value {
    result
        .get("ok")
        .unwrap_or_else(|| panic!("{what}: {result}"))
}

/// A batch's nonces (hex), each of `bits` bits.
fn nonces_of(batch: &Value, bits: u64) -> Vec<String> {
    assert_eq!(batch["bits"], bits, "{batch}");
    let nonces: Vec<String> = batch["nonces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    let hex_digits = usize::try_from(bits / 4).unwrap();
    assert!(nonces.iter().all(|n| n.len() == hex_digits), "{batch}");
    nonces
}

fn distinct(nonces: &[String]) -> bool {
    nonces.iter().collect::<HashSet<_>>().len() == nonces.len()
}

/// Nonces of both kinds, a stream in batches, a counter range and decode, from Python: each
/// nonce read back by `nononce decode` with the machine ID the server leased for its kind.
#[test]
fn nonces_stream_range_and_decode_from_python() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &[]);
    let counter_id = leased_id(&served, "counter");
    let sortable_id = leased_id(&served, "sortable");
    let example_int = u64::from_str_radix(EXAMPLE, 16).unwrap().to_string();
    let r = grpc_calls(
        &served,
        &json!([
            {"method": "GetNonces", "request": {"count": 3}},
            {"method": "GetNonces", "request": {"kind": "KIND_SORTABLE", "bits": 128, "count": 5}},
            {"method": "StreamNonces", "request": {"bits": 96, "count": 10_000}},
            {"method": "GetRange", "request": {"bits": 64, "count": 1000}},
            {"method": "Decode", "request": {"nonce": EXAMPLE}},
            {"method": "Decode", "request": {"nonce": example_int, "input": "INPUT_INT", "bits": 64}},
            {"method": "StreamNonces", "request": {"kind": "KIND_SORTABLE", "count": 5000}},
        ]),
    );

    let counter = nonces_of(ok(&r[0], "GetNonces"), 64);
    assert_eq!(counter.len(), 3);
    assert!(distinct(&counter), "{counter:?}");
    for n in &counter {
        assert_eq!(json(n)["machine_id"], counter_id, "{n}");
    }

    let sortable = nonces_of(ok(&r[1], "GetNonces sortable"), 128);
    assert_eq!(sortable.len(), 5);
    assert!(distinct(&sortable), "{sortable:?}");
    for n in &sortable {
        assert_eq!(json(n)["machine_id"], sortable_id, "{n}");
    }

    let batches = ok(&r[2], "StreamNonces").as_array().unwrap();
    let sizes: Vec<usize> = batches
        .iter()
        .map(|b| b["nonces"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [4096, 4096, 1808]);
    let streamed: Vec<String> = batches.iter().flat_map(|b| nonces_of(b, 96)).collect();
    assert!(distinct(&streamed));
    for n in [&streamed[0], &streamed[9999]] {
        assert_eq!(json(n)["machine_id"], counter_id, "{n}");
    }

    // Counter batches are expanded from counter ranges, other kinds generated one by one.
    let batches = ok(&r[6], "StreamNonces sortable").as_array().unwrap();
    let sizes: Vec<usize> = batches
        .iter()
        .map(|b| b["nonces"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [4096, 904]);
    let streamed: Vec<String> = batches.iter().flat_map(|b| nonces_of(b, 64)).collect();
    assert!(distinct(&streamed));
    for n in [&streamed[0], &streamed[4999]] {
        assert_eq!(json(n)["machine_id"], sortable_id, "{n}");
    }

    // The range's fields, and its first and last nonce as the .proto says to compute them.
    let range = ok(&r[3], "GetRange");
    assert_eq!(range["bits"], 64);
    assert_eq!(range["machine_id"], counter_id);
    assert_eq!(range["count_bits"], 13);
    let len = range["count"].as_u64().unwrap();
    assert!((1..=1000).contains(&len), "{range}");
    let (ts, first_count) = (
        range["timestamp_ms"].as_u64().unwrap(),
        range["first_count"].as_u64().unwrap(),
    );
    let nth = |i: u64| {
        let sum = ((ts << 13) | first_count) + i;
        format!(
            "{:016x}",
            ((sum >> 13) << 22) | (counter_id << 13) | (sum & 0x1fff)
        )
    };
    assert_eq!(range["first"], nth(0));
    assert_eq!(range["last"], nth(len - 1));
    let first = json(range["first"].as_str().unwrap());
    assert_eq!(
        (&first["timestamp_ms"], &first["count"]),
        (&range["timestamp_ms"], &range["first_count"])
    );

    // Decode answers what `nononce decode` prints, whichever way the nonce is written.
    let cli = json(EXAMPLE);
    for (i, result) in r[4..6].iter().enumerate() {
        let decoded = ok(result, "Decode");
        assert_eq!(decoded["nonce"], EXAMPLE, "call {i}");
        for field in [
            "bits",
            "timestamp_ms",
            "unix_ms",
            "time",
            "machine_id",
            "count",
        ] {
            assert_eq!(decoded[field], cli[field], "call {i}: {field}");
        }
    }
}

/// Bad input: INVALID_ARGUMENT (NOT_FOUND for a kind not served) with the one sentence the
/// HTTP API gives, in this API's terms; a huge request OUT_OF_RANGE; the server serves on.
#[test]
fn bad_input_from_python() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &[]);
    let bits65 = "bits \"65\" is not a nonce size: use 64, 96 or 128";
    let unknown_kind =
        |k: u32| format!("unknown kind {k}: use KIND_COUNTER, KIND_SORTABLE or KIND_ENCRYPTED");
    let cases: Vec<(Value, &str, String)> = vec![
        (
            json!({"method": "GetNonces", "request": {"bits": 65, "count": 1}}),
            "INVALID_ARGUMENT",
            bits65.into(),
        ),
        (
            json!({"method": "GetNonces", "request": {"count": 0}}),
            "INVALID_ARGUMENT",
            "count must be 1 to 100000, not 0".into(),
        ),
        (
            json!({"method": "GetNonces", "request": {"count": 100_001}}),
            "INVALID_ARGUMENT",
            "count must be 1 to 100000, not 100001".into(),
        ),
        (
            json!({"method": "GetNonces", "request": {"kind": 7, "count": 1}}),
            "INVALID_ARGUMENT",
            unknown_kind(7),
        ),
        (
            json!({"method": "GetNonces", "request": {"kind": "KIND_ENCRYPTED", "count": 1}}),
            "NOT_FOUND",
            "this server does not serve encrypted nonces (it serves counter, sortable): start it with --kinds including encrypted".into(),
        ),
        (
            json!({"method": "StreamNonces", "request": {"count": 0}}),
            "INVALID_ARGUMENT",
            "count must be 1 to 1000000000, not 0".into(),
        ),
        (
            json!({"method": "StreamNonces", "request": {"bits": 65, "count": 10}}),
            "INVALID_ARGUMENT",
            bits65.into(),
        ),
        (
            json!({"method": "StreamNonces", "request": {"kind": 9, "count": 10}}),
            "INVALID_ARGUMENT",
            unknown_kind(9),
        ),
        (
            json!({"method": "GetRange", "request": {"count": 0}}),
            "INVALID_ARGUMENT",
            "count must be 1 to 1000000000, not 0".into(),
        ),
        (
            json!({"method": "GetRange", "request": {"bits": 65, "count": 10}}),
            "INVALID_ARGUMENT",
            bits65.into(),
        ),
        (
            json!({"method": "Decode", "request": {"nonce": "zz"}}),
            "INVALID_ARGUMENT",
            "malformed nonce \"zz\": \"zz\" is 2 characters: a nonce is 16, 24 or 32 hex digits (0x before them allowed), 11, 16 or 22 base64url characters, or a decimal integer".into(),
        ),
        (
            json!({"method": "Decode", "request": {"nonce": EXAMPLE, "bits": 128}}),
            "INVALID_ARGUMENT",
            format!("malformed nonce \"{EXAMPLE}\": it is a 64-bit nonce, not 128 bits (bits)"),
        ),
        (
            json!({"method": "Decode", "request": {"nonce": EXAMPLE, "bits": 65}}),
            "INVALID_ARGUMENT",
            bits65.into(),
        ),
        (
            json!({"method": "Decode", "request": {"nonce": EXAMPLE, "input": 5}}),
            "INVALID_ARGUMENT",
            "unknown input 5: use INPUT_AUTO, INPUT_HEX, INPUT_BASE64URL or INPUT_INT".into(),
        ),
        // A huge request is refused before it is read whole (at the HTTP body limit).
        (
            json!({"method": "Decode", "request": {"nonce": "0".repeat(70_000)}}),
            "OUT_OF_RANGE",
            "Error, decoded message length too large: found 70004 bytes, the limit is: 65536 bytes"
                .into(),
        ),
    ];
    let mut calls: Vec<Value> = cases.iter().map(|(call, _, _)| call.clone()).collect();
    calls.push(json!({"method": "GetNonces", "request": {"count": 1}}));
    let results = grpc_calls(&served, &Value::Array(calls));
    for ((call, code, message), result) in cases.iter().zip(&results) {
        assert_eq!(result["code"], *code, "{call}: {result}");
        assert_eq!(result["message"], message.as_str(), "{call}: {result}");
        assert_eq!(result["received"], 0, "{call}: {result}");
    }
    assert_eq!(
        nonces_of(ok(results.last().unwrap(), "GetNonces after"), 64).len(),
        1
    );
    let metrics = served.get("/metrics").1;
    assert!(
        metrics.contains("nononce_requests_total{operation=\"grpc_nonces\",status=\"400\"} 4"),
        "{metrics}"
    );
}

/// With a tokens file, gRPC callers present their token as `authorization` metadata: none or
/// an unknown one is UNAUTHENTICATED, a kind the token may not take or more than its burst
/// PERMISSION_DENIED, past its rate RESOURCE_EXHAUSTED, each with the HTTP API's sentence;
/// a token allowed the kind gets its nonces, and decode takes any valid token.
#[test]
fn tokens_from_python() {
    use crate::serve_auth::{COUNTER_ONLY, FULL, SLOW, write_tokens};

    let dir = tempfile::tempdir().unwrap();
    let tokens = write_tokens(dir.path());
    let served = Served::start(dir.path(), &["--tokens-file", tokens.to_str().unwrap()]);
    let sortable = json!({"kind": "KIND_SORTABLE", "count": 2});
    let r = grpc_calls(
        &served,
        &json!([
            {"method": "GetNonces", "request": {"count": 3}},
            {"method": "GetNonces", "request": {"count": 3}, "token": "not-a-token"},
            {"method": "Decode", "request": {"nonce": EXAMPLE}},
            {"method": "GetNonces", "request": sortable, "token": COUNTER_ONLY},
            {"method": "StreamNonces", "request": sortable, "token": COUNTER_ONLY},
            {"method": "GetNonces", "request": {"count": 11}, "token": SLOW},
            {"method": "GetNonces", "request": {"count": 10}, "token": SLOW},
            {"method": "GetNonces", "request": {"count": 10}, "token": SLOW},
            {"method": "GetNonces", "request": {"count": 3}, "token": COUNTER_ONLY},
            {"method": "StreamNonces", "request": {"bits": 96, "count": 5000}, "token": COUNTER_ONLY},
            {"method": "GetRange", "request": {"count": 1000}, "token": COUNTER_ONLY},
            {"method": "GetNonces", "request": sortable, "token": FULL},
            {"method": "Decode", "request": {"nonce": EXAMPLE}, "token": COUNTER_ONLY},
        ]),
    );
    let refused = |i: usize, code: &str, message: &str| {
        assert_eq!(r[i]["code"], code, "call {i}: {}", r[i]);
        assert_eq!(r[i]["message"], message, "call {i}: {}", r[i]);
        assert_eq!(r[i]["received"], 0, "call {i}: {}", r[i]);
    };
    let no_token = "a bearer token is needed: send the header Authorization: Bearer TOKEN";
    refused(0, "UNAUTHENTICATED", no_token);
    refused(
        1,
        "UNAUTHENTICATED",
        "the bearer token is not one this server accepts: send a token its operator issued",
    );
    refused(2, "UNAUTHENTICATED", no_token);
    let not_sortable = "token \"counter-only\" may not take sortable nonces (it may take counter): use a token allowed sortable nonces";
    refused(3, "PERMISSION_DENIED", not_sortable);
    refused(4, "PERMISSION_DENIED", not_sortable);
    refused(
        5,
        "PERMISSION_DENIED",
        "11 nonces is more than token \"slow\" may take at once (10 a second): ask for at most 10 per request",
    );
    assert_eq!(nonces_of(ok(&r[6], "the slow token's burst"), 64).len(), 10);
    // The burst is spent: the next ten are 429's status, told when to retry.
    assert_eq!(r[7]["code"], "RESOURCE_EXHAUSTED", "{}", r[7]);
    let message = r[7]["message"].as_str().unwrap();
    assert!(
        message.starts_with("token \"slow\" is over its rate of 10 nonces per second: retry in "),
        "{message}"
    );

    assert_eq!(nonces_of(ok(&r[8], "GetNonces counter"), 64).len(), 3);
    let streamed: Vec<String> = ok(&r[9], "StreamNonces counter")
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| nonces_of(b, 96))
        .collect();
    assert_eq!(streamed.len(), 5000);
    assert!(distinct(&streamed));
    assert_eq!(ok(&r[10], "GetRange")["count"], 1000);
    let sortable = nonces_of(ok(&r[11], "GetNonces sortable, every kind"), 64);
    assert_eq!(
        json(&sortable[0])["machine_id"],
        leased_id(&served, "sortable")
    );
    assert_eq!(ok(&r[12], "Decode")["nonce"], EXAMPLE);

    // Refusals are counted under the gRPC operations, by the HTTP status of the same error.
    let metrics = served.get("/metrics").1;
    for (series, value) in [
        (
            "nononce_requests_total{operation=\"grpc_nonces\",status=\"401\"}",
            2.0,
        ),
        (
            "nononce_requests_total{operation=\"grpc_decode\",status=\"401\"}",
            1.0,
        ),
        (
            "nononce_requests_total{operation=\"grpc_nonces\",status=\"403\"}",
            2.0,
        ),
        (
            "nononce_requests_total{operation=\"grpc_stream\",status=\"403\"}",
            1.0,
        ),
        (
            "nononce_requests_total{operation=\"grpc_nonces\",status=\"429\"}",
            1.0,
        ),
        ("nononce_rate_limited_total", 2.0),
    ] {
        assert_eq!(metric(&metrics, series), Some(value), "{series}\n{metrics}");
    }
}

/// The value of the metric line starting with `series` (the name and labels).
fn metric(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.trim().parse().ok())
    })
}

/// A client that cancels a stream of a billion nonces after three batches: the server stops
/// generating (the stream is counted as ended by its client, status 499) instead of running
/// on for two minutes of the clock.
#[test]
fn a_cancelled_stream_stops_generating() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &["--kinds", "counter"]);
    let out = client(&served, "cancel", &["1000000000", "3"], "");
    let received: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(received["nonces"], 3 * 4096);
    let ended = "nononce_requests_total{operation=\"grpc_stream\",status=\"499\"}";
    let generated = "nononce_nonces_total{kind=\"counter\",bits=\"64\"}";
    let mut polls = 0;
    let metrics = loop {
        let metrics = served.get("/metrics").1;
        if metric(&metrics, ended) == Some(1.0) {
            break metrics;
        }
        polls += 1;
        assert!(polls < 200, "the stream did not end: {metrics}");
        std::thread::sleep(std::time::Duration::from_millis(25));
    };
    let before = metric(&metrics, generated).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let after = metric(&served.get("/metrics").1, generated).unwrap();
    // What the client's flow-control window let the server send ahead is generated too (a few
    // MiB at most); the billion is not.
    assert!(
        (3.0 * 4096.0..10_000_000.0).contains(&before),
        "{before} generated"
    );
    assert!(
        (after - before).abs() < f64::EPSILON,
        "{before} then {after}"
    );
}

/// Drops a test table when the test ends, passed or not (declared before the servers that
/// use it, so dropped after them).
struct TableGuard(String);

impl Drop for TableGuard {
    fn drop(&mut self) {
        drop_table(&self.0);
    }
}

/// 1,000,000 64-bit counter nonces as a hex JSON list, in requests of 100,000.
fn http_million(served: &Served) -> Vec<u64> {
    let mut out = Vec::with_capacity(1_000_000);
    for _ in 0..10 {
        let (status, body) = get(&served.url("/v1/nonces?count=100000"), None);
        assert_eq!(status, 200, "{body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        out.extend(
            body["nonces"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| u64::from_str_radix(n.as_str().unwrap(), 16).unwrap()),
        );
    }
    out
}

/// 1,000,000 64-bit counter nonces streamed to Python's grpcio.
fn grpc_million(served: &Served) -> Vec<u64> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nonces.bin");
    let out = client(served, "stream", &["1000000", file.to_str().unwrap()], "");
    let summary: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(summary["nonces"], 1_000_000, "{out}");
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(bytes.len(), 8_000_000);
    bytes
        .chunks_exact(8)
        .map(|b| u64::from_be_bytes(b.try_into().unwrap()))
        .collect()
}

/// The machine-ID field of a 64-bit nonce.
fn machine_id_of(nonce: u64) -> u64 {
    (nonce >> 13) & 0x1ff
}

/// The test: two servers on one PostgreSQL store, each streaming 1,000,000 nonces to
/// Python's grpcio while it hands 1,000,000 more to HTTP requests, all at once: 4,000,000
/// distinct nonces, each server's on the machine ID it leased, the two IDs distinct.
#[test]
fn two_servers_on_one_postgres_store_grpc_and_http_at_once() {
    let store = sql_store(&pg_url());
    let _table = TableGuard(store.clone());
    let dir = tempfile::tempdir().unwrap();
    let args = ["--store", store.as_str(), "--kinds", "counter"];
    let servers = [
        Served::start(dir.path(), &args),
        Served::start(dir.path(), &args),
    ];
    let ids = servers.each_ref().map(|s| leased_id(s, "counter"));
    assert_ne!(ids[0], ids[1]);
    let fetched: Vec<(u64, Vec<u64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = servers
            .iter()
            .zip(ids)
            .flat_map(|(served, id)| {
                [
                    (id, scope.spawn(move || grpc_million(served))),
                    (id, scope.spawn(move || http_million(served))),
                ]
            })
            .collect();
        handles
            .into_iter()
            .map(|(id, h)| (id, h.join().unwrap()))
            .collect()
    });
    let mut all = Vec::with_capacity(4_000_000);
    for (id, nonces) in fetched {
        assert_eq!(nonces.len(), 1_000_000);
        assert!(
            nonces.iter().all(|&n| machine_id_of(n) == id),
            "machine id {id}"
        );
        all.extend(nonces);
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 4_000_000);
}
