//! [`RelayError`]: why the relay stopped, each variant naming the setting, position or
//! fix the operator needs.

use std::time::Duration;

use outbox_binlog::BinlogError;
use outbox_checkpoint::CheckpointStoreError;
use outbox_router::RoutingError;

use crate::sink::SinkError;

/// Why the relay stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The router configuration is inconsistent.
    #[error("invalid [[outbox]]/[route] configuration: {0}")]
    RouterConfig(String),
    /// The binlog source failed definitely (or could not connect at startup).
    #[error("binlog source: {0}")]
    Source(#[source] BinlogError),
    /// The stored checkpoint points into binlog the server no longer has (purged). Definite:
    /// starting anywhere else would skip events, so the operator chooses between recovering
    /// the gap and skipping it knowingly.
    #[error("the stored checkpoint ({store}: binlog {position}, GTID set `{gtid_set}`) is no longer on the source server: {source}. Nothing after it was delivered or skipped. Three ways out: (1) recover the missing events from archived copies of the purged binlog files: `outbox-relay inspect --config CONFIG FILE...` shows the records they route to, and `outbox-relay recover --config CONFIG --after {position} FILE...` publishes them with their ids; then `outbox-relay checkpoint set --config CONFIG --position FILE:4` at the oldest file still on the server; or (2) publish them from the outbox table itself: set [source] on_purged = \"fill_from_table\" and start again (the rows written since the checkpoint are published, some perhaps twice with the same id); or (3) skip the gap knowingly: `outbox-relay checkpoint set --config CONFIG --position FILE:POS` (or `--gtid`) at the oldest available position named above, accepting that the events in between are lost")]
    ResumePointPurged {
        /// Where the checkpoint lives (`file ...` or `table ...`).
        store: String,
        /// The checkpoint's binlog position.
        position: String,
        /// The checkpoint's GTID set (may be empty).
        gtid_set: String,
        /// The reader's error, which names the oldest position still available (boxed:
        /// large, and this path is cold).
        source: Box<BinlogError>,
    },
    /// The stored checkpoint is not in the server's binlog, and not because of a purge
    /// (beyond its end, a file it never had, a GTID set ahead of it): it was written against
    /// another server, or this one's binlog was reset or restored. Definite: nothing to
    /// recover from archives; the operator points `source.url` at the right server or sets
    /// the position knowingly.
    #[error("the stored checkpoint ({store}: binlog {position}, GTID set `{gtid_set}`, written against {written_against}) is not in the source server's binlog: {source}. Nothing was delivered or skipped. Check that source.url points at the server the checkpoint was written against; if this server replaced it (a restore, RESET MASTER, a new primary without that history), choose where to resume knowingly: `outbox-relay checkpoint set --config CONFIG --position FILE:POS` or `--gtid SET` (see `outbox-relay check`)")]
    ResumePointNotOnServer {
        /// Where the checkpoint lives (`file ...` or `table ...`).
        store: String,
        /// The checkpoint's binlog position.
        position: String,
        /// The checkpoint's GTID set (may be empty).
        gtid_set: String,
        /// The server the checkpoint names (flavor, server_id, uuid).
        written_against: String,
        /// The reader's error, which says what is wrong with the position (boxed: large,
        /// and this path is cold).
        source: Box<BinlogError>,
    },
    /// The checkpoint store did not answer at startup within its `startup_attempts`.
    #[error("cannot reach the checkpoint store ({store}) at startup: {attempts} attempts over {waited:?} failed while {operation}, the last with: {source}; check that its server or cluster is up and reachable from this host (or set {setting} = 0 to wait forever)")]
    CheckpointStoreUnreachable {
        /// The store ([`outbox_checkpoint::CheckpointStore::describe`] or the config's kind).
        store: String,
        /// What was being done (`opening`, `loading the checkpoint`).
        operation: &'static str,
        /// Failed attempts.
        attempts: u32,
        /// From the first attempt to giving up.
        waited: std::time::Duration,
        /// The config key that limits the attempts.
        setting: &'static str,
        /// The last error (boxed: large, and this path is cold).
        source: Box<CheckpointStoreError>,
    },
    /// The source could not be reached at startup within `source.startup_attempts`.
    #[error("cannot reach the source server {server}: {attempts} attempts over {waited:?} failed, the last with: {source}; check source.url, that the server is up and accepts connections from this host (or set source.startup_attempts = 0 to wait forever)")]
    SourceUnreachable {
        /// `host:port` of the server (password redacted).
        server: String,
        /// How many attempts failed.
        attempts: u32,
        /// Time from the first attempt to giving up.
        waited: Duration,
        /// The last attempt's error (boxed: large, and this path is cold).
        source: Box<BinlogError>,
    },
    /// A reconnect reached another server than the one the stream started on (failover
    /// behind the same address) and no GTID set is known to move over with.
    #[error("the source server changed while streaming: was {before}, now {after}; the stream was at {position}, a file+position that means nothing on another server, and no GTID set is known. Point source.url at the original server, or enable GTIDs and `outbox-relay checkpoint set --gtid ...` at the new one")]
    SourceChanged {
        /// The server the stream started on.
        before: String,
        /// The server the reconnect reached.
        after: String,
        /// The resume position that was requested.
        position: String,
    },
    /// An outbox table lacks columns every row needs (definite: every row would become a
    /// dead letter); the message names each column, its config key and the fix.
    #[error("{0}")]
    OutboxColumnsMissing(String),
    /// The start position in `source.start` does not fit the server.
    #[error("config key `source.start`: {0}")]
    StartPosition(String),
    /// A row could not be routed; the relay stops so nothing is skipped.
    #[error("{}", describe_routing_error(.0))]
    Routing(#[source] Box<RoutingError>),
    /// The outbox rows of XA transactions held until their outcome outgrew their share of
    /// the in-flight budget (see [`crate::xa_hold`]).
    #[error("{0}")]
    XaHoldTooLarge(String),
    /// The poll source failed definitely (a refused statement, an old server, a row that
    /// does not read).
    #[error("poll source: {0}")]
    Poll(#[source] outbox_poll::PollError),
    /// An outbox table cannot be polled: poll-mode columns missing, or a grant.
    #[error("poll source: {table}: {message}")]
    PollTableUnusable {
        /// `database.table`.
        table: String,
        /// What failed and the fix.
        message: String,
    },
    /// The Kafka sink stopped.
    #[error("Kafka sink: {0}")]
    Sink(#[source] SinkError),
    /// Filling a purged gap from the outbox table failed (`[source] on_purged`); nothing was
    /// skipped: the checkpoint still names the purged position, so the next start fills
    /// again.
    #[error("filling the purged binlog gap from the outbox table: {0}")]
    GapFill(String),
    /// The checkpoint store failed.
    #[error("checkpoint store: {0}")]
    Checkpoint(#[source] CheckpointStoreError),
    /// The checkpoint was written for another server and has no GTID set to move over with.
    #[error("the stored checkpoint belongs to server {stored} but the relay is connected to {connected}, and the checkpoint has no GTID set to resume from; point source.url at the original server, or `outbox-relay checkpoint set --gtid ...`")]
    ForeignCheckpoint {
        /// The server the checkpoint names.
        stored: String,
        /// The server the relay reached.
        connected: String,
    },
    /// The metrics listener could not be bound.
    #[error("cannot listen on metrics.listen {listen}: {source}")]
    MetricsListen {
        /// The configured address.
        listen: String,
        /// The bind error.
        source: std::io::Error,
    },
    /// A pipeline task panicked (a bug).
    #[error("pipeline task `{task}` failed: {message}")]
    TaskFailed {
        /// The task name.
        task: &'static str,
        /// The panic or cancellation.
        message: String,
    },
}

/// The operator-facing message for a routing error: event id, table, column, then the fix.
///
/// Used when `[dead_letter]` is off or `fail_on` contains `routing`; otherwise a routing
/// error becomes a dead letter (see [`crate::dead_letter`]).
fn describe_routing_error(error: &RoutingError) -> String {
    format!(
        "cannot route event {} of table {} (column {}): {error}; fix or remove the row, then restart (the relay stopped so the event is not skipped)",
        error.event_id.as_deref().unwrap_or("<unknown id>"),
        error.table,
        error.column.as_deref().unwrap_or("<none>"),
    )
}

impl From<outbox_poll::ConnectionError> for RelayError {
    fn from(error: outbox_poll::ConnectionError) -> Self {
        match error {
            outbox_poll::ConnectionError::Connect(error) => RelayError::Source(error),
            outbox_poll::ConnectionError::Statement(error) => RelayError::Poll(error),
        }
    }
}
