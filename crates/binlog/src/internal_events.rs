//! Internal events (in the style of Vector's `internal_events`): each thing worth telling an
//! operator about is a struct whose [`InternalEvent::emit`] both logs it (tracing) and
//! counts it (Prometheus), in one place, so logs and metrics never disagree.
//!
//! # Metrics
//! The collectors are process-wide; [`register_metrics`] adds them to the relay's
//! [`prometheus::Registry`]:
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `outbox_binlog_events_received_total` | counter | binlog events received from servers |
//! | `outbox_binlog_event_bytes_received_total` | counter | bytes of those events |
//! | `outbox_binlog_event_batches_total` | counter | read-ahead batches (events / batches = how far the reader is behind: 1 when it keeps up, up to 8 inline and 2048 with the read-ahead task when it does not) |
//! | `outbox_binlog_rows_decoded_total` | counter | row changes of watched tables handed out |
//! | `outbox_binlog_transactions_committed_total` | counter | commits handed out |
//! | `outbox_binlog_heartbeats_total` | counter | heartbeats handed out |
//! | `outbox_binlog_column_name_lookups_total` | counter | `information_schema` column-name lookups |
//! | `outbox_binlog_stream_errors_total{transient}` | counter | errors the live reader returned |
//! | `outbox_binlog_reader_connects_total` | counter | live readers connected |
//! | `outbox_binlog_watched_table_vanished_total` | counter | DDL statements after which a watched table no longer exists (a drop, a rename without a swap): alert on any increase, its rows are no longer written |
//!
//! # Cost
//! The hot path emits in batches: [`BinlogEventsReceived`] once per read-ahead batch (up to
//! 8 events inline, 2048 with the read-ahead task), and the live reader counts handed-out
//! items in plain local counters that it flushes as one [`ItemsHandedOut`] per batch, so a
//! counter is touched a few times per batch, never per event or row. Their logs are `trace`
//! level.

use std::sync::LazyLock;

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use crate::{BinlogError, ServerIdentity, TableName};

/// Something that happened, logged and counted by [`InternalEvent::emit`].
pub trait InternalEvent {
    /// Logs the event and updates its metrics.
    fn emit(self);
}

/// The process-wide collectors of this crate.
struct BinlogMetrics {
    /// `outbox_binlog_events_received_total`.
    events_received: IntCounter,
    /// `outbox_binlog_event_bytes_received_total`.
    event_bytes_received: IntCounter,
    /// `outbox_binlog_event_batches_total`.
    event_batches: IntCounter,
    /// `outbox_binlog_rows_decoded_total`.
    rows_decoded: IntCounter,
    /// `outbox_binlog_transactions_committed_total`.
    transactions_committed: IntCounter,
    /// `outbox_binlog_heartbeats_total`.
    heartbeats: IntCounter,
    /// `outbox_binlog_column_name_lookups_total`.
    column_name_lookups: IntCounter,
    /// `outbox_binlog_stream_errors_total`, label `transient` = `true`/`false`.
    stream_errors: IntCounterVec,
    /// `outbox_binlog_reader_connects_total`.
    reader_connects: IntCounter,
    /// `outbox_binlog_watched_table_vanished_total`.
    watched_table_vanished: IntCounter,
}

impl BinlogMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        Ok(Self {
            events_received: IntCounter::new(
                "outbox_binlog_events_received_total",
                "Binlog events received from the server (live reader).",
            )?,
            event_bytes_received: IntCounter::new(
                "outbox_binlog_event_bytes_received_total",
                "Bytes of binlog events received from the server (live reader).",
            )?,
            event_batches: IntCounter::new(
                "outbox_binlog_event_batches_total",
                "Read-ahead batches of binlog events (events per batch grow when the reader falls behind).",
            )?,
            rows_decoded: IntCounter::new(
                "outbox_binlog_rows_decoded_total",
                "Row changes of watched tables decoded and handed out.",
            )?,
            transactions_committed: IntCounter::new(
                "outbox_binlog_transactions_committed_total",
                "Transaction commits handed out.",
            )?,
            heartbeats: IntCounter::new(
                "outbox_binlog_heartbeats_total",
                "Heartbeats handed out (idle server).",
            )?,
            column_name_lookups: IntCounter::new(
                "outbox_binlog_column_name_lookups_total",
                "Column names looked up in information_schema (binlog_row_metadata below FULL).",
            )?,
            stream_errors: IntCounterVec::new(
                Opts::new(
                    "outbox_binlog_stream_errors_total",
                    "Errors the live binlog reader returned, by transience.",
                ),
                &["transient"],
            )?,
            reader_connects: IntCounter::new(
                "outbox_binlog_reader_connects_total",
                "Live binlog readers connected.",
            )?,
            watched_table_vanished: IntCounter::new(
                "outbox_binlog_watched_table_vanished_total",
                "DDL statements read after which a watched table no longer exists (drop, rename without a swap).",
            )?,
        })
    }
}

/// Created on first use; an `Err` (which constant, valid names never produce) disables
/// counting and is reported by [`register_metrics`].
static METRICS: LazyLock<Result<BinlogMetrics, prometheus::Error>> =
    LazyLock::new(BinlogMetrics::new);

fn metrics() -> Option<&'static BinlogMetrics> {
    METRICS.as_ref().ok()
}

/// Registers this crate's collectors into `registry` (the relay owns the registry). Fails if
/// they are already registered there.
pub fn register_metrics(registry: &Registry) -> Result<(), prometheus::Error> {
    register_lazy_collectors(registry, &METRICS, |metrics| {
        vec![
            Box::new(metrics.events_received.clone()),
            Box::new(metrics.event_bytes_received.clone()),
            Box::new(metrics.event_batches.clone()),
            Box::new(metrics.rows_decoded.clone()),
            Box::new(metrics.transactions_committed.clone()),
            Box::new(metrics.heartbeats.clone()),
            Box::new(metrics.column_name_lookups.clone()),
            Box::new(metrics.stream_errors.clone()),
            Box::new(metrics.reader_connects.clone()),
            Box::new(metrics.watched_table_vanished.clone()),
        ]
    })
}

/// The shared body of the workspace crates' `register_metrics`: each crate keeps its
/// counters in a lazily built struct (an `Err` there, which constant valid names never
/// produce, disables counting) and hands `pick` the collectors to register.
pub fn register_lazy_collectors<T>(
    registry: &Registry,
    metrics: &Result<T, prometheus::Error>,
    pick: impl FnOnce(&T) -> Vec<Box<dyn prometheus::core::Collector>>,
) -> Result<(), prometheus::Error> {
    let metrics = match metrics {
        Ok(metrics) => metrics,
        Err(error) => return Err(prometheus::Error::Msg(error.to_string())),
    };
    for collector in pick(metrics) {
        registry.register(collector)?;
    }
    Ok(())
}

fn to_u64(count: usize) -> u64 {
    u64::try_from(count).unwrap_or(u64::MAX)
}

/// A batch of events arrived from the server (one per read-ahead batch, not per event).
#[derive(Debug)]
pub struct BinlogEventsReceived {
    /// Events in the batch.
    pub count: usize,
    /// Their bytes on the wire (header `event_size`), to see the stream's volume.
    pub bytes: usize,
}

impl InternalEvent for BinlogEventsReceived {
    fn emit(self) {
        tracing::trace!(
            count = self.count,
            bytes = self.bytes,
            "binlog events received"
        );
        if let Some(metrics) = metrics() {
            metrics.events_received.inc_by(to_u64(self.count));
            metrics.event_bytes_received.inc_by(to_u64(self.bytes));
            metrics.event_batches.inc();
        }
    }
}

/// Row changes of watched tables were handed out (counted in batches).
#[derive(Debug)]
pub struct RowsDecoded {
    /// How many rows since the last emit.
    pub count: u64,
}

impl InternalEvent for RowsDecoded {
    fn emit(self) {
        if self.count == 0 {
            return;
        }
        tracing::trace!(count = self.count, "rows decoded");
        if let Some(metrics) = metrics() {
            metrics.rows_decoded.inc_by(self.count);
        }
    }
}

/// Transactions' commits were handed out (counted in batches).
#[derive(Debug)]
pub struct TransactionCommitted {
    /// How many commits since the last emit.
    pub count: u64,
}

impl InternalEvent for TransactionCommitted {
    fn emit(self) {
        if self.count == 0 {
            return;
        }
        tracing::trace!(count = self.count, "transactions committed");
        if let Some(metrics) = metrics() {
            metrics.transactions_committed.inc_by(self.count);
        }
    }
}

/// Heartbeats of an idle server were handed out (counted in batches).
#[derive(Debug)]
pub struct HeartbeatReceived {
    /// How many heartbeats since the last emit.
    pub count: u64,
}

impl InternalEvent for HeartbeatReceived {
    fn emit(self) {
        if self.count == 0 {
            return;
        }
        tracing::trace!(count = self.count, "heartbeats received");
        if let Some(metrics) = metrics() {
            metrics.heartbeats.inc_by(self.count);
        }
    }
}

/// Local tallies of items the live reader handed out, flushed as [`RowsDecoded`],
/// [`TransactionCommitted`] and [`HeartbeatReceived`] once per batch (plain additions in
/// between, so the per-item cost is an integer increment).
#[derive(Debug, Default)]
pub(crate) struct ItemsHandedOut {
    /// Rows since the last flush.
    pub(crate) rows: u64,
    /// Commits since the last flush.
    pub(crate) commits: u64,
    /// Heartbeats since the last flush.
    pub(crate) heartbeats: u64,
}

impl ItemsHandedOut {
    /// Emits the tallies and resets them.
    pub(crate) fn flush(&mut self) {
        let ItemsHandedOut {
            rows,
            commits,
            heartbeats,
        } = std::mem::take(self);
        RowsDecoded { count: rows }.emit();
        TransactionCommitted { count: commits }.emit();
        HeartbeatReceived { count: heartbeats }.emit();
    }
}

/// Column names of a table were looked up in `information_schema` (the server logs less
/// than `binlog_row_metadata=FULL`, or a DDL made the reader forget them).
#[derive(Debug)]
pub struct ColumnNamesLookedUp<'a> {
    /// The table.
    pub table: &'a TableName,
    /// How many columns it has now, to spot a lookup that disagrees with the binlog.
    pub columns: usize,
}

impl InternalEvent for ColumnNamesLookedUp<'_> {
    fn emit(self) {
        tracing::debug!(table = %self.table, columns = self.columns, "column names from information_schema");
        if let Some(metrics) = metrics() {
            metrics.column_name_lookups.inc();
        }
    }
}

/// A DDL statement in the binlog left a watched table without a table of its name (a drop,
/// a rename without a swap): nothing is lost yet, but the application can no longer write
/// outbox rows there. Logged at error level and counted so an alert fires; the reader goes
/// on (a table created again under the name is read again).
#[derive(Debug)]
pub struct WatchedTableVanished<'a> {
    /// The watched table that no longer exists.
    pub table: &'a TableName,
    /// Where the DDL statement is (`file:offset` of its event).
    pub position: &'a crate::BinlogPosition,
    /// The statement (cut to 200 characters), for the operator.
    pub statement: &'a str,
}

impl InternalEvent for WatchedTableVanished<'_> {
    fn emit(self) {
        tracing::error!(
            table = %self.table,
            position = %self.position,
            statement = self.statement,
            "a DDL statement left a watched table without a table of its name: its outbox rows \
             can no longer be written; check the application and the [[outbox]] config"
        );
        if let Some(metrics) = metrics() {
            metrics.watched_table_vanished.inc();
        }
    }
}

/// The live reader returned an error (it is finished; transient errors mean reconnect).
#[derive(Debug)]
pub struct StreamError<'a> {
    /// The error, logged in full.
    pub error: &'a BinlogError,
    /// [`BinlogError::is_transient`], the metric's label: transient errors are expected now
    /// and then (restarts, network), definite ones need an operator.
    pub transient: bool,
}

impl InternalEvent for StreamError<'_> {
    fn emit(self) {
        if self.transient {
            tracing::warn!(error = %self.error, "binlog stream failed (transient: reconnect)");
        } else {
            tracing::error!(error = %self.error, "binlog stream failed (definite)");
        }
        if let Some(metrics) = metrics() {
            let label = if self.transient { "true" } else { "false" };
            metrics.stream_errors.with_label_values(&[label]).inc();
        }
    }
}

/// A live reader connected and is about to stream.
#[derive(Debug)]
pub struct ReaderConnected<'a> {
    /// Who the server is.
    pub server: &'a ServerIdentity,
    /// Where the stream starts (resolved: a position or a GTID set).
    pub start: &'a str,
}

impl InternalEvent for ReaderConnected<'_> {
    fn emit(self) {
        tracing::info!(
            server = %self.server.address,
            version = %self.server.version,
            flavor = %self.server.flavor,
            server_id = self.server.server_id,
            start = self.start,
            "starting binlog stream"
        );
        if let Some(metrics) = metrics() {
            metrics.reader_connects.inc();
        }
    }
}

/// `tls.mode = preferred` and the server offers no TLS: the connections are plaintext.
/// Emitted once per server endpoint (a reader's, or `check`'s), not per reconnect.
#[derive(Debug)]
pub struct PlaintextFallback<'a> {
    /// `host:port` of the server.
    pub server: &'a str,
}

impl InternalEvent for PlaintextFallback<'_> {
    fn emit(self) {
        tracing::warn!(
            server = self.server,
            "tls.mode = preferred and the server offers no TLS: connections to it are plaintext \
             (passwords and rows unencrypted); give the server a certificate, or set \
             tls.mode = required (or a verify mode) to refuse plaintext"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_register_and_count() {
        let registry = Registry::new();
        register_metrics(&registry).unwrap();
        assert!(
            register_metrics(&registry).is_err(),
            "registering twice is an error"
        );
        let metrics = metrics().unwrap();
        let events_before = metrics.events_received.get();
        let bytes_before = metrics.event_bytes_received.get();
        BinlogEventsReceived {
            count: 3,
            bytes: 120,
        }
        .emit();
        assert!(metrics.events_received.get() >= events_before + 3);
        assert!(metrics.event_bytes_received.get() >= bytes_before + 120);

        let rows_before = metrics.rows_decoded.get();
        let commits_before = metrics.transactions_committed.get();
        let mut tallies = ItemsHandedOut {
            rows: 5,
            commits: 2,
            heartbeats: 0,
        };
        tallies.flush();
        assert_eq!(tallies.rows + tallies.commits + tallies.heartbeats, 0);
        assert!(metrics.rows_decoded.get() >= rows_before + 5);
        assert!(metrics.transactions_committed.get() >= commits_before + 2);

        let error = BinlogError::StreamLost {
            server: "db:3306".into(),
            position: "binlog.000001:4".into(),
            message: "reset".into(),
        };
        let transient_before = metrics.stream_errors.with_label_values(&["true"]).get();
        StreamError {
            transient: error.is_transient(),
            error: &error,
        }
        .emit();
        assert!(metrics.stream_errors.with_label_values(&["true"]).get() > transient_before);

        let names: Vec<String> = registry
            .gather()
            .iter()
            .map(|family| family.name().to_owned())
            .collect();
        for expected in [
            "outbox_binlog_events_received_total",
            "outbox_binlog_rows_decoded_total",
            "outbox_binlog_stream_errors_total",
            "outbox_binlog_reader_connects_total",
        ] {
            assert!(
                names.contains(&expected.to_owned()),
                "{expected} in {names:?}"
            );
        }
    }
}
