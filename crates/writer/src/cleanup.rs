//! The cleanup job: delete outbox rows the relay has certainly published.
//!
//! # The rule
//! A row is deleted only when its timestamp column (`created_at` / `timestamp`, filled by
//! the server's `CURRENT_TIMESTAMP(6)` at INSERT time) is older than
//! `checkpoint.position.timestamp - safety_margin`, where the checkpoint is the relay's
//! **stored** checkpoint, read through its [`CheckpointStore`].
//!
//! The checkpoint holds no commit time of its own: its `timestamp` is the binlog event
//! timestamp (source server clock, whole seconds) of the last transaction whose events were
//! all acknowledged by Kafka (a heartbeat checkpoint keeps the previous transaction's
//! timestamp, so it never runs ahead). Everything the relay stored a checkpoint past is never
//! read again after a restart. A row's timestamp is taken when its INSERT statement starts,
//! **before** its transaction commits; so a row inserted before the checkpoint's timestamp
//! may still belong to a transaction that committed after the checkpoint position (a long
//! transaction). The safety margin covers that: it must be longer than the longest
//! transaction that writes to the outbox, plus any clock difference between the sessions
//! (the comparison is `created_at < FROM_UNIXTIME(checkpoint timestamp - margin)` in the
//! cleanup session's time zone, so writers and the cleanup job must use the same
//! `time_zone`, normally the server default). The default margin is one hour.
//!
//! No checkpoint, or one with timestamp 0 (a fresh start at a given position), deletes
//! nothing. The relay itself ignores the DELETE rows in the binlog (its
//! `invalid_operation = "ignore"` default); with `"error"` it would stop on them.
//!
//! # Poll mode
//! A polling relay (`[source] mode = "poll"`) stores no checkpoint: each row's status says
//! whether Kafka acknowledged it. [`delete_sent_poll_rows`] deletes rows marked SENT longer
//! ago than a retention; the relay runs it itself (`[source.poll] sent_retention_s`).
//!
//! # Bounded batches
//! Each batch is one autocommitted `DELETE ... ORDER BY ts LIMIT batch_size`, so locks are
//! held briefly and replicas receive small transactions; the job stops after `max_batches`
//! batches and reports whether rows may remain ([`CleanupReport::finished`]).

use std::time::Duration;

use mysql_async::prelude::Queryable;
use outbox_checkpoint::{CheckpointStore, CheckpointStoreError};

use crate::internal_events::{CleanupBatchDeleted, CleanupSkipped, InternalEvent};
use crate::table::{quote, OutboxTable};

/// How much the cleanup job deletes per run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// Subtracted from the checkpoint timestamp: covers transactions that were open longer
    /// than this between their INSERT and their commit, and session clock differences.
    pub safety_margin: Duration,
    /// Rows per DELETE statement, to keep each transaction (locks, binlog, replica lag) small.
    pub batch_size: u32,
    /// Batches per run, so one run has a bounded duration; the next run continues.
    pub max_batches: u32,
}

impl Default for CleanupPolicy {
    fn default() -> Self {
        Self {
            safety_margin: Duration::from_secs(3600),
            batch_size: 1000,
            max_batches: 100,
        }
    }
}

/// What one cleanup run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupReport {
    /// The stored checkpoint's timestamp (`None`: no checkpoint stored yet).
    pub checkpoint_timestamp: Option<u32>,
    /// Rows older than this (Unix seconds) were eligible; `None` when nothing was eligible
    /// (no checkpoint, timestamp 0, or the margin reaches before 1970).
    pub cutoff_unix_seconds: Option<i64>,
    /// Rows deleted.
    pub deleted_rows: u64,
    /// DELETE statements run.
    pub batches: u32,
    /// `true` when the last batch deleted fewer than `batch_size` rows (nothing eligible is
    /// left); `false` when `max_batches` stopped the run.
    pub finished: bool,
}

/// Why the cleanup job failed. Nothing wrong was deleted: the checkpoint is read first, and
/// each batch is its own transaction.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    /// The checkpoint could not be read: nothing is deleted (a guess would risk rows the
    /// relay still needs).
    #[error(
        "cleanup of outbox table {table}: cannot read the relay checkpoint from {store}: {source}"
    )]
    Checkpoint {
        /// The outbox table.
        table: String,
        /// The store's description.
        store: String,
        /// The store's error.
        source: CheckpointStoreError,
    },
    /// A DELETE failed (rows of earlier batches stay deleted; they were eligible).
    #[error(
        "cleanup of outbox table {table}: DELETE failed after {deleted_rows} row(s): {source}"
    )]
    Database {
        /// The outbox table.
        table: String,
        /// Rows deleted by earlier batches.
        deleted_rows: u64,
        /// The driver's error.
        source: mysql_async::Error,
    },
    /// `batch_size` or `max_batches` is 0.
    #[error("cleanup policy: batch_size and max_batches must be at least 1")]
    EmptyPolicy,
}

/// Deletes rows of `table` the relay has published, by the rule in the module docs, on
/// `connection` (autocommit; not inside an application transaction).
pub async fn delete_published_events(
    connection: &mut mysql_async::Conn,
    table: &OutboxTable,
    checkpoint_store: &dyn CheckpointStore,
    policy: &CleanupPolicy,
) -> Result<CleanupReport, CleanupError> {
    if policy.batch_size == 0 || policy.max_batches == 0 {
        return Err(CleanupError::EmptyPolicy);
    }
    let checkpoint = checkpoint_store
        .load()
        .await
        .map_err(|source| CleanupError::Checkpoint {
            table: table.display_name(),
            store: checkpoint_store.describe(),
            source,
        })?;
    let checkpoint_timestamp = checkpoint.as_ref().map(|c| c.position.timestamp);
    let mut report = CleanupReport {
        checkpoint_timestamp,
        cutoff_unix_seconds: None,
        deleted_rows: 0,
        batches: 0,
        finished: true,
    };
    let Some(cutoff) = cutoff_seconds(checkpoint_timestamp, policy.safety_margin) else {
        CleanupSkipped {
            table: &table.display_name(),
            checkpoint_timestamp,
        }
        .emit();
        return Ok(report);
    };
    report.cutoff_unix_seconds = Some(cutoff);
    let timestamp_column = quote(&table.columns().timestamp);
    let statement = format!(
        "DELETE FROM {} WHERE {timestamp_column} < FROM_UNIXTIME(?) ORDER BY {timestamp_column} LIMIT ?",
        table.quoted_name()
    );
    delete_in_batches(
        connection,
        &table.display_name(),
        &statement,
        cutoff,
        policy,
        report,
    )
    .await
}

/// Poll mode's rows to delete: those the polling relay (`outbox-poll`) marked SENT.
#[derive(Debug, Clone, Copy)]
pub struct SentPollRows<'a> {
    /// The table, `database.table`, for messages.
    pub table: &'a str,
    /// The table's quoted name, for the statement.
    pub quoted_table: &'a str,
    /// The status column (`poll_status`).
    pub status_column: &'a str,
    /// When the row was marked SENT (`poll_sent_at`).
    pub sent_at_column: &'a str,
    /// The insertion order (`poll_seq`): oldest first.
    pub sequence_column: &'a str,
}

/// Poll mode (no checkpoint: each row says whether it was published): deletes rows marked
/// SENT more than `retention` ago, in `policy`'s batches (`safety_margin` is not used: a
/// SENT row was acknowledged by Kafka before it was marked). The polling relay runs this
/// itself (`[source.poll] sent_retention_s`); a job of yours can instead (with
/// `sent_retention_s = 0`).
pub async fn delete_sent_poll_rows(
    connection: &mut mysql_async::Conn,
    rows: &SentPollRows<'_>,
    retention: Duration,
    policy: &CleanupPolicy,
) -> Result<CleanupReport, CleanupError> {
    if policy.batch_size == 0 || policy.max_batches == 0 {
        return Err(CleanupError::EmptyPolicy);
    }
    let statement = format!(
        "DELETE FROM {table} WHERE {status} = 'SENT' AND {sent_at} < NOW(6) - INTERVAL ? MICROSECOND \
         ORDER BY {sequence} LIMIT ?",
        table = rows.quoted_table,
        status = quote(rows.status_column),
        sent_at = quote(rows.sent_at_column),
        sequence = quote(rows.sequence_column),
    );
    let retention_micros = i64::try_from(retention.as_micros()).unwrap_or(i64::MAX);
    let report = CleanupReport {
        checkpoint_timestamp: None,
        cutoff_unix_seconds: None,
        deleted_rows: 0,
        batches: 0,
        finished: true,
    };
    delete_in_batches(
        connection,
        rows.table,
        &statement,
        retention_micros,
        policy,
        report,
    )
    .await
}

/// Runs `statement` (its parameters: `bound`, then the batch size) until a batch deletes
/// fewer than `batch_size` rows or `max_batches` ran.
async fn delete_in_batches(
    connection: &mut mysql_async::Conn,
    table: &str,
    statement: &str,
    bound: i64,
    policy: &CleanupPolicy,
    mut report: CleanupReport,
) -> Result<CleanupReport, CleanupError> {
    while report.batches < policy.max_batches {
        connection
            .exec_drop(statement, (bound, policy.batch_size))
            .await
            .map_err(|source| CleanupError::Database {
                table: table.to_owned(),
                deleted_rows: report.deleted_rows,
                source,
            })?;
        let deleted = connection.affected_rows();
        report.batches += 1;
        report.deleted_rows += deleted;
        CleanupBatchDeleted {
            table,
            rows: deleted,
            cutoff_unix_seconds: report.cutoff_unix_seconds,
        }
        .emit();
        if deleted < u64::from(policy.batch_size) {
            report.finished = true;
            return Ok(report);
        }
        report.finished = false;
    }
    Ok(report)
}

/// `checkpoint timestamp - margin` in Unix seconds, or `None` when nothing is eligible.
fn cutoff_seconds(checkpoint_timestamp: Option<u32>, margin: Duration) -> Option<i64> {
    let timestamp = i64::from(checkpoint_timestamp.filter(|&t| t > 0)?);
    let margin = i64::try_from(margin.as_secs()).ok()?;
    let cutoff = timestamp.checked_sub(margin)?;
    (cutoff > 0).then_some(cutoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cutoff_is_the_checkpoint_minus_the_margin_or_nothing() {
        let hour = Duration::from_secs(3600);
        assert_eq!(cutoff_seconds(None, hour), None, "no checkpoint");
        assert_eq!(cutoff_seconds(Some(0), hour), None, "timestamp unknown");
        assert_eq!(cutoff_seconds(Some(3000), hour), None, "margin before 1970");
        assert_eq!(
            cutoff_seconds(Some(1_764_000_000), hour),
            Some(1_763_996_400)
        );
        assert_eq!(cutoff_seconds(Some(10), Duration::MAX), None);
    }
}
