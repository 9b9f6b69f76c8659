//! Why a claim found nothing: the table is exhausted, others are claiming its free rows, or
//! the amnesia guard holds acquisition off (a changed server on PostgreSQL and MySQL/MariaDB;
//! deleted rows on every dialect).

use sqlx::Row;

#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::backend::execute;
use super::backend::on_pool;
use super::explain::ask;
use super::{Connection, SqlStrategy};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::amnesia::Diagnosis;
use crate::amnesia::{Rows, RowsVerdict, Verdict};
use crate::transport::{Reply, Request, Transport};
use crate::{AmnesiaGuard, Dialect, SqlLeaseError};

impl<T: Transport> SqlStrategy<T> {
    /// The error for a claim that found nothing: exhausted, a lost race, or held off. `Ok` when
    /// the server was just recorded as trusted and the claim may be tried again.
    pub(super) async fn nothing_claimed(&self, tried: usize) -> Result<(), SqlLeaseError> {
        let free = if self.guarded() {
            let Some((free, rows)) = self.check_server().await? else {
                return Ok(());
            };
            self.check_rows(rows).await?;
            free
        } else if self.dialect() == Dialect::Sqlite && self.amnesia_guard == AmnesiaGuard::HoldOff {
            let (free, rows) =
                ask!(self, Request::DiagnoseRows, Reply::Rows { free, rows } => (free, rows));
            self.check_rows(rows).await?;
            free
        } else {
            ask!(self, Request::CountFree, Reply::Free(free) => free)
        };
        Err(self.shortage(free, tried))
    }

    /// Acts on what the rows say: missing rows are put back blocked, and while rows put back
    /// are blocked, acquisition is held off.
    async fn check_rows(&self, rows: Rows) -> Result<(), SqlLeaseError> {
        let held_off = |blocked, remaining| SqlLeaseError::RowsDeleted {
            table: self.table.as_str().to_owned(),
            blocked,
            remaining,
        };
        match rows.verdict() {
            RowsVerdict::Missing { missing, blocked } => {
                self.exchange(Request::Restore).await?;
                Err(held_off(blocked + missing, self.amnesia_hold_off()))
            }
            RowsVerdict::Blocked { blocked, remaining } => Err(held_off(blocked, remaining)),
            RowsVerdict::Intact => Ok(()),
        }
    }

    /// No ID for us although the guard passed: free rows that we could not claim are being
    /// claimed by others right now; without any, the table is exhausted.
    fn shortage(&self, free: i64, tried: usize) -> SqlLeaseError {
        if free > 0 || tried > 0 {
            SqlLeaseError::Conflict {
                candidates: tried.max(usize::try_from(free).unwrap_or(0)),
            }
        } else {
            SqlLeaseError::Exhausted {
                table: self.table.as_str().to_owned(),
            }
        }
    }

    /// Asks the database whether the server is the one that granted the table's leases, and
    /// acts on the [`Verdict`]: the free rows and what the rows say when the guard passed,
    /// `None` when the server was just recorded as trusted, else the hold-off error.
    async fn check_server(&self) -> Result<Option<(i64, Rows)>, SqlLeaseError> {
        let table = self.table.as_str().to_owned();
        let held_off = |previous, current, remaining| SqlLeaseError::ServerChanged {
            table: table.clone(),
            previous,
            current,
            remaining,
        };
        let diagnosis = ask!(self, Request::Diagnose, Reply::Diagnosis(diagnosis) => diagnosis);
        match diagnosis.verdict() {
            Verdict::Standby => Err(SqlLeaseError::Standby),
            Verdict::Trust { current } => {
                self.exchange(Request::Record {
                    identity: current,
                    trusted: true,
                })
                .await?;
                Ok(None)
            }
            Verdict::RecordAndHoldOff { current } => {
                self.exchange(Request::Record {
                    identity: current.clone(),
                    trusted: false,
                })
                .await?;
                Err(held_off(None, current, self.amnesia_hold_off()))
            }
            Verdict::Changed { recorded, current } => {
                self.exchange(Request::Replace {
                    current: current.clone(),
                    recorded: recorded.clone(),
                })
                .await?;
                Err(held_off(Some(recorded), current, self.amnesia_hold_off()))
            }
            Verdict::HoldOff {
                previous,
                current,
                remaining,
            } => Err(held_off(previous, current, remaining)),
            Verdict::Passed { free, rows } => Ok(Some((free, rows))),
        }
    }
}

impl Connection {
    /// How many rows are free, as the database counts them.
    pub(super) async fn count_free(&self) -> Result<i64, sqlx::Error> {
        let sql = self.backend.common().count_free.sql();
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .fetch_one(pool)
            .await?
            .try_get(0))
    }

    /// Answers the amnesia guard's requests: the server's diagnosis and record on PostgreSQL and
    /// MySQL/MariaDB, the deleted-rows check alone on SQLite. A dialect without the statement
    /// answers an error.
    pub(super) async fn guard(&self, request: Request) -> Result<Reply, sqlx::Error> {
        #[cfg(feature = "sqlite")]
        if let (Request::DiagnoseRows, super::backend::Backend::Sqlite(pool, queries)) =
            (&request, &self.backend)
        {
            let row = sqlx::query(queries.diagnose.sql()).fetch_one(pool).await?;
            let rows = Rows {
                present: row.try_get(1)?,
                blocked: row.try_get(2)?,
                blocked_remaining_us: row.try_get(3)?,
            };
            return Ok(Reply::Rows {
                free: row.try_get(0)?,
                rows,
            });
        }
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        if let Some(amnesia) = self.backend.amnesia() {
            let backend = &self.backend;
            let done = |_| Reply::Done;
            match &request {
                Request::Diagnose => {
                    let sql = amnesia.diagnose.sql();
                    return on_pool!(backend, |pool| {
                        let row = sqlx::query(sql).fetch_one(pool).await?;
                        let claimed: i64 = match row.try_get::<bool, _>(5) {
                            Ok(claimed) => i64::from(claimed),
                            Err(_) => row.try_get(5)?,
                        };
                        Ok(Reply::Diagnosis(Diagnosis {
                            current: row.try_get(0)?,
                            recorded: row.try_get(1)?,
                            previous: row.try_get(2)?,
                            remaining_us: row.try_get(3)?,
                            free: row.try_get(4)?,
                            claimed: claimed != 0,
                            rows: Rows {
                                present: row.try_get(6)?,
                                blocked: row.try_get(7)?,
                                blocked_remaining_us: row.try_get(8)?,
                            },
                        }))
                    });
                }
                // Recorded if nothing is recorded: trusted (no hold-off) or from now on.
                Request::Record { identity, trusted } => {
                    let sql = amnesia.record.sql();
                    return execute!(backend, sql, identity.as_str(), *trusted).map(done);
                }
                // A no-op if another node replaced the recorded server first.
                Request::Replace { current, recorded } => {
                    let sql = amnesia.replace.sql();
                    return execute!(backend, sql, current.as_str(), recorded.as_str()).map(done);
                }
                _ => {}
            }
        }
        Err(sqlx::Error::Protocol(format!(
            "{} has no statement for {}",
            self.backend.dialect(),
            request.name()
        )))
    }
}
