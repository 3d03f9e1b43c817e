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
//!
//! # Layout
//! [`run_relay`] (here) is the restart loop; `attempt.rs` is one run of the pipeline (load
//! the checkpoint, connect, wire the tasks); `startup.rs` where it starts and the startup
//! retries; `source.rs`, `router_task.rs` and `committer.rs` the tasks; `tracking.rs` the
//! ack tracker they share and what the sinks call on it; `identity.rs` server identities
//! and position texts; `error.rs` [`RelayError`].

use std::sync::Arc;
use std::time::Duration;

use outbox_checkpoint::Checkpoint;
use outbox_router::Router;

use crate::backoff::Backoff;
use crate::config::RelayConfig;
use crate::metrics::Metrics;
use crate::shutdown::ShutdownController;
use crate::sink::{KafkaSinkSettings, RejectedRecords};
use crate::stores::open_checkpoint_store_for_writing;
use crate::tasks::spawn_named;

mod attempt;
mod committer;
mod error;
mod gap_fill;
pub(crate) use gap_fill::check_fill_ready;
mod identity;
mod poll;
mod router_task;
mod source;
mod startup;
#[cfg(test)]
mod tests;
mod tracking;

pub use error::RelayError;
pub use identity::gtid_only_binlog_position;
pub(crate) use identity::{describe_identity, identity_of};
pub(crate) use poll::{
    connection_settings as poll_connection_settings, poll_startup_checks, polled_tables,
};
pub(crate) use startup::describe_missing_columns;

use attempt::{run_pipeline, RunShared};

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

/// Runs the relay until shutdown or a definite error. Commits the acked prefix in both cases.
pub async fn run_relay(
    config: RelayConfig,
    handles: RelayHandles,
) -> Result<RelaySummary, RelayError> {
    let metrics = handles.metrics.clone();
    let controller = handles.shutdown.clone();
    // Built before anything is served (a bad route is a config error), and once: every
    // pipeline attempt shares it.
    let router = Arc::new(
        Router::new(&config.outbox, &config.route)
            .map_err(|e| RelayError::RouterConfig(e.to_string()))?,
    );
    // Under [ha] the standby loop serves them once for all terms.
    if handles.leader_epoch.is_none() {
        start_observability(&config, &metrics, &controller).await?;
    }
    let _heartbeats = crate::heartbeat::spawn_heartbeats(&config, &controller, &metrics);
    if config.source.mode == crate::poll_config::SourceMode::Poll {
        let outcome = poll::run_poll_relay(&config, router, &metrics, &controller).await;
        controller.trigger();
        if let Ok(summary) = &outcome {
            tracing::info!(
                delivered = summary.delivered,
                abandoned = summary.abandoned,
                "relay stopped"
            );
        }
        return outcome;
    }
    // Opened once per call, not per attempt: a Kafka store claims its writer here (fencing
    // an older relay, or under [ha] the previous term's leader: each term is a call).
    let Some(store) = startup::checkpoint_store_at_startup(
        &config,
        &format!("store = \"{}\"", config.checkpoint.store),
        "opening",
        &metrics,
        &controller,
        || open_checkpoint_store_for_writing(&config.checkpoint, &config.kafka),
    )
    .await?
    else {
        return Ok(RelaySummary::default());
    };
    // An aborted Kafka transaction (exactly-once) restarts the pipeline from the stored
    // checkpoint: nothing of it became visible, so nothing is lost or seen twice. Records
    // Kafka rejected are remembered across those restarts, for their dead letters.
    let shared = RunShared {
        router,
        store,
        rejected: RejectedRecords::default(),
        leader_epoch: handles.leader_epoch,
    };
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
        let outcome = run_pipeline(&config, &metrics, &attempt, &shared).await;
        attempt.trigger();
        match outcome {
            Err(RelayError::Sink(error))
                if error.restarts_from_checkpoint() && !controller.is_triggered() =>
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
        // Poll mode reads no binlog (and its user may not list the binlog files).
        if config.source.mode == crate::poll_config::SourceMode::Binlog {
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
    }
    Ok(())
}
