//! One attempt of the pipeline: loads the stored checkpoint, connects the source, and wires
//! the tasks (source -> router -> sink, the committer) with their bounded channels, then
//! waits for them and reports the first error.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_binlog::StartPosition;
use outbox_checkpoint::{AckTracker, CheckpointStoreError, CommitPolicy, SharedCheckpointStore};
use outbox_router::Router;
use tokio::sync::{mpsc, Notify};

use super::committer::{run_committer, CommitterSettings};
use super::error::RelayError;
use super::identity::{initial_position, source_identity};
use super::router_task::{run_router, RouterTaskContext, SinkBatch};
use super::source::{run_source, SourceItem, SourceSettings};
use super::startup::{checkpoint_store_at_startup, connect_source, ConnectedSource};
use super::tracking::{delivery_acker, exactly_once_boundary, RecordTransactions, SharedTracker};
use super::RelaySummary;
use crate::budget::InFlightBudget;
use crate::config::{DeliveryMode, RelayConfig};
use crate::internal_events::{CheckpointLoaded, InternalEvent};
use crate::metrics::Metrics;
use crate::replay::{AttemptSinkObserver, ReplayCounter, SentThrough};
use crate::shutdown::ShutdownController;
use crate::sink::{
    run_kafka_sink, run_transactional_sink, KafkaSinkSettings, RejectedRecords, SinkError,
    TransactionalSinkSettings,
};
use crate::tasks::spawn_named;

/// What every attempt of one [`super::run_relay`] call shares: built once per call, so a
/// restart after an aborted Kafka transaction (exactly-once) neither rebuilds the router nor
/// reopens the checkpoint store (a Kafka store's `claim_writer` costs a second or more).
/// Under `[ha]` each leadership term is its own `run_relay` call, so each term still opens
/// the store anew and claims the writer, fencing the previous leader's store producer.
pub(super) struct RunShared {
    /// Turns rows into records; shared with each attempt's router task.
    pub(super) router: Arc<Router>,
    /// The checkpoint store, opened for writing (a Kafka store has claimed its writer).
    pub(super) store: SharedCheckpointStore,
    /// Records Kafka rejected permanently, remembered across attempts for their dead
    /// letters (exactly-once: an aborted transaction re-reads them).
    pub(super) rejected: RejectedRecords,
    /// `[ha]`: the term's epoch ([`super::RelayHandles::leader_epoch`]).
    pub(super) leader_epoch: Option<u64>,
}

/// One run of the pipeline (source, router, sink, committer) from the stored checkpoint,
/// until shutdown or the first error; `controller` stops this run only.
pub(super) async fn run_pipeline(
    config: &RelayConfig,
    metrics: &Arc<Metrics>,
    controller: &ShutdownController,
    shared: &RunShared,
) -> Result<RelaySummary, RelayError> {
    let metrics = metrics.clone();
    let controller = controller.clone();
    let RunShared {
        router,
        store,
        rejected,
        leader_epoch,
    } = shared;
    let leader_epoch = *leader_epoch;
    let warn_on_skip =
        config.route.invalid_operation == outbox_router::InvalidOperationBehavior::Warn;
    // A new leader stamps the stored checkpoint with its epoch before anything else: from
    // here on an older leader's commits are refused. Every attempt reads it again: an
    // aborted Kafka transaction restarts from what is stored.
    let Some(stored) = checkpoint_store_at_startup(
        config,
        &store.describe(),
        "loading the checkpoint",
        &metrics,
        &controller,
        || async {
            match leader_epoch {
                Some(epoch) => store.take_over(epoch).await,
                None => store.load().await,
            }
        },
    )
    .await?
    else {
        return Ok(RelaySummary::default());
    };
    if let Some(checkpoint) = &stored {
        CheckpointLoaded {
            position: &checkpoint.position.binlog,
        }
        .emit(&metrics);
    }

    let Some(ConnectedSource {
        reader,
        first_start,
        reader_config,
    }) = connect_source(
        config,
        router,
        stored.as_ref(),
        &store.describe(),
        &metrics,
        &controller,
    )
    .await?
    else {
        return Ok(RelaySummary::default());
    };
    let identity = source_identity(&reader);

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
    // The source sends batches of up to MAX_BATCH_ITEMS items: `channel_capacity` counts
    // items, so the source -> router channel holds that many batches' worth (a channel of
    // 1 024 batches let a million-row transaction's rows pile up before the router, up to
    // the byte budget: 102 MiB resident instead of ~30).
    let batch_capacity = capacity.div_ceil(super::source::MAX_BATCH_ITEMS).max(1);
    let (items_tx, items_rx) = mpsc::channel::<SourceItem>(batch_capacity);
    // The router hands the sink batches of up to SINK_BATCH_ITEMS records likewise.
    let sink_batch_capacity = capacity
        .div_ceil(super::router_task::SINK_BATCH_ITEMS)
        .max(1);
    let (records_tx, records_rx) = mpsc::channel::<SinkBatch>(sink_batch_capacity);
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
                redacted_url: config.source.redacted_url(),
                budget: budget.clone(),
                identity: identity.clone(),
                start_gtids,
            },
            reader_config,
            items_tx,
            metrics.clone(),
            source_stop.subscribe(),
        ),
    );
    let router_task = spawn_named(
        "router",
        run_router(
            RouterTaskContext {
                router: router.clone(),
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
    let sink_observer = Arc::new(AttemptSinkObserver {
        metrics: metrics.clone(),
        sent_through: sent_through.clone(),
    });
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
            sink_observer,
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
            sink_observer,
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
    // A fencing explains the errors beside it (a zombie leader's source is kicked off by
    // the new leader's replica connection with the same server_id): it is the one
    // reported, so under [ha] the relay goes back to standby (invariant 18).
    let reported = errors.iter().position(is_fencing).unwrap_or(0);
    if errors.is_empty() {
        Ok(summary)
    } else {
        Err(errors.swap_remove(reported))
    }
}

/// Whether `error` means another relay leads now: the store refused this run's leader
/// epoch, or Kafka fenced one of its transactional producers (the Kafka store's or the
/// exactly-once sink's).
fn is_fencing(error: &RelayError) -> bool {
    matches!(
        error,
        RelayError::Checkpoint(
            CheckpointStoreError::StaleLeader { .. } | CheckpointStoreError::ProducerFenced { .. }
        ) | RelayError::Sink(SinkError::Fenced { .. })
    )
}

/// The exactly-once sink's settings from the config.
fn transactional_sink_settings(config: &RelayConfig) -> TransactionalSinkSettings {
    let commit_interval = config.pipeline.commit_interval();
    TransactionalSinkSettings {
        sink: KafkaSinkSettings::from_relay_config(config),
        transactional_id: outbox_kafka::exactly_once_transactional_id(&config.checkpoint.connector),
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

/// Awaits a task; if it failed (error or panic) triggers `controller`.
pub(super) async fn stop_on_failure<T, E>(
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
pub(super) fn flatten_task<T>(
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
