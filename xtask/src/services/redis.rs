//! Valkey 9 and Redis 8 (and the machine's Redis 7) for `lease-redis`.

use super::Running;

/// Makes Valkey 9 and Redis 8 available to the tests.
pub fn ensure(_running: &mut Running) -> Result<(), String> {
    Ok(())
}
