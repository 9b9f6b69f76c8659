//! [`StoreAdmin`] for the lease hash: the operator commands, and the free count the hash's
//! ID fields give.

use std::time::Duration;

use lease_core::{Holder, MachineId, Migration, StoreAdmin};
use redis::aio::ConnectionLike;

use crate::error::RedisLeaseError;
use crate::scripts::INITIALIZE_SCRIPT;
use crate::strategy::RedisStrategy;
use crate::transport::Connection;
use crate::wire;

impl<C> StoreAdmin for RedisStrategy<Connection<C>>
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

    /// A hash needs no schema, but it needs its initialization marker (field `open_at`): a
    /// new hash cannot be told from one the server lost while it stayed up, so the amnesia
    /// guard holds acquisitions off while the marker is missing. This sets it (ending a pending
    /// hold-off), after a read that makes a wrong address, password or key type show here
    /// rather than at the first lease. Run it on a new store, or with every node stopped; never
    /// after the hash was lost while nodes ran (wait out the hold-off instead).
    async fn migrate(&self) -> Result<Migration, RedisLeaseError> {
        RedisStrategy::holders(self).await?;
        let key = self.options().key();
        let run_id = self.server_info().await?.run_id;
        let (before, now): (Vec<u8>, Vec<u8>) = INITIALIZE_SCRIPT
            .key(key)
            .arg(run_id)
            .invoke_async(&mut self.connection())
            .await
            .map_err(|e| RedisLeaseError::command("EVALSHA (initialize script)", key, e))?;
        let ended_hold_off = wire::parse_floor_value(&before)
            .zip(wire::parse_floor_value(&now))
            .and_then(|(open_at, now)| open_at.checked_sub(now))
            .filter(|left| *left > 0)
            .map(Duration::from_millis);
        Ok(Migration::Initialized {
            marker: format!("field `open_at` of hash `{key}`"),
            ended_hold_off,
        })
    }
}
