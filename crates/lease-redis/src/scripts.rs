//! The Lua scripts of the lease protocol: each claim, renewal or release and its floor write run
//! as one atomic step on the server (`EVALSHA`, loaded on first use by [`redis::Script`]).
//!
//! Every script reads `TIME` itself, so the coordinator's clock comes back with the answer, and
//! names only `KEYS[1]`, the lease hash (its fields: the lease fields, `floor.<id>`, and the
//! initialization marker `open_at`). A floor is canonical decimal Unix ms of at most 19
//! digits (the rule of [`wire::parse_floor_value`](crate::wire::parse_floor_value)); two
//! such values compare exactly as strings of digits, never as Lua's floating-point numbers.

use std::sync::LazyLock;

use redis::Script;

/// Helpers every script starts with.
///
/// `open_at(now, hold)` reads the hash's initialization marker, `open_at` (a field without TTL:
/// the store time, Unix ms, from which acquisitions may claim). A hash without it is new, or
/// lost its lease data while the server stayed up (`FLUSHALL`, `DEL`, eviction: the marker goes
/// with the hash), so a node may still generate with any ID it held: the marker is then written
/// as now + `hold` ms, the amnesia hold-off, and returned. [`INITIALIZE`] writes it as now.
/// Times are whole ms below 2^53, exact in Lua's numbers.
const PRELUDE: &str = r"
local function readable(v)
  return #v <= 19 and (v == '0' or string.find(v, '^[1-9]%d*$') ~= nil)
end
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local key = KEYS[1]
local function ms(now, plus)
  return string.format('%.0f', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + plus)
end
local function open_at(now, hold)
  local at = redis.call('HGET', key, 'open_at')
  if at and readable(at) then return at end
  at = ms(now, tonumber(hold))
  redis.call('HSET', key, 'open_at', at)
  return at
end
";

/// What the lease scripts (acquire, renew, release) add: `ARGV[1]` and `ARGV[2]` are the ID and
/// the token.
const LEASE_PRELUDE: &str = r"
local id, token = ARGV[1], ARGV[2]
local marker = 'token.' .. id .. '.' .. token
local floor_field = 'floor.' .. id
";

/// Claim: `ARGV` = id, token, TTL ms, floor, run ID (empty: the amnesia guard is off), hold-off
/// ms (empty: the amnesia guard is off).
/// When a run ID is given (the amnesia guard checked that server's uptime), the claim is made
/// only on that same server process: a server restarted (or swapped behind the connection)
/// since the check has forgotten leases its uptime no longer speaks for. With a hold-off, the
/// claim is made only once the initialization marker's time has come (see [`PRELUDE`]). The
/// stored floor is read next; an unreadable one stops the claim. Then `HSETEX FNX` of both
/// lease fields (NoNoncense's claim) and, if it won, the floor is raised to the given one.
///
/// Reply: `{status, floor before, TIME seconds, TIME microseconds}`, status 1 = claimed,
/// 0 = the ID is taken, 2 = its floor is unreadable (the floor before is then that value),
/// 3 = the server is not the one checked (the floor before is then its run ID), 4 = held off
/// by the initialization marker (the floor before is then the marker's time).
const ACQUIRE: &str = r"
local now = redis.call('TIME')
if ARGV[5] ~= '' then
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
  if run_id ~= ARGV[5] then
    return {3, run_id, now[1], now[2]}
  end
end
if ARGV[6] ~= '' then
  local at = open_at(now, ARGV[6])
  if above(at, ms(now, 0)) then
    return {4, at, now[1], now[2]}
  end
end
local stored = redis.call('HGET', key, floor_field) or '0'
if not readable(stored) then
  return {2, stored, now[1], now[2]}
end
local claimed = redis.call('HSETEX', key, 'FNX', 'PX', ARGV[3], 'FIELDS', 2,
  id, token, marker, id)
if claimed == 1 and above(ARGV[4], stored) then
  redis.call('HSET', key, floor_field, ARGV[4])
end
return {claimed, stored, now[1], now[2]}
";

/// Renewal: `ARGV` = id, token, TTL ms, floor, hold-off ms (empty: the amnesia guard is off).
/// `HSETEX FXX` of both lease fields (so only while this holder's marker exists) and, only if
/// it succeeded, the floor is raised to the given one. An unreadable stored floor is left as it
/// is. A renewal that failed on a hash without its initialization marker starts the hold-off
/// (see [`PRELUDE`]): the first holder to find its lease gone starts the wait, so
/// acquirers need not be the ones to find the loss.
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
elseif ARGV[5] ~= '' then
  open_at(now, ARGV[5])
end
return {renewed, now[1], now[2]}
";

/// Release: `ARGV` = id, token, guard ms, floor. `HSETEX FXX PX guard` of both lease fields,
/// then this holder's marker is deleted and, if the marker was there, the floor is set to the
/// given one; if it was not (the lease was lost: expired, taken over, or forgotten by a
/// restarted server), the floor is only raised to the given one, never lowered.
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
else
  local stored = redis.call('HGET', key, floor_field) or '0'
  if readable(stored) and above(ARGV[4], stored) then
    redis.call('HSET', key, floor_field, ARGV[4])
  end
end
return released
";

/// Initialization (what `migrate` runs, `ARGV[1]` = the server's run ID as `INFO` gave it):
/// the marker is set to now, unless it already holds a time that has come, and `open_run` to
/// the run ID: the hash was initialized on this server process, so its uptime need not speak
/// for leases of an earlier one. Reply: `{marker before (empty: none), now}`, as Unix ms.
const INITIALIZE: &str = r"
local now = redis.call('TIME')
redis.call('HSET', key, 'open_run', ARGV[1])
local at = redis.call('HGET', key, 'open_at')
if at and readable(at) and not above(at, ms(now, 0)) then
  return {'', ms(now, 0)}
end
redis.call('HSET', key, 'open_at', ms(now, 0))
return {at or '', ms(now, 0)}
";

/// Starts the hold-off if the initialization marker is missing (`ARGV[1]` = hold-off ms), as a
/// failed acquisition or renewal does; run when the restart guard refuses an acquisition, so
/// that both waits run at once instead of one after the other. Reply: the marker's value.
const START_HOLD_OFF: &str = r"
return open_at(redis.call('TIME'), ARGV[1])
";

fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}{LEASE_PRELUDE}{body}"))
}

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(ACQUIRE));
pub(crate) static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(RENEW));
pub(crate) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(RELEASE));
pub(crate) static START_HOLD_OFF_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{PRELUDE}{START_HOLD_OFF}")));
pub(crate) static INITIALIZE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{PRELUDE}{INITIALIZE}")));

/// `TIME`'s seconds and microseconds as Unix ms.
pub(crate) fn time_ms(seconds: u64, micros: u64) -> u64 {
    seconds.saturating_mul(1000).saturating_add(micros / 1000)
}
