//! The `lease-testkit` conformance suite against the example strategy.

use std::time::Duration;

use example_table_strategy::Table;
use lease_core::MachineId;
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
}

async fn harness() -> TableHarness {
    TableHarness(Table::new())
}

// The table hands out any free ID and stores no timestamp floor.
lease_testkit::conformance_tests!(
    harness,
    Options::new(Duration::from_secs(2)),
    does_not_apply: [deterministic, floor_travels]
);
