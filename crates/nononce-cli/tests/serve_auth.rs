//! `nononce serve` with a tokens file, with TLS, and against clients that connect and then
//! send nothing, or too little too slowly.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::common::serve::{Served, agent};
use crate::common::*;

/// The tokens of the tokens file, as callers hold them.
pub(crate) const FULL: &str = "tok-full-6f1d0c2b9e8a4f37";
pub(crate) const COUNTER_ONLY: &str = "tok-counter-0b7e55c1d2a94e86";
pub(crate) const SLOW: &str = "tok-slow-3a9c4e71f0d2b658";

fn sha256_hex(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A tokens file in `dir`: "full" (every kind, 1,000,000/s), "counter-only" (counter),
/// "slow" (10 nonces a second).
pub(crate) fn write_tokens(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("tokens.toml");
    std::fs::write(
        &path,
        format!(
            "# made with: printf %s \"$TOKEN\" | sha256sum\n\
             [[token]]\nname = \"full\"\nsha256 = \"{}\"\nnonces_per_second = 1000000\n\n\
             [[token]]\nname = \"counter-only\"\nsha256 = \"{}\"\nkinds = [\"counter\"]\nnonces_per_second = 1000000\n\n\
             [[token]]\nname = \"slow\"\nsha256 = \"{}\"\nnonces_per_second = 10\n",
            sha256_hex(FULL),
            sha256_hex(COUNTER_ONLY),
            sha256_hex(SLOW)
        ),
    )
    .unwrap();
    path
}

/// GET `url` with an optional bearer token: the status, the Retry-After header, the body as
/// JSON.
fn call(url: &str, token: Option<&str>) -> (u16, Option<String>, serde_json::Value) {
    let mut request = agent().get(url);
    if let Some(token) = token {
        request = request.header("Authorization", &format!("Bearer {token}"));
    }
    let mut response = request.call().unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.body_mut().read_to_string().unwrap();
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}"));
    (status, retry_after, json)
}

fn error_message(body: &serde_json::Value) -> &str {
    body["error"]["message"].as_str().unwrap()
}

/// Each answer of the token check, over the real server: 401 without a token or with a
/// wrong one, 403 for a kind the token may not take, 429 with Retry-After over its rate,
/// 200 otherwise; decode needs a token but costs nothing; no token ever in the server's
/// output.
#[test]
fn tokens_admit_refuse_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = write_tokens(dir.path());
    let served = Served::start(dir.path(), &["--tokens-file", tokens.to_str().unwrap()]);
    let url = |path: &str| served.url(path);

    let (status, _, body) = call(&url("/v1/nonces?count=3"), None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    assert!(
        error_message(&body).contains("Authorization: Bearer TOKEN"),
        "{body}"
    );

    let mut request = agent().get(&url("/v1/nonces"));
    request = request.header("Authorization", &format!("Basic {FULL}"));
    let response = request.call().unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer");

    let (status, _, body) = call(&url("/v1/nonces"), Some("not-a-token-of-this-server"));
    assert_eq!(status, 401, "{body}");
    assert!(
        error_message(&body).contains("not one this server accepts"),
        "{body}"
    );

    let (status, _, body) = call(&url("/v1/nonces?count=3"), Some(FULL));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["nonces"].as_array().unwrap().len(), 3);
    let (status, _, body) = call(&url("/v1/nonces?kind=sortable&count=2"), Some(FULL));
    assert_eq!(status, 200, "{body}");

    let (status, _, body) = call(&url("/v1/nonces?count=2"), Some(COUNTER_ONLY));
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = call(&url("/v1/nonces?kind=sortable"), Some(COUNTER_ONLY));
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    let message = error_message(&body);
    assert!(
        message.contains("\"counter-only\"") && message.contains("sortable"),
        "{message}"
    );
    let (status, _, body) = call(&url("/v1/nonces/range?count=1000"), Some(COUNTER_ONLY));
    assert_eq!(status, 200, "{body}");

    // Decode: a token is needed, any kind's token will do.
    let nonce = served.url(&format!(
        "/v1/decode/{}",
        call(&url("/v1/nonces"), Some(FULL)).2["nonces"][0]
            .as_str()
            .unwrap()
    ));
    assert_eq!(call(&nonce, None).0, 401);
    assert_eq!(call(&nonce, Some(COUNTER_ONLY)).0, 200);

    // "slow" takes 10 a second, in a burst of 10: the first 10 pass, the next must wait (up
    // to a second; a few tries, in case this machine is slow enough for the refill).
    let (status, _, body) = call(&url("/v1/nonces?count=10"), Some(SLOW));
    assert_eq!(status, 200, "{body}");
    let mut tries = 0;
    let (retry_after, body) = loop {
        tries += 1;
        let (status, retry_after, body) = call(&url("/v1/nonces?count=10"), Some(SLOW));
        if status == 429 {
            break (retry_after, body);
        }
        assert_eq!(status, 200, "{body}");
        assert!(
            tries < 5,
            "10 nonces a second, asked for 10 at a time again and again: never limited"
        );
    };
    assert_eq!(body["error"]["code"], "rate_limited");
    assert!(error_message(&body).contains("\"slow\""), "{body}");
    let retry_after: u64 = retry_after.expect("Retry-After").parse().unwrap();
    // The burst refills within the second: the wait, rounded up to whole seconds, is 1.
    assert_eq!(retry_after, 1);
    // More than one second's worth can never pass: refused as such, with nothing to wait for.
    let (status, retry_after, body) = call(&url("/v1/nonces?count=11"), Some(SLOW));
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "over_token_limit");
    assert!(error_message(&body).contains("at most 10"), "{body}");
    assert_eq!(retry_after, None);

    let (status, metrics) = served.get("/metrics");
    assert_eq!(status, 200);
    let counted: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("nononce_rate_limited_total "))
        .expect("nononce_rate_limited_total")
        .trim()
        .parse()
        .unwrap();
    // The 429 and the 403 of "slow".
    assert_eq!(counted, 2, "{metrics}");

    let banner = served.banner.clone();
    let (_, rest) = served.signal("TERM");
    let output = format!("{banner}{rest}");
    for token in [FULL, COUNTER_ONLY, SLOW, "not-a-token-of-this-server"] {
        assert!(!output.contains(token), "{output}");
    }
}

/// `nononce serve --tokens-file PATH` in `dir`: the one line it fails with.
fn serve_fails(dir: &Path, args: &[&str], what: &str) -> String {
    let mut command = nononce();
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .current_dir(dir)
        .timeout(Duration::from_secs(60));
    let out = command.output().unwrap();
    assert_one_line_failure(&out, what)
}

/// A tokens file that is missing, not TOML, holds a bad hash or an unknown kind stops
/// `nononce serve` at once, with one line naming the file, the entry and the fix.
#[test]
fn bad_tokens_files_fail_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let good = sha256_hex(FULL);
    let cases = [
        (None, "cannot read --tokens-file"),
        (Some("[[token]\nname = \"a\"\n".to_owned()), "line 1"),
        (
            Some("[[token]]\nname = \"a\"\nsha256 = \"abc\"\nnonces_per_second = 5\n".to_owned()),
            "token 1 (\"a\"): sha256 is not 64 hex digits",
        ),
        (
            Some(format!(
                "[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nnonces_per_second = 5\n\
                 [[token]]\nname = \"b\"\nsha256 = \"{}\"\nkinds = [\"counter\", \"uuid\"]\nnonces_per_second = 5\n",
                sha256_hex(SLOW)
            )),
            "token 2 (\"b\"): kinds: unknown kind \"uuid\"",
        ),
    ];
    for (i, (text, expected)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("tokens-{i}.toml"));
        if let Some(text) = text {
            std::fs::write(&path, text).unwrap();
        }
        let line = serve_fails(
            dir.path(),
            &["--tokens-file", path.to_str().unwrap()],
            expected,
        );
        assert!(line.contains(expected), "{line}");
        assert!(line.contains(&path.display().to_string()), "{line}");
    }
    // Refused before any lease was taken: the store was never created.
    assert!(!default_store_file().exists());
}

/// A self-signed certificate for 127.0.0.1 and localhost: (certificate PEM, key PEM).
fn self_signed() -> (String, String) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    (certified.cert.pem(), certified.signing_key.serialize_pem())
}

/// HTTPS with the test's own root: nonces over HTTP/1.1 (ureq) and HTTP/2 by ALPN (curl).
#[test]
fn tls_serves_nonces_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed();
    std::fs::write(dir.path().join("cert.pem"), &cert).unwrap();
    std::fs::write(dir.path().join("key.pem"), &key).unwrap();
    let served = Served::start(
        dir.path(),
        &[
            "--tls-cert",
            "cert.pem",
            "--tls-key",
            "key.pem",
            "--header-timeout",
            "1",
        ],
    );
    assert!(
        served.base.starts_with("https://127.0.0.1:"),
        "{}",
        served.base
    );
    // A client that connects and never starts its handshake is cut off (--header-timeout).
    let mut no_handshake = connect(&served);

    let root = ureq::tls::Certificate::from_pem(cert.as_bytes()).unwrap();
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(vec![root])))
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut response = agent.get(&served.url("/v1/nonces?count=3")).call().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: serde_json::Value =
        serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(body["nonces"].as_array().unwrap().len(), 3);

    // Plain HTTP on the TLS port is not served.
    let plain = served.base.replacen("https://", "http://", 1);
    assert!(agent.get(&format!("{plain}/healthz")).call().is_err());

    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--http2",
            "--cacert",
            "cert.pem",
            "-w",
            "\n%{http_version}",
        ])
        .arg(served.url("/v1/nonces?count=2"))
        .current_dir(dir.path())
        .output()
        .expect("curl, to call the server over HTTP/2");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, version) = text.rsplit_once('\n').unwrap();
    assert_eq!(version, "2", "{text}");
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["nonces"].as_array().unwrap().len(), 2);

    assert_eq!(read_to_close(&mut no_handshake), "");
}

/// Certificate and key files that are missing, not PEM, or do not belong together stop
/// `nononce serve` with one line naming --tls-cert or --tls-key.
#[test]
fn bad_tls_files_fail_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed();
    let (_, other_key) = self_signed();
    for (name, text) in [
        ("cert.pem", cert.as_str()),
        ("key.pem", key.as_str()),
        ("other-key.pem", other_key.as_str()),
        ("not-pem.txt", "just some text\n"),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    for (cert, key, expected) in [
        (
            "missing.pem",
            "key.pem",
            "cannot read --tls-cert missing.pem",
        ),
        (
            "cert.pem",
            "missing.pem",
            "cannot read --tls-key missing.pem",
        ),
        (
            "not-pem.txt",
            "key.pem",
            "--tls-cert not-pem.txt holds no certificate chain",
        ),
        (
            "cert.pem",
            "not-pem.txt",
            "--tls-key not-pem.txt holds no private key",
        ),
        (
            "key.pem",
            "key.pem",
            "--tls-cert key.pem holds no certificate chain",
        ),
        (
            "cert.pem",
            "other-key.pem",
            "--tls-key other-key.pem does not go with --tls-cert cert.pem",
        ),
    ] {
        let line = serve_fails(
            dir.path(),
            &["--tls-cert", cert, "--tls-key", key],
            expected,
        );
        assert!(line.contains(expected), "{line}");
    }
}

/// Connects to `served` with a read timeout far past the server's own limits (a hang fails
/// the test rather than stalling it).
fn connect(served: &Served) -> TcpStream {
    let stream = TcpStream::connect(served.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
}

/// Everything the server sends until it closes the connection.
fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    match stream.read_to_end(&mut out) {
        Ok(_) => {}
        // A close with unread input may arrive as a reset.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the server kept the connection open: {e}"),
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// With --header-timeout 1: a connection that sends nothing, half a request's headers, part
/// of the HTTP/2 preface, or a body that never completes is closed; an idle keep-alive
/// connection too, after its answer; a body announced too large is refused without waiting.
#[test]
fn idle_and_slow_clients_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &["--header-timeout", "1"]);

    // All at once, each then read until the server closes it.
    let mut silent = connect(&served);
    let mut half_header = connect(&served);
    half_header
        .write_all(b"GET /v1/nonces HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: ")
        .unwrap();
    let mut half_preface = connect(&served);
    half_preface.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
    let mut slow_body = connect(&served);
    slow_body
        .write_all(
            b"POST /v1/decode HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"nonces\": [",
        )
        .unwrap();
    let mut huge_body = connect(&served);
    huge_body
        .write_all(
            b"POST /v1/decode HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{",
        )
        .unwrap();
    let mut keep_alive = connect(&served);
    keep_alive
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();

    assert_eq!(read_to_close(&mut silent), "");
    let answer = read_to_close(&mut half_header);
    assert!(!answer.contains("200 OK"), "{answer}");
    assert_eq!(read_to_close(&mut half_preface), "");
    let answer = read_to_close(&mut slow_body);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    // Announced too large: refused at once, not waited for.
    let answer = read_to_close(&mut huge_body);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"payload_too_large\""), "{answer}");
    let answer = read_to_close(&mut keep_alive);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // The server is still there for everyone else.
    assert_eq!(served.get("/healthz").0, 200);
}

/// --max-connections 1: while one idle client holds the only slot, the next is not served;
/// it is once --header-timeout has cut the idle one off.
#[test]
fn max_connections_holds_until_a_slot_frees() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(
        dir.path(),
        &["--max-connections", "1", "--header-timeout", "1"],
    );
    let started = Instant::now();
    let mut holder = connect(&served);
    // The holder is accepted before the next connection arrives.
    std::thread::sleep(Duration::from_millis(100));
    let mut waiting = connect(&served);
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let answer = read_to_close(&mut waiting);
    let answered_after = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(read_to_close(&mut holder), "");
    // Served only once the holder's second was up (a broken cap answers in milliseconds).
    assert!(
        answered_after >= Duration::from_millis(800),
        "{answered_after:?}"
    );
}

/// --header-timeout takes a positive number of seconds; anything else is a usage error that
/// says what it takes.
#[test]
fn header_timeout_must_be_positive_seconds() {
    let dir = tempfile::tempdir().unwrap();
    for value in ["0", "-1", "ten", "1e9"] {
        let out = nononce()
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--header-timeout",
                value,
            ])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let line = assert_one_line_exit(&out, value, 2);
        assert!(
            line.contains("--header-timeout") && line.contains("a number of seconds above 0"),
            "{line}"
        );
    }
}
