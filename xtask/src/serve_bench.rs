//! `cargo xtask serve-bench [--seconds N] [--rounds N]`: `nononce serve` side by side with its
//! floor and its peer, in one run, on loopback; prints the table docs/performance.md quotes
//! ("nononce serve").
//!
//! 1. Single-nonce requests: `GET /v1/nonces?count=1` on `nononce serve` against the
//!    `serve_baseline` example (an axum handler returning a constant on the same listener code
//!    and limits), both loaded by `wrk` with the same threads and connections, in alternating
//!    rounds. The per-request cost ratio is the baseline's requests per second over ours.
//! 2. Batches: 64-bit counter nonces per second from `GET /v1/nonces?count=100000` (`wrk`) and
//!    from the gRPC `StreamNonces`, against `ferroid-tonic-server` streaming as many 64-bit IDs
//!    to the same tonic client (`xtask/serve-bench-client`).
//! 3. A range of 1,000,000 counter nonces: the whole request's latency (`wrk`, one connection)
//!    and the server's own time for it (the mean of `nononce_request_seconds` for
//!    `operation="range"` from `/metrics`). The factory's part alone is the criterion benchmark
//!    `range/counter_range96_x1000000` of `cargo xtask bench`.
//!
//! Everything is built in release mode; `wrk` is installed from Debian's package when missing,
//! `ferroid-tonic-server` with `cargo install` into `target/serve-bench/` (once). Not part of
//! `cargo xtask test`: it measures, it does not check.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::launcher::{Server, which};
use crate::ports::server_port;
use crate::services::{apt_install, etcd::ensure_protoc};
use crate::steps::{Step, Steps};
use crate::workspace;

/// The ferroid-tonic-server release measured against.
const FERROID_VERSION: &str = "2.0.0";
/// Nonces per batch request, HTTP and gRPC alike.
const BATCH: u32 = 100_000;
/// The 64-bit counter's nonces per millisecond (its 13-bit count field).
const COUNTER64_PER_MS: f64 = 8192.0;
/// Back-to-back batch rounds at most, to spend the milliseconds the counter saved.
const DRAIN_ROUNDS: usize = 12;
/// The counter counts as caught up with the clock within this.
const CAUGHT_UP_MS: f64 = 50.0;
/// Nonces in the range request.
const RANGE: u64 = 1_000_000;
/// gRPC streams at once, and IDs per stream.
const STREAMS: usize = 2;
const STREAM_IDS: u64 = 5_000_000;
/// wrk's threads and connections for single-nonce requests, the same for both servers.
const WRK_THREADS: &str = "1";
const WRK_CONNECTIONS: &str = "32";

/// Options of `cargo xtask serve-bench`.
struct Options {
    /// Length of each wrk run.
    seconds: u32,
    /// Alternating rounds of each comparison; the median round is reported.
    rounds: usize,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        seconds: 5,
        rounds: 3,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .and_then(|v| v.parse::<u32>().ok())
                .filter(|v| *v > 0)
                .ok_or(format!("{name} needs a positive whole number"))
        };
        match arg.as_str() {
            "--seconds" => options.seconds = value("--seconds")?,
            "--rounds" => options.rounds = value("--rounds")? as usize,
            other => {
                return Err(format!(
                    "unknown option {other}: cargo xtask serve-bench [--seconds N] [--rounds N]"
                ));
            }
        }
    }
    Ok(options)
}

/// Runs the comparison and prints its table.
pub fn run(args: &[String]) -> Result<(), String> {
    let options = options(args)?;
    let wrk = match which("wrk") {
        Some(wrk) => wrk,
        None => {
            apt_install(&["wrk"], "wrk (the HTTP load generator)", "")?;
            which("wrk").ok_or("wrk is installed but not on the PATH")?
        }
    };
    // ferroid-tonic-core generates its gRPC code with protoc at build time.
    ensure_protoc()?;
    let target = workspace::target_dir();
    let bench_dir = target.join("serve-bench");
    let ferroid_root = bench_dir.join(format!("ferroid-tonic-server-{FERROID_VERSION}"));
    let ferroid = ferroid_root.join("bin/ferroid-tonic-server");
    let client_target = bench_dir.join("client");
    let steps = Steps::new();
    steps.run(&Step::cargo(
        "release build of nononce and serve_baseline",
        &[
            "build",
            "--release",
            "-p",
            "nononce-cli",
            "--bin",
            "nononce",
            "--example",
            "serve_baseline",
        ],
    ))?;
    if !ferroid.is_file() {
        // Its own target folder: the install neither waits for nor holds the workspace's lock.
        let root = ferroid_root.display().to_string();
        let build = bench_dir.join("ferroid-build").display().to_string();
        steps.run(&Step::cargo(
            "install ferroid-tonic-server",
            &[
                "install",
                "ferroid-tonic-server",
                "--version",
                FERROID_VERSION,
                "--locked",
                "--root",
                &root,
                "--target-dir",
                &build,
            ],
        ))?;
    }
    let client_manifest = workspace::root().join("xtask/serve-bench-client/Cargo.toml");
    let (manifest, client_dir) = (
        client_manifest.display().to_string(),
        client_target.display().to_string(),
    );
    steps.run(&Step::cargo(
        "release build of the gRPC load client",
        &[
            "build",
            "--release",
            "--manifest-path",
            &manifest,
            "--target-dir",
            &client_dir,
        ],
    ))?;
    let release = target.join("release");
    let bins = Bins {
        nononce: release.join("nononce"),
        baseline: release.join("examples/serve_baseline"),
        ferroid,
        client: client_target.join("release/serve-bench-client"),
        wrk,
    };
    let run_dir = bench_dir.join(format!("run-{}", std::process::id()));
    let _ = fs::remove_dir_all(&run_dir);
    fs::create_dir_all(&run_dir).map_err(|e| format!("{}: {e}", run_dir.display()))?;
    let result = measure(&bins, &options, &run_dir);
    let _ = fs::remove_dir_all(&run_dir);
    let table = result?;
    println!("{}", machine());
    println!("{table}");
    Ok(())
}

struct Bins {
    nononce: PathBuf,
    baseline: PathBuf,
    ferroid: PathBuf,
    client: PathBuf,
    wrk: PathBuf,
}

/// Starts the three servers, loads them, and returns the table.
fn measure(bins: &Bins, options: &Options, dir: &Path) -> Result<String, String> {
    let nononce_port = server_port()?;
    let mut cmd = Command::new(&bins.nononce);
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{nononce_port}")])
        .arg("--store")
        .arg(format!("sqlite://{}", dir.join("leases.db").display()))
        .current_dir(dir);
    let nononce = Server::new(
        "nononce serve",
        &cmd,
        nononce_port,
        dir.join("nononce.log"),
        |port| get(port, "/readyz").is_some_and(|(status, _)| status == 200),
    )
    .start()?;
    let baseline_port = server_port()?;
    let mut cmd = Command::new(&bins.baseline);
    cmd.arg(format!("127.0.0.1:{baseline_port}"));
    let baseline = Server::new(
        "serve_baseline",
        &cmd,
        baseline_port,
        dir.join("baseline.log"),
        |port| get(port, "/v1/nonces").is_some_and(|(status, _)| status == 200),
    )
    .start()?;
    let ferroid_port = server_port()?;
    let mut cmd = Command::new(&bins.ferroid);
    cmd.args(["--server-addr", &format!("127.0.0.1:{ferroid_port}")]);
    let ferroid = Server::new(
        "ferroid-tonic-server",
        &cmd,
        ferroid_port,
        dir.join("ferroid.log"),
        |port| TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).is_ok(),
    )
    .start()?;

    let single = |port: u16| {
        let url = format!("http://127.0.0.1:{port}/v1/nonces?count=1");
        wrk(bins, options, WRK_THREADS, WRK_CONNECTIONS, &url)
    };
    let mut base_runs = Vec::new();
    let mut ours_runs = Vec::new();
    for round in 1..=options.rounds {
        eprintln!(
            "==> single-nonce requests, round {round}/{}",
            options.rounds
        );
        base_runs.push(single(baseline.port())?);
        ours_runs.push(single(nononce.port())?);
    }
    let base = median_by_rate(base_runs);
    let ours = median_by_rate(ours_runs);

    let batch_path = format!("/v1/nonces?kind=counter&bits=64&count={BATCH}");
    let batch_url = format!("http://127.0.0.1:{}{batch_path}", nononce.port());
    check_batch(nononce.port(), &batch_path)?;
    let mut http_batches = Vec::new();
    let mut ferroid_runs = Vec::new();
    let mut credits_ms = Vec::new();
    let mut grpc_runs = Vec::new();
    for round in 1..=options.rounds {
        eprintln!("==> batches, round {round}/{}", options.rounds);
        http_batches.push(wrk(bins, options, "1", "2", &batch_url)?);
        credits_ms.push(counter_credit_ms(nononce.port())?);
        ferroid_runs.push(stream(bins, "ferroid", ferroid.port())?);
        grpc_runs.push(stream(bins, "nononce", nononce.port())?);
    }
    let least_credit_s = credits_ms.iter().copied().fold(f64::INFINITY, f64::min) / 1000.0;
    let most_credit_s = credits_ms.iter().copied().fold(0.0, f64::max) / 1000.0;
    let http_batch = median_by_rate(http_batches);
    let http_per_second = http_batch.requests_per_second * f64::from(BATCH);
    let ferroid_run = median_by(ferroid_runs, |s| s.per_second());
    let grpc_run = median_by(grpc_runs, |s| s.per_second());
    // The rounds above may run on milliseconds the 64-bit counter saved while the server
    // idled. The clock-bound rate, the one a server under constant load gets: rounds back to
    // back until one ends with the counter caught up with the clock, then one more, which
    // starts caught up.
    let mut drained = false;
    for round in 1..=DRAIN_ROUNDS {
        eprintln!("==> batches until the counter is clock-bound, round {round}");
        wrk(bins, options, "1", "2", &batch_url)?;
        if counter_credit_ms(nononce.port())? < CAUGHT_UP_MS {
            drained = true;
            break;
        }
    }
    if !drained {
        return Err(format!(
            "the 64-bit counter was still ahead of its clock after {DRAIN_ROUNDS} rounds of batches: the server cannot outrun 8,192 nonces a millisecond here, so no clock-bound figure"
        ));
    }
    eprintln!("==> batches, clock-bound");
    let bound_batch = wrk(bins, options, "1", "2", &batch_url)?;
    let bound_per_second = bound_batch.requests_per_second * f64::from(BATCH);
    eprintln!("==> gRPC stream, clock-bound");
    let bound_grpc = stream(bins, "nononce", nononce.port())?;

    eprintln!("==> a range of {RANGE} counter nonces");
    let range_url = format!(
        "http://127.0.0.1:{}/v1/nonces/range?bits=96&count={RANGE}",
        nononce.port()
    );
    let before = range_server_time(nononce.port())?;
    let range = wrk(bins, options, "1", "1", &range_url)?;
    let after = range_server_time(nononce.port())?;
    let range_requests = after.1 - before.1;
    if range_requests <= 0.0 {
        return Err("the range requests were not counted in /metrics".into());
    }
    let server_mean = (after.0 - before.0) / range_requests;
    drop((nononce, baseline, ferroid));

    let ratio = base.requests_per_second / ours.requests_per_second;
    let burst_ratio = http_per_second / ferroid_run.per_second();
    let bound_ratio = bound_per_second / ferroid_run.per_second();
    let mut table = String::new();
    let mut row = |line: String| {
        table.push_str(&line);
        table.push('\n');
    };
    row(format!(
        "single-nonce requests (wrk -t{WRK_THREADS} -c{WRK_CONNECTIONS} -d{}s, median of {} rounds)",
        options.seconds, options.rounds
    ));
    row(format!(
        "  {:<34} {:>12} {:>10} {:>10} {:>10}",
        "server", "requests/s", "p50", "p90", "p99"
    ));
    for (name, run) in [
        ("bare axum (serve_baseline)", &base),
        ("nononce serve", &ours),
    ] {
        row(format!(
            "  {name:<34} {:>12.0} {:>10} {:>10} {:>10}",
            run.requests_per_second, run.p50, run.p90, run.p99
        ));
    }
    row(format!(
        "  per-request cost, nononce over bare axum: {ratio:.2}x (goal <= 1.5x: {})",
        verdict(ratio <= 1.5)
    ));
    row(String::new());
    row(format!(
        "64-bit nonces in batches (median of {} rounds)",
        options.rounds
    ));
    row(format!(
        "  ferroid-tonic-server {FERROID_VERSION} ({STREAMS} streams x {STREAM_IDS}): {:>12.0} IDs/s ({} IDs in {:.3} s, all distinct)",
        ferroid_run.per_second(),
        ferroid_run.ids,
        ferroid_run.seconds
    ));
    row(format!(
        "  nononce serve HTTP count={BATCH} (wrk -t1 -c2), clock-bound: {bound_per_second:>12.0} nonces/s ({:.1} requests/s, p50 {}): {bound_ratio:.2}x ferroid (goal >= 2x: {})",
        bound_batch.requests_per_second,
        bound_batch.p50,
        verdict(bound_ratio >= 2.0)
    ));
    row(format!(
        "  the same on milliseconds saved while idle:      {http_per_second:>12.0} nonces/s ({:.1} requests/s, p50 {}): {burst_ratio:.2}x ferroid",
        http_batch.requests_per_second, http_batch.p50
    ));
    row(format!(
        "  nononce serve gRPC StreamNonces ({STREAMS} streams x {STREAM_IDS}), clock-bound: {:>12.0} nonces/s ({} in {:.3} s, all distinct): {:.2}x ferroid",
        bound_grpc.per_second(),
        bound_grpc.ids,
        bound_grpc.seconds,
        bound_grpc.per_second() / ferroid_run.per_second()
    ));
    row(format!(
        "  the same in rounds alternating with ferroid's:   {:>12.0} nonces/s ({} in {:.3} s, all distinct): {:.2}x ferroid",
        grpc_run.per_second(),
        grpc_run.ids,
        grpc_run.seconds,
        grpc_run.per_second() / ferroid_run.per_second()
    ));
    row(format!(
        "  (right after those rounds the counter was {least_credit_s:.1} to {most_credit_s:.1} s behind the clock; clock-bound, one machine ID gives at most 8,192 a millisecond: {:.0} a second)",
        COUNTER64_PER_MS * 1000.0
    ));
    row(String::new());
    row(format!("a range of {RANGE} counter nonces (wrk -t1 -c1)"));
    row(format!(
        "  whole request: p50 {}, p90 {}, p99 {} ({:.0} requests/s)",
        range.p50, range.p90, range.p99, range.requests_per_second
    ));
    row(format!(
        "  server time (nononce_request_seconds, mean of {range_requests:.0}): {:.1} us (goal < 1 ms: {})",
        server_mean * 1e6,
        verdict(server_mean < 1e-3)
    ));
    Ok(table)
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// One wrk run's figures.
struct WrkRun {
    requests_per_second: f64,
    p50: String,
    p90: String,
    p99: String,
}

/// `wrk --latency` against `url`; fails on socket errors or any non-2xx answer, which would
/// make the rate meaningless.
fn wrk(
    bins: &Bins,
    options: &Options,
    threads: &str,
    connections: &str,
    url: &str,
) -> Result<WrkRun, String> {
    let output = Command::new(&bins.wrk)
        .args(["--latency", "-t", threads, "-c", connections, "-d"])
        .arg(format!("{}s", options.seconds))
        .arg(url)
        .output()
        .map_err(|e| format!("could not run wrk: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "wrk failed on {url} ({}): {text}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    if text.contains("Non-2xx") || text.contains("Socket errors") {
        return Err(format!("wrk saw failed requests on {url}:\n{text}"));
    }
    let field = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|line| line.strip_prefix(prefix))
            .map(|rest| rest.split_whitespace().next().unwrap_or("").to_owned())
            .ok_or(format!("wrk printed no \"{prefix}\" line:\n{text}"))
    };
    let requests_per_second = field("Requests/sec:")?
        .parse::<f64>()
        .map_err(|e| format!("wrk's Requests/sec: {e}"))?;
    Ok(WrkRun {
        requests_per_second,
        p50: field("50%")?,
        p90: field("90%")?,
        p99: field("99%")?,
    })
}

fn median_by_rate(runs: Vec<WrkRun>) -> WrkRun {
    median_by(runs, |r| r.requests_per_second)
}

/// The run of median `key` (the upper one of an even count).
fn median_by<T>(mut runs: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    runs.swap_remove(runs.len() / 2)
}

/// One gRPC streaming run.
struct StreamRun {
    ids: u64,
    seconds: f64,
}

impl StreamRun {
    #[expect(
        clippy::cast_precision_loss,
        reason = "a count of IDs far below 2^53 is exact as f64"
    )]
    fn per_second(&self) -> f64 {
        self.ids as f64 / self.seconds
    }
}

/// The gRPC client streaming [`STREAMS`] x [`STREAM_IDS`] 64-bit IDs from `server`
/// (`ferroid` or `nononce`) on `port`.
fn stream(bins: &Bins, server: &str, port: u16) -> Result<StreamRun, String> {
    let output = Command::new(&bins.client)
        .args([
            server,
            &format!("http://127.0.0.1:{port}"),
            &STREAMS.to_string(),
            &STREAM_IDS.to_string(),
        ])
        .output()
        .map_err(|e| format!("could not run the gRPC client: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the gRPC client failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let field = |name: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .ok_or(format!("the gRPC client printed no {name}: {text}"))
    };
    if field("unique=")? != "true" {
        return Err(format!("the gRPC client received duplicate IDs: {text}"));
    }
    Ok(StreamRun {
        ids: field("ids=")?.parse().map_err(|e| format!("ids: {e}"))?,
        seconds: field("seconds=")?
            .parse()
            .map_err(|e| format!("seconds: {e}"))?,
    })
}

/// How far, in milliseconds, the 64-bit counter's next nonce lies behind the wall clock: the
/// milliseconds it has not used yet, which it may spend faster than the clock.
fn counter_credit_ms(port: u16) -> Result<f64, String> {
    let json = |path: &str| {
        let (status, body) = get(port, path).ok_or(format!("no answer from {path}"))?;
        let value: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("{path}: {e}: {body}"))?;
        if status == 200 {
            Ok(value)
        } else {
            Err(format!("{path} answered {status}: {body}"))
        }
    };
    let list = json("/v1/nonces?kind=counter&bits=64&count=1")?;
    let nonce = list["nonces"][0]
        .as_str()
        .ok_or(format!("no nonce in {list}"))?;
    let decoded = json(&format!("/v1/decode/{nonce}"))?;
    let unix_ms = decoded["unix_ms"]
        .as_f64()
        .ok_or(format!("no unix_ms in {decoded}"))?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs_f64()
        * 1000.0;
    Ok((now_ms - unix_ms).max(0.0))
}

/// One batch request, checked: 200 and [`BATCH`] nonces, so wrk's rate counts nonces.
fn check_batch(port: u16, path: &str) -> Result<(), String> {
    let (status, body) = get(port, path).ok_or(format!("no answer from {path}"))?;
    let nonces = body.matches(',').count() + 1;
    if status != 200 || !body.starts_with("{\"nonces\":[") || nonces != BATCH as usize {
        return Err(format!(
            "{path} answered {status} with {nonces} entries, not 200 with {BATCH} nonces"
        ));
    }
    Ok(())
}

/// The sum (seconds) and count of `nononce_request_seconds` for range requests.
fn range_server_time(port: u16) -> Result<(f64, f64), String> {
    let (status, text) = get(port, "/metrics").ok_or("no answer from /metrics")?;
    if status != 200 {
        return Err(format!("/metrics answered {status}"));
    }
    let value = |name: &str| {
        let prefix = format!("{name}{{operation=\"range\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map_or(Ok(0.0), |v| {
                v.trim()
                    .parse::<f64>()
                    .map_err(|e| format!("{name} in /metrics: {e}"))
            })
    };
    Ok((
        value("nononce_request_seconds_sum")?,
        value("nononce_request_seconds_count")?,
    ))
}

/// One HTTP/1.0 GET on loopback `port`: the status and body.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// The machine, for the record: CPU model, cores, kernel.
fn machine() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".into(), |k| k.trim().to_owned());
    format!("machine: {cpu}, {cores} cores available, Linux {kernel}, everything on loopback")
}
