//! [`StoreAdmin`] for the lease keys: the operator commands, each retried briefly on a
//! cluster of several endpoints.

use std::time::{Duration, Instant};

use lease_core::{Holder, LeaseError, MachineId, Migration, StoreAdmin};

use crate::error::EtcdLeaseError;
use crate::strategy::EtcdStrategy;

/// How long an operator request to a store of several endpoints is retried while it fails in
/// a way a retry can cure.
const RETRY_FOR: Duration = Duration::from_secs(3);

/// The pause between two tries of an operator request.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

impl EtcdStrategy {
    /// `request`, tried again for up to [`RETRY_FOR`] while it fails retryably, when the store
    /// has several endpoints: the etcd client balances requests over them and may send one to
    /// a member that is down even while another answers. With one endpoint there is nothing
    /// else to try, and the failure is reported at once.
    async fn retried<T, F>(&self, mut request: impl FnMut() -> F) -> Result<T, EtcdLeaseError>
    where
        F: Future<Output = Result<T, EtcdLeaseError>>,
    {
        let started = Instant::now();
        loop {
            match request().await {
                Err(e)
                    if self.options().endpoints().len() > 1
                        && e.kind().is_retryable()
                        && started.elapsed() < RETRY_FOR =>
                {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                other => return other,
            }
        }
    }
}

/// On top of the inherent methods of the same names; with several endpoints, a request that
/// fails retryably is tried again for up to 3 s (the client may send it to a member that is
/// down while another answers), with one it fails at once.
impl StoreAdmin for EtcdStrategy {
    type Error = EtcdLeaseError;

    async fn holders(&self) -> Result<Vec<Holder>, EtcdLeaseError> {
        self.retried(|| EtcdStrategy::holders(self)).await
    }

    async fn free_count(&self) -> Result<u64, EtcdLeaseError> {
        self.retried(|| EtcdStrategy::free_count(self)).await
    }

    async fn force_release(&self, id: MachineId) -> Result<bool, EtcdLeaseError> {
        self.retried(|| EtcdStrategy::force_release(self, id)).await
    }

    /// Initializes the prefix: writes its initialization marker (`<prefix>initialized`) and
    /// ends a pending hold-off (deletes `<prefix>hold-off`). Without the marker, the first
    /// acquire holds every acquisition off for the amnesia hold-off (the prefix may have lost
    /// keys of IDs that running nodes still use: see the crate docs, "Amnesia").
    ///
    /// Run it once on a new prefix, before the first node starts, or when every node using the
    /// prefix is stopped; on a prefix that keeps its keys it only writes the marker, and may run
    /// while nodes do. Never run it after the prefix lost its keys while nodes ran (`etcdctl del
    /// --prefix`): that would end the hold-off that keeps their IDs from being handed out again;
    /// wait it out instead. A wrong endpoint, password or permission shows here rather than at
    /// the first lease.
    async fn migrate(&self) -> Result<Migration, EtcdLeaseError> {
        self.retried(|| self.initialize()).await
    }
}
