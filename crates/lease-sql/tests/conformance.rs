//! `lease-testkit`'s conformance suite on PostgreSQL, MariaDB and SQLite, each check on a table
//! of its own; on PostgreSQL and MariaDB with both acquisition modes.
#![cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]

use crate::common;

use std::time::Duration;

use common::TestTable;
use lease_core::MachineId;
use lease_sql::{Acquisition, Dialect, SqlStrategy};
use lease_testkit::{Harness, Options};

struct SqlHarness {
    table: TestTable,
    acquisition: Acquisition,
}

impl Harness for SqlHarness {
    type Strategy = SqlStrategy;

    async fn node(&self) -> SqlStrategy {
        self.table.strategy().with_acquisition(self.acquisition)
    }

    async fn expire(&self, id: MachineId) -> bool {
        self.table.pool.expire(&self.table.name, id.get()).await;
        true
    }

    async fn force_release(&self, id: MachineId) -> Option<bool> {
        let node = self.node().await;
        Some(node.force_release(id).await.expect("force_release"))
    }
}

async fn harness(dialect: Dialect, acquisition: Acquisition) -> SqlHarness {
    SqlHarness {
        table: TestTable::new(dialect).await,
        acquisition,
    }
}

/// Several checks fill the table (512 acquires, one transaction each) and need every lease of
/// the fill still valid at its end: 4 s was too short for MariaDB on a loaded 2-core machine
/// (11 to 35 ms per acquire), so the leases last 15 s (at least 7.5 s granted).
fn options() -> Options {
    Options::new(Duration::from_secs(15))
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
const OPTIMISTIC: Acquisition = Acquisition::Optimistic { candidates: 8 };

/// On each dialect and acquisition mode: the suite, and `lease-testkit`'s operator check
/// (holders, free count and force release through `StoreAdmin` agree with what the strategy
/// leased, on a table of its own).
macro_rules! on_dialects {
    ($($feature:literal $module:ident $dialect:ident $acquisition:expr;)*) => {$(
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            lease_testkit::conformance_tests!(
                || harness(Dialect::$dialect, $acquisition),
                options(),
                does_not_apply: [deterministic]
            );

            #[tokio::test]
            async fn operator_commands_agree() {
                let harness = harness(Dialect::$dialect, $acquisition).await;
                lease_testkit::admin::admin_agrees(&harness.node().await, Duration::from_secs(60))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
    )*};
}

on_dialects!(
    "postgres" postgres Postgres Acquisition::SkipLocked;
    "postgres" postgres_optimistic Postgres OPTIMISTIC;
    "mysql" mysql MySql Acquisition::SkipLocked;
    "mysql" mysql_optimistic MySql OPTIMISTIC;
    "sqlite" sqlite Sqlite Acquisition::SkipLocked;
);
