//! A model of `lease-sql` on PostgreSQL (`Acquisition::SkipLocked`), held to its queries:
//!
//! - claim: the lowest free row (`expires_at < now`), preferring one whose floor is below the
//!   acquirer's clock, in one statement that also checks the amnesia guard (the recorded server
//!   identity, hold-off over); `floor_ms = GREATEST(floor_ms, $floor)`, reporting the floor
//!   before and the database clock;
//! - renew: `WHERE id AND token` (an expired lease nobody took is revived), raising the floor;
//! - release: `expires_at = LEAST(expires_at, now + guard)`, the token cleared (a renewal
//!   arriving later is lost), the floor set, token-matched; when it matched nothing (a lost
//!   lease), a second statement raises the floor, whoever holds the row;
//! - the amnesia guard's diagnosis after a claim found nothing: trust a fresh table, record a
//!   changed server identity and hold acquisitions off for the amnesia hold-off; then the rows:
//!   rows missing from the seeded table (deleted while the server stayed up: `TRUNCATE`,
//!   `DELETE`) are put back blocked for the hold-off (only where the table has its coordinator
//!   row), and acquisition is held off while rows put back are blocked. Without that check,
//!   missing rows are put back free, as the migration a starting node runs did before it.
//!
//! All times are the database clock in ms. The server keeps an asynchronous replica: writes
//! reach it after a lag, and a failover promotes it with whatever it had, under a new
//! identity (a new timeline), as PostgreSQL does.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use lease_core::time::millis;
use lease_core::{
    Acquire, ErrorKind, Grant, LeaseTerms, MachineId, Profile, Release, Renew, Renewal, Strategy,
};
use lease_manager::Failure;

use super::{Guards, Link, ModelLease, Request, Response, machine_id};
use crate::rng::Rng;

/// A database server's identity: system identifier and timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The cluster (a restore into a new cluster changes it).
    pub system: u32,
    /// The timeline (a promoted replica starts a new one).
    pub timeline: u32,
}

/// A request the SQL strategy model sends: one statement each.
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

/// The `lease-sql` strategy's client logic over a [`Link`] to an [`SqlServer`].
#[derive(Debug)]
pub struct SqlModel<L> {
    link: L,
    guards: Guards,
    max_lease_ms: u64,
    rng: Mutex<Rng>,
}

impl<L: Link> SqlModel<L> {
    /// A strategy with `guards`, granting at most `max_lease` (the amnesia hold-off is
    /// [`amnesia_hold_off_ms`](super::amnesia_hold_off_ms) of it), its tokens drawn from `seed`.
    pub fn new(link: L, guards: Guards, max_lease: Duration, seed: u64) -> Self {
        Self {
            link,
            guards,
            max_lease_ms: millis(max_lease).max(1),
            rng: Mutex::new(Rng::new(seed)),
        }
    }

    fn token(&self) -> u128 {
        self.rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .next_u128()
    }

    async fn call(&self, request: SqlRequest) -> Result<SqlResponse, Failure> {
        match self.link.call(Request::Sql(request)).await {
            Ok(Response::Sql(SqlResponse::WrongServer)) => Err(Failure::new(
                ErrorKind::Misconfigured,
                "not a SQL lease table",
            )),
            Ok(Response::Sql(reply)) => Ok(reply),
            Err(e) => Err(Failure::new(
                ErrorKind::Retry,
                format!("database unavailable: {e}"),
            )),
        }
    }

    fn unexpected(reply: &SqlResponse) -> Failure {
        Failure::new(ErrorKind::Other, format!("unexpected reply {reply:?}"))
    }

    fn held_off() -> Failure {
        Failure::new(
            ErrorKind::Retry,
            "the database server changed: acquisitions are held off for the amnesia hold-off",
        )
    }

    /// `check_rows`: missing rows are put back blocked, and while rows put back are blocked,
    /// acquisition is held off.
    async fn check_rows(&self, d: &Diagnosis) -> Result<(), Failure> {
        let rows_deleted = |remaining_ms: u64| {
            Failure::new(
                ErrorKind::Retry,
                format!(
                    "rows of the seeded lease table had vanished: they are back, blocked, and \
                     acquisition is held off for {remaining_ms} ms more"
                ),
            )
        };
        let hold_off_ms = super::amnesia_hold_off_ms(self.max_lease_ms);
        if d.missing > 0 {
            match self
                .call(SqlRequest::Restore {
                    blocked_ms: Some(hold_off_ms),
                })
                .await?
            {
                SqlResponse::Count(_) => return Err(rows_deleted(hold_off_ms)),
                other => return Err(Self::unexpected(&other)),
            }
        }
        match d.blocked_remaining_ms.and_then(|ms| u64::try_from(ms).ok()) {
            Some(ms) if ms > 0 && d.blocked > 0 => Err(rows_deleted(ms)),
            _ => Ok(()),
        }
    }

    /// Without the rows check, missing rows come back free (the migration's seeding, which a
    /// starting node runs), and the claim is tried again.
    async fn seed(&self) -> Result<(), Failure> {
        match self.call(SqlRequest::Restore { blocked_ms: None }).await? {
            SqlResponse::Count(_) => Ok(()),
            other => Err(Self::unexpected(&other)),
        }
    }

    /// `nothing_claimed`: `Ok` when the claim may be tried again.
    async fn nothing_claimed(&self) -> Result<(), Failure> {
        let free = if self.guards.amnesia {
            let reply = self
                .call(SqlRequest::Diagnose {
                    hold_off_ms: super::amnesia_hold_off_ms(self.max_lease_ms),
                })
                .await?;
            let SqlResponse::Diagnosis(d) = reply else {
                return Err(Self::unexpected(&reply));
            };
            let Some(current) = d.current else {
                return Err(Failure::new(ErrorKind::Retry, "the server is a standby"));
            };
            match d.recorded {
                None => {
                    let trusted = !d.claimed;
                    self.call(SqlRequest::Record {
                        identity: current,
                        trusted,
                    })
                    .await?;
                    return if trusted {
                        Ok(())
                    } else {
                        Err(Self::held_off())
                    };
                }
                Some(recorded) if recorded != current => {
                    self.call(SqlRequest::Replace { current, recorded }).await?;
                    return Err(Self::held_off());
                }
                Some(_) if d.remaining_ms.is_some_and(|r| r > 0) => {
                    return Err(Self::held_off());
                }
                Some(_) if self.guards.marker_checked() => {
                    self.check_rows(&d).await?;
                    d.free
                }
                Some(_) if d.missing > 0 => return self.seed().await,
                Some(_) => d.free,
            }
        } else {
            match self.call(SqlRequest::Restore { blocked_ms: None }).await? {
                SqlResponse::Count(0) => {}
                SqlResponse::Count(_) => return Ok(()),
                other => return Err(Self::unexpected(&other)),
            }
            match self.call(SqlRequest::CountFree).await? {
                SqlResponse::Count(n) => n,
                other => return Err(Self::unexpected(&other)),
            }
        };
        // SkipLocked tries no candidates: free rows it could not claim are being claimed.
        if free > 0 {
            Err(Failure::new(
                ErrorKind::Conflict,
                format!("{free} free rows are being claimed by others"),
            ))
        } else {
            Err(Failure::new(
                ErrorKind::Exhausted,
                "every machine id of the lease table is leased",
            ))
        }
    }
}

impl<L: Link> Strategy for SqlModel<L> {
    type Lease = ModelLease;
    type Error = Failure;

    async fn acquire(&self, request: Acquire) -> Result<Grant<ModelLease>, Failure> {
        let amount_ms = millis(request.requested).min(self.max_lease_ms);
        let token = self.token();
        for _ in 0..2 {
            let reply = self
                .call(SqlRequest::Claim {
                    token,
                    amount_ms,
                    floor_ms: self.guards.floor_ms(request.floor_ms),
                    now_ms: self.guards.floor_ms(request.now_ms),
                    guard_ms: self
                        .guards
                        .amnesia
                        .then_some(super::amnesia_hold_off_ms(self.max_lease_ms)),
                })
                .await?;
            match reply {
                SqlResponse::Claimed(Some((id, before, clock))) => {
                    let id = machine_id(usize::from(id));
                    let lease = ModelLease { id, token };
                    return Ok(super::clock_bound(
                        self.guards,
                        Grant::new(id, lease, Duration::from_millis(amount_ms))
                            .with_floor(self.guards.floor_ms(before))
                            .with_coordinator_ms(clock),
                    ));
                }
                SqlResponse::Claimed(None) => self.nothing_claimed().await?,
                other => return Err(Self::unexpected(&other)),
            }
        }
        Err(Failure::new(ErrorKind::Conflict, "no row could be claimed"))
    }

    async fn renew(
        &self,
        lease: &ModelLease,
        request: Renew,
    ) -> Result<Renewal<ModelLease>, Failure> {
        let amount_ms = millis(request.requested).min(self.max_lease_ms);
        let reply = self
            .call(SqlRequest::Renew {
                id: lease.id.get(),
                token: lease.token,
                amount_ms,
                floor_ms: self.guards.floor_ms(request.floor_ms),
            })
            .await?;
        match reply {
            SqlResponse::Renewed(Some(clock)) => Ok(super::renewal_clock_bound(
                self.guards,
                Renewal::new(*lease, Duration::from_millis(amount_ms)).with_coordinator_ms(clock),
            )),
            SqlResponse::Renewed(None) => Err(Failure::new(
                ErrorKind::Lost,
                format!("lease on machine id {} is no longer ours", lease.id),
            )),
            other => Err(Self::unexpected(&other)),
        }
    }

    async fn release(&self, lease: &ModelLease, request: Release) -> Result<(), Failure> {
        let guard_ms = self.guards.release_guard.then(|| millis(request.guard));
        let floor_ms = self.guards.floor_ms(request.floor_ms);
        match self
            .call(SqlRequest::Release {
                id: lease.id.get(),
                token: lease.token,
                guard_ms,
                floor_ms,
            })
            .await?
        {
            SqlResponse::Released(true) => Ok(()),
            // Not ours any more: a second statement only raises the floor.
            SqlResponse::Released(false) => match self
                .call(SqlRequest::RaiseFloor {
                    id: lease.id.get(),
                    floor_ms,
                })
                .await?
            {
                SqlResponse::Done => Ok(()),
                other => Err(Self::unexpected(&other)),
            },
            other => Err(Self::unexpected(&other)),
        }
    }

    /// As `SqlStrategy::check_terms`: a longest lease below the minimum TTL is refused.
    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), Failure> {
        if self.max_lease_ms < millis(terms.min_ttl) {
            return Err(Failure::new(
                ErrorKind::Misconfigured,
                "max_lease_duration is below the lease manager's min_ttl",
            ));
        }
        Ok(())
    }

    fn profile(&self) -> Profile {
        self.guards.profile("sql-model")
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
