//! The options of `nononce serve`.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::listener::Limits;
use crate::codec::Kind;
use crate::factory_options::CipherArgs;
use crate::keys::KeyArgs;
use crate::store_arg::StoreArgs;

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
the leases are in this user's SQLite file on this host (~/.local/state/nononce/leases.db),
which every nononce of the user on this host shares. Servers of a fleet need a shared store
(--store postgres://...) for distinct machine ids.

Each kind served (--kinds) leases a machine id of its own from the store, as gen does: a
2-minute lease renewed every 30 s. /readyz answers 200 only while every kind holds its lease.
SIGINT and SIGTERM stop taking connections, let requests in flight finish (up to 10 s), then
release the machine ids. The API: docs/serve.md and docs/openapi.yaml.";

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on (HTTP/1.1 and HTTP/2, gRPC on the same port).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN, value_parser = listen_addr)]
    pub(super) listen: SocketAddr,
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// The kinds to serve, each on a machine ID of its own [default: counter,sortable, and
    /// encrypted when a base key is given].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "KIND,...")]
    pub(super) kinds: Vec<Kind>,
    /// Bearer tokens: who may call, which kinds, how fast (docs/serve.md, "Tokens"). Without
    /// it anyone who reaches the port may call.
    ///
    /// A TOML file of [[token]] tables, each with: name = "billing" (shown in errors; the
    /// token itself never is); sha256 = the token's SHA-256 in hex, from
    /// `printf %s "$TOKEN" | sha256sum`; kinds = ["counter", "sortable"] (optional: all
    /// kinds); nonces_per_second = 100000 (its rate limit, in bursts of up to one second's
    /// worth). Callers send `Authorization: Bearer TOKEN`.
    #[arg(long, value_name = "PATH")]
    pub(super) tokens_file: Option<PathBuf>,
    /// TLS: the certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub(super) tls_cert: Option<PathBuf>,
    /// TLS: the private key (PEM); needs --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub(super) tls_key: Option<PathBuf>,
    /// The most connections served at once; more wait to be accepted.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_connections)]
    pub(super) max_connections: usize,
    /// The longest a client may take to send a request's headers (from connecting, or from
    /// its last answer), and then again its body; with TLS, its handshake too: idle and
    /// trickling clients are cut off.
    #[arg(long, value_name = "SECS", default_value_t = Limits::default().header_timeout.as_secs_f64(), value_parser = parse_timeout, allow_negative_numbers = true)]
    pub(super) header_timeout: f64,
    /// No progress lines (errors are still reported).
    #[arg(short, long)]
    pub(super) quiet: bool,
    #[command(flatten)]
    pub(super) key: KeyArgs,
    /// The epoch timestamps count from, in Unix ms.
    #[arg(long, default_value_t = nononce::nonce::DEFAULT_EPOCH_MS)]
    pub(super) epoch_ms: u64,
    #[command(flatten)]
    pub(super) ciphers: CipherArgs,
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

/// Reads `--listen`: an IP address and a port, or `localhost:PORT` (IPv4 loopback, as the
/// default; a name is not looked up, so the address served is the one shown).
pub(super) fn listen_addr(text: &str) -> Result<SocketAddr, String> {
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
