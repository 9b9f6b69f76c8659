//! [`Strategy`] for [`SqlStrategy`]: each call goes to the part of the protocol that does it.

use std::time::Duration;

use lease_core::{Grant, LeaseConfig, Renewal, Strategy};

use super::SqlStrategy;
use super::amount::Amount;
use super::lease::SqlLease;
use crate::SqlLeaseError;

impl Strategy for SqlStrategy {
    type Lease = SqlLease;
    type Error = SqlLeaseError;

    /// Refuses a longest lease below the manager's `min_ttl`: every grant would be an illegal
    /// TTL. Compared in whole milliseconds, as the manager compares, with the duration the
    /// database applies (SQLite: whole milliseconds).
    fn check_config(&self, config: &LeaseConfig) -> Result<(), SqlLeaseError> {
        let max_lease = Amount::new(self.max_lease_duration, self.dialect())?.applied;
        let min_ttl = config.min_ttl();
        if max_lease.as_millis() < min_ttl.as_millis() {
            return Err(SqlLeaseError::MaxLeaseBelowMinTtl { max_lease, min_ttl });
        }
        Ok(())
    }

    async fn acquire(&self, requested: Duration) -> Result<Grant<SqlLease>, SqlLeaseError> {
        self.claim_lease(requested, 0, 0).await
    }

    async fn renew(
        &self,
        lease: &SqlLease,
        requested: Duration,
    ) -> Result<Renewal<SqlLease>, SqlLeaseError> {
        self.renew_own(lease, requested, 0).await
    }

    async fn release(&self, lease: &SqlLease, guard: Duration) -> Result<(), SqlLeaseError> {
        self.release_own(lease, guard, None).await
    }

    fn records_floor(&self) -> bool {
        true
    }

    async fn acquire_with_floor(
        &self,
        requested: Duration,
        now_ms: u64,
        floor_ms: u64,
    ) -> Result<Grant<SqlLease>, SqlLeaseError> {
        self.claim_lease(requested, now_ms, floor_ms).await
    }

    async fn renew_with_floor(
        &self,
        lease: &SqlLease,
        requested: Duration,
        floor_ms: u64,
    ) -> Result<Renewal<SqlLease>, SqlLeaseError> {
        self.renew_own(lease, requested, floor_ms).await
    }

    async fn release_with_floor(
        &self,
        lease: &SqlLease,
        guard: Duration,
        floor_ms: u64,
    ) -> Result<(), SqlLeaseError> {
        self.release_own(lease, guard, Some(floor_ms)).await
    }

    fn name(&self) -> &'static str {
        self.dialect().as_str()
    }
}
