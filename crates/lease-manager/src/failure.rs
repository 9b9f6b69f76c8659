//! A strategy failure reduced to its kind and its message.

use std::time::Duration;

use lease_core::{ErrorKind, LeaseError, error_chain};

/// A strategy failure reduced to its kind and a message: what the state machine consumes, and a
/// ready-made error type for simple strategies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {reason}")]
#[non_exhaustive]
pub struct Failure {
    /// What kind of failure this is.
    pub kind: ErrorKind,
    /// A human-readable reason, including the source chain of the original error.
    pub reason: String,
}

impl Failure {
    /// A failure of `kind` with `reason`.
    pub fn new(kind: ErrorKind, reason: impl Into<String>) -> Self {
        Self {
            kind,
            reason: reason.into(),
        }
    }

    /// Reduces a strategy error to its kind and its message followed by its source chain, each
    /// cause said once (see [`error_chain`]).
    pub fn from_error<E: LeaseError>(error: &E) -> Self {
        Self {
            kind: error.kind(),
            reason: error_chain(error),
        }
    }

    /// A call that did not answer within `timeout`: uncertain, so [`ErrorKind::Retry`].
    #[must_use]
    pub fn timeout(timeout: Duration) -> Self {
        Self::new(
            ErrorKind::Retry,
            format!("timed out after {} ms", timeout.as_millis()),
        )
    }
}

impl LeaseError for Failure {
    fn kind(&self) -> ErrorKind {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connection refused")]
    struct Refused;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot connect: {0}")]
    struct Connect(#[source] Refused);

    impl LeaseError for Connect {
        fn kind(&self) -> ErrorKind {
            ErrorKind::Retry
        }
    }

    #[test]
    fn a_failure_says_its_error_and_each_cause_once() {
        let failure = Failure::from_error(&Connect(Refused));
        assert_eq!(
            (failure.kind, failure.reason.as_str()),
            (ErrorKind::Retry, "cannot connect: connection refused")
        );
    }
}
