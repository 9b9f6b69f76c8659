//! `nononce serve`: nonces over HTTP/JSON (`http.rs`) and gRPC (`grpc.rs`) on one port, each
//! kind from a factory on a machine ID of its own, leased from the store as `gen` leases one
//! (`workers.rs`). The operations themselves know no transport (`api.rs`).
//!
//! Shutdown (SIGINT, SIGTERM): the listener closes, requests in flight finish (up to
//! [`DRAIN`]), then each factory stops and its machine ID is released.

mod api;
mod auth;
mod grpc;
mod http;
mod listener;
mod metrics;
mod workers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use api::{Api, ApiError, MAX_COUNT, MAX_RANGE};
pub use auth::Tokens;
pub use listener::{Limits, Tls, serve as serve_router};

use crate::backends::{DEFAULT_STORE, STORE_HELP};
use crate::cli::CipherArgs;
use crate::codec::Kind;
use crate::keys::KeyArgs;
use crate::output::Exit;

/// How long requests in flight may take to finish once a signal arrived.
pub const DRAIN: Duration = Duration::from_secs(10);

/// The address `serve` listens on without `--listen`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7300";

pub const EXAMPLES: &str = "Examples:
  nononce serve
  curl 'localhost:7300/v1/nonces?count=3'
  curl 'localhost:7300/v1/nonces?kind=sortable&bits=128&count=2&format=base64url'
  curl 'localhost:7300/v1/nonces/range?bits=96&count=1000000'
  curl localhost:7300/v1/decode/03be4cb500002000
  curl localhost:7300/readyz
  nononce serve --store postgres://app@db/app --listen 0.0.0.0:7300
  curl localhost:7300/readyz
  openssl rand -hex 32 > nonce-key.hex
  nononce serve --base-key-file nonce-key.hex --kinds counter,encrypted
  curl 'localhost:7300/v1/nonces?kind=encrypted&bits=128&count=2'
  export TOKEN=$(openssl rand -hex 32)
  printf '[[token]]\\nname = \"app\"\\nsha256 = \"%s\"\\nnonces_per_second = 100000\\n' \"$(printf %s \"$TOKEN\" | sha256sum | cut -c1-64)\" > tokens.toml
  nononce serve --tokens-file tokens.toml
  curl -H \"Authorization: Bearer $TOKEN\" 'localhost:7300/v1/nonces?count=3'

Run each nononce serve in a terminal of its own, the other lines in another. Without --store,
the leases are in ./nononce-leases.db: it serves one folder of one host. Servers of a fleet,
or several on one host, need a shared store (--store postgres://...) for distinct machine ids.

Each kind served (--kinds) leases a machine id of its own from the store, as gen does: a
2-minute lease renewed every 30 s. /readyz answers 200 only while every kind holds its lease.
SIGINT and SIGTERM stop taking connections, let requests in flight finish (up to 10 s), then
release the machine ids. The API: docs/serve.md and docs/openapi.yaml.";

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on (HTTP/1.1 and HTTP/2, gRPC on the same port).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN, value_parser = listen_addr)]
    listen: SocketAddr,
    #[arg(long, default_value = DEFAULT_STORE, help = STORE_HELP)]
    store: String,
    /// The kinds to serve, each on a machine ID of its own [default: counter,sortable, and
    /// encrypted when a base key is given].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "KIND,...")]
    kinds: Vec<Kind>,
    /// Bearer tokens: who may call, which kinds, how fast (docs/serve.md, "Tokens"). Without
    /// it anyone who reaches the port may call.
    ///
    /// A TOML file of [[token]] tables, each with: name = "billing" (shown in errors; the
    /// token itself never is); sha256 = the token's SHA-256 in hex, from
    /// `printf %s "$TOKEN" | sha256sum`; kinds = ["counter", "sortable"] (optional: all
    /// kinds); nonces_per_second = 100000 (its rate limit, in bursts of up to one second's
    /// worth). Callers send `Authorization: Bearer TOKEN`.
    #[arg(long, value_name = "PATH")]
    tokens_file: Option<PathBuf>,
    /// TLS: the certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS: the private key (PEM); needs --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The most connections served at once; more wait to be accepted.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_connections)]
    max_connections: usize,
    /// The longest a client may take to send a request's headers (from connecting, or from
    /// its last answer), and then again its body; with TLS, its handshake too: idle and
    /// trickling clients are cut off.
    #[arg(long, value_name = "SECS", default_value_t = Limits::default().header_timeout.as_secs_f64(), value_parser = parse_timeout, allow_negative_numbers = true)]
    header_timeout: f64,
    /// No progress lines (errors are still reported).
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    key: KeyArgs,
    /// The epoch timestamps count from, in Unix ms.
    #[arg(long, default_value_t = nononce::nonce::DEFAULT_EPOCH_MS)]
    epoch_ms: u64,
    #[command(flatten)]
    ciphers: CipherArgs,
}

/// Runs `nononce serve` until a signal.
pub fn run(args: ServeArgs) -> Result<(), Exit> {
    let key = args.key.key()?;
    let kinds = if args.kinds.is_empty() {
        let mut kinds = vec![Kind::Counter, Kind::Sortable];
        if key.is_some() {
            kinds.push(Kind::Encrypted);
        }
        kinds
    } else {
        let mut kinds = Vec::new();
        for kind in args.kinds.iter().copied() {
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        kinds
    };
    if kinds.contains(&Kind::Encrypted) && key.is_none() {
        return Err(format!("--kinds encrypted needs a key: {}", crate::keys::HOW).into());
    }
    let tokens = match &args.tokens_file {
        Some(path) => Tokens::load(path)?,
        None => Tokens::open(),
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(Tls::load(cert, key)?),
        _ => None,
    };
    let limits = Limits {
        max_connections: args.max_connections.max(1),
        header_timeout: Duration::from_secs_f64(args.header_timeout),
        handshake_timeout: Duration::from_secs_f64(args.header_timeout),
        ..Limits::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async move {
        let mut signals = crate::cli::Signals::new()?;
        // Bound before any lease is taken: a port in use fails at once, holding nothing.
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| bind_error(args.listen, &e))?;
        let metrics = metrics::Metrics::install()?;
        let workers = tokio::select! {
            started = workers::Workers::start(&args.store, &kinds, &args, key, args.quiet) => started?,
            signal = signals.recv() => return Err(Exit::Signal(signal)),
        };
        let api = Arc::new(Api::new(workers, args.epoch_ms, tokens, metrics));
        if !args.quiet {
            let scheme = if tls.is_some() { "https" } else { "http" };
            crate::output::say(&format!(
                "serving on {scheme}://{} ({})",
                listener.local_addr().unwrap_or(args.listen),
                api.workers().describe()
            ));
        }
        let router = http::router(Arc::clone(&api)).merge(grpc::router(Arc::clone(&api)));
        let signal = listener::serve(listener, router, tls, limits, signals.recv()).await;
        // Requests still running past the drain find their factory stopped.
        let released = api.workers().shutdown().await;
        for (line, failed) in farewell(signal, &released) {
            if failed || !args.quiet {
                crate::output::say(&line);
            }
        }
        Err(Exit::Signal(signal))
    })
}

/// A `--header-timeout`: a positive number of seconds, at most a day.
fn parse_timeout(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs <= 86_400.0 => Ok(secs),
        _ => {
            Err("give a number of seconds above 0 and at most 86400, such as 10 or 0.5".to_owned())
        }
    }
}

/// What the exit says of each machine ID: the IDs given back in one line, then one line per
/// ID that could not be (reported even with --quiet: another server cannot have it yet).
fn farewell(signal: u8, released: &[workers::Released]) -> Vec<(String, bool)> {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        _ => "SIGTERM",
    };
    let mut given_back = Vec::new();
    let mut lines = Vec::new();
    for r in released {
        match (r.machine_id, &r.outcome) {
            (Some(id), Some(Ok(()))) => given_back.push(format!("{id} ({})", r.kind.name())),
            (Some(id), Some(Err(why))) => lines.push((
                format!(
                    "could not release machine id {id} ({}): {why}; it is free again when its lease runs out (within 2 min)",
                    r.kind.name()
                ),
                true,
            )),
            // The lease was already lost or never granted: nothing to give back.
            _ => {}
        }
    }
    let head = if !given_back.is_empty() {
        format!(
            "stopped by {name}: released machine id {}; free for another server after the 10 s release guard",
            given_back.join(", ")
        )
    } else if lines.is_empty() {
        format!("stopped by {name}: no machine id was held")
    } else {
        format!("stopped by {name}")
    };
    lines.insert(0, (head, false));
    lines
}

/// Reads `--listen`: an IP address and a port, or `localhost:PORT` (IPv4 loopback, as the
/// default; a name is not looked up, so the address served is the one shown).
fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    if let Some(port) = text.strip_prefix("localhost:")
        && let Ok(port) = port.parse::<u16>()
    {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    Err("give an IP address and a port: 127.0.0.1:7300 (this host only), 0.0.0.0:7300 (every interface) or [::]:7300".into())
}

fn bind_error(addr: SocketAddr, e: &std::io::Error) -> Exit {
    Exit::Fail(match e.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "cannot listen on {addr}: the port is in use (another nononce serve?): pick another with --listen"
        ),
        std::io::ErrorKind::PermissionDenied => format!(
            "cannot listen on {addr}: permission denied (ports below 1024 need privileges): pick another with --listen"
        ),
        _ => format!("cannot listen on {addr}: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::workers::Released;
    use super::*;

    fn released(
        kind: Kind,
        machine_id: Option<u16>,
        outcome: Option<Result<(), &str>>,
    ) -> Released {
        Released {
            kind,
            machine_id,
            outcome: outcome.map(|o| o.map_err(str::to_owned)),
        }
    }

    /// The exit names the IDs given back, and only those; a failed release is a line of its
    /// own, shown even with --quiet.
    #[test]
    fn farewell_says_what_was_released() {
        let both = farewell(
            15,
            &[
                released(Kind::Counter, Some(3), Some(Ok(()))),
                released(Kind::Sortable, Some(4), Some(Ok(()))),
            ],
        );
        assert_eq!(
            both,
            vec![(
                "stopped by SIGTERM: released machine id 3 (counter), 4 (sortable); free for another server after the 10 s release guard".to_owned(),
                false
            )]
        );
        let one_failed = farewell(
            2,
            &[
                released(
                    Kind::Counter,
                    Some(3),
                    Some(Err("the store did not answer")),
                ),
                released(Kind::Sortable, Some(4), Some(Ok(()))),
            ],
        );
        assert_eq!(
            one_failed,
            vec![
                (
                    "stopped by SIGINT: released machine id 4 (sortable); free for another server after the 10 s release guard".to_owned(),
                    false
                ),
                (
                    "could not release machine id 3 (counter): the store did not answer; it is free again when its lease runs out (within 2 min)".to_owned(),
                    true
                ),
            ]
        );
        let all_failed = farewell(15, &[released(Kind::Counter, Some(3), Some(Err("gone")))]);
        assert_eq!(all_failed[0], ("stopped by SIGTERM".to_owned(), false));
        assert!(all_failed[1].1);
        let none_held = farewell(1, &[released(Kind::Counter, None, None)]);
        assert_eq!(
            none_held,
            vec![(
                "stopped by SIGHUP: no machine id was held".to_owned(),
                false
            )]
        );
    }

    #[test]
    fn listen_takes_addresses_and_localhost() {
        assert_eq!(
            listen_addr("0.0.0.0:7300"),
            Ok(SocketAddr::from(([0; 4], 7300)))
        );
        assert_eq!(listen_addr("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert_eq!(
            listen_addr("localhost:7300"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 7300)))
        );
        for wrong in [
            ":7300",
            "7300",
            "localhost",
            "localhost:99999",
            "db.internal:7300",
        ] {
            assert!(
                listen_addr(wrong).unwrap_err().contains("127.0.0.1:7300"),
                "{wrong}"
            );
        }
    }
}
