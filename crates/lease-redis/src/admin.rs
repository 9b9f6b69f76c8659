//! Operator views of the lease hash: who holds which ID, and freeing a dead node's ID.

use std::time::Duration;

use lease_core::{Holder, MachineId};
use redis::aio::ConnectionLike;

use crate::error::RedisLeaseError;
use crate::strategy::RedisStrategy;
use crate::transport::Connection;
use crate::wire;

impl<C> RedisStrategy<Connection<C>>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Every held ID with a token prefix and the time left, in ID order.
    ///
    /// # Errors
    /// When the server cannot be reached or the key is not a hash.
    pub async fn holders(&self) -> Result<Vec<Holder>, RedisLeaseError> {
        let mut connection = self.connection();
        let key = &self.options().key;
        let fail = |command| move |e| RedisLeaseError::command(command, key, e);
        // Values as bytes: one corrupt value must not hide every other holder.
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(&self.options().key)
            .query_async(&mut connection)
            .await
            .map_err(fail("HGETALL"))?;
        let mut held: Vec<(MachineId, String)> = pairs
            .into_iter()
            .filter_map(|(field, token)| {
                wire::parse_id_field(&field)
                    .map(|id| (id, String::from_utf8_lossy(&token).into_owned()))
            })
            .collect();
        held.sort_by_key(|(id, _)| *id);
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let mut hpttl = redis::cmd("HPTTL");
        hpttl.arg(&self.options().key).arg("FIELDS").arg(held.len());
        for (id, _) in &held {
            hpttl.arg(id.get().to_string());
        }
        let ttls: Vec<i64> = hpttl
            .query_async(&mut connection)
            .await
            .map_err(fail("HPTTL"))?;
        Ok(held
            .into_iter()
            .zip(ttls)
            // -2: expired between the two reads; -1: no TTL (not written by a lease holder).
            .filter(|(_, ttl)| *ttl != -2)
            .map(|((id, token), ttl)| {
                let left = u64::try_from(ttl).map_or(Duration::MAX, Duration::from_millis);
                Holder::new(id, &token, left)
            })
            .collect())
    }

    /// Frees `id` at once, whoever holds it: both its lease fields are deleted; its timestamp
    /// floor (`floor.<id>`) stays, so the next holder still starts above what the dead node
    /// may have issued. Only for a node known to be dead; a live holder would lose its lease at
    /// its next renewal. Returns whether the ID was held.
    ///
    /// # Errors
    /// When the server cannot be reached or the key is not a hash.
    pub async fn force_release(&self, id: MachineId) -> Result<bool, RedisLeaseError> {
        let mut connection = self.connection();
        let key = &self.options().key;
        let fail = |command| move |e| RedisLeaseError::command(command, key, e);
        let token: Option<String> = redis::cmd("HGET")
            .arg(&self.options().key)
            .arg(id.get().to_string())
            .query_async(&mut connection)
            .await
            .map_err(fail("HGET"))?;
        let Some(token) = token else { return Ok(false) };
        let deleted: i64 = redis::cmd("HDEL")
            .arg(&self.options().key)
            .arg(id.get().to_string())
            .arg(wire::marker(id, &token))
            .query_async(&mut connection)
            .await
            .map_err(fail("HDEL"))?;
        Ok(deleted > 0)
    }
}
