//! A TCP proxy on loopback that a test cuts and heals: a client's connection to ZooKeeper lost
//! for as long as the test says, without touching the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Forwards each connection to `target` until [`cut`](Proxy::cut); while cut, new connections
/// are closed at once. Stops when dropped.
pub struct Proxy {
    pub address: String,
    cut: Arc<AtomicBool>,
    /// Bumped by every cut: each connection ends when it changes.
    generation: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a proxy");
        let address = listener.local_addr().expect("proxy address").to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let (generation, _) = watch::channel(0);
        let target = target.to_owned();
        let (flag, sender) = (Arc::clone(&cut), generation.clone());
        let connections = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if flag.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                connections.fetch_add(1, Ordering::SeqCst);
                let target = target.clone();
                let mut ended = sender.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = copy_bidirectional(&mut client, &mut server) => {}
                        _ = ended.changed() => {}
                    }
                });
            }
        });
        Self {
            address,
            cut,
            generation,
            task,
        }
    }

    /// Closes every connection and refuses new ones until [`heal`](Proxy::heal).
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}
