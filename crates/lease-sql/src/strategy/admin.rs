//! Operator views and actions: free IDs, who holds which ID, and freeing an ID by force.

use std::time::Duration;

use lease_core::{Holder, MachineId};
use sqlx::Row;

use super::backend::{execute, on_pool};
use super::lease::{machine_id, row_id};
use super::{Connection, SqlStrategy};
use crate::SqlLeaseError;

impl SqlStrategy<Connection> {
    /// How many machine IDs are free right now (expired, by the database clock).
    ///
    /// # Errors
    /// The errors of any operation on the table.
    pub async fn free_count(&self) -> Result<u64, SqlLeaseError> {
        self.checked(self.transport.count_free().await)
            .await
            .map(|n| u64::try_from(n).unwrap_or(0))
    }

    /// Every held ID (not yet expired on the database clock) with a token prefix and the time
    /// left, in ID order: who holds which ID.
    ///
    /// # Errors
    /// The errors of any operation on the table.
    pub async fn holders(&self) -> Result<Vec<Holder>, SqlLeaseError> {
        self.checked(self.fetch_holders().await).await
    }

    async fn fetch_holders(&self) -> Result<Vec<Holder>, sqlx::Error> {
        let sql = self.transport.backend.common().holders.sql();
        on_pool!(&self.transport.backend, |pool| sqlx::query(sql)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| -> Result<Holder, sqlx::Error> {
                let token: Option<Vec<u8>> = row.try_get(1)?;
                let hex: String = token
                    .unwrap_or_default()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                let left =
                    Duration::from_micros(u64::try_from(row.try_get::<i64, _>(2)?).unwrap_or(0));
                Ok(Holder::new(machine_id(row.try_get(0)?)?, &hex, left))
            })
            .collect())
    }

    /// Frees `id` at once, whoever holds it: its token is cleared, its expiry reset to the
    /// seed value, 1970-01-01, and its timestamp floor raised to the expiry it had (the end of
    /// the lease, or of the block of a row put back after it vanished). Meant for a node known
    /// to be dead; a live holder finds out at its next renewal (*lost*), may use the ID until
    /// its lease ends, and the next holder starts above that end.
    /// Returns whether the ID was held.
    ///
    /// # Errors
    /// The errors of any operation on the table.
    pub async fn force_release(&self, id: MachineId) -> Result<bool, SqlLeaseError> {
        let sql = self.transport.backend.common().force_release.sql();
        let result = execute!(&self.transport.backend, sql, row_id(id));
        self.checked(result).await.map(|n| n == 1)
    }
}
