//! The tests' own ZooKeeper servers (`common::servers`), checked for what the fault tests rely
//! on: an ensemble keeps its data through `kill -9` of its leader and the leader's restart, a
//! wiped member copies the data back from the others before it serves, and a standalone server
//! keeps its data through a restart and loses it to a wipe.

use std::time::{Duration, Instant};

use zookeeper_client::{Acls, Client, CreateMode, Error};

use crate::common::{Mode, OwnEnsemble};

/// A short tick: sessions of 0.4 to 4 s, so a lost session would show within the test.
const TICK: Duration = Duration::from_millis(200);
/// How long a request may retry through a lost connection (a member killed under the client).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A session with the servers of `connect_string`, of the longest timeout the servers grant.
async fn connect(connect_string: &str) -> Client {
    let connect = Client::connector()
        .with_session_timeout(TICK * 20)
        .with_connection_timeout(Duration::from_secs(2))
        .connect(connect_string);
    match tokio::time::timeout(REQUEST_TIMEOUT, connect).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => panic!("no session with {connect_string}: {e}"),
        Err(_) => panic!("no session with {connect_string} within 10 s"),
    }
}

/// Runs `request` until it is answered, again while the client's connection is lost (its
/// server was killed: the client moves to another member, and the session stays).
async fn answered<T, F: Future<Output = Result<T, Error>>>(
    what: &str,
    mut request: impl FnMut() -> F,
) -> Result<T, Error> {
    let started = Instant::now();
    loop {
        match request().await {
            Err(Error::ConnectionLoss) if started.elapsed() < REQUEST_TIMEOUT => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(Error::ConnectionLoss) => panic!("{what}: connection lost for 10 s"),
            result => return result,
        }
    }
}

async fn create(client: &Client, path: &str, data: &[u8]) {
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    answered(path, || client.create(path, data, &options))
        .await
        .unwrap_or_else(|e| panic!("creating {path}: {e}"));
}

/// The data of `path`, `None` when there is no such znode.
async fn read(client: &Client, path: &str) -> Option<Vec<u8>> {
    match answered(path, || client.get_data(path)).await {
        Ok((data, _)) => Some(data),
        Err(Error::NoNode) => None,
        Err(e) => panic!("reading {path}: {e}"),
    }
}

/// Runs the ensemble's blocking `work` off the runtime's worker, so the clients' connections
/// are served meanwhile.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(work)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_keeps_its_znodes_through_the_kill_and_restart_of_its_leader() {
    let started = Instant::now();
    let mut ensemble = blocking(|| OwnEnsemble::start(3, TICK));
    eprintln!(
        "3 members served after {} ms",
        started.elapsed().as_millis()
    );
    let modes: Vec<_> = (0..3).map(|i| ensemble.mode(i)).collect();
    let leaders = modes.iter().filter(|m| **m == Some(Mode::Leader)).count();
    let followers = modes.iter().filter(|m| **m == Some(Mode::Follower)).count();
    assert_eq!((leaders, followers), (1, 2), "{modes:?}");

    let client = connect(&ensemble.connect_string()).await;
    create(&client, "/kept", b"before").await;
    let leader = ensemble.leader().expect("a leader");
    let failover = Instant::now();
    let successor = blocking(|| {
        ensemble.kill(leader);
        ensemble.wait_leader()
    });
    eprintln!("a new leader after {} ms", failover.elapsed().as_millis());
    assert_ne!(successor, leader);
    assert_eq!(ensemble.mode(leader), None);
    // Two of three are a quorum: the session and the data stay, and writes go on.
    assert_eq!(
        read(&client, "/kept").await.as_deref(),
        Some(&b"before"[..])
    );
    create(&client, "/written-while-down", b"during").await;

    let restart = Instant::now();
    blocking(|| ensemble.restart(leader));
    eprintln!(
        "the old leader served again after {} ms",
        restart.elapsed().as_millis()
    );
    assert_eq!(ensemble.mode(leader), Some(Mode::Follower));
    assert_eq!(ensemble.leader(), Some(successor));
    // The restarted member serves both znodes itself: the one it had, and the one written
    // while it was down.
    let alone = connect(&ensemble.address(leader)).await;
    assert_eq!(read(&alone, "/kept").await.as_deref(), Some(&b"before"[..]));
    assert_eq!(
        read(&alone, "/written-while-down").await.as_deref(),
        Some(&b"during"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_copies_the_znodes_back_before_it_serves() {
    let mut ensemble = blocking(|| OwnEnsemble::start(3, TICK));
    let client = connect(&ensemble.connect_string()).await;
    create(&client, "/kept", b"before").await;
    let leader = ensemble.leader().expect("a leader");
    let follower = (leader + 1) % 3;

    let wipe = Instant::now();
    blocking(|| ensemble.wipe_and_restart(follower));
    eprintln!(
        "the wiped member served again after {} ms",
        wipe.elapsed().as_millis()
    );
    assert_eq!(ensemble.mode(follower), Some(Mode::Follower));
    let alone = connect(&ensemble.address(follower)).await;
    assert_eq!(read(&alone, "/kept").await.as_deref(), Some(&b"before"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_server_keeps_its_znodes_through_a_restart_and_loses_them_to_a_wipe() {
    let started = Instant::now();
    let mut server = blocking(|| OwnEnsemble::start(1, TICK));
    eprintln!("1 server served after {} ms", started.elapsed().as_millis());
    assert_eq!(server.mode(0), Some(Mode::Standalone));
    assert_eq!(server.leader(), Some(0));
    let client = connect(&server.connect_string()).await;
    create(&client, "/kept", b"before").await;
    drop(client);

    blocking(|| server.restart(0));
    let client = connect(&server.connect_string()).await;
    assert_eq!(
        read(&client, "/kept").await.as_deref(),
        Some(&b"before"[..])
    );
    drop(client);

    blocking(|| server.wipe_and_restart(0));
    let client = connect(&server.connect_string()).await;
    assert_eq!(read(&client, "/kept").await, None);
}
