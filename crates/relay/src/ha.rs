//! Standby failover (`[ha] enabled = true`): the `run` command as a standby loop.
//!
//! # Contract
//! * Several relays with the same connector name (`checkpoint.connector`) and the same
//!   `[ha]` lease topic run; the one that owns the lease (`outbox_kafka::lease`: partition 0
//!   of the lease topic in the group `outbox-relay-lease-<connector>`) publishes, the others
//!   wait with their HTTP endpoint up (`outbox_relay_leader` 0).
//! * A term: wait for leadership (its epoch) -> [`run_relay`] with the epoch: it opens the
//!   checkpoint store for writing (a Kafka store claims its writer, fencing the previous
//!   leader's store producer; once per term, since each term is one `run_relay` call), takes
//!   the stored checkpoint over (stamped with the epoch, so an older leader's commits are
//!   refused from then on), resumes from it and stamps the epoch into every checkpoint ->
//!   the term ends when the lease says leadership is lost (the run stops publishing: the
//!   source stops, in-flight records get `pipeline.shutdown_timeout_ms`, the final commit
//!   is refused if a newer leader already wrote) or when the store refuses the epoch
//!   (`StaleLeader`). Either way the relay logs, counts
//!   (`outbox_relay_leadership_changes_total`, `outbox_relay_fencing_events_total`) and goes
//!   back to standby. It never exits because of it.
//! * Other definite errors stop the process as without `[ha]` (a standby takes over).
//! * SIGTERM stops the current term gracefully, then leaves the lease group, so a standby
//!   takes over at once instead of after the session timeout.

use std::sync::Arc;
use std::time::Duration;

use outbox_checkpoint::CheckpointStoreError;
use outbox_kafka::{lease_group_id, LeaderLease, LeaseSettings};
use rdkafka::ClientConfig;

use crate::backoff::Backoff;
use crate::config::RelayConfig;
use crate::internal_events::{InternalEvent, LeadershipEnded, LeadershipGained, StaleLeaderFenced};
use crate::metrics::Metrics;
use crate::pipeline::{run_relay, start_observability, RelayError, RelayHandles, RelaySummary};
use crate::shutdown::ShutdownController;
use crate::startup_retry::{retry_at_startup, StartupDependency, StartupFailure};
use crate::tasks::spawn_named;

/// Why the standby loop stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StandbyError {
    /// The lease could not be set up (a definite error: missing topic, authorization).
    #[error("[ha] lease: {0}")]
    Lease(#[source] outbox_kafka::LeaseError),
    /// The lease group could not be joined at startup within `kafka.startup_attempts`.
    #[error("[ha] lease: cannot join the lease group at startup: {attempts} attempts over {waited:?} failed, the last with: {source}; check kafka.brokers and that the brokers are up (or set kafka.startup_attempts = 0 to wait forever)")]
    LeaseUnreachable {
        /// Failed attempts.
        attempts: u32,
        /// From the first attempt to giving up.
        waited: Duration,
        /// The last error (boxed: large, and this path is cold).
        source: Box<outbox_kafka::LeaseError>,
    },
    /// A term's relay run failed with a definite error other than losing leadership.
    #[error(transparent)]
    Relay(#[from] RelayError),
}

/// The lease's Kafka client settings: `[kafka]`'s brokers, properties and security.
fn lease_client_config(config: &RelayConfig) -> Result<ClientConfig, StandbyError> {
    let kafka = &config.kafka;
    let mut client = ClientConfig::new();
    for (key, value) in &kafka.properties {
        client.set(key, value);
    }
    let security = kafka.security.properties().map_err(|message| {
        StandbyError::Relay(RelayError::RouterConfig(format!(
            "[kafka.security] for the [ha] lease: {message}"
        )))
    })?;
    for (key, value) in security {
        client.set(key, value);
    }
    client.set("bootstrap.servers", &kafka.brokers);
    Ok(client)
}

/// Failure tests only: `OUTBOX_RELAY_TEST_LEASE_DEAF=1` makes the lease end a term only when
/// the checkpoint store refuses its epoch (see `LeaseSettings::deaf_to_loss`), so a test can
/// show that the store alone fences a zombie. Never set in production.
pub const LEASE_DEAF_VARIABLE: &str = "OUTBOX_RELAY_TEST_LEASE_DEAF";

fn lease_deaf_for_tests() -> bool {
    let deaf = std::env::var(LEASE_DEAF_VARIABLE).is_ok_and(|value| value == "1");
    if deaf {
        tracing::warn!(
            variable = LEASE_DEAF_VARIABLE,
            "TEST MODE: the lease ignores leadership loss; only the checkpoint store fences this relay"
        );
    }
    deaf
}

/// Starts the lease under the startup rule ([`crate::startup_retry`]): transient failures
/// (broker not up yet) are retried with `[kafka]`'s backoff under `kafka.startup_attempts`,
/// logged, and shown in `/readyz` (the broker check) meanwhile. `Ok(None)`: shutdown.
async fn start_lease(
    config: &RelayConfig,
    metrics: &Metrics,
    shutdown: &ShutdownController,
) -> Result<Option<LeaderLease>, StandbyError> {
    let settings = LeaseSettings {
        client: lease_client_config(config)?,
        topic: config.ha.lease_topic.clone(),
        group_id: lease_group_id(&config.checkpoint.connector),
        session_timeout: Duration::from_millis(config.ha.session_timeout_ms),
        create_topic: config.kafka.create_topics,
        replication_factor: config.kafka.topic_replication_factor,
        request_timeout: Duration::from_millis(config.kafka.admin_timeout_ms),
        deaf_to_loss: lease_deaf_for_tests(),
    };
    let max_attempts = config.kafka.startup_attempts;
    let started = retry_at_startup(
        StartupDependency {
            max_attempts,
            backoff: Backoff::new(
                Duration::from_millis(config.kafka.retry_initial_backoff_ms),
                Duration::from_millis(config.kafka.retry_max_backoff_ms),
            ),
        },
        &mut shutdown.subscribe(),
        outbox_kafka::LeaseError::is_transient,
        |error, attempt, delay| {
            metrics.health.broker_probed(Some(&error.to_string()));
            tracing::warn!(%error, attempt, max_attempts, delay_ms = delay.as_millis() as u64, "cannot join the [ha] lease group at startup; retrying after delay_ms");
        },
        || LeaderLease::start(settings.clone()),
    )
    .await;
    match started {
        Ok(Some(lease)) => {
            tracing::info!(topic = %settings.topic, group = %settings.group_id, session_timeout_ms = config.ha.session_timeout_ms, "joined the lease group as a standby");
            Ok(Some(lease))
        }
        Ok(None) => Ok(None),
        Err(StartupFailure::Definite(error)) => Err(StandbyError::Lease(error)),
        Err(StartupFailure::GaveUp {
            attempts,
            waited,
            last,
        }) => Err(StandbyError::LeaseUnreachable {
            attempts,
            waited,
            source: Box::new(last),
        }),
    }
}

/// The `run` command under `[ha]`: standby, lead, standby again, until `handles.shutdown`.
pub async fn run_standby(
    config: RelayConfig,
    handles: RelayHandles,
) -> Result<RelaySummary, StandbyError> {
    let metrics = handles.metrics.clone();
    let shutdown = handles.shutdown.clone();
    start_observability(&config, &metrics, &shutdown).await?;
    if config.checkpoint.store == "file" {
        tracing::warn!("[ha] with the file checkpoint store fences stale leaders only between relays on one host sharing the file; use store = \"mysql\" (or \"kafka\") across hosts");
    }
    let Some(lease) = start_lease(&config, &metrics, &shutdown).await? else {
        return Ok(RelaySummary::default());
    };
    let lease = Arc::new(lease);
    let mut stop = shutdown.subscribe();
    let mut last_summary = RelaySummary::default();
    loop {
        let epoch = tokio::select! {
            _ = stop.recv() => break,
            epoch = lease.wait_until_leader() => epoch,
        };
        LeadershipGained { epoch }.emit(&metrics);
        let term = ShutdownController::new();
        let watcher = {
            let lease = lease.clone();
            let term = term.clone();
            let mut global = shutdown.subscribe();
            let mut run_over = term.subscribe();
            spawn_named("leadership-watch", async move {
                let reason = tokio::select! {
                    biased;
                    reason = lease.lost(epoch) => Some(reason),
                    _ = global.recv() => None,
                    _ = run_over.recv() => None,
                };
                term.trigger();
                reason
            })
        };
        let run = run_relay(
            config.clone(),
            RelayHandles {
                shutdown: term.clone(),
                metrics: metrics.clone(),
                leader_epoch: Some(epoch),
            },
        )
        .await;
        // The run is over: stop the watcher if the run ended on its own.
        term.trigger();
        let lost_reason = watcher.await.ok().flatten();
        if shutdown.is_triggered() {
            LeadershipEnded {
                epoch,
                reason: "shutting down",
            }
            .emit(&metrics);
            match run {
                Ok(summary) => last_summary = summary,
                Err(error) if is_stale_leader(&error).is_some() || is_fenced_by_kafka(&error) => {}
                Err(error) => {
                    close_lease(lease).await;
                    return Err(error.into());
                }
            }
            break;
        }
        match run {
            Err(error) => match is_stale_leader(&error) {
                Some(stored_epoch) => {
                    let detail = error.to_string();
                    StaleLeaderFenced {
                        epoch,
                        kind: "checkpoint_store",
                        detail: &detail,
                    }
                    .emit(&metrics);
                    LeadershipEnded {
                        epoch,
                        reason: "the checkpoint store refused this leader epoch",
                    }
                    .emit(&metrics);
                    // Another relay led since; if the lease still thinks this one leads,
                    // it takes a new epoch above the stored one (or finds it lost).
                    lease.relinquish_above(stored_epoch);
                    wait_until_term_over(&lease, epoch).await;
                }
                None if is_fenced_by_kafka(&error) => {
                    // Exactly-once (or the Kafka store): a newer producer with this
                    // connector's transactional id fenced this one, so another relay leads.
                    let detail = error.to_string();
                    StaleLeaderFenced {
                        epoch,
                        kind: "kafka_producer",
                        detail: &detail,
                    }
                    .emit(&metrics);
                    LeadershipEnded {
                        epoch,
                        reason: "a newer producer with this connector's transactional id fenced this one",
                    }
                    .emit(&metrics);
                    lease.relinquish_above(epoch);
                    wait_until_term_over(&lease, epoch).await;
                }
                None if lost_reason.is_some() => {
                    let reason = lost_reason.unwrap_or_default();
                    tracing::warn!(%error, "the run failed while leadership was being lost; treating it as the loss");
                    StaleLeaderFenced {
                        epoch,
                        kind: "lease",
                        detail: &reason,
                    }
                    .emit(&metrics);
                    LeadershipEnded {
                        epoch,
                        reason: &reason,
                    }
                    .emit(&metrics);
                }
                None => {
                    LeadershipEnded {
                        epoch,
                        reason: "the relay stopped on an error",
                    }
                    .emit(&metrics);
                    close_lease(lease).await;
                    return Err(error.into());
                }
            },
            Ok(summary) => {
                let reason = match lost_reason {
                    Some(reason) => {
                        StaleLeaderFenced {
                            epoch,
                            kind: "lease",
                            detail: &reason,
                        }
                        .emit(&metrics);
                        reason
                    }
                    None => "the relay run ended without a shutdown".to_owned(),
                };
                LeadershipEnded {
                    epoch,
                    reason: &reason,
                }
                .emit(&metrics);
                last_summary = summary;
            }
        }
    }
    close_lease(lease).await;
    Ok(last_summary)
}

/// The stored epoch when `error` is the store refusing this term's epoch.
fn is_stale_leader(error: &RelayError) -> Option<u64> {
    match error {
        RelayError::Checkpoint(CheckpointStoreError::StaleLeader { stored_epoch, .. }) => {
            Some(*stored_epoch)
        }
        _ => None,
    }
}

/// Whether `error` is Kafka fencing this relay's transactional producer (the exactly-once
/// sink's, or the Kafka checkpoint store's): a newer relay with the same connector name runs.
fn is_fenced_by_kafka(error: &RelayError) -> bool {
    matches!(
        error,
        RelayError::Sink(crate::sink::SinkError::Fenced { .. })
            | RelayError::Checkpoint(CheckpointStoreError::ProducerFenced { .. })
    )
}

/// Waits (bounded) until the lease left term `epoch`, so the next wait for leadership does
/// not return the refused epoch again.
async fn wait_until_term_over(lease: &LeaderLease, epoch: u64) {
    if tokio::time::timeout(Duration::from_secs(10), lease.lost(epoch))
        .await
        .is_err()
    {
        tracing::warn!(epoch, "the lease did not end the refused term within 10 s");
    }
}

/// Leaves the lease group (when no task holds the lease any more).
async fn close_lease(lease: Arc<LeaderLease>) {
    match Arc::try_unwrap(lease) {
        Ok(lease) => lease.close().await,
        // A watcher still holds it: dropping ours stops the lease thread when it drops its.
        Err(shared) => drop(shared),
    }
}
