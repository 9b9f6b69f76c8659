//! The `lease-testkit` conformance suite and handover scenarios on ZooKeeper.

use crate::common;

use std::time::Duration;

use common::Root;
use lease_core::MachineId;
use lease_testkit::Harness;
use lease_zookeeper::ZooKeeperStrategy;

/// One root of its own per check, initialized, deleted afterwards.
struct ZooKeeperHarness {
    root: Root,
}

impl ZooKeeperHarness {
    async fn new() -> Self {
        let root = Root::new();
        drop(common::strategy(&root).await);
        Self { root }
    }
}

impl Harness for ZooKeeperHarness {
    type Strategy = ZooKeeperStrategy;

    /// A node on the harness's root (a session of its own), initialized once in
    /// [`ZooKeeperHarness::new`].
    async fn node(&self) -> ZooKeeperStrategy {
        ZooKeeperStrategy::new(common::options(&self.root)).expect("valid options")
    }

    /// Deletes the ID's ephemeral znode, as the end of its session would; the floor znode
    /// stays.
    async fn expire(&self, id: MachineId) -> bool {
        let client = common::raw().await;
        match client.delete(&self.root.lease(id.get()), None).await {
            Ok(()) | Err(lease_zookeeper::zookeeper_client::Error::NoNode) => true,
            Err(e) => panic!("delete: {e}"),
        }
    }

    async fn force_release(&self, id: MachineId) -> Option<bool> {
        let node = self.node().await;
        Some(node.force_release(id).await.expect("force_release"))
    }
}

/// Leases of 15 s (three quarters of the tests' 20 s sessions): the checks that hold every ID
/// (511 claims) finish well within them. The guard is observed on the acquirer's own clock from
/// when it first sees the guard znode: slack for the round trip in between.
fn options() -> lease_testkit::Options {
    lease_testkit::Options::new(Duration::from_secs(15))
        .with_min_ttl(Duration::from_secs(10))
        .with_guard(Duration::from_secs(2))
        .with_slack(Duration::from_millis(900))
}

lease_testkit::conformance_tests!(
    ZooKeeperHarness::new,
    options(),
    does_not_apply: [deterministic]
);

/// The handover scenarios of `lease-testkit`: one ID from node A to node B whose clock is up to
/// an hour off, through real lease managers and factories; with the floor nothing repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_across_clocks() {
    lease_testkit::handover::standard(ZooKeeperHarness::new)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// `lease-testkit`'s operator check: holders, free count and force release (through
/// `StoreAdmin`) agree with what the strategy leased, under a root of its own.
#[tokio::test]
async fn operator_commands_agree() {
    let harness = ZooKeeperHarness::new().await;
    let s = harness.node().await;
    lease_testkit::admin::admin_agrees(&s, Duration::from_secs(15))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
