//! The HTTP API of `nononce serve` against what the repository says of it:
//!
//! - schemathesis (PyPI) generates requests from `docs/openapi.yaml`, valid and invalid, and
//!   checks that every answer is documented (status, content type, schema) and none is a
//!   server error; bounded by a number of examples per operation and a fixed seed, so a run
//!   repeats the last;
//! - every row of the "Bad input" table of `docs/serve.md` is sent to a live server, which
//!   must answer the row's status, error code and message exactly.
//!
//! Both need `cargo xtask with-services` (it installs schemathesis and says where).

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::Digest;

use crate::common::serve::{Served, agent};
use crate::common::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A variable `cargo xtask with-services` sets; its absence fails the test.
fn service_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the test under `cargo xtask with-services`, which installs the Python test clients and sets it")
    })
}

/// Runs schemathesis as tests/serve_fuzz.toml configures it (every check, bounded, seeded)
/// against `served` with the repository's OpenAPI document, `args` added to `run`; fails the
/// test on any finding.
fn fuzz(served: &Served, args: &[&str]) {
    let pythonpath = service_var("NONONCE_TEST_PYTHONPATH");
    let schemathesis = service_var("NONONCE_TEST_SCHEMATHESIS");
    let scratch = tempfile::tempdir().unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve_fuzz.toml");
    let out = Command::new("python3")
        .arg(&schemathesis)
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(root().join("docs/openapi.yaml"))
        .args(["--url", &served.base])
        .args(args)
        .env("PYTHONPATH", &pythonpath)
        .current_dir(scratch.path())
        .output()
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "schemathesis found answers that docs/openapi.yaml does not describe:\n{report}"
    );
    // A run that tested nothing would also succeed.
    assert!(
        report.contains("7 selected / 7 total") && report.contains("Tested: 7"),
        "{report}"
    );
    // The server took it all without failing.
    assert_eq!(served.get("/healthz").0, 200);
}

/// Every kind served, no tokens file: every operation open.
#[test]
fn openapi_document_holds_under_fuzzing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key.hex"), KEY).unwrap();
    let served = Served::start(dir.path(), &["--base-key-file", "key.hex"]);
    fuzz(&served, &[]);
}

/// With a tokens file, calling with a token allowed counter nonces only, 1,000 a second: the
/// 403s (other kinds; more nonces at once than the token may take) and the 429s (its rate
/// spent by the requests before) must be as documented too.
#[test]
fn openapi_document_holds_under_fuzzing_with_a_token() {
    const TOKEN: &str = "fuzz-2f8b61d0c47e9a35";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key.hex"), KEY).unwrap();
    let digest = sha2::Sha256::digest(TOKEN.as_bytes());
    std::fs::write(
        dir.path().join("tokens.toml"),
        format!(
            "[[token]]\nname = \"fuzz\"\nsha256 = \"{}\"\nkinds = [\"counter\"]\nnonces_per_second = 1000\n",
            hex::encode(digest)
        ),
    )
    .unwrap();
    let served = Served::start(
        dir.path(),
        &["--base-key-file", "key.hex", "--tokens-file", "tokens.toml"],
    );
    // The tokens are in force: no token is a 401, another kind a 403.
    assert_eq!(served.get("/v1/nonces").0, 401);
    assert_eq!(
        served.get_with_token("/v1/nonces?kind=sortable", TOKEN).0,
        403
    );
    assert_eq!(served.get_with_token("/v1/nonces", TOKEN).0, 200);
    fuzz(
        &served,
        &[
            "--header",
            &format!("Authorization: Bearer {TOKEN}"),
            "--max-examples",
            "20",
        ],
    );
}

/// A row of the "Bad input" table.
#[derive(Debug)]
struct BadInput {
    origin: String,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
    status: u16,
    code: String,
    message: String,
}

/// The code spans of a table cell, as CommonMark reads them: a run of N backticks up to the
/// next run of exactly N, one space stripped from each end when both ends have one.
fn code_spans(cell: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut rest = cell;
    while let Some(start) = rest.find('`') {
        let ticks = rest[start..].len() - rest[start..].trim_start_matches('`').len();
        let after = &rest[start + ticks..];
        let mut search = 0;
        let Some(end) = (loop {
            let Some(found) = after[search..].find('`') else {
                break None;
            };
            let at = search + found;
            let run = after[at..].len() - after[at..].trim_start_matches('`').len();
            if run == ticks {
                break Some(at);
            }
            search = at + run;
        }) else {
            break;
        };
        let span = &after[..end];
        let span = match span.strip_prefix(' ').and_then(|s| s.strip_suffix(' ')) {
            Some(inner) if !inner.trim().is_empty() => inner,
            _ => span,
        };
        spans.push(span.to_owned());
        rest = &after[end + ticks..];
    }
    spans
}

/// A body the table describes in words: "N nonces", a JSON list of N 64-bit nonces.
fn described_body(cell: &str) -> Option<String> {
    let count: usize = cell.strip_suffix(" nonces")?.parse().ok()?;
    let nonces = vec!["\"03be4cb500002000\""; count].join(", ");
    Some(format!("{{\"nonces\": [{nonces}]}}"))
}

/// The rows of the first table under `## Bad input` in docs/serve.md.
fn bad_inputs() -> Vec<BadInput> {
    let text = std::fs::read_to_string(root().join("docs/serve.md")).unwrap();
    let mut lines = text.lines().enumerate();
    lines
        .by_ref()
        .find(|(_, l)| l.trim() == "## Bad input")
        .expect("docs/serve.md has a \"## Bad input\" section");
    let table: Vec<(usize, &str)> = lines
        .skip_while(|(_, l)| !l.trim_start().starts_with('|'))
        .take_while(|(_, l)| l.trim_start().starts_with('|'))
        .collect();
    let cells = |line: &str| -> Vec<String> {
        let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
        inner.split('|').map(|c| c.trim().to_owned()).collect()
    };
    let header = cells(table[0].1);
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("docs/serve.md, Bad input: no \"{name}\" column"))
    };
    let (request, body, status, code, message) = (
        column("request"),
        column("body"),
        column("status"),
        column("code"),
        column("message"),
    );
    table
        .iter()
        .skip(2)
        .map(|(n, line)| {
            let origin = format!("docs/serve.md:{}", n + 1);
            let row = cells(line);
            assert_eq!(row.len(), header.len(), "{origin}: {} cells", row.len());
            let request_spans = code_spans(&row[request]);
            let (method, path) = request_spans
                .first()
                .and_then(|r| r.split_once(' '))
                .unwrap_or_else(|| panic!("{origin}: no `METHOD /path` in the request"));
            let headers = request_spans[1..]
                .iter()
                .map(|h| {
                    let (name, value) = h
                        .split_once(": ")
                        .unwrap_or_else(|| panic!("{origin}: header {h:?}"));
                    (name.to_owned(), value.to_owned())
                })
                .collect();
            let body = match (code_spans(&row[body]).first(), row[body].as_str()) {
                (Some(literal), _) => Some(literal.clone()),
                (None, "none") => None,
                (None, words) => Some(described_body(words).unwrap_or_else(|| {
                    panic!("{origin}: body {words:?}: a code span, \"none\" or \"N nonces\"")
                })),
            };
            let single = |column: usize| {
                let spans = code_spans(&row[column]);
                assert_eq!(
                    spans.len(),
                    1,
                    "{origin}: one code span in {:?}",
                    row[column]
                );
                spans[0].clone()
            };
            BadInput {
                method: method.to_owned(),
                path: path.to_owned(),
                headers,
                body,
                status: row[status]
                    .parse()
                    .unwrap_or_else(|_| panic!("{origin}: status {:?}", row[status])),
                code: single(code),
                message: single(message),
                origin,
            }
        })
        .collect()
}

/// Sends `row`'s request: the status, the Content-Type and the body of the answer.
fn send(served: &Served, row: &BadInput) -> (u16, String, String) {
    let mut request = ureq::http::Request::builder()
        .method(row.method.as_str())
        .uri(served.url(&row.path));
    let typed = row
        .headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-type"));
    for (name, value) in &row.headers {
        request = request.header(name, value);
    }
    let response = match &row.body {
        Some(body) => {
            if !typed {
                request = request.header("Content-Type", "application/json");
            }
            agent().run(request.body(body.clone().into_bytes()).unwrap())
        }
        None => agent().run(request.body(()).unwrap()),
    };
    let mut response = response.unwrap_or_else(|e| panic!("{}: {e}", row.origin));
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.body_mut().read_to_string().unwrap();
    (response.status().as_u16(), content_type, body)
}

/// Every row of the table, against a server serving what the table says (no base key).
#[test]
fn bad_input_table_matches_the_server() {
    let rows = bad_inputs();
    // The inputs the table promises to cover: a table cut short fails here.
    assert!(rows.len() >= 25, "{} rows in docs/serve.md", rows.len());
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &["--kinds", "counter,sortable"]);
    let mut wrong = Vec::new();
    for row in &rows {
        let (status, content_type, body) = send(&served, row);
        let error: serde_json::Value = serde_json::from_str(&body).unwrap_or(serde_json::json!({}));
        let (code, message) = (&error["error"]["code"], &error["error"]["message"]);
        if status != row.status
            || content_type != "application/json"
            || code.as_str() != Some(row.code.as_str())
            || message.as_str() != Some(row.message.as_str())
        {
            wrong.push(format!(
                "{}: {} {}: expected {} {} {:?}, got {status} ({content_type}) {body}",
                row.origin, row.method, row.path, row.status, row.code, row.message
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "the server does not answer as docs/serve.md says:\n{}",
        wrong.join("\n")
    );
    assert_eq!(served.get("/healthz").0, 200);
}

/// A media type is case-insensitive and may carry parameters (RFC 9110, 8.3.1).
#[test]
fn decode_takes_json_by_its_media_type() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &[]);
    for content_type in ["application/json", "Application/JSON; charset=utf-8"] {
        let mut response = agent()
            .post(served.url("/v1/decode"))
            .header("Content-Type", content_type)
            .send(r#"{"nonces": ["03be4cb500002000"]}"#)
            .unwrap();
        let body = response.body_mut().read_to_string().unwrap();
        assert_eq!(response.status().as_u16(), 200, "{content_type}: {body}");
        let decoded: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(decoded["decoded"][0]["nonce"], "03be4cb500002000");
    }
}

/// A body cut off before its Content-Length: the JSON error, not the framework's text.
#[test]
fn body_cut_short_is_a_json_error() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &[]);
    let mut stream = std::net::TcpStream::connect(served.addr()).unwrap();
    stream
        .write_all(
            b"POST /v1/decode HTTP/1.1\r\nHost: nononce\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"nonces\": [",
        )
        .unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 400 "), "{response}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{response}"
    );
    let error: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(error["error"]["code"], "bad_request");
    assert_eq!(
        error["error"]["message"],
        "the body was cut off before its end: send the whole body"
    );
}

#[test]
fn code_spans_read_as_commonmark() {
    assert_eq!(code_spans("`a` and `b c`"), ["a", "b c"]);
    assert_eq!(code_spans("``x `y` z``"), ["x `y` z"]);
    assert_eq!(code_spans("`` `a` ``"), ["`a`"]);
    assert_eq!(code_spans("none"), Vec::<String>::new());
}
