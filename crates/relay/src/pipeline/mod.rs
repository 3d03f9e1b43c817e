//! The running connector: source -> router -> Kafka sink -> ack tracker -> checkpoint store,
//! as named tasks joined by bounded channels.
//!
//! # Contract
//! * **At least once.** The checkpoint store only ever receives positions from
//!   [`AckTracker::acked_position`], i.e. transaction ends whose every record (and every
//!   earlier record) Kafka acknowledged. A crash at any point replays from the last
//!   checkpoint.
//! * **Backpressure.** The source -> router and router -> sink channels are bounded
//!   (`pipeline.channel_capacity`) and the sink keeps at most `pipeline.max_in_flight`
//!   records unacked, so memory is bounded however far behind Kafka is.
//! * **Dead letters.** A per-event permanent failure (routing error, a record Kafka
//!   rejects for good) becomes a dead letter on `dead_letter.topic` under the event's own
//!   ack ticket: **a dead-lettered event counts as acked only after the dead-letter write is
//!   acked**, so the checkpoint never passes an event that is neither delivered nor
//!   dead-lettered. See [`crate::dead_letter`].
//! * **Definite errors stop the relay**: a routing error under policy `fail` (naming event
//!   id, table and column), a definite source error, a permanent Kafka rejection under
//!   policy `fail` or of a dead letter itself, a checkpoint store failure. The acked prefix is still committed before returning the error.
//!
//! * **XA.** The records of a two-phase XA transaction are held from its rows until its
//!   outcome is read: published at `XA COMMIT`, dropped at `XA ROLLBACK`; until then the
//!   checkpoint stays before its `XA PREPARE` ([`crate::xa_hold`]).
//!
//! * **Startup retries.** A source that is unreachable at startup (transient error) is
//!   retried with backoff like a lost connection; definite errors fail at once.
//!
//! # Resumption
//! * With a stored checkpoint the stream starts at its binlog position (on the server that
//!   wrote it) or at its GTID set (when the relay now talks to another server, e.g. after a
//!   failover). `source.start` is ignored then.
//! * Without one, it starts at `source.start` (`latest` by default).
//! * After a transient source error the source reconnects with backoff and resumes from
//!   the reader's own [`BinlogReader::resume_point`] (the last transaction boundary it
//!   handed out): rows of a transaction that was open when the stream broke are read again
//!   and sent again (duplicates, never loss). The checkpoint is only used at process start.
//!
//! # Shutdown
//! The shutdown signal stops the source; the router stops forwarding; the sink waits up to
//! `pipeline.shutdown_timeout_ms` for records in flight; then the committer stores the
//! final acked position and [`run_relay`] returns.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_binlog::{
    BinlogError, BinlogPosition, BinlogReader, GtidSet, ReaderConfig, StartPosition, StreamItem,
    XaBoundary,
};
use outbox_checkpoint::{
    AckToken, AckTracker, Checkpoint, CheckpointCommitter, CheckpointPosition,
    CheckpointStoreError, CommitPolicy, SharedCheckpointStore, SourceIdentity,
};
use outbox_router::{RouteOutcome, Router, RoutingError};
use tokio::sync::{mpsc, Notify};

use crate::backoff::Backoff;
use crate::budget::{row_change_bytes, BudgetPermit, InFlightBudget};
use crate::config::{DeliveryMode, RelayConfig, StartSetting};
use crate::dead_letter::{dead_letter_for_routing_error, RecordOrigin};
use crate::internal_events::{
    CheckpointCommitFailed, CheckpointCommitted, CheckpointLoaded, DeadLettered, HeartbeatRead,
    InternalEvent, RecordRouted, RowRead, RowSkipped, SourceConnected, SourceReconnecting,
    TransactionRead, XaHeldChanged, XaOutcomeRead, XaOutcomeWithoutPrepare, XaPrepareHeld,
};
use crate::metrics::Metrics;
use crate::replay::{ReplayCounter, SentThrough};
use crate::shutdown::{Shutdown, ShutdownController};
use crate::sink::{
    run_kafka_sink, run_transactional_sink, BatchBoundary, KafkaSinkSettings, OutboundRecord,
    RejectedRecords, SequencedTicket, SinkError, SinkItem, TransactionalSinkSettings,
};
use crate::stores::open_checkpoint_store_for_writing;
use crate::tasks::spawn_named;
use crate::xa_hold::{describe_refused, HeldRecord, XaHolds, XaRelease, XaResolution};

#[cfg(test)]
#[path = "tests.rs"]
mod pipeline_tests;

/// Why the relay stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The router configuration is inconsistent.
    #[error("invalid [[outbox]]/[route] configuration: {0}")]
    RouterConfig(String),
    /// The binlog source failed definitely (or could not connect at startup).
    #[error("binlog source: {0}")]
    Source(#[source] BinlogError),
    /// The stored checkpoint points into binlog the server no longer has (purged, or never
    /// written there). Definite: starting anywhere else would skip events, so the operator
    /// chooses between recovering the gap and skipping it knowingly.
    #[error("the stored checkpoint ({store}: binlog {position}, GTID set `{gtid_set}`) is no longer on the source server: {source}. Nothing after it was delivered or skipped. Two ways out: (1) recover the missing events from archived copies of the purged binlog files: `outbox-relay inspect --config CONFIG FILE...` shows the records they route to, and `outbox-relay recover --config CONFIG --after {position} FILE...` publishes them with their ids; then `outbox-relay checkpoint set --config CONFIG --position FILE:4` at the oldest file still on the server; or (2) skip the gap knowingly: `outbox-relay checkpoint set --config CONFIG --position FILE:POS` (or `--gtid`) at the oldest available position named above, accepting that the events in between are lost")]
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
    /// The Kafka sink stopped.
    #[error("Kafka sink: {0}")]
    Sink(#[source] SinkError),
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

/// What a relay run did, returned when it stopped cleanly.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RelaySummary {
    /// Records Kafka acknowledged.
    pub delivered: u64,
    /// Records unacked when the shutdown deadline passed (replayed on the next start).
    pub abandoned: usize,
    /// The last checkpoint stored, if any.
    pub checkpoint: Option<Checkpoint>,
}

/// Everything [`run_relay`] needs besides the config.
#[derive(Clone)]
pub struct RelayHandles {
    /// Fires to stop the relay gracefully.
    pub shutdown: ShutdownController,
    /// Where counters go (and what `/metrics` serves).
    pub metrics: Arc<Metrics>,
    /// `[ha]`: the leadership term this run publishes in. Its epoch is stamped into the
    /// checkpoint taken over at start and every checkpoint committed, so the store refuses
    /// this run's writes once a newer leader wrote. The standby loop ([`crate::ha`]) then
    /// serves the HTTP endpoint across terms, so `run_relay` does not. `None`: no `[ha]`.
    pub leader_epoch: Option<u64>,
}

impl Default for RelayHandles {
    fn default() -> Self {
        Self {
            shutdown: ShutdownController::new(),
            metrics: Metrics::new(),
            leader_epoch: None,
        }
    }
}

/// The ack tracker shared by the router task (adds records, ends transactions) and the
/// sink (acks); a plain mutex, held for a few instructions at a time.
type SharedTracker = Arc<Mutex<AckTracker>>;

/// Ordinals (1-based, in end order, heartbeats included) of ended transactions that carried
/// records: pushed by the router, popped by the committer as the checkpoint passes them.
/// Bounded by the transactions in flight.
type RecordTransactions = Arc<Mutex<VecDeque<u64>>>;

fn lock_records(records: &RecordTransactions) -> std::sync::MutexGuard<'_, VecDeque<u64>> {
    records
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A held XA record, released for sending: it gets its ack token now (so the checkpoint
/// waits for it) and keeps its budget permit; `xa_release` is the prepared transaction's
/// shared release, `None` for a one-phase XA commit.
fn held_record_to_sink_item(
    tracker: &SharedTracker,
    held: HeldRecord,
    xa_release: Option<Arc<XaRelease>>,
) -> SinkItem<RecordTicket> {
    let token = lock_tracker(tracker).add_record();
    SinkItem {
        record: held.record,
        ticket: RecordTicket {
            token,
            budget: held.budget,
            xa_release,
        },
        origin: held.origin,
    }
}

fn lock_tracker(tracker: &SharedTracker) -> std::sync::MutexGuard<'_, AckTracker> {
    // A poisoned lock means another task panicked mid-update; the tracker's state is still
    // consistent at instruction granularity, and that task's failure stops the relay anyway.
    tracker
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs the relay until shutdown or a definite error. Commits the acked prefix in both cases.
pub async fn run_relay(
    config: RelayConfig,
    handles: RelayHandles,
) -> Result<RelaySummary, RelayError> {
    let metrics = handles.metrics.clone();
    let controller = handles.shutdown.clone();
    // Checked before anything is served: a bad route is a config error.
    Router::new(&config.outbox, &config.route)
        .map_err(|e| RelayError::RouterConfig(e.to_string()))?;
    // Under [ha] the standby loop serves them once for all terms.
    if handles.leader_epoch.is_none() {
        start_observability(&config, &metrics, &controller).await?;
    }
    // An aborted Kafka transaction (exactly-once) restarts the pipeline from the stored
    // checkpoint: nothing of it became visible, so nothing is lost or seen twice. Records
    // Kafka rejected are remembered across those restarts, for their dead letters.
    let rejected = RejectedRecords::default();
    let mut backoff = Backoff::new(
        Duration::from_millis(config.kafka.retry_initial_backoff_ms),
        Duration::from_millis(config.kafka.retry_max_backoff_ms),
    );
    let outcome = loop {
        let attempt = ShutdownController::new();
        {
            let mut global = controller.subscribe();
            let mut attempt_done = attempt.subscribe();
            let attempt = attempt.clone();
            spawn_named("attempt-stop-forwarder", async move {
                tokio::select! {
                    _ = global.recv() => attempt.trigger(),
                    _ = attempt_done.recv() => {}
                }
            });
        }
        let outcome =
            run_pipeline(&config, &metrics, &attempt, &rejected, handles.leader_epoch).await;
        attempt.trigger();
        match outcome {
            Err(RelayError::Sink(error))
                if error.is_transaction_retry() && !controller.is_triggered() =>
            {
                let delay = backoff.next_delay();
                tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64, "restarting the pipeline from the stored checkpoint");
                let mut stop = controller.subscribe();
                tokio::select! {
                    _ = stop.recv() => break Ok(RelaySummary::default()),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            other => break other,
        }
    };
    controller.trigger();
    match outcome {
        Ok(summary) => {
            tracing::info!(
                delivered = summary.delivered,
                abandoned = summary.abandoned,
                checkpoint = %summary.checkpoint.as_ref().map(|c| c.position.binlog.to_string()).unwrap_or_else(|| "none".into()),
                "relay stopped"
            );
            Ok(summary)
        }
        Err(error) => Err(error),
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` (when `metrics.listen` is set) with the
/// broker probe and the purge horizon, until `controller` fires: once per process, across
/// pipeline restarts. [`run_relay`] calls it itself without `[ha]`; the standby loop calls
/// it once for all terms.
pub(crate) async fn start_observability(
    config: &RelayConfig,
    metrics: &Arc<Metrics>,
    controller: &ShutdownController,
) -> Result<(), RelayError> {
    metrics
        .health
        .set_max_backoff(Duration::from_millis(config.metrics.ready_max_backoff_ms));
    if let Some(listen) = config.metrics_listen() {
        let (bound, serve) =
            crate::http::bind_http_server(listen, metrics.clone(), controller.subscribe())
                .await
                .map_err(|source| RelayError::MetricsListen {
                    listen: listen.to_string(),
                    source,
                })?;
        tracing::info!(listen = %bound, "serving GET /metrics, /healthz and /readyz");
        spawn_named("metrics-server", serve);
        spawn_named(
            "broker-probe",
            crate::broker_probe::run_broker_probe(
                KafkaSinkSettings::from_relay_config(config),
                metrics.clone(),
                controller.subscribe(),
            ),
        );
        spawn_named(
            "purge-horizon",
            crate::purge_horizon::run_purge_horizon(
                config.source.connection_url(),
                config.source.tls_options(),
                metrics.clone(),
                controller.subscribe(),
            ),
        );
    }
    Ok(())
}

/// One run of the pipeline (source, router, sink, committer) from the stored checkpoint,
/// until shutdown or the first error; `controller` stops this run only.
async fn run_pipeline(
    config: &RelayConfig,
    metrics: &Arc<Metrics>,
    controller: &ShutdownController,
    rejected: &RejectedRecords,
    leader_epoch: Option<u64>,
) -> Result<RelaySummary, RelayError> {
    let metrics = metrics.clone();
    let controller = controller.clone();
    let warn_on_skip =
        config.route.invalid_operation == outbox_router::InvalidOperationBehavior::Warn;
    let router = Router::new(&config.outbox, &config.route)
        .map_err(|e| RelayError::RouterConfig(e.to_string()))?;
    let store: SharedCheckpointStore =
        open_checkpoint_store_for_writing(&config.checkpoint, &config.kafka)
            .await
            .map_err(RelayError::Checkpoint)?;
    // A new leader stamps the stored checkpoint with its epoch before anything else: from
    // here on an older leader's commits are refused.
    let stored = match leader_epoch {
        Some(epoch) => store.take_over(epoch).await,
        None => store.load().await,
    }
    .map_err(RelayError::Checkpoint)?;
    if let Some(checkpoint) = &stored {
        CheckpointLoaded {
            position: &checkpoint.position.binlog,
        }
        .emit(&metrics);
    }

    // Connect first: the start position of a first run and the source identity come from
    // the server.
    let source_url = config.source.connection_url();
    let source_tls = config.source.tls_options();
    let redacted = config.source.redacted_url();
    let startup_retry = StartupRetry {
        backoff: Backoff::new(
            Duration::from_millis(config.source.reconnect_initial_backoff_ms),
            Duration::from_millis(config.source.reconnect_max_backoff_ms),
        ),
        max_attempts: config.source.startup_attempts,
        server: redacted.clone(),
    };
    let first_start = match &stored {
        Some(checkpoint) => {
            tracing::info!(position = %checkpoint.position.binlog, gtid_set = %checkpoint.position.gtid_set, store = %store.describe(), "resuming from the stored checkpoint");
            if checkpoint.position.binlog == gtid_only_binlog_position() {
                StartPosition::Gtid(checkpoint.position.gtid_set.clone())
            } else {
                // A file+position only means something on the server that wrote it: check
                // who we are talking to before streaming from it.
                let Some(identity) = server_identity_at_startup(
                    &source_url,
                    &source_tls,
                    startup_retry.clone(),
                    &metrics,
                    controller.subscribe(),
                )
                .await?
                else {
                    return Ok(RelaySummary::default());
                };
                if identity == checkpoint.source {
                    StartPosition::Position(checkpoint.position.binlog.clone())
                } else if checkpoint.position.gtid_set.is_empty() {
                    return Err(RelayError::ForeignCheckpoint {
                        stored: describe_identity(&checkpoint.source),
                        connected: describe_identity(&identity),
                    });
                } else {
                    tracing::warn!(stored = %describe_identity(&checkpoint.source), connected = %describe_identity(&identity), gtid_set = %checkpoint.position.gtid_set, "checkpoint was taken on another server; resuming by GTID set");
                    StartPosition::Gtid(checkpoint.position.gtid_set.clone())
                }
            }
        }
        None => {
            let setting = config
                .source
                .start_setting()
                .map_err(|e| RelayError::StartPosition(e.to_string()))?;
            tracing::info!(start = %config.source.start, store = %store.describe(), "no checkpoint stored; first run");
            match setting {
                StartSetting::Earliest => StartPosition::Earliest,
                StartSetting::Latest => StartPosition::Latest,
                StartSetting::Position(position) => StartPosition::Position(position),
                // The flavor is not known before connecting: ask the server first.
                StartSetting::Gtid(text) => {
                    let report = outbox_binlog::check_server(&source_url, &source_tls)
                        .await
                        .map_err(RelayError::Source)?;
                    StartPosition::Gtid(
                        StartSetting::gtid_set(&text, report.identity.flavor)
                            .map_err(RelayError::StartPosition)?,
                    )
                }
            }
        }
    };
    let reader_config = |start: StartPosition| ReaderConfig {
        url: source_url.clone(),
        server_id: config.source.server_id,
        start,
        filter: config.table_filter(),
        heartbeat_interval: Duration::from_millis(config.source.heartbeat_interval_ms),
        idle_timeout: Duration::from_millis(config.source.idle_timeout_ms),
        connect_timeout: Duration::from_millis(config.source.connect_timeout_ms),
        tls: source_tls.clone(),
    };
    let connected = connect_at_startup(
        reader_config(first_start.clone()),
        startup_retry.clone(),
        &metrics,
        controller.subscribe(),
    )
    .await;
    let connected = match (connected, &stored) {
        (Err(RelayError::Source(error @ BinlogError::PositionPurged { .. })), Some(checkpoint)) => {
            return Err(RelayError::ResumePointPurged {
                store: store.describe(),
                position: checkpoint.position.binlog.to_string(),
                gtid_set: checkpoint.position.gtid_set.to_string(),
                source: Box::new(error),
            })
        }
        (connected, _) => connected?,
    };
    let Some(mut reader) = connected else {
        tracing::info!("shutdown requested before the source connected");
        return Ok(RelaySummary::default());
    };
    // Every [[outbox]] table must exist as the binlog names it, or its rows would be
    // skipped silently (ARCHITECTURE.md, invariant 4c).
    reader
        .verify_watched_tables()
        .await
        .map_err(RelayError::Source)?;
    let identity = source_identity(&reader);
    SourceConnected {
        server: &redacted,
        start: describe_start(&reader.resume_point()),
        reconnect: 0,
    }
    .emit(&metrics);

    let mut tracker_start = match &stored {
        Some(checkpoint) => checkpoint.position.clone(),
        None => initial_position(&reader.resume_point()),
    };
    // The server's GTID history at the start (every domain), not just the GTIDs read from
    // here on: a later resume or failover by GTID set then asks for exactly what follows.
    if let Some(history) = reader.start_gtid_set() {
        tracker_start.gtid_set = history.clone();
    }
    let start_gtids = tracker_start.gtid_set.clone();
    let tracker: SharedTracker = Arc::new(Mutex::new(AckTracker::new(tracker_start)));
    let acked = Arc::new(Notify::new());
    let record_transactions: RecordTransactions = Arc::new(Mutex::new(VecDeque::new()));

    // How far the previous run had sent (crate::replay): its records are counted as
    // replays, only when resuming at the stored file position on the server that wrote it.
    let resumed_sent_through = stored
        .as_ref()
        .filter(|_| matches!(first_start, StartPosition::Position(_)))
        .and_then(|checkpoint| checkpoint.sent_through.clone());
    let sent_through = SentThrough::default();

    let capacity = config.pipeline.channel_capacity;
    let (items_tx, items_rx) = mpsc::channel::<SourceItem>(capacity);
    let (records_tx, records_rx) = mpsc::channel::<SinkItem<RecordTicket>>(capacity);
    let budget = InFlightBudget::new(config.pipeline.max_in_flight_bytes);

    // The source has its own stop signal: a failing source or router stops reading, but the
    // sink still delivers what was routed before the failure (the checkpoint then ends right
    // before the problem). The global signal (SIGTERM, a failing sink) stops it too.
    let source_stop = ShutdownController::new();
    {
        let mut global = controller.subscribe();
        let source_stop = source_stop.clone();
        spawn_named("source-stop-forwarder", async move {
            global.recv().await;
            source_stop.trigger();
        });
    }
    let source_task = spawn_named(
        "binlog-source",
        run_source(
            reader,
            SourceSettings {
                reconnect_initial: Duration::from_millis(
                    config.source.reconnect_initial_backoff_ms,
                ),
                reconnect_max: Duration::from_millis(config.source.reconnect_max_backoff_ms),
                redacted_url: redacted.clone(),
                budget: budget.clone(),
                identity: identity.clone(),
                start_gtids,
            },
            reader_config(first_start),
            items_tx,
            metrics.clone(),
            source_stop.subscribe(),
        ),
    );
    let router_task = spawn_named(
        "router",
        run_router(
            RouterTaskContext {
                router,
                warn_on_skip,
                record_transactions: record_transactions.clone(),
                tracker: tracker.clone(),
                progress: acked.clone(),
                metrics: metrics.clone(),
                dead_letter: config.dead_letter.clone(),
                max_in_flight_bytes: config.pipeline.max_in_flight_bytes,
                sent_through: sent_through.clone(),
                replay: ReplayCounter::new(resumed_sent_through.clone()),
            },
            items_rx,
            records_tx,
            controller.subscribe(),
        ),
    );
    let on_delivered = delivery_acker(
        tracker.clone(),
        acked.clone(),
        budget.clone(),
        metrics.clone(),
    );
    let exactly_once = config.kafka.delivery == DeliveryMode::ExactlyOnce;
    let sink_task = if exactly_once {
        let settings = transactional_sink_settings(config);
        let boundary_tracker = tracker.clone();
        let boundary_identity = identity.clone();
        let sink = run_transactional_sink(
            settings,
            records_rx,
            on_delivered,
            move |last_sent| {
                exactly_once_boundary(&boundary_tracker, &boundary_identity, last_sent)
            },
            acked.clone(),
            rejected.clone(),
            stored.clone(),
            metrics.clone(),
            controller.subscribe(),
        );
        spawn_named("kafka-transactional-sink", async move {
            sink.await
                .map(|summary| (summary.sink, Some(summary.checkpoint)))
        })
    } else {
        let sink = run_kafka_sink(
            KafkaSinkSettings::from_relay_config(config),
            records_rx,
            on_delivered,
            metrics.clone(),
            controller.subscribe(),
        );
        spawn_named("kafka-sink", async move {
            sink.await.map(|summary| (summary, None))
        })
    };
    // Exactly-once: the sink commits the checkpoint inside its Kafka transactions.
    let committer_stop = ShutdownController::new();
    let committer_task = (!exactly_once).then(|| {
        let committer_run = run_committer(
            CommitterSettings {
                identity: identity.clone(),
                policy: CommitPolicy {
                    max_interval: config.pipeline.commit_interval(),
                    max_transactions: config.pipeline.commit_max_transactions,
                },
                // A checkpoint of another server (resumed by GTID set) cannot be compared
                // with this server's positions: start the monotonic check afresh.
                resumed_from: stored
                    .as_ref()
                    .filter(|c| c.source == identity)
                    .map(|c| c.position.clone()),
                record_transactions: record_transactions.clone(),
                leader_epoch,
                sent_through: sent_through.clone(),
                resumed_sent_through,
            },
            store.clone(),
            tracker.clone(),
            acked.clone(),
            metrics.clone(),
            committer_stop.subscribe(),
        );
        let committer_failed = controller.clone();
        spawn_named("checkpoint-committer", async move {
            let result = committer_run.await;
            // A definite store refusal (a regression, or a newer leader's epoch under [ha])
            // stops publishing at once: nothing sent from here on could be checkpointed.
            if result.is_err() {
                committer_failed.trigger();
            }
            result
        })
    });

    // A failing source or router stops reading (the sink drains what was routed); a failing
    // sink stops everything. The first error is the one reported.
    let (source_result, router_result, sink_result) = tokio::join!(
        stop_on_failure(source_task, &source_stop),
        stop_on_failure(router_task, &source_stop),
        stop_on_failure(sink_task, &controller),
    );
    let mut errors: Vec<RelayError> = Vec::new();
    let mut summary = RelaySummary::default();
    flatten_task("binlog-source", source_result, &mut errors);
    flatten_task("router", router_result, &mut errors);
    if let Some((sink_summary, sink_checkpoint)) = flatten_task(
        "kafka-sink",
        sink_result.map(|r| r.map_err(RelayError::Sink)),
        &mut errors,
    ) {
        summary.delivered = sink_summary.delivered;
        summary.abandoned = sink_summary.abandoned;
        if let Some(checkpoint) = sink_checkpoint {
            summary.checkpoint = checkpoint;
        }
    }
    committer_stop.trigger();
    if let Some(committer_task) = committer_task {
        if let Some(last) = flatten_task("checkpoint-committer", committer_task.await, &mut errors)
        {
            summary.checkpoint = last;
        }
    }
    for error in &errors {
        tracing::error!(%error, "relay stopped on error");
    }
    controller.trigger();
    match errors.into_iter().next() {
        Some(error) => Err(error),
        None => Ok(summary),
    }
}

/// What the sink calls for each delivered record: acks it in the tracker (and the XA hold
/// it releases), frees its byte budget, and wakes the committer.
fn delivery_acker(
    tracker: SharedTracker,
    acked: Arc<Notify>,
    budget: InFlightBudget,
    metrics: Arc<Metrics>,
) -> impl FnMut(RecordTicket) + Send {
    move |ticket: RecordTicket| {
        let RecordTicket {
            token,
            budget: permit,
            xa_release,
        } = ticket;
        let result = {
            let mut tracker = lock_tracker(&tracker);
            let result = tracker.ack(token);
            match xa_release.and_then(|release| release.record_acked()) {
                Some(hold_token) => result.and(tracker.ack(hold_token)),
                None => result,
            }
        };
        drop(permit);
        metrics
            .in_flight_bytes
            .set(i64::try_from(budget.reserved_bytes()).unwrap_or(i64::MAX));
        if let Err(error) = result {
            tracing::error!(%error, "ack tracker rejected an ack (a bug; the checkpoint is held back)");
        }
        acked.notify_one();
    }
}

impl SequencedTicket for RecordTicket {
    fn sequence(&self) -> u64 {
        self.token.sequence()
    }
}

/// The exactly-once sink's settings from the config.
fn transactional_sink_settings(config: &RelayConfig) -> TransactionalSinkSettings {
    let commit_interval = config.pipeline.commit_interval();
    TransactionalSinkSettings {
        sink: KafkaSinkSettings::from_relay_config(config),
        transactional_id: format!("outbox-relay-{}", config.checkpoint.connector),
        checkpoint_topic: config.checkpoint.kafka_topic().to_owned(),
        checkpoint_key: outbox_kafka::checkpoint_record_key(&config.checkpoint.connector),
        max_interval: commit_interval,
        max_records: config.kafka.transaction_max_records,
        max_bytes: config.kafka.transaction_max_bytes,
        // As for idle-only checkpoint commits of the at-least-once committer.
        idle_interval: commit_interval
            .saturating_mul(10)
            .max(Duration::from_secs(5)),
        transaction_timeout: Duration::from_millis(config.kafka.transaction_timeout_ms),
    }
}

/// The checkpoint a Kafka transaction may be committed with: the tracker's, once every
/// record up to `last_sent` belongs to a binlog transaction it has passed (see
/// [`AckTracker::records_passed`]). After a move to another server (failover by GTID
/// set), the checkpoint names that server and is GTID-only, as the committer stores it.
fn exactly_once_boundary(
    tracker: &SharedTracker,
    identity: &SourceIdentity,
    last_sent: Option<u64>,
) -> Option<BatchBoundary> {
    let tracker = lock_tracker(tracker);
    if last_sent.is_some_and(|sequence| sequence >= tracker.records_passed()) {
        return None;
    }
    let mut position = tracker.checkpoint().clone();
    let source = match tracker.checkpoint_source() {
        Some(moved) if moved != identity => {
            position.binlog = gtid_only_binlog_position();
            moved.clone()
        }
        _ => identity.clone(),
    };
    Some(BatchBoundary {
        checkpoint: Checkpoint::new(source, position),
        caught_up: tracker.tracked_transactions() == 0,
    })
}

/// The binlog position of a checkpoint that only has a GTID set (written by
/// `outbox-relay checkpoint set --gtid`): an empty file name, which no server uses. Such a
/// checkpoint resumes by GTID set.
pub fn gtid_only_binlog_position() -> BinlogPosition {
    BinlogPosition::new("", 4)
}

/// Awaits a task; if it failed (error or panic) triggers `controller`.
async fn stop_on_failure<T, E>(
    task: tokio::task::JoinHandle<Result<T, E>>,
    controller: &ShutdownController,
) -> Result<Result<T, E>, tokio::task::JoinError> {
    let result = task.await;
    if !matches!(result, Ok(Ok(_))) {
        controller.trigger();
    }
    result
}

/// A task's result, with panics turned into [`RelayError::TaskFailed`] and errors collected.
fn flatten_task<T>(
    task: &'static str,
    joined: Result<Result<T, RelayError>, tokio::task::JoinError>,
    errors: &mut Vec<RelayError>,
) -> Option<T> {
    match joined {
        Ok(Ok(value)) => Some(value),
        Ok(Err(error)) => {
            errors.push(error);
            None
        }
        Err(join) => {
            errors.push(RelayError::TaskFailed {
                task,
                message: join.to_string(),
            });
            None
        }
    }
}

/// The identity a checkpoint records for the connected server.
/// The identity a checkpoint records, from a server check.
pub(crate) fn identity_of(report: &outbox_binlog::ServerReport) -> SourceIdentity {
    SourceIdentity {
        flavor: report.identity.flavor,
        server_id: report.identity.server_id,
        server_uuid: report.identity.server_uuid.clone(),
    }
}

fn source_identity(reader: &BinlogReader) -> SourceIdentity {
    let server = reader.server();
    SourceIdentity {
        flavor: server.flavor,
        server_id: server.server_id,
        server_uuid: server.server_uuid.clone(),
    }
}

fn describe_identity(identity: &SourceIdentity) -> String {
    match &identity.server_uuid {
        Some(uuid) => format!(
            "{} server_id {} uuid {uuid}",
            identity.flavor, identity.server_id
        ),
        None => format!("{} server_id {}", identity.flavor, identity.server_id),
    }
}

fn describe_start(start: &StartPosition) -> String {
    match start {
        StartPosition::Earliest => "earliest".into(),
        StartPosition::Latest => "latest".into(),
        StartPosition::Position(position) => format!("file:{position}"),
        StartPosition::Gtid(set) => format!("gtid:{set}"),
    }
}

/// The tracker's starting point for a first run. It is never committed as such (the tracker
/// only reports positions it moved to), so an unknown file is harmless.
fn initial_position(start: &StartPosition) -> CheckpointPosition {
    match start {
        StartPosition::Position(position) => CheckpointPosition::at(position.clone()),
        StartPosition::Gtid(set) => CheckpointPosition {
            gtid_set: set.clone(),
            ..CheckpointPosition::at(gtid_only_binlog_position())
        },
        StartPosition::Earliest | StartPosition::Latest => CheckpointPosition {
            gtid_set: GtidSet::Empty,
            ..CheckpointPosition::at(gtid_only_binlog_position())
        },
    }
}

/// How the relay retries reaching the source at startup.
#[derive(Clone)]
struct StartupRetry {
    /// Delays between attempts.
    backoff: Backoff,
    /// Attempts before giving up with [`RelayError::SourceUnreachable`]; 0 = unlimited
    /// (`source.startup_attempts`).
    max_attempts: u32,
    /// `host:port` (password redacted), for the give-up message.
    server: String,
}

/// Runs `attempt` until it succeeds, retrying transient source errors (server not up yet,
/// network) with backoff, each retry logged with its delay; definite errors (wrong settings,
/// purged position, access denied) fail at once, and after `max_attempts` transient failures
/// the relay gives up naming the server and the last error. `None` when shutdown was
/// requested meanwhile.
async fn retry_source_at_startup<T, F, Fut>(
    retry: StartupRetry,
    resume_from: String,
    metrics: &Metrics,
    mut shutdown: Shutdown,
    mut attempt: F,
) -> Result<Option<T>, RelayError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BinlogError>>,
{
    let StartupRetry {
        mut backoff,
        max_attempts,
        server,
    } = retry;
    let started = std::time::Instant::now();
    let mut attempts: u32 = 0;
    loop {
        let result = tokio::select! {
            _ = shutdown.recv() => return Ok(None),
            result = attempt() => result,
        };
        attempts = attempts.saturating_add(1);
        match result {
            Ok(value) => return Ok(Some(value)),
            Err(error) if error.is_transient() => {
                if max_attempts != 0 && attempts >= max_attempts {
                    return Err(RelayError::SourceUnreachable {
                        server,
                        attempts,
                        waited: started.elapsed(),
                        source: Box::new(error),
                    });
                }
                let delay = backoff.next_delay();
                SourceReconnecting {
                    error: &error,
                    delay,
                    resume_from: resume_from.clone(),
                    attempt: attempts,
                    max_attempts,
                }
                .emit(metrics);
                tokio::select! {
                    _ = shutdown.recv() => return Ok(None),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            Err(error) => return Err(RelayError::Source(error)),
        }
    }
}

/// The source server's identity (via `check_server`), retried like [`connect_at_startup`].
async fn server_identity_at_startup(
    url: &str,
    tls: &outbox_binlog::TlsOptions,
    retry: StartupRetry,
    metrics: &Metrics,
    shutdown: Shutdown,
) -> Result<Option<SourceIdentity>, RelayError> {
    retry_source_at_startup(
        retry,
        "the stored checkpoint".into(),
        metrics,
        shutdown,
        || async { Ok(identity_of(&outbox_binlog::check_server(url, tls).await?)) },
    )
    .await
}

/// Connects the source at startup (see [`retry_source_at_startup`]).
async fn connect_at_startup(
    reader_config: ReaderConfig,
    retry: StartupRetry,
    metrics: &Metrics,
    shutdown: Shutdown,
) -> Result<Option<BinlogReader>, RelayError> {
    let resume_from = describe_start(&reader_config.start);
    retry_source_at_startup(retry, resume_from, metrics, shutdown, || {
        BinlogReader::connect(reader_config.clone())
    })
    .await
}

/// Source task settings.
struct SourceSettings {
    /// First reconnect delay.
    reconnect_initial: Duration,
    /// Largest reconnect delay.
    reconnect_max: Duration,
    /// For logs.
    redacted_url: String,
    /// Each row reserves its size here before it is handed on.
    budget: InFlightBudget,
    /// Who the source was at startup: a reconnect that reaches another server (failover
    /// behind the same address) must not resume by file+position there.
    identity: SourceIdentity,
    /// The GTID set the stream started from (the checkpoint's, or empty); the source adds
    /// every commit's GTID it hands on, so it can move to another server by GTID.
    start_gtids: GtidSet,
}

/// What the source hands the router, in stream order.
enum SourceItem {
    /// A stream item and, for a row, its share of the in-flight byte budget (released when
    /// its record is acked, or when it is dropped).
    Stream(StreamItem, Option<BudgetPermit>),
    /// The source moved to another server by GTID set (failover): every item after this
    /// one comes from that server. In the stream, not beside it, so the router tags exactly
    /// the positions read from the new server with it ([`AckTracker::switch_source`]); the
    /// committer then names it and stores those checkpoints GTID-only.
    MovedTo(SourceIdentity),
}

/// The sink's ticket for a record: the tracker's token, and the row's budget reservation,
/// released once the record (or its dead letter) is acknowledged.
struct RecordTicket {
    /// Acked in the tracker on delivery.
    token: AckToken,
    /// Dropped on delivery.
    budget: Option<BudgetPermit>,
    /// For a record of a committed XA transaction: releases the hold on its XA PREPARE once
    /// every record of the transaction is acked ([`crate::xa_hold`]).
    xa_release: Option<Arc<XaRelease>>,
}

/// Reads the binlog into `items` until shutdown or a definite error; reconnects on
/// transient errors from the reader's resume point.
async fn run_source(
    mut reader: BinlogReader,
    settings: SourceSettings,
    mut reader_config: ReaderConfig,
    items: mpsc::Sender<SourceItem>,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) -> Result<(), RelayError> {
    let mut backoff = Backoff::new(settings.reconnect_initial, settings.reconnect_max);
    let mut reconnects: u64 = 0;
    let mut handed_out_gtids = settings.start_gtids.clone();
    loop {
        let next = tokio::select! {
            _ = shutdown.recv() => return Ok(()),
            next = reader.next_item() => next,
        };
        match next {
            Ok(item) => {
                match &item {
                    StreamItem::Row(_) => RowRead.emit(&metrics),
                    StreamItem::Commit(commit) => {
                        TransactionRead {
                            timestamp: commit.timestamp,
                        }
                        .emit(&metrics);
                        backoff.reset();
                        if let Some(gtid) = &commit.gtid {
                            handed_out_gtids.add(gtid);
                        }
                    }
                    StreamItem::Heartbeat(_) => {
                        HeartbeatRead.emit(&metrics);
                        backoff.reset();
                    }
                }
                let permit = match &item {
                    StreamItem::Row(row) => {
                        let permit = tokio::select! {
                            _ = shutdown.recv() => return Ok(()),
                            permit = settings.budget.reserve(row_change_bytes(row)) => permit,
                        };
                        metrics.in_flight_bytes.set(
                            i64::try_from(settings.budget.reserved_bytes()).unwrap_or(i64::MAX),
                        );
                        permit
                    }
                    StreamItem::Commit(_) | StreamItem::Heartbeat(_) => None,
                };
                tokio::select! {
                    _ = shutdown.recv() => return Ok(()),
                    sent = items.send(SourceItem::Stream(item, permit)) => if sent.is_err() { return Ok(()) },
                }
            }
            Err(error) if error.is_transient() => {
                // Reconnect until it works or shutdown; definite errors on reconnect stop.
                let mut last_error = error;
                loop {
                    let resume = reader.resume_point();
                    let delay = backoff.next_delay();
                    SourceReconnecting {
                        error: &last_error,
                        delay,
                        resume_from: describe_start(&resume),
                        attempt: backoff.attempts(),
                        max_attempts: 0,
                    }
                    .emit(&metrics);
                    tokio::select! {
                        _ = shutdown.recv() => return Ok(()),
                        _ = tokio::time::sleep(delay) => {}
                    }
                    reader_config.start = resume.clone();
                    // A file+position only means something on the server that wrote it:
                    // check who answers before streaming from one. Another server behind the
                    // address (failover): move over by GTID set, or refuse.
                    let mut moved_to = false;
                    if !matches!(resume, StartPosition::Gtid(_)) {
                        let checked = tokio::select! {
                            _ = shutdown.recv() => return Ok(()),
                            // Bounded: a half-open connection must not hang the reconnect.
                            checked = outbox_binlog::check_server_within(
                                &reader_config.url,
                                &reader_config.tls,
                                reader_config.connect_timeout,
                            ) => checked,
                        };
                        let found = match checked {
                            Ok(report) => identity_of(&report),
                            Err(error) if error.is_transient() => {
                                last_error = error;
                                continue;
                            }
                            Err(error) => return Err(RelayError::Source(error)),
                        };
                        if found != settings.identity {
                            if handed_out_gtids.is_empty() {
                                return Err(RelayError::SourceChanged {
                                    before: describe_identity(&settings.identity),
                                    after: describe_identity(&found),
                                    position: describe_start(&resume),
                                });
                            }
                            tracing::warn!(before = %describe_identity(&settings.identity), after = %describe_identity(&found), gtid_set = %handed_out_gtids, "another server answers at the source address (failover?); resuming by GTID set");
                            reader_config.start = StartPosition::Gtid(handed_out_gtids.clone());
                            moved_to = true;
                        }
                    }
                    let connected = tokio::select! {
                        _ = shutdown.recv() => return Ok(()),
                        connected = BinlogReader::connect(reader_config.clone()) => connected,
                    };
                    match connected {
                        Ok(new_reader) => {
                            if moved_to {
                                let moved = SourceItem::MovedTo(source_identity(&new_reader));
                                tokio::select! {
                                    _ = shutdown.recv() => return Ok(()),
                                    sent = items.send(moved) => if sent.is_err() { return Ok(()) },
                                }
                            }
                            reconnects += 1;
                            reader = new_reader;
                            SourceConnected {
                                server: &settings.redacted_url,
                                start: describe_start(&reader_config.start),
                                reconnect: reconnects,
                            }
                            .emit(&metrics);
                            break;
                        }
                        Err(error) if error.is_transient() => last_error = error,
                        Err(error) => return Err(RelayError::Source(error)),
                    }
                }
            }
            Err(error) => return Err(RelayError::Source(error)),
        }
    }
}

/// What the router task works with besides its channels.
struct RouterTaskContext {
    /// Turns rows into records.
    router: Router,
    /// Log skipped rows at warn (`invalid_operation = "warn"`).
    warn_on_skip: bool,
    /// Ordinals of ended transactions that carried records, for the committer's idle rule.
    record_transactions: RecordTransactions,
    /// Registers records and transaction ends.
    tracker: SharedTracker,
    /// Wakes the committer when a transaction ended.
    progress: Arc<Notify>,
    /// Counters.
    metrics: Arc<Metrics>,
    /// Routing errors become dead letters unless policy says `fail`.
    dead_letter: crate::config::DeadLetterConfig,
    /// `pipeline.max_in_flight_bytes`: bounds the records of XA transactions held.
    max_in_flight_bytes: u64,
    /// Advanced at each transaction end that handed records to the sink; the committer
    /// stores it (crate::replay).
    sent_through: SentThrough,
    /// Counts the records the previous run had already sent (crate::replay).
    replay: ReplayCounter,
}

/// Routes rows into records (registering each with the tracker) and ends transactions in
/// the tracker, in binlog order.
async fn run_router(
    context: RouterTaskContext,
    mut items: mpsc::Receiver<SourceItem>,
    records: mpsc::Sender<SinkItem<RecordTicket>>,
    mut shutdown: Shutdown,
) -> Result<(), RelayError> {
    let RouterTaskContext {
        router,
        warn_on_skip,
        record_transactions,
        tracker,
        progress,
        metrics,
        dead_letter,
        max_in_flight_bytes,
        sent_through,
        mut replay,
    } = context;
    // Transactions (and heartbeats) ended so far: the same count as the tracker's
    // `completed_transactions` once the checkpoint passes them.
    let mut ended_transactions: u64 = 0;
    let mut records_in_open_transaction: u64 = 0;
    let mut end_transaction = |position: CheckpointPosition, records: &mut u64| {
        ended_transactions += 1;
        if *records > 0 {
            // Before `end_transaction`, so the committer never sees the end without it.
            lock_records(&record_transactions).push_back(ended_transactions);
            sent_through.advance(&position.binlog);
        }
        *records = 0;
        lock_tracker(&tracker).end_transaction(position);
        progress.notify_one();
    };
    let mut xa = XaHolds::new(max_in_flight_bytes);
    let mut xa_ticker = tokio::time::interval(Duration::from_secs(1));
    xa_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (item, budget) = tokio::select! {
            _ = shutdown.recv() => return Ok(()),
            _ = xa_ticker.tick() => {
                XaHeldChanged {
                    prepared: xa.prepared_count(),
                    oldest_prepare_timestamp: xa.oldest_prepare_timestamp(),
                }
                .emit(&metrics);
                continue;
            }
            item = items.recv() => match item {
                Some(SourceItem::Stream(item, budget)) => (item, budget),
                Some(SourceItem::MovedTo(server)) => {
                    lock_tracker(&tracker).switch_source(server);
                    replay.source_moved(&metrics);
                    continue;
                }
                None => return Ok(()),
            },
        };
        match item {
            StreamItem::Row(row) => {
                let record = match router.route(&row) {
                    Ok(RouteOutcome::Record(record)) => {
                        RecordRouted.emit(&metrics);
                        OutboundRecord::from(record)
                    }
                    Ok(RouteOutcome::Skipped { reason }) => {
                        RowSkipped {
                            reason: &format!("{reason:?}"),
                            table: &row.table,
                            warn: warn_on_skip,
                        }
                        .emit(&metrics);
                        continue;
                    }
                    // Policy `fail` (or dead letters off): stop, naming the row.
                    Err(error) if !dead_letter.dead_letters("routing") => {
                        return Err(RelayError::Routing(Box::new(error)))
                    }
                    // Deterministic: dead-lettered at once, tracked and acked like any record.
                    Err(error) => {
                        let letter = dead_letter_for_routing_error(&error, &row, &dead_letter);
                        let message = error.to_string();
                        DeadLettered {
                            class: "routing",
                            id: error.event_id.as_deref(),
                            original_topic: "",
                            dead_letter_topic: &dead_letter.topic,
                            attempts: 1,
                            error: &message,
                        }
                        .emit(&metrics);
                        letter
                    }
                };
                let origin = RecordOrigin::of_row(&row);
                if row.in_xa_transaction {
                    // Held until the XA transaction's outcome (crate::xa_hold).
                    let held = HeldRecord {
                        record,
                        origin,
                        budget,
                        bytes: row_change_bytes(&row) as u64,
                    };
                    if let Err(refused) = xa.hold(held) {
                        return Err(RelayError::XaHoldTooLarge(describe_refused(
                            &refused,
                            &row.event_position,
                        )));
                    }
                    continue;
                }
                let token = lock_tracker(&tracker).add_record();
                records_in_open_transaction += 1;
                let item = SinkItem {
                    record,
                    ticket: RecordTicket {
                        token,
                        budget,
                        xa_release: None,
                    },
                    origin,
                };
                if !send_to_sink(&records, &mut shutdown, item).await {
                    return Ok(());
                }
            }
            StreamItem::Commit(commit) => {
                match &commit.xa {
                    Some(XaBoundary::Prepare { xid }) => {
                        let held = xa.prepare(xid, commit.timestamp, || {
                            records_in_open_transaction += 1;
                            lock_tracker(&tracker).add_record()
                        });
                        if held > 0 {
                            XaPrepareHeld {
                                xid,
                                records: held,
                                position: &commit.position,
                            }
                            .emit(&metrics);
                        }
                    }
                    Some(XaBoundary::Commit { xid } | XaBoundary::Rollback { xid }) => {
                        let committed = matches!(commit.xa, Some(XaBoundary::Commit { .. }));
                        match xa.resolve(xid) {
                            XaResolution::Held(prepared) => {
                                XaOutcomeRead {
                                    xid,
                                    committed,
                                    records: prepared.records.len(),
                                }
                                .emit(&metrics);
                                if committed {
                                    // Records of the XA COMMIT transaction; the last ack
                                    // also releases the hold on the prepare.
                                    let release = Arc::new(XaRelease::new(
                                        prepared.records.len(),
                                        prepared.hold_token,
                                    ));
                                    for held in prepared.records {
                                        records_in_open_transaction += 1;
                                        let item = held_record_to_sink_item(
                                            &tracker,
                                            held,
                                            Some(release.clone()),
                                        );
                                        if !send_to_sink(&records, &mut shutdown, item).await {
                                            return Ok(());
                                        }
                                    }
                                } else if let Err(error) =
                                    lock_tracker(&tracker).ack(prepared.hold_token)
                                {
                                    tracing::error!(%error, "ack tracker rejected the release of a rolled-back XA transaction (a bug; the checkpoint is held back)");
                                }
                            }
                            XaResolution::PreparedWithoutRecords => {}
                            XaResolution::PrepareNotRead => XaOutcomeWithoutPrepare {
                                xid,
                                committed,
                                position: &commit.position,
                            }
                            .emit(&metrics),
                        }
                    }
                    None if xa.has_open_records() => {
                        // A one-phase XA commit: the held records are this transaction's.
                        for held in xa.take_open() {
                            records_in_open_transaction += 1;
                            let item = held_record_to_sink_item(&tracker, held, None);
                            if !send_to_sink(&records, &mut shutdown, item).await {
                                return Ok(());
                            }
                        }
                    }
                    None => {}
                }
                if commit.xa.is_some() {
                    XaHeldChanged {
                        prepared: xa.prepared_count(),
                        oldest_prepare_timestamp: xa.oldest_prepare_timestamp(),
                    }
                    .emit(&metrics);
                }
                // The records handed to the sink (an XA PREPARE's are only held).
                let sent = match commit.xa {
                    Some(XaBoundary::Prepare { .. }) => 0,
                    _ => records_in_open_transaction,
                };
                replay.transaction_ended(&commit.position, sent, &metrics);
                end_transaction(
                    CheckpointPosition::after_commit(&commit),
                    &mut records_in_open_transaction,
                )
            }
            StreamItem::Heartbeat(heartbeat) => {
                replay.transaction_ended(&heartbeat.position, 0, &metrics);
                end_transaction(
                    CheckpointPosition::at_heartbeat(&heartbeat),
                    &mut records_in_open_transaction,
                )
            }
        }
    }
}

/// Sends one record to the sink; false when the relay is stopping (or the sink is gone).
async fn send_to_sink(
    records: &mpsc::Sender<SinkItem<RecordTicket>>,
    shutdown: &mut Shutdown,
    item: SinkItem<RecordTicket>,
) -> bool {
    tokio::select! {
        _ = shutdown.recv() => false,
        sent = records.send(item) => sent.is_ok(),
    }
}

impl From<outbox_router::KafkaRecord> for OutboundRecord {
    fn from(record: outbox_router::KafkaRecord) -> Self {
        OutboundRecord {
            topic: record.topic,
            key: record.key,
            payload: record.value,
            headers: record.headers,
            timestamp_ms: record.timestamp_millis,
            partition: record.partition,
        }
    }
}

/// Committer settings.
struct CommitterSettings {
    /// Written into every checkpoint.
    identity: SourceIdentity,
    /// When to store: by time and by transaction count.
    policy: CommitPolicy,
    /// The checkpoint the relay resumed from, so it is not stored again.
    resumed_from: Option<CheckpointPosition>,
    /// Ordinals of ended transactions that carried records; tells record progress from
    /// idle progress.
    record_transactions: RecordTransactions,
    /// `[ha]`: the term's epoch, stamped into every checkpoint ([`RelayHandles`]).
    leader_epoch: Option<u64>,
    /// How far the router handed records to the sink: stored with each checkpoint
    /// (crate::replay).
    sent_through: SentThrough,
    /// The resumed checkpoint's sent-through position, kept until passed.
    resumed_sent_through: Option<BinlogPosition>,
}

/// Limits commits that cover only transactions without outbox records (other tables'
/// transactions, DDL, and above all the MySQL checkpoint store's own writes when it lives on
/// the source server: there every commit would otherwise cause the next, forever).
///
/// Rule: a position that adds no records is offered at once unless the previous offer was
/// such an idle one too, within `interval`; then it is held (newest wins) and offered when
/// `interval` has passed, or at shutdown. Holding a position only delays the checkpoint,
/// which is always safe.
#[derive(Debug)]
struct IdleCommitLimiter {
    /// Least time between two idle-only offers.
    interval: Duration,
    /// When the last offer happened and whether it was idle-only.
    last_offer: Option<(tokio::time::Instant, bool)>,
    /// A held idle-only position and the transactions it covers.
    held: Option<(CheckpointPosition, u64)>,
}

impl IdleCommitLimiter {
    fn new(commit_interval: Duration) -> Self {
        Self {
            interval: commit_interval
                .saturating_mul(10)
                .max(Duration::from_secs(5)),
            last_offer: None,
            held: None,
        }
    }

    /// The position to offer now, or `None` when it is held.
    fn on_moved(
        &mut self,
        position: CheckpointPosition,
        transactions: u64,
        covers_records: bool,
        now: tokio::time::Instant,
    ) -> Option<(CheckpointPosition, u64)> {
        let idle = !covers_records;
        let transactions = transactions + self.held.take().map_or(0, |(_, count)| count);
        let recent_idle_offer = matches!(
            self.last_offer,
            Some((at, true)) if now.saturating_duration_since(at) < self.interval
        );
        if idle && recent_idle_offer {
            self.held = Some((position, transactions));
            return None;
        }
        self.last_offer = Some((now, idle));
        Some((position, transactions))
    }

    /// The held position, once `interval` has passed since the last offer (or `force`).
    fn take_due(
        &mut self,
        now: tokio::time::Instant,
        force: bool,
    ) -> Option<(CheckpointPosition, u64)> {
        let due = force
            || self
                .last_offer
                .is_none_or(|(at, _)| now.saturating_duration_since(at) >= self.interval);
        if !due {
            return None;
        }
        let held = self.held.take()?;
        self.last_offer = Some((now, true));
        Some(held)
    }
}

/// Feeds the tracker's acked positions to a [`CheckpointCommitter`] (which batches them by
/// `pipeline.commit_interval_ms` / `commit_max_transactions`); on `stop`, flushes the newest
/// one and returns the last stored checkpoint.
///
/// A failing store is retried at the next due time (the relay keeps running: the replay
/// after a crash grows, nothing is lost); a regression (another relay writing the same
/// checkpoint) or a failing final flush stops the relay.
async fn run_committer(
    settings: CommitterSettings,
    store: SharedCheckpointStore,
    tracker: SharedTracker,
    progress: Arc<Notify>,
    metrics: Arc<Metrics>,
    mut stop: Shutdown,
) -> Result<Option<Checkpoint>, RelayError> {
    let mut identity = settings.identity.clone();
    let leader_epoch = settings.leader_epoch;
    let mut committer = CheckpointCommitter::new(
        store,
        settings.identity,
        settings.policy,
        settings.resumed_from,
    )
    .with_leader_epoch(leader_epoch);
    committer.resume_sent_through(settings.resumed_sent_through.clone());
    let mut seen_transactions = lock_tracker(&tracker).completed_transactions();
    let mut limiter = IdleCommitLimiter::new(settings.policy.max_interval);
    let record_transactions = settings.record_transactions.clone();
    let mut lag_ticker = tokio::time::interval(Duration::from_secs(1));
    lag_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let due = committer.next_due();
        let due_sleep = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let stopping = tokio::select! {
            _ = stop.recv() => true,
            _ = progress.notified() => false,
            _ = due_sleep => false,
            _ = lag_ticker.tick() => false,
        };
        // The position and the server it belongs to are read under one lock: a position of
        // the new server is never stored under the old one's name (tracker module docs).
        let (moved, completed, caught_up, position_source) = {
            let mut tracker = lock_tracker(&tracker);
            (
                tracker.acked_position(),
                tracker.completed_transactions(),
                tracker.tracked_transactions() == 0,
                tracker.checkpoint_source().cloned(),
            )
        };
        if let Some(new_source) = position_source.filter(|source| *source != identity) {
            tracing::warn!(server = %describe_identity(&new_source), "the source moved to another server: checkpoints now name it and resume by GTID set");
            committer.move_to_source(new_source.clone(), gtid_only_binlog_position());
            identity = new_source;
        }
        if let Some(sent) = settings.sent_through.get() {
            committer.note_sent_through(sent);
        }
        let before = committer.last_committed().cloned();
        let now = tokio::time::Instant::now();
        let offer = match moved {
            Some(position) => {
                let transactions = completed.saturating_sub(seen_transactions);
                seen_transactions = completed;
                let covers_records = {
                    let mut ordinals = lock_records(&record_transactions);
                    let mut covered = false;
                    while ordinals
                        .front()
                        .is_some_and(|&ordinal| ordinal <= completed)
                    {
                        ordinals.pop_front();
                        covered = true;
                    }
                    covered
                };
                if covers_records {
                    crate::crash_points::crash_if_armed(
                        crate::crash_points::CrashPoint::BeforeCheckpointCommit,
                    );
                }
                limiter.on_moved(position, transactions, covers_records, now)
            }
            None => None,
        };
        let offer = offer.or_else(|| limiter.take_due(now, stopping));
        let outcome = match offer {
            Some((position, transactions)) => {
                committer.offer_transactions(position, transactions).await
            }
            None => committer.commit_if_due().await,
        };
        let outcome = match (outcome, stopping) {
            (Ok(_), true) => committer.flush().await,
            (other, _) => other,
        };
        match outcome {
            Ok(_) => {}
            // Definite: a regression, another process fenced this one's Kafka store, or a
            // newer leader's epoch under [ha].
            Err(
                error @ (CheckpointStoreError::Regression { .. }
                | CheckpointStoreError::ProducerFenced { .. }
                | CheckpointStoreError::StaleLeader { .. }),
            ) => return Err(RelayError::Checkpoint(error)),
            Err(error) if stopping => return Err(RelayError::Checkpoint(error)),
            Err(error) => CheckpointCommitFailed { error: &error }.emit(&metrics),
        }
        let after = committer.last_committed().cloned();
        if after != before {
            if let Some(position) = &after {
                CheckpointCommitted {
                    position: &position.binlog,
                    gtid_set: Some(position.gtid_set.to_string()),
                    transaction_timestamp: position.timestamp,
                    caught_up: caught_up && committer.pending().is_none(),
                }
                .emit(&metrics);
            }
        } else {
            let timestamp = after.as_ref().map_or(0, |p| p.timestamp);
            metrics
                .checkpoint_lag_seconds
                .set(crate::internal_events::lag_seconds(
                    timestamp,
                    caught_up && committer.pending().is_none(),
                ));
        }
        if stopping {
            if let Some(position) = &after {
                tracing::info!(position = %position.binlog, gtid_set = %position.gtid_set, "final checkpoint stored");
            }
            return Ok(after.map(|position| {
                Checkpoint::new(identity.clone(), position).with_leader_epoch(leader_epoch)
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The failover identity race: once the checkpoint reaches a position read from the new
    /// server, it is stored naming that server and GTID-only, whatever the committer saw
    /// before; positions of the old server before it keep the old server's name.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_position_read_from_the_new_server_is_never_stored_under_the_old_name() {
        let dir = tempfile::tempdir().unwrap();
        let store: SharedCheckpointStore = Arc::new(outbox_checkpoint::FileCheckpointStore::new(
            dir.path().join("checkpoint.json"),
        ));
        let old_server = SourceIdentity {
            flavor: outbox_binlog::Flavor::Mariadb,
            server_id: 1,
            server_uuid: None,
        };
        let new_server = SourceIdentity {
            server_id: 2,
            ..old_server.clone()
        };
        let tracker: SharedTracker = Arc::new(Mutex::new(AckTracker::new(position(4))));
        let progress = Arc::new(Notify::new());
        let stop = ShutdownController::new();
        let committer = tokio::spawn(run_committer(
            CommitterSettings {
                identity: old_server.clone(),
                policy: CommitPolicy {
                    max_interval: Duration::from_millis(1),
                    max_transactions: 1,
                },
                resumed_from: None,
                record_transactions: Arc::new(Mutex::new(VecDeque::from([1, 2]))),
                leader_epoch: None,
                sent_through: SentThrough::default(),
                resumed_sent_through: None,
            },
            store.clone(),
            tracker.clone(),
            progress.clone(),
            Metrics::new(),
            stop.subscribe(),
        ));
        let gtid = |server_id, sequence| outbox_binlog::Gtid::Mariadb {
            domain_id: 0,
            server_id,
            sequence,
        };
        async fn wait_for(
            store: &SharedCheckpointStore,
            predicate: impl Fn(&Checkpoint) -> bool,
        ) -> Checkpoint {
            let started = std::time::Instant::now();
            loop {
                if let Some(stored) = store.load().await.unwrap() {
                    if predicate(&stored) {
                        return stored;
                    }
                }
                assert!(started.elapsed() < Duration::from_secs(10), "not stored");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // A transaction of the old server.
        lock_tracker(&tracker).end_transaction(CheckpointPosition {
            gtid: Some(gtid(1, 5)),
            ..position(500)
        });
        progress.notify_one();
        let stored = wait_for(&store, |c| c.position.binlog.position == 500).await;
        assert_eq!(stored.source, old_server);
        // The source moved (in stream order) and a transaction of the new server ended; the
        // committer learns of the move from the position itself.
        {
            let mut tracker = lock_tracker(&tracker);
            tracker.switch_source(new_server.clone());
            tracker.end_transaction(CheckpointPosition {
                gtid: Some(gtid(2, 6)),
                ..position(900)
            });
        }
        progress.notify_one();
        let stored = wait_for(&store, |c| c.position.gtid_set.to_string() == "0-2-6").await;
        assert_eq!(
            (stored.source, stored.position.binlog),
            (new_server, gtid_only_binlog_position()),
            "the new server's position is stored under its own name, GTID-only"
        );
        stop.trigger();
        committer.await.unwrap().unwrap();
    }

    fn position(offset: u64) -> CheckpointPosition {
        CheckpointPosition::at(BinlogPosition::new("binlog.000001", offset))
    }

    #[test]
    fn idle_only_progress_is_committed_at_most_once_per_interval() {
        let start = tokio::time::Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut limiter = IdleCommitLimiter::new(Duration::from_millis(100));
        assert_eq!(limiter.interval, Duration::from_secs(5));
        // First progress (idle, nothing routed yet) goes out at once.
        assert!(limiter.on_moved(position(100), 1, false, at(0)).is_some());
        // A second idle-only move right after is held...
        assert!(limiter.on_moved(position(200), 1, false, at(10)).is_none());
        // ...newest wins, counts add up...
        assert!(limiter.on_moved(position(300), 2, false, at(20)).is_none());
        assert!(limiter.take_due(at(1000), false).is_none());
        // ...and it is offered once the interval passed.
        let (held, transactions) = limiter.take_due(at(5000), false).unwrap();
        assert_eq!((held.binlog.position, transactions), (300, 3));
        assert!(limiter.take_due(at(6000), false).is_none());
        // Progress with records always goes out at once, and resets the rule.
        assert!(limiter.on_moved(position(400), 1, true, at(5010)).is_some());
        assert!(limiter
            .on_moved(position(500), 1, false, at(5020))
            .is_some());
        assert!(limiter
            .on_moved(position(600), 1, false, at(5030))
            .is_none());
        // Shutdown forces the held position out.
        let (forced, _) = limiter.take_due(at(5040), true).unwrap();
        assert_eq!(forced.binlog.position, 600);
    }
}
