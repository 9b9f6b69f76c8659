//! `nononce serve`: nonces over HTTP/JSON (`http.rs`) and gRPC (`grpc.rs`) on one port, each
//! kind from a factory on a machine ID of its own, leased from the store as `gen` leases one
//! (`workers.rs`). The operations themselves know no transport (`api.rs`).
//!
//! Shutdown (SIGINT, SIGTERM): the listener closes, requests in flight finish (up to
//! [`DRAIN`]), then each factory stops and its machine ID is released.

mod api;
mod args;
mod auth;
mod grpc;
mod http;
mod listener;
mod metrics;
mod request;
mod workers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use api::Api;
pub use args::{DEFAULT_LISTEN, EXAMPLES, ServeArgs};
pub use auth::Tokens;
pub use listener::DRAIN;
pub use listener::{Limits, Tls, serve as serve_router};
pub use request::{ApiError, MAX_COUNT, MAX_RANGE};

use crate::codec::Kind;
use crate::output::Exit;

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
        let mut signals = crate::signals::Signals::new()?;
        let store = args.store.choose(nononce::lease::Access::Lease)?;
        // Bound before any lease is taken: a port in use fails at once, holding nothing.
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| bind_error(args.listen, &e))?;
        let metrics = metrics::Metrics::install()?;
        let workers = tokio::select! {
            started = workers::Workers::start(&store, &kinds, &args, key, args.quiet) => started?,
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
    use super::args::listen_addr;
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
