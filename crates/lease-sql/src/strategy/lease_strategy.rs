//! [`Strategy`] for [`SqlStrategy`]: each call goes to the part of the protocol that does it.

use lease_core::{Acquire, Grant, LeaseTerms, Profile, Release, Renew, Renewal, Strategy};

use super::SqlStrategy;
use super::amount::Amount;
use super::lease::SqlLease;
use crate::SqlLeaseError;
use crate::transport::Transport;

impl<T: Transport> Strategy for SqlStrategy<T> {
    type Lease = SqlLease;
    type Error = SqlLeaseError;

    async fn acquire(&self, request: Acquire) -> Result<Grant<SqlLease>, SqlLeaseError> {
        self.claim_lease(request).await
    }

    async fn renew(
        &self,
        lease: &SqlLease,
        request: Renew,
    ) -> Result<Renewal<SqlLease>, SqlLeaseError> {
        self.renew_own(lease, request).await
    }

    async fn release(&self, lease: &SqlLease, request: Release) -> Result<(), SqlLeaseError> {
        self.release_own(lease, request).await
    }

    /// Refuses a longest lease below the manager's `min_ttl`: every grant would be an illegal
    /// TTL. Compared in whole milliseconds, as the manager compares, with the duration the
    /// database applies (SQLite: whole milliseconds).
    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), SqlLeaseError> {
        let max_lease = Amount::new(self.max_lease_duration, self.dialect())?.applied;
        let min_ttl = terms.min_ttl;
        if max_lease.as_millis() < min_ttl.as_millis() {
            return Err(SqlLeaseError::MaxLeaseBelowMinTtl { max_lease, min_ttl });
        }
        Ok(())
    }

    fn profile(&self) -> Profile {
        Profile::new(self.dialect().as_str()).recording_floor()
    }
}
