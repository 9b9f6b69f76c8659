//! Operator views of the lease znodes: who holds which ID, how many are free, freeing a dead
//! node's ID, and initializing the root.

use std::time::Duration;

use lease_core::{Holder, MachineId, Migration, StoreAdmin};

use crate::error::ZooKeeperLeaseError;
use crate::paths;
use crate::strategy::{ZooKeeperStrategy, lossy};
use crate::transport::{ReadOp, ReadResult, Transport, WriteOp};

impl<T: Transport> ZooKeeperStrategy<T> {
    /// The IDs with a znode under `<root>/leases` (held) and under `<root>/guards` (in their
    /// release guard), each in ID order; empty where the folder does not exist.
    async fn listed(&self) -> Result<(Vec<MachineId>, Vec<MachineId>), ZooKeeperLeaseError> {
        let ops = vec![
            ReadOp::Children(self.layout().leases()),
            ReadOp::Children(self.layout().guards()),
        ];
        let (_, results) = self.read("multi-read (leases)", ops).await?;
        let mut lists = results.into_iter().map(|result| match result {
            ReadResult::Children(children) => {
                let mut ids: Vec<MachineId> =
                    children.iter().filter_map(|c| paths::child_id(c)).collect();
                ids.sort();
                ids
            }
            _ => Vec::new(),
        });
        let held = lists.next().unwrap_or_default();
        Ok((held, lists.next().unwrap_or_default()))
    }

    /// Every held ID, and every ID in its release guard, in ID order. A held ID shows its
    /// token and, as its time left, the longest session timeout: ZooKeeper ends the znode at most
    /// that long after its holder stops. An ID only in its guard shows `guard` and the guard's
    /// length, at most what is left of it.
    ///
    /// # Errors
    /// When the ensemble cannot be reached or refuses the reads.
    pub async fn holders(&self) -> Result<Vec<Holder>, ZooKeeperLeaseError> {
        let (held, guarded) = self.listed().await?;
        let mut ops: Vec<ReadOp> = held
            .iter()
            .map(|id| ReadOp::Data(self.layout().lease(*id)))
            .collect();
        ops.extend(
            guarded
                .iter()
                .map(|id| ReadOp::Data(self.layout().guard(*id))),
        );
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let (_, results) = self.read("multi-read (holders)", ops).await?;
        let (leases, guards) = results.split_at(held.len());
        let mut holders: Vec<Holder> = held
            .iter()
            .zip(leases)
            .filter_map(|(id, result)| match result {
                ReadResult::Data { data, .. } => Some(Holder::new(
                    *id,
                    &lossy(data),
                    self.options().max_session_timeout(),
                )),
                // Released since the listing.
                _ => None,
            })
            .collect();
        for (id, result) in guarded.iter().zip(guards) {
            if holders.iter().any(|h| h.machine_id == *id) {
                continue;
            }
            if let ReadResult::Data { data, .. } = result {
                let left = paths::parse_length("guard", data).unwrap_or(0);
                holders.push(Holder::new(*id, "guard", Duration::from_millis(left)));
            }
        }
        holders.sort_by_key(|h| h.machine_id);
        Ok(holders)
    }

    /// How many of the 512 IDs have no znode (neither held nor in a release guard).
    ///
    /// # Errors
    /// When the ensemble cannot be reached or refuses the read.
    pub async fn free_count(&self) -> Result<u64, ZooKeeperLeaseError> {
        let (held, guarded) = self.listed().await?;
        let taken: std::collections::BTreeSet<MachineId> =
            held.into_iter().chain(guarded).collect();
        Ok(u64::from(MachineId::COUNT)
            .saturating_sub(u64::try_from(taken.len()).unwrap_or(u64::MAX)))
    }

    /// Frees `id` at once, whoever holds it: its znode is deleted and its floor znode written
    /// again at the same value, so that a holder that is still alive fails its next renewal
    /// (which expects the floor at the version it last wrote). The floor stays, so the next
    /// holder still starts above what the dead node may have issued. Returns whether the ID was
    /// held.
    ///
    /// # Errors
    /// When the ensemble cannot be reached or refuses the delete.
    pub async fn force_release(&self, id: MachineId) -> Result<bool, ZooKeeperLeaseError> {
        for _ in 0..3 {
            let ops = vec![
                ReadOp::Data(self.layout().lease(id)),
                ReadOp::Data(self.layout().floor(id)),
            ];
            let (_, results) = self.read("multi-read (release)", ops).await?;
            let Some(ReadResult::Data { stat, .. }) = results.first() else {
                return Ok(false);
            };
            let mut write = vec![WriteOp::Delete {
                path: self.layout().lease(id),
                version: Some(stat.version),
            }];
            if let Some(ReadResult::Data { data, stat }) = results.get(1) {
                write.push(WriteOp::SetData {
                    path: self.layout().floor(id),
                    data: data.clone(),
                    version: Some(stat.version),
                });
            }
            if self.write("multi (release)", write).await?.1.is_ok() {
                return Ok(true);
            }
        }
        Err(ZooKeeperLeaseError::Conflict { attempts: 3 })
    }

    /// Creates the root's folders and initialization marker and ends a pending hold-off (deletes
    /// the hold-off znode), with the hold-off's length when it ended one. What
    /// [`StoreAdmin::migrate`] runs.
    pub(crate) async fn initialize(&self) -> Result<Migration, ZooKeeperLeaseError> {
        let layout = self.layout();
        self.make_root().await?;
        for _ in 0..3 {
            let ops = vec![
                ReadOp::Children(layout.leases()),
                ReadOp::Children(layout.floors()),
                ReadOp::Children(layout.guards()),
                ReadOp::Data(layout.marker()),
                ReadOp::Data(layout.hold_off()),
            ];
            let (_, results) = self.read("multi-read (initialize)", ops).await?;
            let missing = |i: usize| matches!(results.get(i), Some(ReadResult::Missing) | None);
            let create = |path, data: &[u8]| WriteOp::Create {
                path,
                data: data.to_vec(),
                ephemeral: false,
            };
            let mut write = Vec::new();
            if missing(0) {
                write.push(create(layout.leases(), b""));
            }
            if missing(1) {
                write.push(create(layout.floors(), b""));
            }
            if missing(2) {
                write.push(create(layout.guards(), b""));
            }
            if missing(3) {
                write.push(create(layout.marker(), paths::MARKER_DATA));
            }
            let mut ended_hold_off = None;
            if let Some(ReadResult::Data { data, stat }) = results.get(4) {
                ended_hold_off = Some(
                    paths::parse_length("hold-off", data)
                        .map_or(self.options().amnesia_hold_off(), Duration::from_millis),
                );
                write.push(WriteOp::Delete {
                    path: layout.hold_off(),
                    version: Some(stat.version),
                });
            }
            if write.is_empty() || self.write("multi (initialize)", write).await?.1.is_ok() {
                return Ok(Migration::Initialized {
                    marker: format!("znode `{}`", layout.marker()),
                    ended_hold_off,
                });
            }
        }
        Err(ZooKeeperLeaseError::Conflict { attempts: 3 })
    }
}

impl<T: Transport> StoreAdmin for ZooKeeperStrategy<T> {
    type Error = ZooKeeperLeaseError;

    async fn holders(&self) -> Result<Vec<Holder>, ZooKeeperLeaseError> {
        ZooKeeperStrategy::holders(self).await
    }

    async fn free_count(&self) -> Result<u64, ZooKeeperLeaseError> {
        ZooKeeperStrategy::free_count(self).await
    }

    async fn force_release(&self, id: MachineId) -> Result<bool, ZooKeeperLeaseError> {
        ZooKeeperStrategy::force_release(self, id).await
    }

    async fn migrate(&self) -> Result<Migration, ZooKeeperLeaseError> {
        self.initialize().await
    }
}
