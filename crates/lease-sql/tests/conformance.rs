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

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    lease_testkit::conformance_tests!(
        || harness(Dialect::Postgres, Acquisition::SkipLocked),
        options(),
        does_not_apply: [deterministic]
    );
}

#[cfg(feature = "postgres")]
mod postgres_optimistic {
    use super::*;
    lease_testkit::conformance_tests!(
        || harness(Dialect::Postgres, OPTIMISTIC),
        options(),
        does_not_apply: [deterministic]
    );
}

#[cfg(feature = "mysql")]
mod mysql {
    use super::*;
    lease_testkit::conformance_tests!(
        || harness(Dialect::MySql, Acquisition::SkipLocked),
        options(),
        does_not_apply: [deterministic]
    );
}

#[cfg(feature = "mysql")]
mod mysql_optimistic {
    use super::*;
    lease_testkit::conformance_tests!(
        || harness(Dialect::MySql, OPTIMISTIC),
        options(),
        does_not_apply: [deterministic]
    );
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    lease_testkit::conformance_tests!(
        || harness(Dialect::Sqlite, Acquisition::SkipLocked),
        options(),
        does_not_apply: [deterministic]
    );
}

/// `lease-testkit`'s operator check: holders, free count and force release (through
/// `StoreAdmin`) agree with what the strategy leased, on a table of its own.
async fn operator_commands(dialect: Dialect) {
    let table = TestTable::new(dialect).await;
    lease_testkit::admin::admin_agrees(&table.strategy(), Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{dialect:?}: {e}"));
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn operator_commands_agree_on_postgres() {
    operator_commands(Dialect::Postgres).await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn operator_commands_agree_on_mysql() {
    operator_commands(Dialect::MySql).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn operator_commands_agree_on_sqlite() {
    operator_commands(Dialect::Sqlite).await;
}
