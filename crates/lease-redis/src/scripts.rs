//! The Lua scripts of the floor-aware operations: each claim, renewal or release and its floor
//! write run as one atomic step on the server (`EVALSHA`, loaded on first use by
//! [`redis::Script`]).
//!
//! Every script reads `TIME` itself, so the coordinator's clock comes back with the answer, and
//! names only `KEYS[1]`, the lease hash. A floor is canonical decimal Unix ms of at most 19
//! digits (the rule of [`wire::parse_floor_value`](crate::wire::parse_floor_value)); two
//! such values compare exactly as strings of digits, never as Lua's floating-point numbers.

use std::sync::LazyLock;

use redis::Script;

/// Helpers every script starts with.
const PRELUDE: &str = r"
local function readable(v)
  return #v <= 19 and (v == '0' or string.find(v, '^[1-9]%d*$') ~= nil)
end
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local key, id, token = KEYS[1], ARGV[1], ARGV[2]
local marker = 'token.' .. id .. '.' .. token
local floor_field = 'floor.' .. id
";

/// Claim: `ARGV` = id, token, TTL ms, floor. The floor is read first; an unreadable one stops
/// the claim. Otherwise `HSETEX FNX` of both lease fields and, if it won, the floor is raised to
/// the given one.
///
/// Reply: `{status, floor before, TIME seconds, TIME microseconds}`, status 1 = claimed,
/// 0 = the ID is taken, 2 = its floor is unreadable (the floor before is then that value).
const ACQUIRE: &str = r"
local now = redis.call('TIME')
local stored = redis.call('HGET', key, floor_field)
if stored and not readable(stored) then
  return {2, stored, now[1], now[2]}
end
stored = stored or '0'
local claimed = redis.call('HSETEX', key, 'FNX', 'PX', ARGV[3], 'FIELDS', 2,
  id, token, marker, id)
if claimed == 1 and above(ARGV[4], stored) then
  redis.call('HSET', key, floor_field, ARGV[4])
end
return {claimed, stored, now[1], now[2]}
";

/// Renewal: `ARGV` = id, token, TTL ms, floor. `HSETEX FXX` of both lease fields (so only
/// while this holder's marker exists) and, only if it succeeded, the floor is raised to the
/// given one. An unreadable stored floor is left as it is.
///
/// Reply: `{renewed (1 or 0), TIME seconds, TIME microseconds}`.
const RENEW: &str = r"
local now = redis.call('TIME')
local renewed = redis.call('HSETEX', key, 'FXX', 'PX', ARGV[3], 'FIELDS', 2,
  id, token, marker, id)
if renewed == 1 then
  local stored = redis.call('HGET', key, floor_field) or '0'
  if readable(stored) and above(ARGV[4], stored) then
    redis.call('HSET', key, floor_field, ARGV[4])
  end
end
return {renewed, now[1], now[2]}
";

/// Release: `ARGV` = id, token, guard ms, floor. `HSETEX FXX PX guard` of both lease fields,
/// then this holder's marker is deleted and, only if the marker was there, the floor is set to
/// the given one.
///
/// The ID field stays for the guard, so every node (NoNoncense ones too) sees the ID taken
/// until then; without the marker, a renewal that reaches the server after the release (its
/// `HSETEX FXX` needs both fields) fails instead of extending the released lease.
///
/// Reply: 1 = released, 0 = the lease was not this holder's any more.
const RELEASE: &str = r"
local released = redis.call('HSETEX', key, 'FXX', 'PX', ARGV[3], 'FIELDS', 2,
  id, token, marker, id)
redis.call('HDEL', key, marker)
if released == 1 then
  redis.call('HSET', key, floor_field, ARGV[4])
end
return released
";

fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}{body}"))
}

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(ACQUIRE));
pub(crate) static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(RENEW));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(RELEASE));

/// `TIME`'s seconds and microseconds as Unix ms.
pub(crate) fn time_ms(seconds: u64, micros: u64) -> u64 {
    seconds.saturating_mul(1000).saturating_add(micros / 1000)
}
