//! Poll mode (`[source] mode = "poll"`): the outbox table is the source. `outbox-poll`
//! claims due rows under a lease and a fencing token; the same router and Kafka sink as the
//! binlog mode publish them; a claim whose every row was acked (delivered, or its dead
//! letter) is marked SENT (DEAD for dead letters) under its token.
//!
//! # Contract
//! * **At least once, same id.** A row is marked SENT only after Kafka acked its record. A
//!   relay that dies between publish and mark leaves the row PROCESSING; when its lease
//!   ends any relay claims it again and publishes it again with the same id.
//! * **Leases hold while publishing.** The claims this relay is still publishing or marking
//!   have their lease renewed every third of `lease_ms` (task `poll-leases`, which also returns
//!   rows of expired leases, anyone's, to PENDING and deletes SENT rows past the
//!   retention). So a lease ends only for a relay that stopped or lost the database.
//! * **Per-key order.** A claim takes only the oldest unsent row of an aggregate
//!   (`outbox-poll`): an aggregate has at most one row in flight across all relays.
//! * **Bounded.** At most `pipeline.max_in_flight` claimed rows are unsettled at a time,
//!   holding at most `pipeline.max_in_flight_bytes` (a claim keeps a row only with its share
//!   of that budget, read row by row; one row larger than the whole budget passes alone).
//!
//! # Shutdown
//! Claiming stops; the sink drains within `pipeline.shutdown_timeout_ms`; every claim
//! settled by then is marked. Rows of claims not settled stay PROCESSING until their lease
//! ends, then are claimed again (duplicates, never losses).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_binlog::{BinlogError, TableName};
use outbox_poll::internal_events::{InternalEvent as PollEvent, RowsClaimed};
use outbox_poll::{
    lock_ledger, maintain_leases, mark_settled_claims, AdmittedClaim, ClaimLedger,
    ConnectionHealth, ConnectionSettings, LeaseSettings, MarkTask, PollConnection, PollError,
    PolledTable, Poller, RetryPolicy, RowOutcome, RowTicket, SettledClaim, SharedLedger,
};
use outbox_router::{RouteOutcome, Router};
use tokio::sync::{mpsc, Notify};

use super::attempt::{flatten_task, stop_on_failure};
use super::error::RelayError;
use super::router_task::routing_dead_letter;
use super::RelaySummary;
use crate::backoff::Backoff;
use crate::budget::{row_bytes, BudgetPermit, InFlightBudget};
use crate::config::RelayConfig;
use crate::dead_letter::RecordOrigin;
use crate::internal_events::{ColumnTypeClashFound, InternalEvent, RecordRouted, RowSkipped};
use crate::metrics::Metrics;
use crate::replay::{AttemptSinkObserver, SentThrough};
use crate::shutdown::{Shutdown, ShutdownController};
use crate::sink::{run_kafka_sink, KafkaSinkSettings, OutboundRecord, SinkItem, SinkTicket};
use crate::startup_retry::{retry_at_startup, StartupDependency};
use crate::tasks::spawn_named;

/// The sink's ticket for a claimed row's record.
struct PollTicket {
    /// Which claim and row, to settle in the ledger.
    row: RowTicket,
    /// The row's share of `pipeline.max_in_flight_bytes`, taken when it was claimed and
    /// released when the sink hands the ticket back.
    budget: BudgetPermit,
    /// Set when the record went to the dead-letter topic (routing error, or Kafka
    /// rejected it for good): the row becomes DEAD with this reason.
    dead_letter: Option<String>,
    /// Set when the sink gave up on the record (no ack within `kafka.stall_timeout_ms`, a
    /// failure librdkafka gave up on): the row goes back to PENDING with a backoff.
    gave_up: Option<String>,
}

impl PollTicket {
    /// The row, its budget share, and how its publish ended, once the sink handed the
    /// ticket back.
    fn into_parts(self) -> (RowTicket, BudgetPermit, RowOutcome) {
        let outcome = match (self.gave_up, self.dead_letter) {
            // A dead letter the sink gave up on was not written either: retry the row.
            (Some(reason), _) => RowOutcome::Failed(reason),
            (None, Some(reason)) => RowOutcome::DeadLettered(reason),
            (None, None) => RowOutcome::Delivered,
        };
        (self.row, self.budget, outcome)
    }
}

impl SinkTicket for PollTicket {
    fn dead_lettered(&mut self, reason: &str) {
        self.dead_letter = Some(reason.to_owned());
    }

    fn gave_up(&mut self, reason: &str) {
        self.gave_up = Some(reason.to_owned());
    }
}

/// Runs poll mode until shutdown or a definite error.
pub(super) async fn run_poll_relay(
    config: &RelayConfig,
    router: Arc<Router>,
    metrics: &Arc<Metrics>,
    controller: &ShutdownController,
) -> Result<RelaySummary, RelayError> {
    let tables: Arc<[PolledTable]> = polled_tables(config)
        .into_iter()
        .map(|(name, poller)| PolledTable {
            label: name.to_string(),
            name,
            poller,
        })
        .collect();
    let mut claims_connection = PollConnection::new(connection_settings(config), "claims")
        .reporting_health(Arc::new(SourceReadiness(metrics.clone())));
    let Some(conn) = connect_at_startup(config, metrics, controller).await? else {
        return Ok(RelaySummary::default());
    };
    let conn = claims_connection.adopt(conn);
    let (checked, clashes) = poll_startup_checks(config, &router, conn).await?;
    for clash in &clashes {
        ColumnTypeClashFound { clash }.emit(metrics);
    }
    tracing::info!(
        server = %config.source.redacted_url(),
        tables = tables.len(),
        checked = %checked,
        "poll source connected"
    );

    let ledger: SharedLedger = Arc::new(Mutex::new(ClaimLedger::new()));
    let budget = InFlightBudget::new(config.pipeline.max_in_flight_bytes);
    let capacity_freed = Arc::new(Notify::new());
    let claims_marked = Arc::new(Notify::new());
    let (settled_tx, settled_rx) = mpsc::unbounded_channel::<SettledClaim>();
    let batch_capacity = config
        .pipeline
        .channel_capacity
        .div_ceil(config.source.poll.batch_size as usize)
        .max(1);
    let (records_tx, records_rx) = mpsc::channel::<Vec<SinkItem<PollTicket>>>(batch_capacity);

    // Claiming has its own stop: a failing claim task stops claiming while the sink still
    // delivers (and the settle task marks) what was claimed.
    let claims_stop = ShutdownController::new();
    {
        let mut global = controller.subscribe();
        let claims_stop = claims_stop.clone();
        spawn_named("poll-stop-forwarder", async move {
            global.recv().await;
            claims_stop.trigger();
        });
    }
    let claim_task = spawn_named(
        "poll-claims",
        run_claims(
            ClaimsContext {
                tables: tables.clone(),
                router,
                ledger: ledger.clone(),
                capacity_freed: capacity_freed.clone(),
                claims_marked: claims_marked.clone(),
                metrics: metrics.clone(),
                config: config.clone(),
                budget: budget.clone(),
                settled: settled_tx.clone(),
            },
            claims_connection,
            records_tx,
            claims_stop.subscribe(),
        ),
    );
    let on_delivered = {
        let ledger = ledger.clone();
        let capacity_freed = capacity_freed.clone();
        let (budget, metrics) = (budget.clone(), metrics.clone());
        move |ticket: PollTicket| {
            let (row, permit, outcome) = ticket.into_parts();
            let settled = lock_ledger(&ledger).settle(row, outcome);
            // Released before the claim task is woken: it may be waiting for these bytes.
            drop(permit);
            metrics.in_flight_bytes.set(budget.reserved_bytes() as i64);
            capacity_freed.notify_one();
            if let Some(settled) = settled {
                // The settle task outlives the sink (it ends when this sender is dropped).
                let _ = settled_tx.send(settled);
            }
        }
    };
    // A row the sink cannot deliver goes back to PENDING and is retried on the table's
    // schedule (backoff, max_attempts) instead of the sink's: one row per aggregate is in
    // flight, so giving records back never reorders a key.
    let sink_settings = KafkaSinkSettings {
        give_up_on_rebuild: true,
        ..KafkaSinkSettings::from_relay_config(config)
    };
    let sink_task = spawn_named(
        "kafka-sink",
        run_kafka_sink(
            sink_settings,
            records_rx,
            on_delivered,
            Arc::new(AttemptSinkObserver {
                metrics: metrics.clone(),
                sent_through: SentThrough::default(),
            }),
            controller.subscribe(),
        ),
    );
    let settle_task = spawn_named("poll-settle", {
        let stop_relay = controller.clone();
        let marks = mark_settled_claims(
            MarkTask {
                tables: tables.clone(),
                ledger: ledger.clone(),
                claims_marked,
                retry: RetryPolicy {
                    max_attempts: config.source.poll.max_attempts,
                    initial: Duration::from_millis(config.source.poll.retry_initial_backoff_ms),
                    max: Duration::from_millis(config.source.poll.retry_max_backoff_ms),
                },
                give_up: marks_deadline(controller, config.pipeline.shutdown_timeout()).receiver(),
                before_mark: Box::new(|| {
                    use crate::crash_points::{crash_if_armed, pause_once_if_armed, CrashPoint};
                    crash_if_armed(CrashPoint::BeforePollMark);
                    pause_once_if_armed(CrashPoint::BeforePollMark)
                }),
            },
            PollConnection::new(connection_settings(config), "marks"),
            settled_rx,
        );
        async move {
            // A definite error stops the relay (the sink may still be delivering).
            marks.await.map_err(|error| {
                stop_relay.trigger();
                RelayError::from(error)
            })
        }
    });
    let leases_stop = ShutdownController::new();
    let leases_task = spawn_named("poll-leases", {
        let leases = maintain_leases(
            tables,
            ledger,
            PollConnection::new(connection_settings(config), "leases"),
            LeaseSettings {
                lease: config.source.poll.lease(),
                sent_retention: (config.source.poll.sent_retention_s > 0)
                    .then(|| Duration::from_secs(config.source.poll.sent_retention_s)),
                cleanup_batch: config.source.poll.cleanup_batch,
            },
            leases_stop.subscribe().receiver(),
        );
        async move { leases.await.map_err(RelayError::from) }
    });

    let (claim_result, sink_result) = tokio::join!(
        stop_on_failure(claim_task, &claims_stop),
        stop_on_failure(sink_task, controller),
    );
    let mut errors: Vec<RelayError> = Vec::new();
    let mut summary = RelaySummary::default();
    flatten_task("poll-claims", claim_result, &mut errors);
    if let Some(sink_summary) = flatten_task(
        "kafka-sink",
        sink_result.map(|r| r.map_err(RelayError::Sink)),
        &mut errors,
    ) {
        summary.delivered = sink_summary.delivered;
        summary.abandoned = sink_summary.abandoned;
    }
    // The sink is done: its ack callback (the settle channel's sender) is gone, so the
    // settle task marks what is left and ends; the leases are renewed until then.
    flatten_task("poll-settle", settle_task.await, &mut errors);
    leases_stop.trigger();
    flatten_task("poll-leases", leases_task.await, &mut errors);
    for error in &errors {
        tracing::error!(%error, "relay stopped on error");
    }
    controller.trigger();
    match errors.into_iter().next() {
        None => Ok(summary),
        Some(error) => Err(error),
    }
}

/// What the claim task works with besides its connection and channel.
struct ClaimsContext {
    tables: Arc<[PolledTable]>,
    router: Arc<Router>,
    ledger: SharedLedger,
    /// Woken by every settled row: the claim task waits on it at `max_in_flight`.
    capacity_freed: Arc<Notify>,
    /// Woken by every claim marked: rows of its aggregates may be claimable now.
    claims_marked: Arc<Notify>,
    metrics: Arc<Metrics>,
    config: RelayConfig,
    /// `pipeline.max_in_flight_bytes`: each claimed row takes its share before the claim
    /// keeps it.
    budget: InFlightBudget,
    /// A claim settled by skipped rows alone goes to the settle task from here.
    settled: mpsc::UnboundedSender<SettledClaim>,
}

/// How often at most a claim looks past its window (see `Poller::claim_rows`): a claim
/// without one reads the whole backlog when nothing in it is claimable.
const FULL_SCAN_EVERY: Duration = Duration::from_secs(10);

/// The PENDING rows a claim of `limit` looks at: enough that rows of aggregates in flight
/// do not fill it, few enough that a claim that finds nothing stays cheap.
fn claim_window(limit: u32) -> u32 {
    limit.saturating_mul(4).max(2_000)
}

/// Claims due rows table by table, routes them and hands them to the sink; waits
/// `interval_ms` after a round in which no claim was full.
async fn run_claims(
    context: ClaimsContext,
    mut connection: PollConnection,
    records: mpsc::Sender<Vec<SinkItem<PollTicket>>>,
    mut shutdown: Shutdown,
) -> Result<(), RelayError> {
    let poll = &context.config.source.poll;
    let max_in_flight = context.config.pipeline.max_in_flight.max(1);
    let mut last_full_scan: Option<tokio::time::Instant> = None;
    let mut stop = shutdown.receiver();
    loop {
        let mut any_full = false;
        for (index, table) in context.tables.iter().enumerate() {
            // Bounded: wait for acks while max_in_flight rows are unsettled.
            let room = loop {
                let notified = context.capacity_freed.notified();
                let in_flight = lock_ledger(&context.ledger).rows_in_flight();
                if in_flight < max_in_flight {
                    break max_in_flight - in_flight;
                }
                tokio::select! {
                    _ = shutdown.recv() => return Ok(()),
                    _ = notified => {}
                }
            };
            let limit = poll.batch_size.min(u32::try_from(room).unwrap_or(u32::MAX));
            let Some(conn) = connection.get(&mut stop).await? else {
                return Ok(());
            };
            let own_claims_open = lock_ledger(&context.ledger).has_claims_out();
            // Bounded in bytes too: a row is kept only with its share of the budget (one
            // larger than the whole budget waits until nothing else holds any).
            let admit = |image: &outbox_binlog::Row| context.budget.try_reserve(row_bytes(image));
            let mut claimed = table
                .poller
                .claim_rows_admitting(conn, limit, poll.lease(), Some(claim_window(limit)), admit)
                .await;
            // The window's rows all wait behind siblings in flight elsewhere, or back off:
            // now and then look past it, so they cannot hide claimable rows for long.
            let window_found_nothing = matches!(&claimed, Ok(claimed) if claimed.claim.rows.is_empty() && !claimed.refused);
            if window_found_nothing
                && !own_claims_open
                && last_full_scan.is_none_or(|last| last.elapsed() >= FULL_SCAN_EVERY)
            {
                last_full_scan = Some(tokio::time::Instant::now());
                claimed = table
                    .poller
                    .claim_rows_admitting(conn, limit, poll.lease(), None, admit)
                    .await;
            }
            let AdmittedClaim {
                claim,
                images,
                refused,
            } = match claimed {
                Ok(claimed) => claimed,
                Err(error) => {
                    connection.failed(error)?;
                    continue;
                }
            };
            context
                .metrics
                .in_flight_bytes
                .set(context.budget.reserved_bytes() as i64);
            any_full |= claim.rows.len() as u32 >= limit || refused;
            if !claim.rows.is_empty() {
                RowsClaimed {
                    table: &table.label,
                    rows: claim.rows.len(),
                }
                .emit();
                let tickets = lock_ledger(&context.ledger).open(index, claim);
                let batch = route_claimed(&context, table, tickets, images)?;
                tokio::select! {
                    _ = shutdown.recv() => return Ok(()),
                    sent = records.send(batch) => if sent.is_err() { return Ok(()) },
                }
            }
            if refused {
                // The byte budget is spent: claim again once acks released some of it.
                tokio::select! {
                    _ = shutdown.recv() => return Ok(()),
                    _ = context.capacity_freed.notified() => {}
                    _ = tokio::time::sleep(poll.interval()) => {}
                }
            }
        }
        if !any_full {
            // Rows held back behind this relay's own claims become claimable when those
            // are marked: claim again then, not a whole interval later.
            let marked = context.claims_marked.notified();
            let waiting_for_own_claims = lock_ledger(&context.ledger).has_claims_out();
            tokio::select! {
                _ = shutdown.recv() => return Ok(()),
                _ = tokio::time::sleep(poll.interval()) => {}
                _ = marked, if waiting_for_own_claims => {}
            }
        }
    }
}

/// The records of one claim's rows: routed, or their dead letters (a routing error
/// stops the relay under policy `fail`).
fn route_claimed(
    context: &ClaimsContext,
    table: &PolledTable,
    tickets: Vec<RowTicket>,
    images: Vec<(outbox_binlog::Row, BudgetPermit)>,
) -> Result<Vec<SinkItem<PollTicket>>, RelayError> {
    let dead_letter = &context.config.dead_letter;
    let now = u32::try_from(outbox_kafka::unix_millis_now() / 1000).unwrap_or(u32::MAX);
    let mut batch = Vec::with_capacity(tickets.len());
    for (ticket, (image, budget)) in tickets.into_iter().zip(images) {
        // The claim's time: a polled row has no binlog event.
        let row = outbox_poll::sql_row_change(table.name.clone(), image, now);
        let mut ticket = PollTicket {
            row: ticket,
            budget,
            dead_letter: None,
            gave_up: None,
        };
        let record = match context.router.route(&row) {
            Ok(RouteOutcome::Record(record)) => {
                RecordRouted.emit(&context.metrics);
                OutboundRecord::from(record)
            }
            Ok(RouteOutcome::Skipped { reason }) => {
                // Only UPDATE/DELETE rows are skipped, and a claim yields inserts: settle
                // it as sent all the same, so the row cannot block its aggregate.
                RowSkipped {
                    reason: &format!("{reason:?}"),
                    table: &row.table,
                    warn: true,
                }
                .emit(&context.metrics);
                if let Some(settled) =
                    lock_ledger(&context.ledger).settle(ticket.row, RowOutcome::Delivered)
                {
                    // The settle task ends only after this task: it is still receiving.
                    let _ = context.settled.send(settled);
                }
                continue;
            }
            Err(error) if !dead_letter.dead_letters("routing") => {
                return Err(RelayError::Routing(Box::new(error)));
            }
            Err(error) => {
                let (letter, message) =
                    routing_dead_letter(&error, &row, dead_letter, &context.metrics);
                ticket.dead_letter = Some(message);
                letter
            }
        };
        batch.push(SinkItem {
            record,
            ticket,
            origin: RecordOrigin::of_row(&row),
        });
    }
    Ok(batch)
}

/// Fires `timeout` after `controller` does: how long marks may still be retried while the
/// relay stops.
fn marks_deadline(controller: &ShutdownController, timeout: Duration) -> Shutdown {
    let deadline = ShutdownController::new();
    let fired = deadline.subscribe();
    let mut stopping = controller.subscribe();
    spawn_named("poll-marks-deadline", async move {
        stopping.recv().await;
        tokio::time::sleep(timeout).await;
        deadline.trigger();
    });
    fired
}

/// Where the poll source's connections go (`[source]`): the relay's, and the `poll`,
/// `status` and `check` commands'.
pub(crate) fn connection_settings(config: &RelayConfig) -> ConnectionSettings {
    ConnectionSettings {
        url: config.source.connection_url(),
        tls: config.source.tls_options(),
        connect_timeout: Duration::from_millis(config.source.connect_timeout_ms),
        reconnect_initial_backoff: Duration::from_millis(
            config.source.reconnect_initial_backoff_ms,
        ),
        reconnect_max_backoff: Duration::from_millis(config.source.reconnect_max_backoff_ms),
    }
}

/// The claims connection's state as the source's readiness (`/readyz`).
struct SourceReadiness(Arc<Metrics>);

impl ConnectionHealth for SourceReadiness {
    fn connected(&self) {
        self.0.health.source_connected();
    }

    fn retrying(&self, error: &str) {
        self.0.health.source_retrying(error);
    }
}

/// The first connection, under the startup rule ([`crate::startup_retry`]): transient
/// failures retried with backoff `source.startup_attempts` times (0: forever), each one
/// logged and in `/readyz`; a definite one stops the relay. `None` on shutdown meanwhile.
async fn connect_at_startup(
    config: &RelayConfig,
    metrics: &Metrics,
    controller: &ShutdownController,
) -> Result<Option<mysql_async::Conn>, RelayError> {
    let settings = connection_settings(config);
    let outcome = retry_at_startup(
        StartupDependency {
            max_attempts: config.source.startup_attempts,
            backoff: Backoff::new(
                settings.reconnect_initial_backoff,
                settings.reconnect_max_backoff,
            ),
        },
        &mut controller.subscribe(),
        BinlogError::is_transient,
        |error, attempt, delay| {
            metrics.health.source_retrying(&error.to_string());
            tracing::warn!(%error, attempt, retry_in_ms = delay.as_millis() as u64, "poll source: the server is not reachable yet");
        },
        || settings.open(),
    )
    .await;
    outcome.map_err(|failure| {
        super::startup::source_startup_failure(failure, config.source.redacted_url())
    })
}

/// The configured outbox tables with their pollers, in config order.
pub(crate) fn polled_tables(config: &RelayConfig) -> Vec<(Arc<TableName>, Poller)> {
    let columns = config.source.poll.columns.poll_columns();
    config
        .outbox
        .iter()
        .map(|table| {
            (
                Arc::new(table.table.clone()),
                Poller::for_relay_table(&table.table, &table.column_mapping(), &columns),
            )
        })
        .collect()
}

/// What poll mode needs of the server and of every `[[outbox]]` table, checked by `run` at
/// start and by `check`: `SKIP LOCKED` (MySQL 8.0, MariaDB 10.6); each table exists, has
/// the columns its route reads (invariant 4c) and the poll-mode columns; the relay's user
/// may SELECT and UPDATE it, and DELETE from it when the cleanup is on. Each probe changes
/// no row. `Ok`: what was checked, for the log, and the configured column types the server
/// contradicts ([`Router::column_type_clashes`]: `run` warns of them, `check` fails them).
pub(crate) async fn poll_startup_checks(
    config: &RelayConfig,
    router: &Router,
    conn: &mut mysql_async::Conn,
) -> Result<(String, Vec<outbox_router::ColumnTypeClash>), RelayError> {
    let version = outbox_poll::check_server(conn)
        .await
        .map_err(RelayError::Poll)?;
    let names = config.outbox_tables();
    let columns = outbox_binlog::resolve_watched_tables(conn, &names)
        .await
        .map_err(|error| {
            RelayError::Source(BinlogError::Connection {
                server: config.source.redacted_url(),
                message: format!("looking up the outbox tables: {error}"),
            })
        })?
        .map_err(|unresolved| RelayError::OutboxColumnsMissing(unresolved.message))?;
    if let Some(message) = super::describe_missing_columns(router, &columns) {
        return Err(RelayError::OutboxColumnsMissing(message));
    }
    let clashes = router.column_type_clashes(&columns);
    let poll = &config.source.poll;
    let grant_hint = |table: &TableName, error: PollError| {
        let hint = if poll.sent_retention_s > 0 {
            "SELECT, UPDATE, DELETE"
        } else {
            "SELECT, UPDATE"
        };
        RelayError::PollTableUnusable {
            table: table.to_string(),
            message: format!("{error}; the table needs the poll-mode columns (`outbox-relay poll ddl` prints them, or [source.poll.columns] names yours) and the relay's user `GRANT {hint} ON {table}`"),
        }
    };
    // A probe that lost a lock conflict to a running relay's claims ran, so it was allowed:
    // its grant is there.
    let probed = |table: &TableName, result: Result<u64, PollError>| match result {
        Err(error) if !error.is_lock_conflict() => Err(grant_hint(table, error)),
        _ => Ok(()),
    };
    for (table, poller) in polled_tables(config) {
        poller
            .status(conn)
            .await
            .map_err(|error| grant_hint(&table, error))?;
        poller.check_indexes(conn).await.map_err(RelayError::Poll)?;
        probed(
            &table,
            poller
                .renew_leases(conn, &["outbox-relay-check"], poll.lease())
                .await,
        )?;
        if poll.sent_retention_s > 0 {
            // Rows SENT a century ago: none, but the statement needs the DELETE grant.
            probed(
                &table,
                poller
                    .delete_sent(conn, Duration::from_secs(100 * 365 * 86_400), 1)
                    .await,
            )?;
        }
    }
    let summary = format!(
        "{} (SKIP LOCKED); {}: poll-mode columns and the claim's indexes present, SELECT and UPDATE{} granted",
        version.text,
        names
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        if poll.sent_retention_s > 0 {
            ", DELETE"
        } else {
            ""
        }
    );
    Ok((summary, clashes))
}
