//! [`StoreAdmin`] for the lease table: the operator commands, through the table's own
//! queries.

use lease_core::{Holder, MachineId, Migration, StoreAdmin};

use crate::error::SqlLeaseError;
use crate::strategy::{Connection, SqlStrategy};

impl StoreAdmin for SqlStrategy<Connection> {
    type Error = SqlLeaseError;

    async fn holders(&self) -> Result<Vec<Holder>, SqlLeaseError> {
        SqlStrategy::holders(self).await
    }

    async fn free_count(&self) -> Result<u64, SqlLeaseError> {
        SqlStrategy::free_count(self).await
    }

    async fn force_release(&self, id: MachineId) -> Result<bool, SqlLeaseError> {
        SqlStrategy::force_release(self, id).await
    }

    async fn migrate(&self) -> Result<Migration, SqlLeaseError> {
        let rows_added = SqlStrategy::migrate(self).await?;
        Ok(Migration::Table {
            table: self.table().to_owned(),
            rows_added,
        })
    }
}
