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
