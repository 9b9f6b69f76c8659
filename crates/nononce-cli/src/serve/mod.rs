//! `nononce serve`: nonces over HTTP/JSON (`http.rs`) and gRPC (`grpc.rs`) on one port, each
//! kind from a factory on a machine ID of its own, leased from the store as `gen` leases one
//! (`workers.rs`). The operations themselves know no transport (`api.rs`).
//!
//! Shutdown (SIGINT, SIGTERM): the listener closes, requests in flight finish (up to
//! [`DRAIN`]), then each factory stops and its machine ID is released.

mod api;
mod auth;
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
  nononce serve --store postgres://app@db/app --listen 0.0.0.0:7300 --tokens-file tokens.toml
  nononce serve --base-key-file nonce-key.hex --kinds counter,encrypted

Each kind served (--kinds) leases a machine ID of its own from the store, as gen does: a
2-minute lease renewed every 30 s. /readyz answers 200 only while every kind holds its lease.
SIGINT and SIGTERM stop taking connections, let requests in flight finish (up to 10 s), then
release the machine ids. The API: docs/serve.md and docs/openapi.yaml.";

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on (HTTP/1.1 and HTTP/2, gRPC on the same port).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    #[arg(long, default_value = DEFAULT_STORE, help = STORE_HELP)]
    store: String,
    /// The kinds to serve, each on a machine ID of its own [default: counter,sortable, and
    /// encrypted when a base key is given].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "KIND,...")]
    kinds: Vec<Kind>,
    /// Bearer tokens: who may call, which kinds, how fast (docs/serve.md, "Tokens"). Without
    /// it anyone who reaches the port may call.
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
        let router = http::router(Arc::clone(&api));
        let signal = listener::serve(listener, router, tls, limits, signals.recv()).await;
        // Requests still running past the drain find their factory stopped.
        api.workers().shutdown().await;
        Err(Exit::Signal(signal))
    })
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
