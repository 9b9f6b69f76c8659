//! A PostgreSQL server holding `lease-sql`'s table, applying its statements
//! (`Acquisition::SkipLocked`); the client is lease-sql's own [`SqlStrategy`], over a
//! [`SqlTransport`] that sends each of its requests, which the server applies as the
//! statement PostgreSQL runs for it:
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
    Claim, Diagnosis, Reply as SqlReply, Request as SqlRequest, Rows, Settings, Transport,
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
    fn parse(text: &str) -> Result<Self, String> {
        let parsed = text.split_once(':').and_then(|(system, timeline)| {
            Some(Self {
                system: system.parse().ok()?,
                timeline: u32::from_str_radix(timeline, 16).ok()?,
            })
        });
        parsed.ok_or_else(|| format!("not a server identity: {text:?}"))
    }
}

/// lease-sql's request as PostgreSQL runs it: the statements that check the server (the claim,
/// the diagnosis, the restore) carry the amnesia hold-off the strategy configured (`None`: the
/// guard off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// lease-sql's request.
    pub request: SqlRequest,
    /// The amnesia hold-off in ms, when the guard is on.
    pub hold_off_ms: Option<u64>,
}

/// What the model server answers: lease-sql's reply, or why it cannot run the statement (the
/// database's error).
pub type SqlResponse = Result<SqlReply, String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Row {
    token: Option<[u8; 16]>,
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
    /// Whether the guard's restore puts missing rows back blocked (the marker guard's switch;
    /// off, they come back free, as the migration a starting node runs did before it).
    restores_blocked: bool,
}

/// A count as SQL returns it.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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
        let rows = vec![Some(Row::default()); usize::from(capacity.min(MachineId::COUNT))];
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
            restores_blocked: true,
        }
    }

    /// Blocks the server's restore putting rows back only while `guards` has the marker on.
    pub const fn set_guards(&mut self, guards: Guards) {
        self.restores_blocked = guards.marker;
    }

    /// The server's identity now.
    #[must_use]
    pub const fn identity(&self) -> Identity {
        self.identity
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

    /// Records server `identity`, trusted from `since`, replacing `previous`.
    fn record(&mut self, t: u64, identity: Identity, since: u64, previous: Option<Identity>) {
        let record = RecordRow {
            identity,
            since,
            previous,
        };
        self.write_record(t, Some(record));
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
    pub fn handle(&mut self, t: u64, now: u64, statement: Statement) -> SqlResponse {
        self.replicate_until(t.saturating_sub(MAX_LAG_MS));
        let hold_off_ms = statement.hold_off_ms;
        let matched = |ours| SqlReply::Matched {
            ours,
            clock_ms: ours.then_some(now),
        };
        Ok(match statement.request {
            SqlRequest::Claim {
                token,
                amount,
                floor_ms,
                now_ms,
            } => SqlReply::Claim(self.claim(t, now, hold_off_ms, token, amount, floor_ms, now_ms)),
            SqlRequest::Diagnose => SqlReply::Diagnosis(self.diagnose(now, hold_off_ms)),
            SqlRequest::Restore => {
                let blocked_ms = hold_off_ms.filter(|_| self.restores_blocked);
                SqlReply::Free(self.restore(t, now, blocked_ms))
            }
            SqlRequest::Record { identity, trusted } => {
                let identity = Identity::parse(&identity)?;
                if self.primary.record.is_none() {
                    let since = if trusted { 0 } else { now };
                    self.record(t, identity, since, None);
                }
                SqlReply::Done
            }
            SqlRequest::Replace { current, recorded } => {
                let (current, recorded) = (Identity::parse(&current)?, Identity::parse(&recorded)?);
                if let Some(r) = self.primary.record
                    && r.identity == recorded
                {
                    self.record(t, current, now, Some(r.identity));
                }
                SqlReply::Done
            }
            SqlRequest::CountFree => SqlReply::Free(self.count_free(now)),
            SqlRequest::Renew {
                id,
                token,
                amount,
                floor_ms,
            } => {
                let index = usize::from(id.get());
                let row = self.row(index).filter(|row| row.token == Some(token));
                if let Some(row) = row {
                    let renewed = Row {
                        expires_at: now.saturating_add(millis(amount)),
                        lock_version: row.lock_version.wrapping_add(1),
                        floor_ms: row.floor_ms.max(floor_ms),
                        ..row
                    };
                    self.set_row(t, index, Some(renewed));
                }
                matched(row.is_some())
            }
            SqlRequest::Release {
                id,
                token,
                guard,
                floor_ms,
            } => {
                let index = usize::from(id.get());
                let row = self.row(index).filter(|row| row.token == Some(token));
                if let Some(row) = row {
                    // A guard of 0 frees the row at once (the switched-off release guard).
                    let until = if guard.is_zero() {
                        0
                    } else {
                        now.saturating_add(millis(guard))
                    };
                    // The token goes: a renewal arriving later no longer matches.
                    let released = Row {
                        token: None,
                        expires_at: row.expires_at.min(until),
                        lock_version: row.lock_version.wrapping_add(1),
                        floor_ms,
                    };
                    self.set_row(t, index, Some(released));
                }
                SqlReply::Matched {
                    ours: row.is_some(),
                    clock_ms: None,
                }
            }
            SqlRequest::RaiseFloor { id, floor_ms } => {
                let index = usize::from(id.get());
                if let Some(row) = self.row(index) {
                    let raised = Row {
                        lock_version: row.lock_version.wrapping_add(1),
                        floor_ms: row.floor_ms.max(floor_ms),
                        ..row
                    };
                    self.set_row(t, index, Some(raised));
                }
                SqlReply::Done
            }
            other => return Err(format!("PostgreSQL has no statement for {}", other.name())),
        })
    }

    /// The claim statement: with the amnesia guard on (`hold_off_ms`), only on the recorded
    /// server after its hold-off; the lowest free row, `ORDER BY (floor_ms >= $now), id`.
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &mut self,
        t: u64,
        now: u64,
        hold_off_ms: Option<u64>,
        token: [u8; 16],
        amount: Duration,
        floor_ms: u64,
        now_ms: u64,
    ) -> Claim {
        let nothing = Claim::Nothing { tried: 0 };
        if hold_off_ms.is_some_and(|max| !self.guard_passes(now, max)) {
            return nothing;
        }
        let pick = self
            .present()
            .filter(|(_, row)| Self::free(row, now))
            .min_by_key(|(i, row)| (row.floor_ms >= now_ms, *i));
        let Some((index, row)) = pick else {
            return nothing;
        };
        let claimed = Row {
            token: Some(token),
            expires_at: now.saturating_add(millis(amount)),
            lock_version: row.lock_version.wrapping_add(1),
            floor_ms: row.floor_ms.max(floor_ms),
        };
        self.set_row(t, index, Some(claimed));
        Claim::Won {
            id: machine_id(index),
            floor_ms: row.floor_ms,
            coordinator_ms: now,
        }
    }

    /// The amnesia guard's diagnosis: the server now, the recorded one and the one before, the
    /// hold-off left, free rows, whether any row was ever claimed, and what the rows say.
    fn diagnose(&self, now: u64, hold_off_ms: Option<u64>) -> Diagnosis {
        let us = |end: u64| {
            let us = (i128::from(end) - i128::from(now)) * 1000;
            i64::try_from(us).unwrap_or(i64::MAX)
        };
        let record = self.primary.record;
        let blocked: Vec<u64> = self
            .present()
            .filter(|(_, r)| r.lock_version == 0 && r.token.is_none() && !Self::free(r, now))
            .map(|(_, r)| r.expires_at)
            .collect();
        let missing = self.primary.rows.iter().filter(|r| r.is_none()).count();
        Diagnosis {
            current: Some(self.identity.text()),
            recorded: record.map(|r| r.identity.text()),
            previous: record.and_then(|r| r.previous.map(Identity::text)),
            remaining_us: record.map(|r| us(r.since.saturating_add(hold_off_ms.unwrap_or(0)))),
            free: self.count_free(now),
            claimed: self
                .present()
                .any(|(_, r)| r.lock_version != 0 || r.token.is_some()),
            rows: Rows {
                // The IDs past the model's capacity are rows other owners hold.
                present: i64::from(MachineId::COUNT) - count(missing),
                blocked: count(blocked.len()),
                blocked_remaining_us: blocked.iter().max().map(|&end| us(end)),
            },
        }
    }

    /// Puts the missing rows back: blocked for `blocked_ms` from now and only if the table has
    /// its coordinator row (the guard's restore statement), or free (`None`: the migration's
    /// seeding, as without the guard or its marker check). Returns how many rows it added.
    fn restore(&mut self, t: u64, now: u64, blocked_ms: Option<u64>) -> i64 {
        if blocked_ms.is_some() && self.primary.record.is_none() {
            return 0;
        }
        let missing: Vec<usize> = (0..self.primary.rows.len())
            .filter(|&i| self.primary.rows[i].is_none())
            .collect();
        for &index in &missing {
            let row = Row {
                expires_at: blocked_ms.map_or(0, |ms| now.saturating_add(ms)),
                ..Row::default()
            };
            self.set_row(t, index, Some(row));
        }
        count(missing.len())
    }

    fn count_free(&self, now: u64) -> i64 {
        count(self.present().filter(|(_, r)| Self::free(r, now)).count())
    }

    /// `UPDATE ... SET expires_at = now - 1 s WHERE id = ?` (the conformance harness).
    pub fn expire(&mut self, now: u64, id: MachineId) {
        let index = usize::from(id.get());
        if let Some(mut row) = self.row(index) {
            row.expires_at = now.saturating_sub(1000);
            self.set_row(now, index, Some(row));
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
                self.set_row(t, index, Some(freed));
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

/// lease-sql's transport in the simulation: each request, with the amnesia hold-off of its
/// statements, to the model server over a [`Link`]; PostgreSQL's dialect; tokens from a random
/// source seeded by the run. The settings (the amnesia guard, its hold-off) come from the
/// strategy, as lease-sql builds its statements from them.
#[derive(Debug)]
pub struct SqlTransport<L> {
    sim: SimTransport<L>,
    /// The amnesia hold-off in ms, when the statements check the server (guard on).
    hold_off_ms: Option<u64>,
}

impl<L: Link> SqlTransport<L> {
    /// Requests over `link`, tokens from `seed`.
    pub fn new(link: L, seed: u64) -> Self {
        Self {
            sim: SimTransport::new(link, seed),
            hold_off_ms: None,
        }
    }

    /// Sends `request` with `hold_off_ms`.
    fn send(
        &self,
        request: SqlRequest,
        hold_off_ms: Option<u64>,
    ) -> impl Future<Output = Result<SqlReply, sqlx::Error>> + Send {
        let reply = self.sim.link.exchange(Request::Sql(Statement {
            request,
            hold_off_ms,
        }));
        async move {
            match reply.await {
                Ok(Reply::Sql(reply)) => reply.map_err(sqlx::Error::Protocol),
                Ok(_) => Err(sqlx::Error::Protocol("not a SQL lease table".to_owned())),
                Err(e) => Err(sqlx::Error::Io(e.into())),
            }
        }
    }
}

impl<L: Link> Transport for SqlTransport<L> {
    fn exchange(
        &self,
        request: SqlRequest,
    ) -> impl Future<Output = Result<SqlReply, sqlx::Error>> + Send {
        self.send(request, self.hold_off_ms)
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
    SqlStrategy::with_transport(SqlTransport::new(link, seed))
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
        match self.transport().send(SqlRequest::Restore, None).await {
            Ok(SqlReply::Free(n)) => Ok(n > 0),
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

    fn id(n: u16) -> MachineId {
        MachineId::new(n).unwrap()
    }

    fn token(n: u8) -> [u8; 16] {
        [n; 16]
    }

    /// `request` with the amnesia guard on (a hold-off of 5 s).
    fn guarded(request: SqlRequest) -> Statement {
        Statement {
            request,
            hold_off_ms: Some(5000),
        }
    }

    fn claim(token: [u8; 16], amount_ms: u64, now_ms: u64, floor_ms: u64) -> Statement {
        guarded(SqlRequest::Claim {
            token,
            amount: Duration::from_millis(amount_ms),
            floor_ms,
            now_ms,
        })
    }

    fn won(id: u16, floor_ms: u64, coordinator_ms: u64) -> SqlResponse {
        Ok(SqlReply::Claim(Claim::Won {
            id: self::id(id),
            floor_ms,
            coordinator_ms,
        }))
    }

    fn release(token: [u8; 16], guard_ms: u64, floor_ms: u64) -> Statement {
        guarded(SqlRequest::Release {
            id: id(0),
            token,
            guard: Duration::from_millis(guard_ms),
            floor_ms,
        })
    }

    fn renew(token: [u8; 16], amount_ms: u64, floor_ms: u64) -> Statement {
        guarded(SqlRequest::Renew {
            id: id(0),
            token,
            amount: Duration::from_millis(amount_ms),
            floor_ms,
        })
    }

    const fn matched(ours: bool, clock_ms: Option<u64>) -> SqlResponse {
        Ok(SqlReply::Matched { ours, clock_ms })
    }

    #[test]
    fn claims_the_lowest_free_row_preferring_passed_floors() {
        let mut s = SqlServer::new(4);
        let t = 1_000_000;
        assert_eq!(s.handle(t, t, claim(token(1), 1000, 50, 900)), won(0, 0, t));
        // Row 0 released with a floor ahead of the next acquirer's clock.
        let released = s.handle(t, t, release(token(1), 0, 900));
        assert_eq!(released, matched(true, None));
        let t = t + 1;
        assert_eq!(s.handle(t, t, claim(token(2), 1000, 500, 0)), won(1, 0, t));
        assert_eq!(
            s.handle(t, t, claim(token(3), 1000, 1000, 0)),
            won(0, 900, t)
        );
    }

    #[test]
    fn renew_revives_an_untaken_expired_lease_and_release_ends_it_for_good() {
        let t = 1_000_000;
        let mut s = SqlServer::new(1);
        assert_eq!(s.handle(t, t, claim(token(9), 1000, 0, 0)), won(0, 0, t));
        let renewed = s.handle(t, t + 5000, renew(token(9), 1000, 5));
        assert_eq!(renewed, matched(true, Some(t + 5000)));
        let released = s.handle(t, t + 5100, release(token(9), 10_000, 6));
        assert_eq!(released, matched(true, None));
        assert_eq!(s.held(t + 5999), vec![id(0)]);
        // The token is gone: a late renewal or a second release matches nothing.
        let late = s.handle(t, t + 5200, renew(token(9), 100_000, 7));
        assert_eq!(late, matched(false, None));
        let again = s.handle(t, t + 5300, release(token(9), 10_000, 6));
        assert_eq!(again, matched(false, None));
        assert!(s.held(t + 6001).is_empty());
        // The release set the floor; the late renewal did not raise it.
        assert_eq!(s.floor(id(0)), 6);
    }

    #[test]
    fn a_failover_loses_unreplicated_writes_and_changes_the_identity() {
        let t = 1_000_000;
        let mut s = SqlServer::new(2);
        assert_eq!(s.handle(t, t, claim(token(1), 100_000, 0, 0)), won(0, 0, t));
        let t2 = t + 8_000;
        assert_eq!(
            s.handle(t2, t2, claim(token(2), 100_000, 0, 0)),
            won(1, 0, t2)
        );
        let before = s.identity();
        assert_eq!(s.fail_over(t + 10_000, 5_000), 1);
        assert_ne!(s.identity(), before);
        assert_eq!(s.held(t + 9_500), vec![id(0)]);
        // The guard now refuses claims.
        let t = t + 10_001;
        assert_eq!(
            s.handle(t, t, claim(token(3), 100_000, 0, 0)),
            Ok(SqlReply::Claim(Claim::Nothing { tried: 0 }))
        );
    }
}
