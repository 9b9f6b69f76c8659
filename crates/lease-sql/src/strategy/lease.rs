//! [`SqlLease`], and the conversions between a lease row's columns and lease values.

use core::fmt;

use lease_core::MachineId;

use crate::SqlLeaseError;

/// A held lease: the machine ID and the random 16-byte token that proves it is ours.
///
/// Renewals and releases match the row on both; a node whose lease expired and was claimed by
/// another node can neither extend nor free the new holder's lease. A release clears the row's
/// token, so once released the handle renews nothing (*lost*).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlLease {
    machine_id: MachineId,
    token: [u8; 16],
}

impl SqlLease {
    /// A lease handle from its parts, for example one saved by a previous process.
    #[must_use]
    pub const fn from_parts(machine_id: MachineId, token: [u8; 16]) -> Self {
        Self { machine_id, token }
    }

    /// The leased machine ID (the row's `id`).
    #[must_use]
    pub const fn machine_id(&self) -> MachineId {
        self.machine_id
    }

    /// The lease token (the row's `token`).
    #[must_use]
    pub const fn token(&self) -> [u8; 16] {
        self.token
    }
}

/// Shows the ID and only a prefix of the token: enough to tell leases apart in logs, not to
/// act as their holder.
impl fmt::Debug for SqlLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix: String = self.token[..4].iter().map(|b| format!("{b:02x}")).collect();
        f.debug_struct("SqlLease")
            .field("machine_id", &self.machine_id.get())
            .field("token", &format_args!("{prefix}…"))
            .finish()
    }
}

/// A new random lease token.
pub(super) fn new_token() -> Result<[u8; 16], SqlLeaseError> {
    let mut token = [0u8; 16];
    getrandom::fill(&mut token).map_err(SqlLeaseError::Random)?;
    Ok(token)
}

/// A row's `id` as a machine ID.
pub(super) fn machine_id(id: i64) -> Result<MachineId, sqlx::Error> {
    u16::try_from(id)
        .ok()
        .and_then(|id| MachineId::new(id).ok())
        .ok_or_else(|| {
            sqlx::Error::Protocol(format!(
                "lease table row has id {id}, outside 0..={}",
                MachineId::MAX
            ))
        })
}

/// A machine ID as the row's `id` parameter.
pub(super) fn row_id(id: MachineId) -> i16 {
    i16::try_from(id.get()).unwrap_or(-1)
}

/// A floor or clock reading (Unix ms) as the signed column stores it.
pub(super) fn signed(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A stored floor or clock reading as Unix ms (a negative value, only ever written by hand, is 0).
pub(super) fn unsigned(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_debug_shows_the_id_and_a_token_prefix_only() {
        let lease = SqlLease::from_parts(MachineId::new(42).unwrap(), [0xab; 16]);
        let shown = format!("{lease:?}");
        assert!(shown.contains("42"), "{shown}");
        assert!(shown.contains("abababab…"), "{shown}");
        assert!(!shown.contains(&"ab".repeat(5)), "{shown}");
    }
}
