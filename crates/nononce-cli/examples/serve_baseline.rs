//! The floor of `nononce serve`'s per-request cost: an axum handler that returns a constant
//! nonce list, on the same listener (`nononce_cli::serve::serve_router`), limits and runtime as
//! `nononce serve`. `cargo xtask serve-bench` loads both side by side.
//!
//! ```text
//! cargo run --release -p nononce-cli --example serve_baseline -- 127.0.0.1:0
//! ```
//!
//! It prints `serving on http://ADDR` to stderr once it listens, and stops on SIGINT or SIGTERM
//! after the drain `nononce serve` allows.

use std::net::SocketAddr;
use std::process::ExitCode;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::routing::get;
use nononce_cli::serve::{DEFAULT_LISTEN, Limits, serve_router};

/// What `GET /v1/nonces?count=1` answers with, the same size and type as `nononce serve`'s.
const ONE_NONCE: &str = "{\"nonces\":[\"03be4cb500002000\"]}";

fn main() -> ExitCode {
    let text = std::env::args()
        .nth(1)
        .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let Ok(addr) = text.parse::<SocketAddr>() else {
        eprintln!("serve_baseline: \"{text}\" is not an address: give one like 127.0.0.1:0");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("serve_baseline: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("serve_baseline: cannot listen on {addr}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let router = Router::new().route(
            "/v1/nonces",
            get(|| async {
                (
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    )],
                    ONE_NONCE,
                )
            }),
        );
        eprintln!(
            "serve_baseline: serving on http://{}",
            listener.local_addr().unwrap_or(addr)
        );
        serve_router(listener, router, None, Limits::default(), stop()).await;
        ExitCode::SUCCESS
    })
}

/// Resolves at the first SIGINT or SIGTERM.
async fn stop() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
