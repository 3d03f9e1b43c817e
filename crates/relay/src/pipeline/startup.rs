//! Where a pipeline attempt starts and how it reaches the source: the start position from
//! the stored checkpoint (or `source.start`), and the startup retries (a source that never
//! answers is given up after `source.startup_attempts`; ARCHITECTURE.md, invariant 7).

use std::time::Duration;

use outbox_binlog::{BinlogError, BinlogReader, ReaderConfig, StartPosition, WatchedTableColumns};
use outbox_checkpoint::{Checkpoint, CheckpointStoreError, SourceIdentity};
use outbox_router::Router;

use super::error::RelayError;
use super::identity::{describe_identity, describe_start, gtid_only_binlog_position, identity_of};
use crate::backoff::Backoff;
use crate::config::{OnPurged, RelayConfig, StartSetting};
use crate::internal_events::{
    CheckpointStoreWaiting, ColumnTypeClashFound, InternalEvent, SourceConnected,
    SourceReconnecting,
};
use crate::metrics::Metrics;
use crate::shutdown::{Shutdown, ShutdownController};
use crate::startup_retry::{retry_at_startup, StartupDependency, StartupFailure};

/// The source of one pipeline attempt, connected and checked.
pub(super) struct ConnectedSource {
    /// Streams from `first_start`; handed to the source task.
    pub(super) reader: BinlogReader,
    /// Where the stream started: a resume at the stored file+position (not by GTID set)
    /// is what lets the replay count trust the stored `sent_through` (crate::replay).
    pub(super) first_start: StartPosition,
    /// The reader's settings, for the source task's reconnects (it moves `start` along).
    pub(super) reader_config: ReaderConfig,
}

/// Connects the source where this attempt starts: at the stored checkpoint's binlog
/// position on the server that wrote it, by its GTID set on another server (or when it is
/// GTID-only), else at `source.start`; transient failures are retried
/// ([`retry_source_at_startup`]). Then checks that every watched table exists as the binlog
/// names it (ARCHITECTURE.md, invariant 4c). `None`: shutdown was requested meanwhile.
pub(super) async fn connect_source(
    config: &RelayConfig,
    router: &Router,
    stored: Option<&Checkpoint>,
    store_description: &str,
    metrics: &Metrics,
    shutdown: &ShutdownController,
) -> Result<Option<ConnectedSource>, RelayError> {
    // The start position of a first run and the source identity come from the server.
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
    let first_start = match stored {
        Some(checkpoint) => {
            tracing::info!(position = %checkpoint.position.binlog, gtid_set = %checkpoint.position.gtid_set, store = %store_description, "resuming from the stored checkpoint");
            if checkpoint.position.binlog == gtid_only_binlog_position() {
                StartPosition::Gtid(checkpoint.position.gtid_set.clone())
            } else {
                // A file+position only means something on the server that wrote it: check
                // who we are talking to before streaming from it.
                let Some(identity) = server_identity_at_startup(
                    &source_url,
                    &source_tls,
                    startup_retry.clone(),
                    metrics,
                    shutdown.subscribe(),
                )
                .await?
                else {
                    return Ok(None);
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
            tracing::info!(start = %config.source.start, store = %store_description, "no checkpoint stored; first run");
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
        metrics,
        shutdown.subscribe(),
    )
    .await;
    let (connected, first_start) = match (connected, stored) {
        (Err(RelayError::Source(BinlogError::PositionPurged { .. })), Some(checkpoint))
            if config.source.on_purged == OnPurged::FillFromTable =>
        {
            // The reader first, at the server's current end: every transaction is then
            // either in the table read below or in the stream (super::gap_fill).
            tracing::warn!(position = %checkpoint.position.binlog, "the stored checkpoint's position is purged: filling the gap from the outbox table ([source] on_purged = \"fill_from_table\")");
            let latest = StartPosition::Latest;
            let connected = connect_at_startup(
                reader_config(latest.clone()),
                startup_retry.clone(),
                metrics,
                shutdown.subscribe(),
            )
            .await?;
            if connected.is_some() {
                super::gap_fill::fill_gap_from_table(config, router, checkpoint, metrics).await?;
            }
            (connected, latest)
        }
        (Err(RelayError::Source(error @ BinlogError::PositionPurged { .. })), Some(checkpoint)) => {
            return Err(RelayError::ResumePointPurged {
                store: store_description.to_owned(),
                position: checkpoint.position.binlog.to_string(),
                gtid_set: checkpoint.position.gtid_set.to_string(),
                source: Box::new(error),
            })
        }
        (
            Err(RelayError::Source(error @ BinlogError::PositionNotOnServer { .. })),
            Some(checkpoint),
        ) => {
            return Err(RelayError::ResumePointNotOnServer {
                store: store_description.to_owned(),
                position: checkpoint.position.binlog.to_string(),
                gtid_set: checkpoint.position.gtid_set.to_string(),
                written_against: describe_identity(&checkpoint.source),
                source: Box::new(error),
            })
        }
        (connected, _) => {
            let connected = connected?;
            if connected.is_some() && config.source.on_purged == OnPurged::FillFromTable {
                // Found now, not when a purge needs the fill.
                super::gap_fill::check_fill_ready(config)
                    .await
                    .map_err(|problem| {
                        RelayError::GapFill(format!(
                            "[source] on_purged = \"fill_from_table\" could not fill from the outbox tables: {problem}"
                        ))
                    })?;
            }
            (connected, first_start)
        }
    };
    let Some((reader, tables)) = connected else {
        tracing::info!("shutdown requested before the source connected");
        return Ok(None);
    };
    if let Some(message) = describe_missing_columns(router, &tables) {
        return Err(RelayError::OutboxColumnsMissing(message));
    }
    warn_of_column_type_clashes(router, &tables, metrics);
    SourceConnected {
        server: &redacted,
        start: describe_start(&reader.resume_point()),
        reconnect: 0,
    }
    .emit(metrics);
    let reader_config = reader_config(first_start.clone());
    Ok(Some(ConnectedSource {
        reader,
        first_start,
        reader_config,
    }))
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

/// Runs `attempt` under the startup rule ([`crate::startup_retry`]): transient source errors
/// (server not up yet, network) are retried with backoff, each retry logged with its delay;
/// definite errors (wrong settings, purged position, access denied) fail at once, and after
/// `max_attempts` transient failures the relay gives up naming the server and the last
/// error. `None` when shutdown was requested meanwhile.
async fn retry_source_at_startup<T, F, Fut>(
    retry: StartupRetry,
    resume_from: String,
    metrics: &Metrics,
    mut shutdown: Shutdown,
    attempt: F,
) -> Result<Option<T>, RelayError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BinlogError>>,
{
    let StartupRetry {
        backoff,
        max_attempts,
        server,
    } = retry;
    let outcome = retry_at_startup(
        StartupDependency {
            max_attempts,
            backoff,
        },
        &mut shutdown,
        BinlogError::is_transient,
        |error, attempt, delay| {
            SourceReconnecting {
                error,
                delay,
                resume_from: resume_from.clone(),
                attempt,
                max_attempts,
            }
            .emit(metrics)
        },
        attempt,
    )
    .await;
    outcome.map_err(|failure| source_startup_failure(failure, server))
}

/// The relay's error when the source (binlog or poll) could not be reached at startup:
/// definite at once, or unreachable after its attempts (naming `server`, redacted).
pub(super) fn source_startup_failure(
    failure: StartupFailure<BinlogError>,
    server: String,
) -> RelayError {
    match failure {
        StartupFailure::Definite(error) => RelayError::Source(error),
        StartupFailure::GaveUp {
            attempts,
            waited,
            last,
        } => RelayError::SourceUnreachable {
            server,
            attempts,
            waited,
            source: Box::new(last),
        },
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
) -> Result<Option<(BinlogReader, Vec<WatchedTableColumns>)>, RelayError> {
    let resume_from = describe_start(&reader_config.start);
    // Every [[outbox]] table must exist as the binlog names it, or its rows would be
    // skipped silently, and have the columns its route reads, or every row would become a
    // dead letter (ARCHITECTURE.md, invariant 4c): checked in the same attempt as the
    // connect, so a server that goes away between the two is retried like one that never
    // answered (it used to stop the relay as a definite error).
    retry_source_at_startup(retry, resume_from, metrics, shutdown, || async {
        let mut reader = BinlogReader::connect(reader_config.clone()).await?;
        let tables = reader.verify_watched_tables().await?;
        Ok((reader, tables))
    })
    .await
}

/// The outbox tables of `tables` that lack columns their route reads in every row
/// ([`Router::missing_columns`]), one sentence each naming the columns, their config keys and
/// the columns the table has; `None` when every table has them all.
pub(crate) fn describe_missing_columns(
    router: &Router,
    tables: &[WatchedTableColumns],
) -> Option<String> {
    let sentences: Vec<String> = tables
        .iter()
        .filter_map(|table| {
            let missing = router.missing_columns(&table.table, &table.columns)?;
            if missing.is_empty() {
                return None;
            }
            let named = missing
                .iter()
                .map(|(key, column)| format!("`{column}` ({key})"))
                .collect::<Vec<_>>()
                .join(", ");
            Some(format!(
                "outbox table `{}` has no column {named}, so every row of it would become a dead letter; its columns are {}: set [[outbox]] preset or columns.* to them, or add the columns",
                table.table,
                table
                    .columns
                    .iter()
                    .map(|column| format!("`{column}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
        .collect();
    (!sentences.is_empty()).then(|| sentences.join("; "))
}

/// Warns of every configured column type the server's definition of the column contradicts
/// ([`Router::column_type_clashes`]): the relay runs with the setting, as configured, and
/// says at start that its records will differ from Debezium's.
pub(crate) fn warn_of_column_type_clashes(
    router: &Router,
    tables: &[WatchedTableColumns],
    metrics: &Metrics,
) {
    for clash in router.column_type_clashes(tables) {
        ColumnTypeClashFound { clash: &clash }.emit(metrics);
    }
}

/// Runs `operation` on the checkpoint store at startup (`what`: `opening`, `loading the
/// checkpoint`) under the startup rule ([`crate::startup_retry`]): a store that does not
/// answer (a broker restarting, the MySQL server not up yet) is retried with backoff under
/// `kafka.startup_attempts` (Kafka store) or `source.startup_attempts` (MySQL store; a file
/// store's errors are all definite), visible in `/readyz` meanwhile. `None`: shutdown was
/// requested.
pub(super) async fn checkpoint_store_at_startup<T, F, Fut>(
    config: &RelayConfig,
    store_description: &str,
    what: &'static str,
    metrics: &Metrics,
    shutdown: &ShutdownController,
    operation: F,
) -> Result<Option<T>, RelayError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, CheckpointStoreError>>,
{
    let (max_attempts, setting, backoff) = if config.checkpoint.store == "kafka" {
        (
            config.kafka.startup_attempts,
            "kafka.startup_attempts",
            Backoff::new(
                Duration::from_millis(config.kafka.retry_initial_backoff_ms),
                Duration::from_millis(config.kafka.retry_max_backoff_ms),
            ),
        )
    } else {
        (
            config.source.startup_attempts,
            "source.startup_attempts",
            Backoff::new(
                Duration::from_millis(config.source.reconnect_initial_backoff_ms),
                Duration::from_millis(config.source.reconnect_max_backoff_ms),
            ),
        )
    };
    let outcome = retry_at_startup(
        StartupDependency {
            max_attempts,
            backoff,
        },
        &mut shutdown.subscribe(),
        CheckpointStoreError::is_transient,
        |error, attempt, delay| {
            CheckpointStoreWaiting {
                error,
                operation: what,
                attempt,
                max_attempts,
                delay,
            }
            .emit(metrics)
        },
        operation,
    )
    .await;
    match outcome {
        Ok(Some(value)) => {
            metrics.health.checkpoint_committed(None);
            Ok(Some(value))
        }
        Ok(None) => Ok(None),
        Err(StartupFailure::Definite(error)) => Err(RelayError::Checkpoint(error)),
        Err(StartupFailure::GaveUp {
            attempts,
            waited,
            last,
        }) => Err(RelayError::CheckpointStoreUnreachable {
            store: store_description.to_owned(),
            operation: what,
            attempts,
            waited,
            setting,
            source: Box::new(last),
        }),
    }
}
