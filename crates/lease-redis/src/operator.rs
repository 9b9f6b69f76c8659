//! [`StoreAdmin`] for the lease hash: the operator commands, and the free count the hash's
//! ID fields give.

use lease_core::{Holder, MachineId, Migration, StoreAdmin};
use redis::aio::ConnectionLike;

use crate::error::RedisLeaseError;
use crate::strategy::RedisStrategy;
use crate::wire;

impl<C> StoreAdmin for RedisStrategy<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    type Error = RedisLeaseError;

    async fn holders(&self) -> Result<Vec<Holder>, RedisLeaseError> {
        RedisStrategy::holders(self).await
    }

    /// The IDs without an ID field: expired fields are gone from the hash, and a field a
    /// release guard keeps still counts as held.
    async fn free_count(&self) -> Result<u64, RedisLeaseError> {
        let key = &self.options().key;
        let fields: Vec<Vec<u8>> = redis::cmd("HKEYS")
            .arg(key)
            .query_async(&mut self.connection())
            .await
            .map_err(|e| RedisLeaseError::command("HKEYS", key, e))?;
        Ok(u64::try_from(wire::free_ids(&fields).len()).unwrap_or(u64::MAX))
    }

    async fn force_release(&self, id: MachineId) -> Result<bool, RedisLeaseError> {
        RedisStrategy::force_release(self, id).await
    }

    /// A hash needs no schema: the hash must answer a read all the same, so that a wrong
    /// address, password or key type shows here rather than at the first lease.
    async fn migrate(&self) -> Result<Migration, RedisLeaseError> {
        RedisStrategy::holders(self).await?;
        Ok(Migration::NoSchema {
            reason: format!("the hash `{}` needs no schema", self.options().key()),
        })
    }
}
