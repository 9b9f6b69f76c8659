//! Shared test helpers: the test cluster's endpoints, prefixes of a test's own with cleanup,
//! and etcd servers of a test's own.
#![allow(dead_code, reason = "each test file uses a different subset")]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lease_core::{ErrorKind, LeaseError, MachineId, StoreAdmin};
use lease_etcd::etcd_client::{Client, DeleteOptions, Error, GetOptions};
use lease_etcd::{EtcdLeaseError, EtcdOptions, EtcdStrategy};
use nonce_core::{BootClock, Clock};

/// The endpoints of the shared test server (`cargo xtask test` starts it).
pub fn endpoints() -> Vec<String> {
    std::env::var("NONONCE_TEST_ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2390".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// A plain client for direct requests; panics (a test failure, never a skip) if the cluster
/// does not answer.
pub async fn raw_at(endpoints: &[String]) -> Client {
    let connect = async {
        let mut client = Client::connect(endpoints, None).await?;
        client.status().await?;
        Ok::<_, Error>(client)
    };
    let failure = match tokio::time::timeout(Duration::from_secs(10), connect).await {
        Ok(Ok(client)) => return client,
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer within 10 s".to_owned(),
    };
    panic!(
        "etcd does not answer at {endpoints:?} ({failure}): run `cargo xtask test`, which starts it"
    )
}

/// A client on the shared test server.
pub async fn raw() -> Client {
    raw_at(&endpoints()).await
}

/// Runs `work` on a runtime of its own, on a thread of its own (off any runtime the caller is
/// on); `None` if it panicked.
fn on_own_runtime<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> Option<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    std::thread::spawn(move || runtime.expect("runtime").block_on(work))
        .join()
        .ok()
}

/// A unique key prefix on the shared server; its keys are deleted and their leases revoked
/// when dropped.
pub struct Prefix {
    pub name: String,
    endpoints: Vec<String>,
}

impl Prefix {
    pub fn new() -> Self {
        Self::at(endpoints())
    }

    pub fn at(endpoints: Vec<String>) -> Self {
        Self {
            name: format!("/nononce-test/{:016x}/", rand::random::<u64>()),
            endpoints,
        }
    }

    pub fn lease_key(&self, id: u16) -> String {
        format!("{}{id}", self.name)
    }

    pub fn floor_key(&self, id: u16) -> String {
        format!("{}floor/{id}", self.name)
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        let (name, endpoints) = (self.name.clone(), self.endpoints.clone());
        on_own_runtime(async move {
            let work = async {
                let mut client = Client::connect(&endpoints, None).await?;
                let keys = client
                    .get(name.as_str(), Some(GetOptions::new().with_prefix()))
                    .await?;
                let leases: BTreeSet<i64> = keys.kvs().iter().map(|kv| kv.lease()).collect();
                for lease in leases.into_iter().filter(|l| *l != 0) {
                    let _ = client.lease_revoke(lease).await;
                }
                client
                    .delete(name.as_str(), Some(DeleteOptions::new().with_prefix()))
                    .await
            };
            let _ = tokio::time::timeout(Duration::from_secs(10), work).await;
        });
    }
}

/// Options for tests: the given prefix on `endpoints`, short timeouts.
pub fn options_at(endpoints: &[String], prefix: &Prefix) -> EtcdOptions {
    EtcdOptions::new(endpoints.iter().cloned())
        .with_prefix(prefix.name.clone())
        .with_request_timeout(Duration::from_secs(2))
        .with_connect_timeout(Duration::from_secs(1))
}

pub fn options(prefix: &Prefix) -> EtcdOptions {
    options_at(&endpoints(), prefix)
}

/// A strategy on the shared server using `prefix`, which it initializes (as an operator does
/// once for a new prefix).
pub async fn strategy(prefix: &Prefix) -> EtcdStrategy {
    // Fail clearly if the server is not there.
    drop(raw().await);
    initialized(options(prefix)).await
}

/// A strategy with `options`, whose prefix it initializes.
pub async fn initialized(options: EtcdOptions) -> EtcdStrategy {
    let strategy = EtcdStrategy::new(options).expect("valid options");
    initialize(&strategy).await;
    strategy
}

/// Initializes `strategy`'s prefix (`nononce leases migrate`): without it the first acquire
/// holds acquisition off.
pub async fn initialize(strategy: &EtcdStrategy) {
    StoreAdmin::migrate(strategy)
        .await
        .unwrap_or_else(|e| panic!("initializing the prefix: {e}"));
}

/// This machine's clock in Unix ms.
pub fn now_ms() -> u64 {
    BootClock::new().now_ms()
}

pub use lease_testkit::poll;

/// The error of `result`, which must be one of `kind`.
pub fn fails<T: std::fmt::Debug>(
    result: Result<T, EtcdLeaseError>,
    kind: ErrorKind,
) -> EtcdLeaseError {
    let error = result.expect_err("expected an error");
    assert_eq!(error.kind(), kind, "{error}");
    error
}

/// Holds every ID except `free` with keys of a foreign owner (no lease; the prefix is removed
/// at the end).
pub async fn occupy_all_but(client: &mut Client, prefix: &Prefix, free: &[u16]) {
    for id in (0..MachineId::COUNT).filter(|id| !free.contains(id)) {
        let put = client.put(prefix.lease_key(id), "foreign", None).await;
        put.expect("put");
    }
}

/// The etcd binary (`NONONCE_TEST_ETCD_BIN`, or `etcd` on the `PATH`).
fn binary() -> PathBuf {
    if let Ok(path) = std::env::var("NONONCE_TEST_ETCD_BIN") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("etcd"))
                .find(|path| path.is_file())
        })
        .unwrap_or_else(|| {
            panic!("etcd not found: set NONONCE_TEST_ETCD_BIN or run `cargo xtask test`, which installs it")
        })
}

/// One member of a cluster of a test's own.
pub struct Member {
    pub client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Member {
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }
}

/// An etcd cluster of a test's own (one or three members on free loopback ports, data in a
/// temporary directory), stopped and removed on drop.
pub struct OwnCluster {
    pub members: Vec<Member>,
    /// The arguments every member starts with: the cluster, its token, the log.
    shared: String,
}

impl OwnCluster {
    pub fn start(size: usize) -> Self {
        let token = format!("nononce-test-{:x}", rand::random::<u64>());
        let port = || lease_testkit::ports::server_port().expect("a free loopback port");
        let members: Vec<Member> = (0..size)
            .map(|i| Member {
                client_port: port(),
                peer_port: port(),
                dir: std::env::temp_dir().join(format!("{token}-m{i}")),
                child: None,
            })
            .collect();
        let peers = members.iter().enumerate();
        let peers = peers.map(|(i, m)| format!("m{i}=http://127.0.0.1:{}", m.peer_port));
        let shared = format!(
            "--initial-cluster {} --initial-cluster-state new --initial-cluster-token {token} \
             --logger zap --log-outputs stderr",
            peers.collect::<Vec<_>>().join(",")
        );
        let mut cluster = Self { members, shared };
        (0..size).for_each(|i| cluster.spawn(i));
        (0..size).for_each(|i| cluster.wait_healthy(i));
        cluster
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    fn spawn(&mut self, i: usize) {
        let member = &mut self.members[i];
        std::fs::create_dir_all(&member.dir).expect("member directory");
        let (client, peer) = (member.endpoint(), member.peer_port);
        let args = format!(
            "--name m{i} --listen-client-urls {client} --advertise-client-urls {client} \
             --listen-peer-urls http://127.0.0.1:{peer} \
             --initial-advertise-peer-urls http://127.0.0.1:{peer} {}",
            self.shared
        );
        let log = std::fs::File::create(member.dir.with_extension("log")).expect("log file");
        let child = Command::new(binary())
            .args(args.split(' '))
            .arg("--data-dir")
            .arg(member.dir.join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start own etcd");
        member.child = Some(child);
    }

    /// Waits until member `i` answers a linearizable read (it has a leader).
    fn wait_healthy(&self, i: usize) {
        let endpoint = self.members[i].endpoint();
        let started = Instant::now();
        let ready = || {
            let endpoint = endpoint.clone();
            on_own_runtime(async {
                let check = async {
                    let mut client = Client::connect([endpoint], None).await.ok()?;
                    client.get("health", None).await.ok()
                };
                let answer = tokio::time::timeout(Duration::from_millis(1000), check).await;
                answer.ok().flatten().is_some()
            })
            .unwrap_or(false)
        };
        while !ready() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "own etcd member {i} did not answer on {endpoint} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills member `i` (SIGKILL); its data stays.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data, and waits until it answers.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_healthy(i);
    }

    /// Kills member `i`, deletes its data and starts it as a new single-member cluster on the
    /// same ports: an etcd that forgot everything (size-1 clusters only).
    pub fn wipe_and_restart(&mut self, i: usize) {
        assert_eq!(self.members.len(), 1, "only a single member can be wiped");
        self.kill(i);
        let _ = std::fs::remove_dir_all(self.members[i].dir.join("data"));
        self.restart(i);
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
            let dir = &self.members[i].dir;
            let _ = std::fs::remove_dir_all(dir);
            let _ = std::fs::remove_file(dir.with_extension("log"));
        }
    }
}
