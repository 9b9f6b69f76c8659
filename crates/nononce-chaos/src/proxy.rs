//! A TCP proxy between one chaos node and its coordinator, for network faults.
//!
//! - [`Mode::Pass`]: bytes flow both ways.
//! - [`Mode::Stall`]: nothing is forwarded either way; bytes wait (in the kernel buffers and
//!   one chunk in the proxy) as on a cut link, and are delivered in order once healed.
//! - [`Mode::Reset`]: every open connection is reset (`SO_LINGER` 0, then closed: both peers
//!   get an RST), and every connection accepted while the mode lasts is reset at once.
//! - [`Mode::Delay`]: every chunk waits this many ms before it is forwarded.
//!
//! The upstream address can change at run time (a SQL failover repoints the node); the
//! connections to the old upstream are reset.
//!
//! `chaos-proxy` runs a set of these for the orchestrator, controlled over stdin.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a connection to the upstream may take before the client is reset.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward.
    Pass,
    /// Forward nothing, keep every byte for later.
    Stall,
    /// Reset every connection, now and as they come.
    Reset,
    /// Delay every chunk by this many ms.
    Delay(u64),
}

impl std::str::FromStr for Mode {
    type Err = String;

    /// `pass`, `stall`, `reset` or `delay:<ms>`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pass" => Ok(Mode::Pass),
            "stall" => Ok(Mode::Stall),
            "reset" => Ok(Mode::Reset),
            _ => s
                .strip_prefix("delay:")
                .and_then(|ms| ms.parse().ok())
                .map(Mode::Delay)
                .ok_or_else(|| {
                    format!("unknown proxy mode {s:?}: use pass, stall, reset or delay:MS")
                }),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Control {
    mode: Mode,
    upstream: SocketAddr,
    /// Bumped to reset every open connection.
    resets: u64,
}

/// One proxy: a loopback listener forwarding to `upstream`. Dropping it closes the listener
/// and every connection.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    control: watch::Sender<Control>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port. Must be called within a tokio runtime.
    ///
    /// # Errors
    /// The listener could not be bound.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (control, watching) = watch::channel(Control {
            mode: Mode::Pass,
            upstream,
            resets: 0,
        });
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                tokio::spawn(serve(client, watching.clone()));
            }
        });
        Ok(Self {
            addr,
            control,
            accept,
        })
    }

    /// The address nodes connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Changes the mode; entering [`Mode::Reset`] resets every open connection.
    pub fn set(&self, mode: Mode) {
        self.control.send_modify(|c| {
            if mode == Mode::Reset && c.mode != Mode::Reset {
                c.resets += 1;
            }
            c.mode = mode;
        });
    }

    /// Forwards new connections to `upstream`; open ones (to the old upstream) are reset.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        self.control.send_modify(|c| {
            c.upstream = upstream;
            c.resets += 1;
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Every connection task sees the sender go and closes its sockets.
    }
}

fn reset(stream: &TcpStream) {
    // Linger 0: close sends an RST instead of a FIN, as a crashed peer or a middlebox does.
    let _ = stream.set_zero_linger();
}

async fn serve(mut client: TcpStream, mut control: watch::Receiver<Control>) {
    let now = *control.borrow_and_update();
    if now.mode == Mode::Reset {
        reset(&client);
        return;
    }
    let connect = TcpStream::connect(now.upstream);
    let Ok(Ok(mut server)) = tokio::time::timeout(CONNECT_TIMEOUT, connect).await else {
        // The coordinator is down: the client sees its connection reset.
        reset(&client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let was_reset = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let (up, down) = (control.clone(), control.clone());
        let pumps = async {
            tokio::join!(
                pump(client_read, server_write, up),
                pump(server_read, client_write, down)
            )
        };
        tokio::select! {
            _ = pumps => false,
            // The reset counter moved past the one this connection began with, or the proxy
            // is gone.
            _ = control.wait_for(|c| c.resets != now.resets) => true,
        }
    };
    if was_reset {
        reset(&client);
        reset(&server);
    }
}

/// Returns once the mode is not [`Mode::Stall`] (or the proxy is gone: `None`), with the
/// delay to apply.
async fn unstalled(control: &mut watch::Receiver<Control>) -> Option<u64> {
    match control.wait_for(|c| c.mode != Mode::Stall).await.ok()?.mode {
        Mode::Delay(ms) => Some(ms),
        _ => Some(0),
    }
}

async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut control: watch::Receiver<Control>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // While stalled nothing is read: the sender's bytes stay queued in the kernel.
        if unstalled(&mut control).await.is_none() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // A chunk read just before a stall is held until the stall ends.
        let Some(delay) = unstalled(&mut control).await else {
            return;
        };
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An upstream that answers every chunk with `tag` followed by the chunk.
    async fn echo(tag: &'static [u8]) -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let mut out = tag.to_vec();
                        out.extend_from_slice(&buf[..n]);
                        if s.write_all(&out).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn read_some(s: &mut TcpStream, within: Duration) -> Option<io::Result<Vec<u8>>> {
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(within, s.read(&mut buf)).await {
            Ok(Ok(n)) => Some(Ok(buf[..n].to_vec())),
            Ok(Err(e)) => Some(Err(e)),
            Err(_) => None,
        }
    }

    const SOON: Duration = Duration::from_secs(2);

    /// Sends `bytes` and reads the answer.
    async fn ask(c: &mut TcpStream, bytes: &[u8]) -> Vec<u8> {
        c.write_all(bytes).await.unwrap();
        read_some(c, SOON).await.unwrap().unwrap()
    }

    /// A proxy to an upstream answering `a:`, and a client through it answered once.
    async fn connected() -> (Proxy, TcpStream) {
        let proxy = Proxy::start(echo(b"a:").await).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(ask(&mut c, b"1").await, b"a:1");
        (proxy, c)
    }

    async fn assert_reset(c: &mut TcpStream) {
        let e = read_some(c, SOON).await.unwrap().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
    }

    #[tokio::test]
    async fn a_stall_holds_bytes_until_healed_and_latency_delays_every_chunk() {
        let (proxy, mut c) = connected().await;
        proxy.set(Mode::Stall);
        c.write_all(b"2").await.unwrap();
        assert!(
            read_some(&mut c, Duration::from_millis(400))
                .await
                .is_none(),
            "nothing gets through a stall"
        );
        proxy.set(Mode::Pass);
        assert_eq!(read_some(&mut c, SOON).await.unwrap().unwrap(), b"a:2");
        proxy.set(Mode::Delay(250));
        let started = Instant::now();
        assert_eq!(ask(&mut c, b"x").await, b"a:x");
        let took = started.elapsed();
        // Once on the way there, once on the way back.
        assert!(took >= Duration::from_millis(500), "{took:?}");
        proxy.set(Mode::Pass);
        let started = Instant::now();
        assert_eq!(ask(&mut c, b"y").await, b"a:y");
        assert!(started.elapsed() < Duration::from_millis(250));
    }

    #[tokio::test]
    async fn resets_reach_open_and_new_connections() {
        // In reset mode: the open connection and every new one, until healed.
        let (proxy, mut c) = connected().await;
        proxy.set(Mode::Reset);
        assert_reset(&mut c).await;
        assert_reset(&mut TcpStream::connect(proxy.addr()).await.unwrap()).await;
        proxy.set(Mode::Pass);
        let mut f = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(ask(&mut f, b"3").await, b"a:3");
        // A new upstream: the open connection is reset, a new one reaches the new upstream.
        proxy.set_upstream(echo(b"b:").await);
        assert_reset(&mut f).await;
        let mut d = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(ask(&mut d, b"2").await, b"b:2");
        // An upstream that is down: the client is reset.
        let gone = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        proxy.set_upstream(gone.local_addr().unwrap());
        drop(gone);
        assert_reset(&mut TcpStream::connect(proxy.addr()).await.unwrap()).await;
    }

    #[test]
    fn modes_parse() {
        assert_eq!("delay:300".parse::<Mode>().unwrap(), Mode::Delay(300));
        assert_eq!("stall".parse::<Mode>().unwrap(), Mode::Stall);
        assert!("cut".parse::<Mode>().is_err());
    }
}
