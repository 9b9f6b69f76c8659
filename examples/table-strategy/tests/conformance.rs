//! The `lease-testkit` conformance suite, the operator check and the handover scenarios against
//! the example strategy.

use std::time::Duration;

use example_table_strategy::Table;
use lease_core::{MachineId, StoreAdmin};
use lease_testkit::{Harness, Options};

struct TableHarness(Table);

impl Harness for TableHarness {
    type Strategy = Table;

    async fn node(&self) -> Table {
        self.0.clone()
    }

    async fn expire(&self, id: MachineId) -> bool {
        self.0.expire(id);
        true
    }

    async fn force_release(&self, id: MachineId) -> Option<bool> {
        Some(self.0.force_release(id).await.expect("force_release"))
    }
}

async fn harness() -> TableHarness {
    TableHarness(Table::new())
}

// The table hands out any free ID, so it is not deterministic; every other check applies,
// the timestamp floor's included.
lease_testkit::conformance_tests!(
    harness,
    Options::new(Duration::from_secs(2)),
    does_not_apply: [deterministic]
);

/// `holders`, `free_count` and `force_release` agree with what the strategy leased.
#[tokio::test]
async fn operator_commands_agree() {
    lease_testkit::admin::admin_agrees(&Table::new(), Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Two real lease managers hand one ID over with clocks up to an hour apart: with the floor,
/// no nonce repeats.
#[tokio::test]
async fn handover_across_clocks_repeats_nothing() {
    lease_testkit::handover::standard(harness)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
