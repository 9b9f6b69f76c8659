//! Operator views of the lease znodes: who holds which ID, how many are free, freeing a dead
//! node's ID, and initializing the root.

use std::time::Duration;

use lease_core::{Holder, MachineId, Migration, StoreAdmin};

use crate::error::ZooKeeperLeaseError;
use crate::paths;
use crate::strategy::{ZooKeeperStrategy, lossy};
use crate::transport::{ReadOp, ReadResult, Reply, Request, Transport, WriteOp};

impl<T: Transport> ZooKeeperStrategy<T> {
    /// The IDs with a znode under `<root>/leases`, in ID order; `None` when the folder does not
    /// exist.
    async fn listed(&self) -> Result<Option<Vec<MachineId>>, ZooKeeperLeaseError> {
        let ops = vec![ReadOp::Children(self.layout().leases())];
        let (_, results) = self.read("get children (leases)", ops).await?;
        Ok(match results.into_iter().next() {
            Some(ReadResult::Children(children)) => {
                let mut ids: Vec<MachineId> =
                    children.iter().filter_map(|c| paths::child_id(c)).collect();
                ids.sort();
                Some(ids)
            }
            _ => None,
        })
    }

    /// Every held ID, and every ID in its release guard, in ID order. A held ID shows its
    /// token and, as its time left, the longest session timeout: ZooKeeper ends the znode at most
    /// that long after its holder stops. An ID in its guard shows `guard` and the guard's
    /// length, which a node that sees it now waits.
    ///
    /// # Errors
    /// When the ensemble cannot be reached or refuses the reads.
    pub async fn holders(&self) -> Result<Vec<Holder>, ZooKeeperLeaseError> {
        let Some(ids) = self.listed().await? else {
            return Ok(Vec::new());
        };
        let ops = ids
            .iter()
            .map(|id| ReadOp::Data(self.layout().lease(*id)))
            .collect();
        let (_, results) = self.read("multi-read (holders)", ops).await?;
        Ok(ids
            .into_iter()
            .zip(results)
            .filter_map(|(id, result)| {
                let ReadResult::Data { data, stat } = result else {
                    // Released since the listing.
                    return None;
                };
                if stat.ephemeral_owner == 0
                    && let Some(guard_ms) = paths::parse_length("guard", &data)
                {
                    return Some(Holder::new(id, "guard", Duration::from_millis(guard_ms)));
                }
                Some(Holder::new(
                    id,
                    &lossy(&data),
                    self.options().max_session_timeout(),
                ))
            })
            .collect())
    }

    /// How many of the 512 IDs have no znode (neither held nor in a release guard).
    ///
    /// # Errors
    /// When the ensemble cannot be reached or refuses the read.
    pub async fn free_count(&self) -> Result<u64, ZooKeeperLeaseError> {
        let held = self.listed().await?.map_or(0, |ids| ids.len());
        Ok(u64::from(MachineId::COUNT).saturating_sub(u64::try_from(held).unwrap_or(u64::MAX)))
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
        let answer = self
            .exchange("create (root)", Request::MakePath(layout.root().to_owned()))
            .await?;
        if answer.reply != Reply::Done {
            return Err(ZooKeeperLeaseError::unexpected(
                "create (root)",
                format!("{:?}", answer.reply),
            ));
        }
        for _ in 0..3 {
            let ops = vec![
                ReadOp::Children(layout.leases()),
                ReadOp::Children(layout.floors()),
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
                write.push(create(layout.marker(), paths::MARKER_DATA));
            }
            let mut ended_hold_off = None;
            if let Some(ReadResult::Data { data, stat }) = results.get(3) {
                ended_hold_off = Some(
                    paths::parse_length("hold-off", data)
                        .map_or(self.options().max_session_timeout(), Duration::from_millis),
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
