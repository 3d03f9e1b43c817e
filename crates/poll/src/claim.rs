//! Claim, mark, expire: the poller's statements.

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, TxOpts, Value};
use outbox_writer::OutboxTable;

use crate::columns::{quote, PollColumns, RowStatus};
use crate::error::PollError;

/// One table's poller: the statements of the protocol (see the crate docs), built once.
#[derive(Debug, Clone)]
pub struct Poller {
    /// `database.table`, for messages.
    table_name: String,
    /// The claim's SELECT: due PENDING rows, oldest unsent of their aggregate, oldest first.
    select_claimable: String,
    /// Sets the selected rows PROCESSING under the new token and lease; completed by
    /// `IN (?, ...)` with one placeholder per selected row.
    update_claimed_prefix: String,
    /// Marks a claim's rows SENT while its token holds.
    update_sent: String,
    /// Returns PROCESSING rows whose lease ended to PENDING.
    update_expired: String,
    /// Puts one claimed row back to PENDING (due after a delay) or DEAD, under its token.
    update_failed: String,
    /// Puts DEAD rows back to PENDING; completed by the selection's condition.
    update_replay_prefix: String,
    /// Deletes a batch of SENT rows sent before a time.
    delete_sent: String,
    /// The event id column, quoted (replay by id).
    quoted_event_id: String,
    /// The next-attempt column, quoted (replay since a time).
    quoted_next_attempt: String,
}

/// What became of a claimed row whose publish failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureOutcome {
    /// Back to PENDING, due after the delay.
    Retrying,
    /// DEAD: attempts exhausted or rejected for good; `last_error` says why.
    Dead,
    /// The claim no longer held the row (its lease ended and it was reclaimed): nothing
    /// was changed.
    Fenced,
}

/// A failed publish of one claimed row, as [`Poller::record_failure`] records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure<'a> {
    /// Why (stored in the last-error column).
    pub error: &'a str,
    /// Rejected for good (a permanent error): DEAD at once.
    pub permanent: bool,
    /// Attempts after which a transient failure is DEAD too.
    pub max_attempts: u32,
    /// When the row is due again (a transient failure below `max_attempts`).
    pub delay: std::time::Duration,
}

/// Which DEAD rows `poll replay` puts back to PENDING.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaySelection {
    /// One event, by id.
    Id(String),
    /// Every DEAD row.
    All,
    /// DEAD rows whose last attempt was due at or after this time (`YYYY-MM-DD HH:MM:SS`,
    /// the server's time zone).
    Since(String),
}

/// A claimed row: what the router needs, and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedRow {
    /// The insertion order (`poll_seq`).
    pub sequence: u64,
    /// The event id.
    pub event_id: String,
    /// The aggregate type.
    pub aggregate_type: String,
    /// The aggregate id.
    pub aggregate_id: String,
    /// Claims of this row so far, this one included.
    pub attempts: u32,
}

/// One claim: its rows (oldest first) and the token that fences them.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The fencing token written into every claimed row.
    pub token: String,
    /// The claimed rows, in `poll_seq` order.
    pub rows: Vec<ClaimedRow>,
}

/// What a mark did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkOutcome {
    /// Rows marked SENT.
    pub marked: u64,
    /// Rows of the claim that were no longer held by its token (reclaimed after the lease
    /// ended): a fencing rejection; their publish was a duplicate.
    pub fenced: u64,
}

impl Poller {
    /// The statements for `table` with `columns`.
    pub fn new(table: &OutboxTable, columns: &PollColumns) -> Self {
        let name = table.quoted_name();
        let mapping = table.columns();
        let status = quote(&columns.status);
        let seq = quote(&columns.sequence);
        let next = quote(&columns.next_attempt_at);
        let locked = quote(&columns.locked_until);
        let token = quote(&columns.claim_token);
        let attempts = quote(&columns.attempts);
        let event_id = quote(&mapping.event_id);
        let aggregate_type = quote(&mapping.aggregate_type);
        let aggregate_id = quote(&mapping.aggregate_id);
        let pending = RowStatus::Pending.as_str();
        let processing = RowStatus::Processing.as_str();
        let sent = RowStatus::Sent.as_str();
        Self {
            table_name: table.display_name(),
            select_claimable: format!(
                "SELECT o.{seq}, o.{event_id}, o.{aggregate_type}, o.{aggregate_id}, o.{attempts} \
                 FROM {name} o \
                 WHERE o.{status} = '{pending}' AND o.{next} <= NOW(6) \
                 AND NOT EXISTS (SELECT 1 FROM {name} e \
                   WHERE e.{aggregate_id} = o.{aggregate_id} AND e.{aggregate_type} = o.{aggregate_type} \
                   AND e.{status} IN ('{pending}', '{processing}') AND e.{seq} < o.{seq}) \
                 ORDER BY o.{seq} LIMIT ? FOR UPDATE SKIP LOCKED"
            ),
            update_claimed_prefix: format!(
                "UPDATE {name} SET {status} = '{processing}', {attempts} = {attempts} + 1, \
                 {locked} = NOW(6) + INTERVAL ? MICROSECOND, {token} = ? \
                 WHERE {seq} IN "
            ),
            update_sent: format!(
                "UPDATE {name} SET {status} = '{sent}', {sent_at} = NOW(6), {locked} = NULL \
                 WHERE {token} = ? AND {status} = '{processing}' AND {seq} BETWEEN ? AND ?",
                sent_at = quote(&columns.sent_at),
            ),
            update_expired: format!(
                "UPDATE {name} SET {status} = '{pending}', {token} = NULL, {locked} = NULL \
                 WHERE {status} = '{processing}' AND {locked} < NOW(6)"
            ),
            update_failed: format!(
                "UPDATE {name} SET {status} = ?, {next} = NOW(6) + INTERVAL ? MICROSECOND, \
                 {locked} = NULL, {token} = NULL, {last_error} = ? \
                 WHERE {seq} = ? AND {token} = ? AND {status} = '{processing}'",
                last_error = quote(&columns.last_error),
            ),
            update_replay_prefix: format!(
                "UPDATE {name} SET {status} = '{pending}', {attempts} = 0, {next} = NOW(6) \
                 WHERE {status} = '{dead}' AND ",
                dead = RowStatus::Dead.as_str(),
            ),
            delete_sent: format!(
                "DELETE FROM {name} WHERE {status} = '{sent}' \
                 AND {sent_at} < NOW(6) - INTERVAL ? MICROSECOND ORDER BY {seq} LIMIT ?",
                sent_at = quote(&columns.sent_at),
            ),
            quoted_event_id: event_id.clone(),
            quoted_next_attempt: next.clone(),
        }
    }

    /// The claim's SELECT (for `EXPLAIN` in tests and `check`).
    pub fn claim_query(&self) -> &str {
        &self.select_claimable
    }

    /// Claims up to `limit` due rows for `lease` in one transaction (see the crate docs).
    /// An empty claim is no error.
    pub async fn claim(
        &self,
        conn: &mut mysql_async::Conn,
        limit: u32,
        lease: std::time::Duration,
    ) -> Result<Claim, PollError> {
        let token = uuid::Uuid::now_v7().to_string();
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(|source| self.failed("starting the claim", source))?;
        let rows: Vec<Row> = tx
            .exec(&self.select_claimable, (limit,))
            .await
            .map_err(|source| self.failed("selecting claimable rows", source))?;
        let rows = rows
            .into_iter()
            .map(|row| self.claimed_row(row))
            .collect::<Result<Vec<_>, _>>()?;
        if !rows.is_empty() {
            let placeholders = vec!["?"; rows.len()].join(", ");
            let statement = format!("{}({placeholders})", self.update_claimed_prefix);
            let lease_micros = u64::try_from(lease.as_micros()).unwrap_or(u64::MAX);
            let mut values = vec![Value::from(lease_micros), Value::from(token.as_str())];
            values.extend(rows.iter().map(|row| Value::from(row.sequence)));
            tx.exec_drop(statement, Params::Positional(values))
                .await
                .map_err(|source| self.failed("claiming rows", source))?;
        }
        tx.commit()
            .await
            .map_err(|source| self.failed("committing the claim", source))?;
        let rows = rows
            .into_iter()
            .map(|row| ClaimedRow {
                attempts: row.attempts + 1,
                ..row
            })
            .collect();
        Ok(Claim { token, rows })
    }

    /// Marks `claim`'s rows SENT where its token still holds; the rest are counted as
    /// fenced (another worker reclaimed them after the lease ended).
    pub async fn mark_sent(
        &self,
        conn: &mut mysql_async::Conn,
        claim: &Claim,
    ) -> Result<MarkOutcome, PollError> {
        let (Some(first), Some(last)) = (claim.rows.first(), claim.rows.last()) else {
            return Ok(MarkOutcome {
                marked: 0,
                fenced: 0,
            });
        };
        conn.exec_drop(
            &self.update_sent,
            (claim.token.as_str(), first.sequence, last.sequence),
        )
        .await
        .map_err(|source| self.failed("marking rows sent", source))?;
        let marked = conn.affected_rows();
        let claimed = claim.rows.len() as u64;
        Ok(MarkOutcome {
            marked,
            fenced: claimed.saturating_sub(marked),
        })
    }

    /// Returns PROCESSING rows whose lease ended to PENDING (no token: the old claim can no
    /// longer mark them); how many.
    pub async fn expire_leases(&self, conn: &mut mysql_async::Conn) -> Result<u64, PollError> {
        conn.query_drop(&self.update_expired)
            .await
            .map_err(|source| self.failed("expiring leases", source))?;
        Ok(conn.affected_rows())
    }

    /// A claimed row's publish failed: DEAD when the failure is permanent or the row's
    /// attempts reached `max_attempts`, else PENDING again, due after `delay`. Only while
    /// `claim` still holds the row ([`FailureOutcome::Fenced`] otherwise).
    pub async fn record_failure(
        &self,
        conn: &mut mysql_async::Conn,
        claim: &Claim,
        row: &ClaimedRow,
        failure: &Failure<'_>,
    ) -> Result<FailureOutcome, PollError> {
        let dies = failure.permanent || row.attempts >= failure.max_attempts;
        let status = if dies {
            RowStatus::Dead
        } else {
            RowStatus::Pending
        };
        let delay_micros = u64::try_from(failure.delay.as_micros()).unwrap_or(u64::MAX);
        conn.exec_drop(
            &self.update_failed,
            (
                status.as_str(),
                delay_micros,
                failure.error,
                row.sequence,
                claim.token.as_str(),
            ),
        )
        .await
        .map_err(|source| self.failed("recording a failed attempt", source))?;
        Ok(match (conn.affected_rows(), dies) {
            (0, _) => FailureOutcome::Fenced,
            (_, true) => FailureOutcome::Dead,
            (_, false) => FailureOutcome::Retrying,
        })
    }

    /// Puts the selected DEAD rows back to PENDING with their ids unchanged (attempts from
    /// zero, due now); how many.
    pub async fn replay(
        &self,
        conn: &mut mysql_async::Conn,
        selection: &ReplaySelection,
    ) -> Result<u64, PollError> {
        let (condition, params): (String, Vec<Value>) = match selection {
            ReplaySelection::Id(id) => (
                format!("{} = ?", self.quoted_event_id),
                vec![Value::from(id.as_str())],
            ),
            ReplaySelection::All => ("1 = 1".to_owned(), Vec::new()),
            ReplaySelection::Since(time) => (
                format!("{} >= ?", self.quoted_next_attempt),
                vec![Value::from(time.as_str())],
            ),
        };
        let statement = format!("{}{condition}", self.update_replay_prefix);
        conn.exec_drop(statement, Params::Positional(params))
            .await
            .map_err(|source| self.failed("replaying dead rows", source))?;
        Ok(conn.affected_rows())
    }

    /// Deletes SENT rows sent more than `retention` ago, `batch` rows per statement (short
    /// locks), until none is left; how many.
    pub async fn delete_sent(
        &self,
        conn: &mut mysql_async::Conn,
        retention: std::time::Duration,
        batch: u32,
    ) -> Result<u64, PollError> {
        let retention_micros = u64::try_from(retention.as_micros()).unwrap_or(u64::MAX);
        let mut deleted = 0;
        loop {
            conn.exec_drop(&self.delete_sent, (retention_micros, batch))
                .await
                .map_err(|source| self.failed("deleting sent rows", source))?;
            let this_batch = conn.affected_rows();
            deleted += this_batch;
            if this_batch < u64::from(batch) {
                return Ok(deleted);
            }
        }
    }

    fn claimed_row(&self, row: Row) -> Result<ClaimedRow, PollError> {
        type Columns = (u64, String, String, String, u32);
        let (sequence, event_id, aggregate_type, aggregate_id, attempts) =
            mysql_async::from_row_opt::<Columns>(row).map_err(|error| PollError::BadRow {
                table: self.table_name.clone(),
                message: format!(
                    "a claimed row does not read as (sequence, event id, aggregate type, aggregate id, attempts): {error:?}"
                ),
            })?;
        Ok(ClaimedRow {
            sequence,
            event_id,
            aggregate_type,
            aggregate_id,
            attempts,
        })
    }

    fn failed(&self, operation: &'static str, source: mysql_async::Error) -> PollError {
        PollError::Mysql {
            table: self.table_name.clone(),
            operation,
            source,
        }
    }
}
