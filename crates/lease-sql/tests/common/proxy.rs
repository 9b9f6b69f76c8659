//! A TCP proxy between a pool and its database server, counting the client's requests, that a
//! test can cut.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP proxy to a database server. It counts request flights: data from the client after the
/// server last sent something (or first). Cut, it closes every open connection and refuses new
/// ones until it is restored.
pub struct Proxy {
    pub addr: SocketAddr,
    flights: Arc<AtomicUsize>,
    cut: watch::Sender<bool>,
}

/// Copies `from` to `to` until either ends, calling `sent` before each chunk is forwarded.
async fn forward(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    sent: impl Fn(),
) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        sent();
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let flights = Arc::new(AtomicUsize::new(0));
        let (cut, cut_rx) = watch::channel(false);
        let counter = Arc::clone(&flights);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *cut_rx.borrow() {
                    continue;
                }
                let (counter, mut cut_rx) = (Arc::clone(&counter), cut_rx.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (client_rx, client_tx) = client.into_split();
                    let (server_rx, server_tx) = server.into_split();
                    // true: the server spoke last (the start of a session counts as that too).
                    let answered = AtomicBool::new(true);
                    let requests = forward(client_rx, server_tx, || {
                        if answered.swap(false, Ordering::SeqCst) {
                            counter.fetch_add(1, Ordering::SeqCst);
                        }
                    });
                    // Marked before it is forwarded: the client cannot send its next request
                    // before it has this answer.
                    let answers = forward(server_rx, client_tx, || {
                        answered.store(true, Ordering::SeqCst);
                    });
                    // Dropping both ends closes them.
                    tokio::select! {
                        _ = async { tokio::join!(requests, answers) } => {}
                        _ = cut_rx.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Self { addr, flights, cut }
    }

    pub fn flights(&self) -> usize {
        self.flights.load(Ordering::SeqCst)
    }

    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn restore(&self) {
        self.cut.send_replace(false);
    }
}
