//! [`StoreAdmin`] for the lease table: the operator commands, through the table's own
//! queries.

use lease_core::{Holder, MachineId, Migration, StoreAdmin};

use crate::error::SqlError;
use crate::strategy::SqlStrategy;

impl StoreAdmin for SqlStrategy {
    type Error = SqlError;

    async fn holders(&self) -> Result<Vec<Holder>, SqlError> {
        SqlStrategy::holders(self).await
    }

    async fn free_count(&self) -> Result<u64, SqlError> {
        SqlStrategy::free_count(self).await
    }

    async fn force_release(&self, id: MachineId) -> Result<bool, SqlError> {
        SqlStrategy::force_release(self, id).await
    }

    async fn migrate(&self) -> Result<Migration, SqlError> {
        let rows_added = SqlStrategy::migrate(self).await?;
        Ok(Migration::Table {
            table: self.table().to_owned(),
            rows_added,
        })
    }
}
