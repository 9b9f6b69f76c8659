//! The listener: HTTP/1.1 and HTTP/2 (gRPC included) on one port, TLS when configured, a cap
//! on connections, timeouts against idle and slow clients, and a graceful drain.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How long requests in flight may take to finish once a signal arrived.
pub const DRAIN: Duration = Duration::from_secs(10);

/// The longest a request's body may take to arrive once its headers are in; the listener
/// sets it (`--header-timeout`), so that a body sent a byte at a time cannot hold a
/// connection.
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub Duration);

impl Default for BodyTimeout {
    fn default() -> Self {
        Self(Limits::default().header_timeout)
    }
}

/// What one server allows each client.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; the next waits to be accepted.
    pub max_connections: usize,
    /// The longest wait for a request's headers, from the connection's start or the end of
    /// its last request: a client that sends nothing, or its headers a byte at a time, is
    /// disconnected after it. A request's body, once its headers are in, gets as long again.
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
    /// Reads the certificate chain and private key (PEM); offers HTTP/2 (gRPC needs it) and
    /// HTTP/1.1 by ALPN.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, String> {
        let cert_at = format!("--tls-cert {}", cert.display());
        let key_at = format!("--tls-key {}", key.display());
        let chain = CertificateDer::pem_file_iter(cert)
            .map_err(|e| pem_error(&cert_at, &e, "certificate chain"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem_error(&cert_at, &e, "certificate chain"))?;
        if chain.is_empty() {
            return Err(pem_error(
                &cert_at,
                &rustls::pki_types::pem::Error::NoItemsFound,
                "certificate chain",
            ));
        }
        let private_key =
            PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error(&key_at, &e, "private key"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .with_no_client_auth()
            .with_single_cert(chain, private_key)
            .map_err(|e| {
                format!(
                    "{key_at} does not go with {cert_at}: {e}: give the private key of the certificate's first entry"
                )
            })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// A PEM file that did not give `what`, as one line naming the option.
fn pem_error(at: &str, e: &rustls::pki_types::pem::Error, what: &str) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(e) => format!("cannot read {at}: {e}: give the path of the {what} in PEM"),
        Error::NoItemsFound => format!(
            "{at} holds no {what} (no -----BEGIN ...----- block of one): give the {what} in PEM"
        ),
        other => format!("{at} is not valid PEM: {other}: give the {what} in PEM"),
    }
}

/// A connection whose first bytes must arrive within a deadline.
///
/// hyper's header timeout starts only once it knows the connection speaks HTTP/1; before
/// that, telling HTTP/1 from HTTP/2 waits for the first bytes with no limit. This bounds
/// that wait: a client that connects and sends nothing, or part of the HTTP/2 preface, is
/// disconnected when `deadline` passes. After the preface's length, reads are left alone
/// (HTTP/1's header timeout and HTTP/2's keep-alive take over).
struct FirstBytesDeadline<S> {
    inner: S,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Bytes still to come before the deadline no longer applies.
    awaited: usize,
}

/// The length of the HTTP/2 connection preface, all hyper reads to pick a protocol.
const PREFACE_LEN: usize = 24;

impl<S> FirstBytesDeadline<S> {
    fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
            awaited: PREFACE_LEN,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstBytesDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.awaited = this
                    .awaited
                    .saturating_sub(buf.filled().len().saturating_sub(before));
                if this.awaited == 0 {
                    this.deadline = None;
                }
                Poll::Ready(result)
            }
            Poll::Pending => match &mut this.deadline {
                Some(deadline) => {
                    ready!(deadline.as_mut().poll(cx));
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request within the header timeout",
                    )))
                }
                None => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstBytesDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
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
    let service =
        TowerToHyperService::new(router.layer(Extension(BodyTimeout(limits.header_timeout))));
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
                let stream = FirstBytesDeadline::new(stream, limits.header_timeout);
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                let conn = watcher.watch(conn.into_owned());
                tokio::spawn(async move {
                    let _ = conn.await;
                    drop(permit);
                });
            }
            Some(tls) => {
                let acceptor = tls.acceptor.clone();
                let (handshake_timeout, header_timeout) =
                    (limits.handshake_timeout, limits.header_timeout);
                tokio::spawn(async move {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    let stream = FirstBytesDeadline::new(stream, header_timeout);
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let _ = watcher.watch(conn.into_owned()).await;
                    drop(permit);
                });
            }
        }
    };
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
    stopped
}
