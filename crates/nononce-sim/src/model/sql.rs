//! A PostgreSQL server holding `lease-sql`'s table, applying its statements
//! (`Acquisition::SkipLocked`); the client is lease-sql's own [`SqlStrategy`], over a
//! [`SqlTransport`] that sends each of its requests as the statement it runs:
//!
//! - claim: the lowest free row (`expires_at < now`), preferring one whose floor is below the
//!   acquirer's clock, in one statement that also checks the amnesia guard (the recorded server
//!   identity, hold-off over); `floor_ms = GREATEST(floor_ms, $floor)`, reporting the floor
//!   before and the database clock;
//! - renew: `WHERE id AND token` (an expired lease nobody took is revived), raising the floor;
//! - release: `expires_at = LEAST(expires_at, now + guard)`, the token cleared (a renewal
//!   arriving later is lost), the floor set, token-matched; when it matched nothing (a lost
//!   lease), a second statement raises the floor, whoever holds the row;
//! - the amnesia guard's statements after a claim found nothing (what lease-sql makes of them
//!   is its own): the diagnosis (the server's identity, the recorded one and the one before,
//!   the hold-off left, free rows, whether any row was ever claimed, rows missing from the
//!   seeded table and rows put back blocked), the record and replace statements, and the
//!   restore, which puts missing rows (deleted while the server stayed up: `TRUNCATE`,
//!   `DELETE`) back blocked for the hold-off (only where the table has its coordinator row),
//!   or, with the marker check off, free, as the migration a starting node runs did before it.
//!
//! All times are the database clock in ms. The server keeps an asynchronous replica: writes
//! reach it after a lag, and a failover promotes it with whatever it had, under a new
//! identity (a new timeline), as PostgreSQL does.

use std::collections::VecDeque;
use std::time::Duration;

use lease_core::time::millis;
use lease_core::{ErrorKind, MachineId};
use lease_manager::Failure;
use lease_sql::sqlx;
use lease_sql::transport::{
    Claim as SqlClaim, Diagnosis as SqlDiagnosis, Reply as SqlReply,
    Request as SqlTransportRequest, Rows, Settings, Transport,
};
use lease_sql::{AmnesiaGuard, Dialect, SqlLease, SqlLeaseError, SqlStrategy};

use super::client::{Client, SimTransport, Simulated};
use super::{Guards, Link, Reply, Request, machine_id};

/// A database server's identity: system identifier and timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The cluster (a restore into a new cluster changes it).
    pub system: u32,
    /// The timeline (a promoted replica starts a new one).
    pub timeline: u32,
}

impl Identity {
    /// The identity as PostgreSQL's guard reads it: system identifier, `:`, and the timeline as
    /// eight hex digits.
    #[must_use]
    pub fn text(self) -> String {
        format!("{}:{:08X}", self.system, self.timeline)
    }

    /// An identity from its [`text`](Self::text).
    fn parse(text: &str) -> Result<Self, sqlx::Error> {
        let parsed = text.split_once(':').and_then(|(system, timeline)| {
            Some(Self {
                system: system.parse().ok()?,
                timeline: u32::from_str_radix(timeline, 16).ok()?,
            })
        });
        parsed.ok_or_else(|| sqlx::Error::Protocol(format!("not a server identity: {text:?}")))
    }
}

/// A statement the model server applies: what lease-sql's requests run on PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlRequest {
    /// The claim statement.
    Claim {
        /// The new lease's token.
        token: u128,
        /// Lease duration in ms.
        amount_ms: u64,
        /// `GREATEST(floor_ms, floor)`.
        floor_ms: u64,
        /// The acquirer's clock: rows whose floor is below it are preferred.
        now_ms: u64,
        /// The amnesia guard's hold-off (the longest lease), when the guard is on.
        guard_ms: Option<u64>,
    },
    /// The amnesia guard's diagnosis.
    Diagnose {
        /// The amnesia hold-off.
        hold_off_ms: u64,
    },
    /// Records the server for the table if nothing is recorded.
    Record {
        /// The server.
        identity: Identity,
        /// Trusted (no hold-off) or from now on.
        trusted: bool,
    },
    /// Replaces the recorded server.
    Replace {
        /// The server now.
        current: Identity,
        /// The server recorded before.
        recorded: Identity,
    },
    /// Counts free rows.
    CountFree,
    /// Puts the missing rows back: blocked for `blocked_ms` from now and only if the table has
    /// its coordinator row (the guard's restore statement), or free (`None`: the migration's
    /// seeding, as without the guard). Answers how many rows it added.
    Restore {
        /// How long the rows put back stay blocked.
        blocked_ms: Option<u64>,
    },
    /// The renew statement.
    Renew {
        /// Row.
        id: u16,
        /// Token.
        token: u128,
        /// Lease duration in ms.
        amount_ms: u64,
        /// `GREATEST(floor_ms, floor)`.
        floor_ms: u64,
    },
    /// The release statement.
    Release {
        /// Row.
        id: u16,
        /// Token.
        token: u128,
        /// How long the row stays blocked (`None`: freed at once, the switched-off guard).
        guard_ms: Option<u64>,
        /// The floor to set.
        floor_ms: u64,
    },
    /// `raise_floor`, after a release that matched nothing: `GREATEST(floor_ms, floor)` and a
    /// version bump, whoever holds the row.
    RaiseFloor {
        /// Row.
        id: u16,
        /// The floor to raise to.
        floor_ms: u64,
    },
}

/// What the amnesia guard's diagnosis statement returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    /// The server now (`None` on a standby).
    pub current: Option<Identity>,
    /// The server recorded for the table.
    pub recorded: Option<Identity>,
    /// The server recorded before it.
    pub previous: Option<Identity>,
    /// Ms until the recorded server's hold-off ends (negative: it ended).
    pub remaining_ms: Option<i64>,
    /// Free rows.
    pub free: u64,
    /// Whether any row was ever claimed.
    pub claimed: bool,
    /// Rows missing from the seeded table (the model's table has one row per ID it offers).
    pub missing: u64,
    /// Rows put back blocked and not yet free (no token, version 0, expiry ahead).
    pub blocked: u64,
    /// Ms until the last of them is free.
    pub blocked_remaining_ms: Option<i64>,
}

/// A statement's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlResponse {
    /// The claim: `(id, floor before, database clock)`, or no row.
    Claimed(Option<(u16, u64, u64)>),
    /// The diagnosis.
    Diagnosis(Diagnosis),
    /// A count.
    Count(u64),
    /// A write without a result.
    Done,
    /// The renewal: the database clock if the row matched.
    Renewed(Option<u64>),
    /// Whether the release matched its row.
    Released(bool),
    /// The request was for another kind of server.
    WrongServer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    token: Option<u128>,
    expires_at: u64,
    lock_version: u32,
    floor_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RecordRow {
    identity: Identity,
    since: u64,
    previous: Option<Identity>,
}

/// The lease table (a row per ID, `None` where it was deleted) and the coordinator table's row
/// for it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tables {
    rows: Vec<Option<Row>>,
    record: Option<RecordRow>,
}

#[derive(Debug, Clone, Copy)]
enum Write {
    Row(usize, Option<Row>),
    Record(Option<RecordRow>),
}

/// Writes older than this have reached the replica whatever its lag.
const MAX_LAG_MS: u64 = 300_000;

/// A PostgreSQL server holding one migrated lease table, with an asynchronous replica.
#[derive(Debug, Clone)]
pub struct SqlServer {
    primary: Tables,
    replica: Tables,
    /// Writes the replica may not have yet, with the true time they committed.
    log: VecDeque<(u64, Write)>,
    identity: Identity,
}

impl SqlServer {
    /// A table of `capacity` rows (at most 512) just migrated: every row free, floors 0, the
    /// server recorded as trusted (as `migrate` records it).
    #[must_use]
    pub fn new(capacity: u16) -> Self {
        let identity = Identity {
            system: 7,
            timeline: 1,
        };
        let rows = vec![
            Some(Row {
                token: None,
                expires_at: 0,
                lock_version: 0,
                floor_ms: 0,
            });
            usize::from(capacity.min(MachineId::COUNT))
        ];
        let tables = Tables {
            rows,
            record: Some(RecordRow {
                identity,
                since: 0,
                previous: None,
            }),
        };
        Self {
            primary: tables.clone(),
            replica: tables,
            log: VecDeque::new(),
            identity,
        }
    }

    /// The server's identity now.
    #[must_use]
    pub const fn identity(&self) -> Identity {
        self.identity
    }

    fn write_row(&mut self, t: u64, index: usize, row: Row) {
        self.set_row(t, index, Some(row));
    }

    fn set_row(&mut self, t: u64, index: usize, row: Option<Row>) {
        self.primary.rows[index] = row;
        self.log.push_back((t, Write::Row(index, row)));
    }

    /// Row `index`, if the table has it.
    fn row(&self, index: usize) -> Option<Row> {
        self.primary.rows.get(index).copied().flatten()
    }

    /// The rows the table has, with their indexes.
    fn present(&self) -> impl Iterator<Item = (usize, Row)> + '_ {
        self.primary
            .rows
            .iter()
            .enumerate()
            .filter_map(|(i, row)| row.map(|row| (i, row)))
    }

    /// Rows vanish while the server stays up, at true time `t`: every row (`TRUNCATE`, `rows`
    /// `None`) or those of `rows` (`DELETE ... WHERE id`), and the table's coordinator row
    /// with them if `record`. Returns how many rows went.
    pub fn wipe(&mut self, t: u64, rows: Option<&[MachineId]>, record: bool) -> usize {
        let indexes: Vec<usize> = match rows {
            None => (0..self.primary.rows.len()).collect(),
            Some(ids) => ids.iter().map(|id| usize::from(id.get())).collect(),
        };
        let mut deleted = 0;
        for index in indexes {
            if self.row(index).is_some() {
                self.set_row(t, index, None);
                deleted += 1;
            }
        }
        if record {
            self.write_record(t, None);
        }
        deleted
    }

    /// Rows put back blocked and not yet free at `now` (`lock_version = 0 AND token IS NULL`,
    /// expiry ahead), and ms until the last is free.
    fn blocked(&self, now: u64) -> (u64, Option<i64>) {
        let blocked: Vec<u64> = self
            .present()
            .filter(|(_, r)| r.lock_version == 0 && r.token.is_none() && !Self::free(r, now))
            .map(|(_, r)| r.expires_at)
            .collect();
        let remaining = blocked
            .iter()
            .max()
            .map(|end| i64::try_from(i128::from(*end) - i128::from(now)).unwrap_or(i64::MAX));
        (u64::try_from(blocked.len()).unwrap_or(u64::MAX), remaining)
    }

    fn write_record(&mut self, t: u64, record: Option<RecordRow>) {
        self.primary.record = record;
        self.log.push_back((t, Write::Record(record)));
    }

    /// Applies to the replica every logged write committed at or before `t`.
    fn replicate_until(&mut self, t: u64) {
        while let Some(&(at, write)) = self.log.front() {
            if at > t {
                break;
            }
            match write {
                Write::Row(i, row) => self.replica.rows[i] = row,
                Write::Record(record) => self.replica.record = record,
            }
            self.log.pop_front();
        }
    }

    /// Promotes the replica, which has every write committed at least `lag_ms` before true time
    /// `t` and none after: the writes in between are lost, and the server has a new timeline.
    /// Returns how many writes were lost.
    pub fn fail_over(&mut self, t: u64, lag_ms: u64) -> usize {
        self.replicate_until(t.saturating_sub(lag_ms));
        let lost = self.log.len();
        self.log.clear();
        self.primary = self.replica.clone();
        self.identity.timeline += 1;
        lost
    }

    /// A crash that loses the writes of the last `lag_ms` (`synchronous_commit = off`) on the
    /// same server: its identity does not change, so the guard cannot notice. Returns how many
    /// writes were lost.
    pub fn lose_recent_commits(&mut self, t: u64, lag_ms: u64) -> usize {
        let identity = self.identity;
        let lost = self.fail_over(t, lag_ms);
        self.identity = identity;
        lost
    }

    fn free(row: &Row, now: u64) -> bool {
        row.expires_at < now
    }

    fn guard_passes(&self, now: u64, hold_off_ms: u64) -> bool {
        self.primary.record.is_some_and(|r| {
            r.identity == self.identity && r.since.saturating_add(hold_off_ms) <= now
        })
    }

    /// Applies one statement at true time `t`, database clock `now`.
    pub fn handle(&mut self, t: u64, now: u64, request: SqlRequest) -> SqlResponse {
        self.replicate_until(t.saturating_sub(MAX_LAG_MS));
        match request {
            SqlRequest::Claim {
                token,
                amount_ms,
                floor_ms,
                now_ms,
                guard_ms,
            } => {
                if guard_ms.is_some_and(|max| !self.guard_passes(now, max)) {
                    return SqlResponse::Claimed(None);
                }
                // ORDER BY (floor_ms >= $now), id LIMIT 1
                let pick = self
                    .present()
                    .filter(|(_, row)| Self::free(row, now))
                    .min_by_key(|(i, row)| (row.floor_ms >= now_ms, *i));
                let Some((index, row)) = pick else {
                    return SqlResponse::Claimed(None);
                };
                let claimed = Row {
                    token: Some(token),
                    expires_at: now.saturating_add(amount_ms),
                    lock_version: row.lock_version.wrapping_add(1),
                    floor_ms: row.floor_ms.max(floor_ms),
                };
                self.write_row(t, index, claimed);
                SqlResponse::Claimed(Some((machine_id(index).get(), row.floor_ms, now)))
            }
            SqlRequest::Diagnose { hold_off_ms } => {
                let record = self.primary.record;
                let (blocked, blocked_remaining_ms) = self.blocked(now);
                let missing = self.primary.rows.iter().filter(|r| r.is_none()).count();
                SqlResponse::Diagnosis(Diagnosis {
                    current: Some(self.identity),
                    recorded: record.map(|r| r.identity),
                    previous: record.and_then(|r| r.previous),
                    remaining_ms: record.map(|r| {
                        let end = i128::from(r.since) + i128::from(hold_off_ms);
                        i64::try_from(end - i128::from(now)).unwrap_or(i64::MAX)
                    }),
                    free: self.count_free(now),
                    claimed: self
                        .present()
                        .any(|(_, r)| r.lock_version != 0 || r.token.is_some()),
                    missing: u64::try_from(missing).unwrap_or(u64::MAX),
                    blocked,
                    blocked_remaining_ms,
                })
            }
            SqlRequest::Restore { blocked_ms } => {
                if blocked_ms.is_some() && self.primary.record.is_none() {
                    return SqlResponse::Count(0);
                }
                let missing: Vec<usize> = (0..self.primary.rows.len())
                    .filter(|&i| self.primary.rows[i].is_none())
                    .collect();
                for &index in &missing {
                    let row = Row {
                        token: None,
                        expires_at: blocked_ms.map_or(0, |ms| now.saturating_add(ms)),
                        lock_version: 0,
                        floor_ms: 0,
                    };
                    self.write_row(t, index, row);
                }
                SqlResponse::Count(u64::try_from(missing.len()).unwrap_or(u64::MAX))
            }
            SqlRequest::Record { identity, trusted } => {
                if self.primary.record.is_none() {
                    let since = if trusted { 0 } else { now };
                    self.write_record(
                        t,
                        Some(RecordRow {
                            identity,
                            since,
                            previous: None,
                        }),
                    );
                }
                SqlResponse::Done
            }
            SqlRequest::Replace { current, recorded } => {
                if let Some(r) = self.primary.record
                    && r.identity == recorded
                {
                    self.write_record(
                        t,
                        Some(RecordRow {
                            identity: current,
                            since: now,
                            previous: Some(r.identity),
                        }),
                    );
                }
                SqlResponse::Done
            }
            SqlRequest::CountFree => SqlResponse::Count(self.count_free(now)),
            SqlRequest::Renew {
                id,
                token,
                amount_ms,
                floor_ms,
            } => {
                let index = usize::from(id);
                match self.row(index) {
                    Some(row) if row.token == Some(token) => {
                        let renewed = Row {
                            expires_at: now.saturating_add(amount_ms),
                            lock_version: row.lock_version.wrapping_add(1),
                            floor_ms: row.floor_ms.max(floor_ms),
                            ..row
                        };
                        self.write_row(t, index, renewed);
                        SqlResponse::Renewed(Some(now))
                    }
                    _ => SqlResponse::Renewed(None),
                }
            }
            SqlRequest::Release {
                id,
                token,
                guard_ms,
                floor_ms,
            } => {
                let index = usize::from(id);
                match self.row(index) {
                    Some(row) if row.token == Some(token) => {
                        let until = guard_ms.map_or(0, |guard| now.saturating_add(guard));
                        // The token goes: a renewal arriving later no longer matches.
                        let released = Row {
                            token: None,
                            expires_at: row.expires_at.min(until),
                            lock_version: row.lock_version.wrapping_add(1),
                            floor_ms,
                        };
                        self.write_row(t, index, released);
                        SqlResponse::Released(true)
                    }
                    _ => SqlResponse::Released(false),
                }
            }
            SqlRequest::RaiseFloor { id, floor_ms } => {
                let index = usize::from(id);
                if let Some(row) = self.row(index) {
                    let raised = Row {
                        lock_version: row.lock_version.wrapping_add(1),
                        floor_ms: row.floor_ms.max(floor_ms),
                        ..row
                    };
                    self.write_row(t, index, raised);
                }
                SqlResponse::Done
            }
        }
    }

    fn count_free(&self, now: u64) -> u64 {
        let free = self.present().filter(|(_, r)| Self::free(r, now)).count();
        u64::try_from(free).unwrap_or(u64::MAX)
    }

    /// `UPDATE ... SET expires_at = now - 1 s WHERE id = ?` (the conformance harness).
    pub fn expire(&mut self, now: u64, id: MachineId) {
        let index = usize::from(id.get());
        if let Some(mut row) = self.row(index) {
            row.expires_at = now.saturating_sub(1000);
            self.write_row(now, index, row);
        }
    }

    /// `force_release`: token cleared, expiry reset to 1970, the floor raised to the expiry
    /// it had.
    pub fn force_release(&mut self, t: u64, now: u64, id: MachineId) -> bool {
        let index = usize::from(id.get());
        match self.row(index) {
            Some(row) if !Self::free(&row, now) => {
                let freed = Row {
                    token: None,
                    expires_at: 0,
                    lock_version: row.lock_version.wrapping_add(1),
                    floor_ms: row.floor_ms.max(row.expires_at),
                };
                self.write_row(t, index, freed);
                true
            }
            _ => false,
        }
    }

    /// The rows held at `now`.
    #[must_use]
    pub fn held(&self, now: u64) -> Vec<MachineId> {
        self.present()
            .filter(|(_, r)| !Self::free(r, now))
            .map(|(i, _)| machine_id(i))
            .collect()
    }

    /// The floor stored with `id`.
    #[must_use]
    pub fn floor(&self, id: MachineId) -> u64 {
        self.row(usize::from(id.get())).map_or(0, |r| r.floor_ms)
    }
}

/// lease-sql's transport in the simulation: each request as the statement the model server
/// applies, over a [`Link`]; PostgreSQL's dialect; tokens from a random source seeded by the
/// run. The statements' settings (the amnesia guard, its hold-off) come from the strategy, as
/// lease-sql builds its statements from them; the guards lease-sql has no switch for are the
/// simulation's: with the marker off, missing rows are put back free, and a release with a
/// guard of 0 frees its row at once (the release guard off).
#[derive(Debug)]
pub struct SqlTransport<L> {
    sim: SimTransport<L>,
    guards: Guards,
    /// The amnesia hold-off in ms, when the statements check the server (guard on).
    hold_off_ms: Option<u64>,
}

impl<L: Link> SqlTransport<L> {
    /// Requests over `link` with the simulation's `guards`, tokens from `seed`.
    pub fn new(link: L, guards: Guards, seed: u64) -> Self {
        Self {
            sim: SimTransport::new(link, seed),
            guards,
            hold_off_ms: None,
        }
    }

    /// The model's statement for `request`.
    fn statement(&self, request: SqlTransportRequest) -> Result<SqlRequest, sqlx::Error> {
        let token = |token: [u8; 16]| u128::from_le_bytes(token);
        Ok(match request {
            SqlTransportRequest::Claim {
                token: t,
                amount,
                floor_ms,
                now_ms,
            } => SqlRequest::Claim {
                token: token(t),
                amount_ms: millis(amount),
                floor_ms,
                now_ms,
                guard_ms: self.hold_off_ms,
            },
            SqlTransportRequest::Diagnose => SqlRequest::Diagnose {
                hold_off_ms: self.hold_off_ms.unwrap_or(0),
            },
            SqlTransportRequest::Record { identity, trusted } => SqlRequest::Record {
                identity: Identity::parse(&identity)?,
                trusted,
            },
            SqlTransportRequest::Replace { current, recorded } => SqlRequest::Replace {
                current: Identity::parse(&current)?,
                recorded: Identity::parse(&recorded)?,
            },
            SqlTransportRequest::CountFree => SqlRequest::CountFree,
            SqlTransportRequest::Restore => SqlRequest::Restore {
                blocked_ms: self.hold_off_ms.filter(|_| self.guards.marker),
            },
            SqlTransportRequest::Renew {
                id,
                token: t,
                amount,
                floor_ms,
            } => SqlRequest::Renew {
                id: id.get(),
                token: token(t),
                amount_ms: millis(amount),
                floor_ms,
            },
            SqlTransportRequest::Release {
                id,
                token: t,
                guard,
                floor_ms,
            } => SqlRequest::Release {
                id: id.get(),
                token: token(t),
                guard_ms: (!guard.is_zero()).then(|| millis(guard)),
                floor_ms,
            },
            SqlTransportRequest::RaiseFloor { id, floor_ms } => SqlRequest::RaiseFloor {
                id: id.get(),
                floor_ms,
            },
            other => {
                return Err(sqlx::Error::Protocol(format!(
                    "PostgreSQL has no statement for {other:?}"
                )));
            }
        })
    }
}

/// lease-sql's reply from the model's `response` to a statement; `counts` when that statement
/// was the count of free rows (whose count is the answer, where other counts are not).
fn reply(counts: bool, response: SqlResponse) -> Result<SqlReply, sqlx::Error> {
    let us = |ms: i64| ms.saturating_mul(1000);
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    Ok(match (counts, response) {
        (_, SqlResponse::Claimed(Some((id, floor_ms, coordinator_ms)))) => {
            SqlReply::Claim(SqlClaim::Won {
                id: machine_id(usize::from(id)),
                floor_ms,
                coordinator_ms,
            })
        }
        (_, SqlResponse::Claimed(None)) => SqlReply::Claim(SqlClaim::Nothing { tried: 0 }),
        (_, SqlResponse::Diagnosis(d)) => SqlReply::Diagnosis(SqlDiagnosis {
            current: d.current.map(Identity::text),
            recorded: d.recorded.map(Identity::text),
            previous: d.previous.map(Identity::text),
            remaining_us: d.remaining_ms.map(us),
            free: count(d.free),
            claimed: d.claimed,
            rows: Rows {
                // The IDs past the model's capacity are rows other owners hold.
                present: i64::from(MachineId::COUNT) - count(d.missing),
                blocked: count(d.blocked),
                blocked_remaining_us: d.blocked_remaining_ms.map(us),
            },
        }),
        (true, SqlResponse::Count(n)) => SqlReply::Free(count(n)),
        (_, SqlResponse::Count(_) | SqlResponse::Done) => SqlReply::Done,
        (_, SqlResponse::Renewed(clock_ms)) => SqlReply::Matched {
            ours: clock_ms.is_some(),
            clock_ms,
        },
        (_, SqlResponse::Released(ours)) => SqlReply::Matched {
            ours,
            clock_ms: None,
        },
        (_, SqlResponse::WrongServer) => {
            return Err(sqlx::Error::Protocol("not a SQL lease table".to_owned()));
        }
    })
}

impl<L: Link> Transport for SqlTransport<L> {
    fn exchange(
        &self,
        request: SqlTransportRequest,
    ) -> impl Future<Output = Result<SqlReply, sqlx::Error>> + Send {
        let sent = self.statement(request).map(|statement| {
            let counts = statement == SqlRequest::CountFree;
            (counts, self.sim.link.exchange(Request::Sql(statement)))
        });
        async move {
            let (counts, response) = sent?;
            match response.await {
                Ok(Reply::Sql(response)) => reply(counts, response),
                Ok(_) => reply(counts, SqlResponse::WrongServer),
                Err(e) => Err(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    e.to_string(),
                ))),
            }
        }
    }

    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn configure(&mut self, settings: &Settings) {
        self.hold_off_ms = (settings.amnesia_guard() == AmnesiaGuard::HoldOff)
            .then(|| millis(settings.hold_off()));
    }

    fn token(&self) -> Result<[u8; 16], SqlLeaseError> {
        let (low, high) = (self.sim.next_random(), self.sim.next_random());
        Ok((u128::from(high) << 64 | u128::from(low)).to_le_bytes())
    }
}

/// lease-sql's strategy as the simulation runs it, with its guard switches ([`Client`]).
pub type SqlClient<L> = Client<SqlStrategy<SqlTransport<L>>>;

/// lease-sql's strategy over `link` with `guards` (the amnesia guard its own setting, the
/// marker's the transport's) and `max_lease_duration` = `max_lease`, its tokens drawn from
/// `seed`.
///
/// # Panics
/// Never: the settings are in range.
pub fn strategy<L: Link>(
    link: L,
    guards: Guards,
    max_lease: Duration,
    seed: u64,
) -> SqlStrategy<SqlTransport<L>> {
    let guard = if guards.amnesia {
        AmnesiaGuard::HoldOff
    } else {
        AmnesiaGuard::Off
    };
    SqlStrategy::with_transport(SqlTransport::new(link, guards, seed))
        .with_amnesia_guard(guard)
        .with_max_lease_duration(max_lease.max(Duration::from_millis(1)))
        .and_then(|s| s.with_max_clock_offset(Duration::from_millis(super::MAX_CLOCK_OFFSET_MS)))
        .unwrap_or_else(|e| panic!("the simulation's sql settings: {e}"))
}

impl<L: Link> Simulated for SqlStrategy<SqlTransport<L>> {
    /// The token's 16 bytes.
    fn key(lease: &SqlLease) -> Result<u128, Failure> {
        Ok(u128::from_le_bytes(lease.token()))
    }

    /// The migration's seeding, which a starting node runs: missing rows back free. Whether
    /// any came back.
    async fn found_nothing_unguarded(&self) -> Result<bool, Failure> {
        let link = &self.transport().sim.link;
        match link
            .exchange(Request::Sql(SqlRequest::Restore { blocked_ms: None }))
            .await
        {
            Ok(Reply::Sql(SqlResponse::Count(n))) => Ok(n > 0),
            Ok(other) => Err(Failure::new(
                ErrorKind::Other,
                format!("unexpected reply {other:?}"),
            )),
            Err(e) => Err(Failure::new(
                ErrorKind::Retry,
                format!("database unavailable: {e}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(token: u128, now_ms: u64, floor_ms: u64) -> SqlRequest {
        SqlRequest::Claim {
            token,
            amount_ms: 1000,
            floor_ms,
            now_ms,
            guard_ms: Some(5000),
        }
    }

    #[test]
    fn claims_the_lowest_free_row_preferring_passed_floors() {
        let mut s = SqlServer::new(4);
        let t = 1_000_000;
        assert_eq!(
            s.handle(t, t, claim(1, 50, 900)),
            SqlResponse::Claimed(Some((0, 0, t)))
        );
        // Row 0 released with a floor ahead of the next acquirer's clock.
        s.handle(
            t,
            t,
            SqlRequest::Release {
                id: 0,
                token: 1,
                guard_ms: None,
                floor_ms: 900,
            },
        );
        assert_eq!(
            s.handle(t + 1, t + 1, claim(2, 500, 0)),
            SqlResponse::Claimed(Some((1, 0, t + 1)))
        );
        assert_eq!(
            s.handle(t + 1, t + 1, claim(3, 1000, 0)),
            SqlResponse::Claimed(Some((0, 900, t + 1)))
        );
    }

    #[test]
    fn renew_revives_an_untaken_expired_lease_and_release_ends_it_for_good() {
        let t = 1_000_000;
        let mut s = SqlServer::new(1);
        s.handle(t, t, claim(9, 0, 0));
        let renew = SqlRequest::Renew {
            id: 0,
            token: 9,
            amount_ms: 1000,
            floor_ms: 5,
        };
        assert_eq!(
            s.handle(t, t + 5000, renew),
            SqlResponse::Renewed(Some(t + 5000))
        );
        let release = SqlRequest::Release {
            id: 0,
            token: 9,
            guard_ms: Some(10_000),
            floor_ms: 6,
        };
        assert_eq!(
            s.handle(t, t + 5100, release.clone()),
            SqlResponse::Released(true)
        );
        assert_eq!(s.held(t + 5999), vec![MachineId::new(0).unwrap()]);
        // The token is gone: a late renewal or a second release matches nothing.
        let late = SqlRequest::Renew {
            id: 0,
            token: 9,
            amount_ms: 100_000,
            floor_ms: 7,
        };
        assert_eq!(s.handle(t, t + 5200, late), SqlResponse::Renewed(None));
        assert_eq!(s.handle(t, t + 5300, release), SqlResponse::Released(false));
        assert!(s.held(t + 6001).is_empty());
        // The release set the floor; the late renewal did not raise it.
        assert_eq!(s.floor(MachineId::new(0).unwrap()), 6);
    }

    #[test]
    fn a_failover_loses_unreplicated_writes_and_changes_the_identity() {
        let t = 1_000_000;
        let long = |token| SqlRequest::Claim {
            token,
            amount_ms: 100_000,
            floor_ms: 0,
            now_ms: 0,
            guard_ms: Some(5000),
        };
        let mut s = SqlServer::new(2);
        s.handle(t, t, long(1));
        s.handle(t + 8_000, t + 8_000, long(2));
        let before = s.identity();
        assert_eq!(s.fail_over(t + 10_000, 5_000), 1);
        assert_ne!(s.identity(), before);
        assert_eq!(s.held(t + 9_500), vec![MachineId::new(0).unwrap()]);
        // The guard now refuses claims.
        assert_eq!(
            s.handle(t + 10_001, t + 10_001, long(3)),
            SqlResponse::Claimed(None)
        );
    }
}
