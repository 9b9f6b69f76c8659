//! Operator views of the lease keys: who holds which ID, how many are free, freeing a dead
//! node's ID, and initializing the prefix.

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::{DeleteOptions, GetOptions, Txn, TxnOp, TxnOpResponse};
use lease_core::{Holder, MachineId, Migration};

use crate::error::EtcdLeaseError;
use crate::keys::{self, Entry};
use crate::strategy::EtcdStrategy;
use crate::transport::Header;

impl EtcdStrategy {
    /// Every held ID (including IDs blocked by a release guard) with a token prefix and the
    /// time left on its etcd lease, in ID order. A key without a lease (not written by this
    /// strategy) shows [`Duration::MAX`].
    ///
    /// # Errors
    /// When the cluster cannot be reached or refuses the reads.
    pub async fn holders(&self) -> Result<Vec<Holder>, EtcdLeaseError> {
        let client = self.client().await?;
        let options = Some(GetOptions::new().with_prefix());
        let mut kv = client.kv_client();
        let answer = self.call("range", kv.get(self.prefix(), options)).await?;
        let mut held: Vec<(MachineId, String, i64)> = answer
            .kvs()
            .iter()
            .filter_map(|kv| match keys::classify(self.prefix(), kv.key()) {
                Entry::Lease(id) => Some((
                    id,
                    String::from_utf8_lossy(kv.value()).into_owned(),
                    kv.lease(),
                )),
                _ => None,
            })
            .collect();
        held.sort_by_key(|(id, _, _)| *id);
        let mut left: HashMap<i64, Option<Duration>> = HashMap::new();
        for (_, _, lease) in &held {
            if *lease == 0 || left.contains_key(lease) {
                continue;
            }
            let mut leases = client.lease_client();
            let request = leases.time_to_live(*lease, None);
            let ttl = self.call("lease time-to-live", request).await?.ttl();
            // -1: the lease ended between the two reads, and its key with it.
            left.insert(*lease, u64::try_from(ttl).ok().map(Duration::from_secs));
        }
        Ok(held
            .into_iter()
            .filter_map(|(id, token, lease)| {
                let expires_in = if lease == 0 {
                    Duration::MAX
                } else {
                    left.get(&lease).copied().flatten()?
                };
                Some(Holder::new(id, &token, expires_in))
            })
            .collect())
    }

    /// How many of the 512 IDs have no key (neither held nor blocked by a release guard).
    ///
    /// # Errors
    /// When the cluster cannot be reached or refuses the read.
    pub async fn free_count(&self) -> Result<u64, EtcdLeaseError> {
        let client = self.client().await?;
        let options = Some(GetOptions::new().with_prefix().with_keys_only());
        let mut kv = client.kv_client();
        let answer = self.call("range", kv.get(self.prefix(), options)).await?;
        let held = answer
            .kvs()
            .iter()
            .filter(|kv| matches!(keys::classify(self.prefix(), kv.key()), Entry::Lease(_)))
            .count();
        Ok(u64::from(MachineId::COUNT).saturating_sub(u64::try_from(held).unwrap_or(u64::MAX)))
    }

    /// Frees `id` at once, whoever holds it: its key is deleted and the etcd lease it was
    /// attached to revoked; its timestamp floor key stays, so the next holder still starts
    /// above what the dead node may have issued. Only for a node known to be dead; a live
    /// holder loses its lease at its next renewal. Returns whether the ID was held.
    ///
    /// # Errors
    /// When the cluster cannot be reached or refuses the delete.
    pub async fn force_release(&self, id: MachineId) -> Result<bool, EtcdLeaseError> {
        let client = self.client().await?;
        let options = Some(DeleteOptions::new().with_prev_key());
        let mut kv = client.kv_client();
        let delete = kv.delete(keys::lease_key(self.prefix(), id), options);
        let answer = self.call("delete", delete).await?;
        let Some(previous) = answer.prev_kvs().first() else {
            return Ok(false);
        };
        if previous.lease() != 0 {
            self.revoke_quietly(previous.lease()).await;
        }
        Ok(true)
    }

    /// Writes the initialization marker and ends a pending hold-off (deletes the hold-off key,
    /// then revokes its etcd lease), with how long that hold-off still had. What
    /// [`StoreAdmin::migrate`](lease_core::StoreAdmin::migrate) runs.
    pub(crate) async fn initialize(&self) -> Result<Migration, EtcdLeaseError> {
        const OPERATION: &str = "txn (initialize)";
        let client = self.client().await?;
        let prefix = self.prefix();
        let marker = keys::marker_key(prefix);
        let txn = Txn::new().and_then(vec![
            TxnOp::put(marker.clone(), keys::MARKER_VALUE, None),
            TxnOp::delete(
                keys::hold_off_key(prefix),
                Some(DeleteOptions::new().with_prev_key()),
            ),
        ]);
        let before = self.revision_before();
        let answer = self.call(OPERATION, client.kv_client().txn(txn)).await?;
        self.observe(before, answer.header().map(Header::from).as_ref());
        let responses = answer.op_responses();
        let (Some(TxnOpResponse::Put(_)), Some(TxnOpResponse::Delete(delete))) =
            (responses.first(), responses.get(1))
        else {
            return Err(EtcdLeaseError::unexpected(
                OPERATION,
                format!("{responses:?}"),
            ));
        };
        let ended_hold_off = match delete.prev_kvs().first().map(|kv| kv.lease()) {
            None => None,
            // Put by hand without a lease.
            Some(0) => Some(Duration::MAX),
            Some(lease) => {
                let mut leases = client.lease_client();
                let request = leases.time_to_live(lease, None);
                let answer = self.call("lease time-to-live", request).await;
                let ttl = answer.map_or(0, |answer| answer.ttl());
                // Its key is deleted already: the etcd lease holds nothing.
                self.revoke_quietly(lease).await;
                Some(Duration::from_secs(u64::try_from(ttl).unwrap_or(0)))
            }
        };
        Ok(Migration::Initialized {
            marker: format!("key `{marker}`"),
            ended_hold_off,
        })
    }
}
