//! Internal events: each notable thing that happens in the relay is a struct whose
//! [`InternalEvent::emit`] writes the log line and updates the metrics in one place, so
//! logs and counters cannot drift apart. The Kafka sink's events (acks, resends, rebuilds,
//! dead letters, Kafka transactions) are `outbox-kafka`'s own, counting in the relay's
//! [`Metrics::sink`] and reaching its readiness through `impl SinkObserver for Metrics`.

use std::time::Duration;

use crate::metrics::Metrics;

/// The Kafka sink's events are `outbox-kafka`'s ([`outbox_kafka::internal_events`]); the
/// pipeline emits this one too, for a row the router cannot route.
pub use outbox_kafka::internal_events::DeadLettered;

/// Something that happened, to be logged and counted.
pub trait InternalEvent {
    /// Logs the event and updates `metrics`.
    fn emit(self, metrics: &Metrics);
}

/// The binlog source connected (first connect or reconnect).
#[derive(Debug)]
pub struct SourceConnected<'a> {
    /// Server URL with the password redacted.
    pub server: &'a str,
    /// Where the stream starts, for the log.
    pub start: String,
    /// 0 for the first connection, else the number of this reconnect.
    pub reconnect: u64,
}

impl InternalEvent for SourceConnected<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.health.source_connected();
        tracing::info!(server = self.server, start = %self.start, reconnect = self.reconnect, "binlog source connected");
    }
}

/// A configured column type, nullability or `connect_schema` setting contradicts the
/// server's definition of the column (found at start): the setting is used, and the
/// records differ from Debezium's.
#[derive(Debug)]
pub struct ColumnTypeClashFound<'a> {
    /// The clash, naming table, column, setting and both values.
    pub clash: &'a outbox_router::ColumnTypeClash,
}

impl InternalEvent for ColumnTypeClashFound<'_> {
    fn emit(self, _metrics: &Metrics) {
        tracing::warn!(
            table = %self.clash.table,
            column = %self.clash.column,
            setting = %self.clash.setting,
            configured = %self.clash.configured,
            server = %self.clash.server,
            "{}",
            self.clash
        );
    }
}

/// A gap fill published a table's rows written since a purged checkpoint position.
#[derive(Debug)]
pub struct GapFilled<'a> {
    /// `database.table`.
    pub table: &'a str,
    /// Rows published (acknowledged once the fill returns).
    pub rows: u64,
    /// The fill's window start (UTC).
    pub since: &'a str,
}

impl InternalEvent for GapFilled<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.gap_filled.inc_by(self.rows);
        tracing::warn!(
            table = self.table,
            rows = self.rows,
            since = self.since,
            "purged binlog gap filled from the outbox table"
        );
    }
}

/// A gap fill could not prove that it recovered every event of a table: nothing older than
/// its window is left in the table.
#[derive(Debug)]
pub struct GapUnrecoverable<'a> {
    /// `database.table`.
    pub table: &'a str,
    /// The fill's window start (UTC).
    pub since: &'a str,
}

impl InternalEvent for GapUnrecoverable<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.gap_unrecoverable.inc();
        tracing::error!(
            table = self.table,
            since = self.since,
            "the purged binlog gap may have lost events: the outbox table holds no row older than the fill's window start, so rows the gap needed may have been deleted before the fill (by the writer's cleanup with a safety_margin not above [source] fill_margin_s, or by hand); the rows still there were published. Check with `outbox-relay audit --since` the window start, and recover from archived binlogs (`outbox-relay recover`) if you have them"
        );
    }
}

/// The binlog source failed transiently and will reconnect after `delay`.
#[derive(Debug)]
pub struct SourceReconnecting<'a> {
    /// The error that ended the stream.
    pub error: &'a dyn std::error::Error,
    /// How long until the next attempt.
    pub delay: Duration,
    /// Where the new stream resumes.
    pub resume_from: String,
    /// Failed attempts so far (1 for the first failure).
    pub attempt: u32,
    /// Attempts before the relay gives up (0: never; a running relay always waits out an
    /// outage, only startup is limited by `source.startup_attempts`).
    pub max_attempts: u32,
}

impl InternalEvent for SourceReconnecting<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.source_reconnects.inc();
        metrics
            .retries
            .with_label_values(&["source_reconnect"])
            .inc();
        metrics.health.source_retrying(&self.error.to_string());
        let limit = if self.max_attempts == 0 {
            "unlimited".to_string()
        } else {
            self.max_attempts.to_string()
        };
        tracing::warn!(error = %self.error, delay_ms = self.delay.as_millis() as u64, attempt = self.attempt, max_attempts = %limit, resume_from = %self.resume_from, "binlog source unavailable; retrying after delay_ms");
    }
}

/// One row change of a watched table was read.
#[derive(Debug)]
pub struct RowRead;

impl InternalEvent for RowRead {
    fn emit(self, metrics: &Metrics) {
        metrics.events_read.inc();
    }
}

/// One transaction commit was read.
#[derive(Debug)]
pub struct TransactionRead {
    /// The commit's server timestamp (epoch seconds; 0 if unknown), for
    /// `source_seconds_behind`.
    pub timestamp: u32,
}

impl InternalEvent for TransactionRead {
    fn emit(self, metrics: &Metrics) {
        metrics.transactions_read.inc();
        metrics
            .source_seconds_behind
            .set(lag_seconds(self.timestamp, false));
    }
}

/// A heartbeat was read: the server had nothing newer to send, so the reader is caught up.
#[derive(Debug)]
pub struct HeartbeatRead;

impl InternalEvent for HeartbeatRead {
    fn emit(self, metrics: &Metrics) {
        metrics.source_seconds_behind.set(0.0);
    }
}

/// The router produced a record.
#[derive(Debug)]
pub struct RecordRouted;

impl InternalEvent for RecordRouted {
    fn emit(self, metrics: &Metrics) {
        metrics.events_routed.inc();
    }
}

impl InternalEvent for DeadLettered<'_> {
    fn emit(self, metrics: &Metrics) {
        outbox_kafka::internal_events::InternalEvent::emit(self, metrics);
    }
}

/// The router skipped a row by design.
#[derive(Debug)]
pub struct RowSkipped<'a> {
    /// Why, in the router's words.
    pub reason: &'a str,
    /// The row's table.
    pub table: &'a outbox_binlog::TableName,
    /// Log at warn (`[route] invalid_operation = "warn"`) instead of debug.
    pub warn: bool,
}

impl InternalEvent for RowSkipped<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.events_skipped.inc();
        if self.warn {
            tracing::warn!(table = %self.table, reason = self.reason, "outbox row skipped (not an insert)");
        } else {
            tracing::debug!(table = %self.table, reason = self.reason, "outbox row skipped (not an insert)");
        }
    }
}

/// After a restart, records the previous run had already handed on for sending were read
/// and handed to the sink again ([`crate::replay`]).
#[derive(Debug)]
pub struct RecordsReplayed {
    /// Records of one transaction.
    pub records: u64,
}

impl InternalEvent for RecordsReplayed {
    fn emit(self, metrics: &Metrics) {
        metrics.replayed_records.inc_by(self.records);
    }
}

/// The replay after a restart reached the previous run's sent-through position (or could
/// no longer be compared with it): everything from here on is new.
#[derive(Debug)]
pub struct ReplayFinished<'a> {
    /// Records counted as replayed.
    pub records: u64,
    /// The previous run's sent-through position.
    pub sent_through: &'a outbox_binlog::BinlogPosition,
}

impl InternalEvent for ReplayFinished<'_> {
    fn emit(self, _metrics: &Metrics) {
        if self.records > 0 {
            tracing::warn!(records = self.records, sent_through = %self.sent_through, "replayed records the previous run had already sent before it stopped without a final checkpoint (a crash): consumers may see them twice, with the same ids");
        } else {
            tracing::info!(sent_through = %self.sent_through, "passed the previous run's sent-through position without replaying a record");
        }
    }
}

/// The broker probe of `/readyz` got an answer (`None`) or an error.
#[derive(Debug)]
pub struct BrokerProbed<'a> {
    /// What failed, or `None` when the cluster answered.
    pub error: Option<&'a str>,
}

impl InternalEvent for BrokerProbed<'_> {
    fn emit(self, metrics: &Metrics) {
        let was_reachable = metrics.health.broker_reachable();
        metrics.health.broker_probed(self.error);
        match (was_reachable, self.error) {
            (true, Some(error)) => tracing::warn!(
                error,
                "Kafka cluster unreachable: /readyz reports not ready"
            ),
            (false, None) => tracing::info!("Kafka cluster reachable: /readyz broker check passes"),
            _ => {}
        }
    }
}

/// A checkpoint commit failed; it is retried at the next commit.
#[derive(Debug)]
pub struct CheckpointCommitFailed<'a> {
    /// The store's error.
    pub error: &'a dyn std::error::Error,
}

impl InternalEvent for CheckpointCommitFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics
            .retries
            .with_label_values(&["checkpoint_commit"])
            .inc();
        metrics
            .health
            .checkpoint_committed(Some(&self.error.to_string()));
        tracing::error!(error = %self.error, "checkpoint commit failed; retrying at the next commit (nothing is lost, the replay after a crash grows)");
    }
}

/// The checkpoint store did not answer at startup (opening it, or loading the stored
/// checkpoint); the relay retries after `delay` and `/readyz` shows the error meanwhile.
#[derive(Debug)]
pub struct CheckpointStoreWaiting<'a> {
    /// The store's error.
    pub error: &'a dyn std::error::Error,
    /// What was being done (`opening`, `loading the checkpoint`).
    pub operation: &'static str,
    /// Failed attempts so far (1 for the first failure).
    pub attempt: u32,
    /// Attempts before the relay gives up (0: never).
    pub max_attempts: u32,
    /// How long until the next attempt.
    pub delay: Duration,
}

impl InternalEvent for CheckpointStoreWaiting<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics
            .retries
            .with_label_values(&["checkpoint_startup"])
            .inc();
        metrics
            .health
            .checkpoint_committed(Some(&self.error.to_string()));
        let limit = if self.max_attempts == 0 {
            "unlimited".to_string()
        } else {
            self.max_attempts.to_string()
        };
        tracing::warn!(error = %self.error, operation = self.operation, attempt = self.attempt, max_attempts = %limit, delay_ms = self.delay.as_millis() as u64, "checkpoint store unavailable at startup; retrying after delay_ms (nothing is read or sent until it answers)");
    }
}

/// A checkpoint was committed to the store.
#[derive(Debug)]
pub struct CheckpointCommitted<'a> {
    /// The committed position, for the log.
    pub position: &'a outbox_binlog::BinlogPosition,
    /// The committed GTID set, if any, for the log.
    pub gtid_set: Option<String>,
    /// Server timestamp of the last transaction it covers (0 if unknown).
    pub transaction_timestamp: u32,
    /// True when every transaction read so far is covered (caught up).
    pub caught_up: bool,
}

impl InternalEvent for CheckpointCommitted<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.checkpoint_commits.inc();
        metrics.health.checkpoint_committed(None);
        metrics.set_committed_checkpoint(&self.position.file, self.position.position);
        metrics
            .checkpoint_binlog_offset
            .set(i64::try_from(self.position.position).unwrap_or(i64::MAX));
        if let Some(number) = binlog_file_number(&self.position.file) {
            metrics.checkpoint_binlog_file_number.set(number);
        }
        metrics
            .checkpoint_lag_seconds
            .set(lag_seconds(self.transaction_timestamp, self.caught_up));
        tracing::debug!(position = %self.position, gtid_set = self.gtid_set.as_deref().unwrap_or(""), "checkpoint committed");
    }
}

/// Seconds from `timestamp` (server clock, epoch seconds) to now; 0 when caught up or unknown.
pub fn lag_seconds(timestamp: u32, caught_up: bool) -> f64 {
    if caught_up || timestamp == 0 {
        return 0.0;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    (now - f64::from(timestamp)).max(0.0)
}

/// `binlog.000042` -> 42.
pub fn binlog_file_number(file: &str) -> Option<i64> {
    file.rsplit_once('.').and_then(|(_, n)| n.parse().ok())
}

/// The outbox rows of an XA transaction were prepared (`XA PREPARE`): they are held, not
/// published, until its `XA COMMIT` or `XA ROLLBACK` is read.
#[derive(Debug)]
pub struct XaPrepareHeld<'a> {
    /// The transaction's XID (`X'..',X'..',n`).
    pub xid: &'a str,
    /// Records held.
    pub records: usize,
    /// Where the `XA PREPARE` ends.
    pub position: &'a outbox_binlog::BinlogPosition,
}

impl InternalEvent for XaPrepareHeld<'_> {
    fn emit(self, _metrics: &Metrics) {
        tracing::info!(xid = self.xid, records = self.records, position = %self.position, "XA transaction prepared: its records are held until XA COMMIT/ROLLBACK (the checkpoint stays before it)");
    }
}

/// A held XA transaction's outcome was read: its records are published (`XA COMMIT`) or
/// dropped (`XA ROLLBACK`).
#[derive(Debug)]
pub struct XaOutcomeRead<'a> {
    /// The transaction's XID.
    pub xid: &'a str,
    /// True for `XA COMMIT`, false for `XA ROLLBACK`.
    pub committed: bool,
    /// Records published or dropped.
    pub records: usize,
}

impl InternalEvent for XaOutcomeRead<'_> {
    fn emit(self, _metrics: &Metrics) {
        let outcome = if self.committed {
            "committed: publishing its records"
        } else {
            "rolled back: dropping its records"
        };
        tracing::info!(
            xid = self.xid,
            records = self.records,
            "held XA transaction {outcome}"
        );
    }
}

/// An `XA COMMIT`/`XA ROLLBACK` of a transaction whose `XA PREPARE` this run never read (it
/// lies before the stream's start): its rows, if any, were not read and are not published.
#[derive(Debug)]
pub struct XaOutcomeWithoutPrepare<'a> {
    /// The transaction's XID.
    pub xid: &'a str,
    /// True for `XA COMMIT`.
    pub committed: bool,
    /// Where the outcome ends.
    pub position: &'a outbox_binlog::BinlogPosition,
}

impl InternalEvent for XaOutcomeWithoutPrepare<'_> {
    fn emit(self, _metrics: &Metrics) {
        if self.committed {
            tracing::warn!(xid = self.xid, position = %self.position, "XA COMMIT of a transaction prepared before the stream started: rows it wrote to outbox tables (if any) were not read and are not published; recover them from the binlog before the start if it had some");
        } else {
            tracing::debug!(xid = self.xid, position = %self.position, "XA ROLLBACK of a transaction prepared before the stream started");
        }
    }
}

/// The held prepared XA transactions changed, or time passed: sets the XA gauges.
#[derive(Debug)]
pub struct XaHeldChanged {
    /// Prepared XA transactions held.
    pub prepared: usize,
    /// Server timestamp of the oldest one's `XA PREPARE` (`None`: none held).
    pub oldest_prepare_timestamp: Option<u32>,
}

impl InternalEvent for XaHeldChanged {
    fn emit(self, metrics: &Metrics) {
        metrics
            .xa_prepared_held
            .set(i64::try_from(self.prepared).unwrap_or(i64::MAX));
        let age = self.oldest_prepare_timestamp.map_or(0, |timestamp| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_secs());
            now.saturating_sub(u64::from(timestamp))
        });
        metrics
            .xa_oldest_prepared_age_seconds
            .set(i64::try_from(age).unwrap_or(i64::MAX));
    }
}

/// The stored checkpoint was loaded at startup: the purge horizon is measured from it until
/// the first commit of this run.
#[derive(Debug)]
pub struct CheckpointLoaded<'a> {
    /// Its binlog position.
    pub position: &'a outbox_binlog::BinlogPosition,
}

impl InternalEvent for CheckpointLoaded<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.set_committed_checkpoint(&self.position.file, self.position.position);
    }
}

/// The purge horizon was measured.
#[derive(Debug)]
pub struct PurgeHorizonMeasured<'a> {
    /// The measurement.
    pub horizon: &'a crate::purge_horizon::PurgeHorizon,
}

impl InternalEvent for PurgeHorizonMeasured<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics
            .binlog_purge_horizon_seconds
            .set(self.horizon.seconds);
        metrics.binlog_purge_horizon_bytes.set(self.horizon.bytes);
        metrics
            .source_binlog_bytes_behind
            .set(self.horizon.bytes_behind as f64);
        if self.horizon.seconds < 86_400.0 || self.horizon.bytes < 1e9 {
            tracing::warn!(seconds_left = self.horizon.seconds, bytes_left = self.horizon.bytes, "the source server may purge the checkpoint's binlog file soon: the relay must catch up (or the server's binlog retention grow) before then, or its resume point is lost");
        }
    }
}

/// The purge horizon could not be measured; its gauges become NaN (unknown) until it can.
#[derive(Debug)]
pub struct PurgeHorizonUnknown<'a> {
    /// Why.
    pub error: &'a crate::purge_horizon::PurgeHorizonError,
}

impl InternalEvent for PurgeHorizonUnknown<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.binlog_purge_horizon_seconds.set(f64::NAN);
        metrics.binlog_purge_horizon_bytes.set(f64::NAN);
        metrics.source_binlog_bytes_behind.set(f64::NAN);
        tracing::warn!(error = %self.error, "cannot measure the binlog purge horizon");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_event_sets_position_and_lag_metrics() {
        let metrics = Metrics::new();
        let position = outbox_binlog::BinlogPosition::new("binlog.000042", 1234);
        let old = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as u32
            - 100;
        CheckpointCommitted {
            position: &position,
            gtid_set: None,
            transaction_timestamp: old,
            caught_up: false,
        }
        .emit(&metrics);
        assert_eq!(metrics.checkpoint_commits.get(), 1);
        assert_eq!(metrics.checkpoint_binlog_offset.get(), 1234);
        assert_eq!(metrics.checkpoint_binlog_file_number.get(), 42);
        let lag = metrics.checkpoint_lag_seconds.get();
        assert!((99.0..200.0).contains(&lag), "{lag}");
        CheckpointCommitted {
            position: &position,
            gtid_set: None,
            transaction_timestamp: old,
            caught_up: true,
        }
        .emit(&metrics);
        assert_eq!(metrics.checkpoint_lag_seconds.get(), 0.0);
    }
}

/// `[ha]`: this relay became the leader of its connector's lease group and starts
/// publishing in term `epoch`.
#[derive(Debug)]
pub struct LeadershipGained {
    /// The term's leader epoch (stamped into every checkpoint it commits).
    pub epoch: u64,
}

impl InternalEvent for LeadershipGained {
    fn emit(self, metrics: &Metrics) {
        metrics.leader.set(1);
        metrics
            .leader_epoch
            .set(i64::try_from(self.epoch).unwrap_or(i64::MAX));
        metrics.leadership_changes.inc();
        tracing::info!(
            epoch = self.epoch,
            "leadership gained: resuming from the stored checkpoint and publishing"
        );
    }
}

/// `[ha]`: term `epoch` ended (leadership lost, or the store fenced it); the relay stopped
/// publishing and is a standby again.
#[derive(Debug)]
pub struct LeadershipEnded<'a> {
    /// The term that ended.
    pub epoch: u64,
    /// Why, for the log.
    pub reason: &'a str,
}

impl InternalEvent for LeadershipEnded<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.leader.set(0);
        metrics.leadership_changes.inc();
        tracing::warn!(
            epoch = self.epoch,
            reason = self.reason,
            "stopped publishing: no longer the leader; back to standby"
        );
    }
}

/// `[ha]`: this relay was fenced as a stale leader: the checkpoint store refused its epoch
/// (`kind` `checkpoint_store`), or the lease ended its term while it was publishing
/// (`lease`).
#[derive(Debug)]
pub struct StaleLeaderFenced<'a> {
    /// The fenced term.
    pub epoch: u64,
    /// `checkpoint_store` or `lease` (the metric's label).
    pub kind: &'static str,
    /// What fenced it, for the log.
    pub detail: &'a str,
}

impl InternalEvent for StaleLeaderFenced<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.fencing_events.with_label_values(&[self.kind]).inc();
        tracing::warn!(
            epoch = self.epoch,
            kind = self.kind,
            detail = self.detail,
            "fenced as a stale leader"
        );
    }
}

/// Without `[ha]` the relay is the only one and always publishes: `outbox_relay_leader`
/// is 1 while it runs.
#[derive(Debug)]
pub struct SoleRelayStarted;

impl InternalEvent for SoleRelayStarted {
    fn emit(self, metrics: &Metrics) {
        metrics.leader.set(1);
        tracing::debug!("no [ha]: this relay publishes without a lease");
    }
}
