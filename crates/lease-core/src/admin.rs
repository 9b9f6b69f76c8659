//! What operators see of a lease store: who holds which ID, and for how long.

use std::time::Duration;

use nonce_core::MachineId;

/// A machine ID held in a store, as an operator tool lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The held ID.
    pub machine_id: MachineId,
    /// The first characters of the holder's token: enough to tell holders apart, not to act
    /// as them.
    pub token_prefix: String,
    /// Time left before the lease expires on the store's clock.
    pub expires_in: Duration,
}

impl Holder {
    /// Characters of a token shown to operators.
    pub const TOKEN_PREFIX_LEN: usize = 8;

    /// A holder whose token is shortened to [`TOKEN_PREFIX_LEN`](Self::TOKEN_PREFIX_LEN).
    #[must_use]
    pub fn new(machine_id: MachineId, token: &str, expires_in: Duration) -> Self {
        Self {
            machine_id,
            token_prefix: token.chars().take(Self::TOKEN_PREFIX_LEN).collect(),
            expires_in,
        }
    }
}
