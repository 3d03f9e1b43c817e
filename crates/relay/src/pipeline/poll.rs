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
//! * **Bounded.** At most `pipeline.max_in_flight` claimed rows are unsettled at a time.
//!
//! # Shutdown
//! Claiming stops; the sink drains within `pipeline.shutdown_timeout_ms`; every claim
//! settled by then is marked. Rows of claims not settled stay PROCESSING until their lease
//! ends, then are claimed again (duplicates, never losses).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use outbox_binlog::{BinlogError, BinlogPosition, RowChange, RowOperation, TableName};
use outbox_poll::internal_events::{
    BacklogMeasured, ClaimMarked, InternalEvent as PollEvent, LeasesExpired, RowsClaimed,
};
use outbox_poll::{
    ClaimLedger, PollError, Poller, RetryPolicy, RowOutcome, RowTicket, SettledClaim, SESSION_SETUP,
};
use outbox_router::{RouteOutcome, Router};
use tokio::sync::{mpsc, Notify};

use super::attempt::{flatten_task, stop_on_failure};
use super::error::RelayError;
use super::router_task::routing_dead_letter;
use super::RelaySummary;
use crate::backoff::Backoff;
use crate::config::RelayConfig;
use crate::dead_letter::RecordOrigin;
use crate::internal_events::{InternalEvent, RecordRouted, RowSkipped};
use crate::metrics::Metrics;
use crate::replay::{AttemptSinkObserver, SentThrough};
use crate::shutdown::{Shutdown, ShutdownController};
use crate::sink::{run_kafka_sink, KafkaSinkSettings, OutboundRecord, SinkItem, SinkTicket};
use crate::tasks::spawn_named;

/// One polled table: its name (shared by its rows) and its statements.
struct PolledTable {
    /// `database.table`, as the router and the dead letters name it.
    name: Arc<TableName>,
    /// The same, as metrics label it.
    label: String,
    /// Claim, mark, renew, expire, clean up.
    poller: Poller,
}

/// The sink's ticket for a claimed row's record.
struct PollTicket {
    /// Which claim and row, to settle in the ledger.
    row: RowTicket,
    /// Set when the record went to the dead-letter topic (routing error, or Kafka
    /// rejected it for good): the row becomes DEAD with this reason.
    dead_letter: Option<String>,
    /// Set when the sink gave up on the record (no ack within `kafka.stall_timeout_ms`, a
    /// failure librdkafka gave up on): the row goes back to PENDING with a backoff.
    gave_up: Option<String>,
}

impl PollTicket {
    /// How the row's publish ended, once the sink handed the ticket back.
    fn outcome(self) -> RowOutcome {
        match (self.gave_up, self.dead_letter) {
            // A dead letter the sink gave up on was not written either: retry the row.
            (Some(reason), _) => RowOutcome::Failed(reason),
            (None, Some(reason)) => RowOutcome::DeadLettered(reason),
            (None, None) => RowOutcome::Delivered,
        }
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

/// The claims in flight, shared by the claim task (opens), the sink's ack callback
/// (settles) and the lease task (renews).
type SharedLedger = Arc<Mutex<ClaimLedger>>;

fn lock_ledger(ledger: &SharedLedger) -> std::sync::MutexGuard<'_, ClaimLedger> {
    // A poisoned lock: a task panicked mid-update, and that failure stops the relay.
    ledger
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
    let mut claims_connection = PollConnection::new(config, "claims").reporting_health(metrics);
    let Some(conn) = claims_connection.connect_at_startup(controller).await? else {
        return Ok(RelaySummary::default());
    };
    let checked = poll_startup_checks(config, &router, conn).await?;
    tracing::info!(
        server = %config.source.redacted_url(),
        tables = tables.len(),
        checked = %checked,
        "poll source connected"
    );

    let ledger: SharedLedger = Arc::new(Mutex::new(ClaimLedger::new()));
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
        move |ticket: PollTicket| {
            let row = ticket.row;
            let settled = lock_ledger(&ledger).settle(row, ticket.outcome());
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
    let settle_task = spawn_named(
        "poll-settle",
        run_settle(
            SettleContext {
                tables: tables.clone(),
                ledger: ledger.clone(),
                claims_marked,
                retry: RetryPolicy {
                    max_attempts: config.source.poll.max_attempts,
                    initial: Duration::from_millis(config.source.poll.retry_initial_backoff_ms),
                    max: Duration::from_millis(config.source.poll.retry_max_backoff_ms),
                },
                controller: controller.clone(),
                give_up: marks_deadline(controller, config.pipeline.shutdown_timeout()),
            },
            PollConnection::new(config, "marks"),
            settled_rx,
        ),
    );
    let leases_stop = ShutdownController::new();
    let leases_task = spawn_named(
        "poll-leases",
        run_leases(
            tables,
            ledger,
            PollConnection::new(config, "leases"),
            config.source.poll.clone(),
            leases_stop.subscribe(),
        ),
    );

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
            let Some(conn) = connection.get(&mut shutdown).await? else {
                return Ok(());
            };
            let own_claims_open = lock_ledger(&context.ledger).has_claims_out();
            let mut claimed = table
                .poller
                .claim_rows(conn, limit, poll.lease(), Some(claim_window(limit)))
                .await;
            // The window's rows all wait behind siblings in flight elsewhere, or back off:
            // now and then look past it, so they cannot hide claimable rows for long.
            let window_found_nothing = matches!(&claimed, Ok((claim, _)) if claim.rows.is_empty());
            if window_found_nothing
                && !own_claims_open
                && last_full_scan.is_none_or(|last| last.elapsed() >= FULL_SCAN_EVERY)
            {
                last_full_scan = Some(tokio::time::Instant::now());
                claimed = table
                    .poller
                    .claim_rows(conn, limit, poll.lease(), None)
                    .await;
            }
            let (claim, images) = match claimed {
                Ok(claimed) => claimed,
                Err(error) => {
                    connection.failed(error)?;
                    continue;
                }
            };
            any_full |= claim.rows.len() as u32 >= limit;
            if claim.rows.is_empty() {
                continue;
            }
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
    images: Vec<outbox_binlog::Row>,
) -> Result<Vec<SinkItem<PollTicket>>, RelayError> {
    let dead_letter = &context.config.dead_letter;
    let now = u32::try_from(outbox_kafka::unix_millis_now() / 1000).unwrap_or(u32::MAX);
    let mut batch = Vec::with_capacity(tickets.len());
    for (ticket, image) in tickets.into_iter().zip(images) {
        let row = RowChange {
            table: table.name.clone(),
            operation: RowOperation::Insert,
            before: None,
            after: Some(image),
            // The claim's time: a polled row has no binlog event.
            event_timestamp: now,
            event_position: BinlogPosition::new(String::new(), 0),
            transaction_gtid: None,
            in_xa_transaction: false,
        };
        let mut ticket = PollTicket {
            row: ticket,
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

/// What the settle task works with besides its connection and channel.
struct SettleContext {
    tables: Arc<[PolledTable]>,
    /// Told when a claim is marked (its lease needs no renewing).
    ledger: SharedLedger,
    /// Woken per claim marked (the claim task may claim the aggregates again).
    claims_marked: Arc<Notify>,
    /// Backoff and `max_attempts` of rows whose publish failed.
    retry: RetryPolicy,
    /// Stops the relay on a definite error.
    controller: ShutdownController,
    /// Fires when marks may no longer be retried (the shutdown timeout into a stop).
    give_up: Shutdown,
}

/// Marks each settled claim (SENT, DEAD for dead letters) under its token; a lost
/// connection is reconnected and the same claim marked again. Ends when the sink is done
/// (the channel closes) and every claim received was marked.
async fn run_settle(
    context: SettleContext,
    mut connection: PollConnection,
    mut settled: mpsc::UnboundedReceiver<SettledClaim>,
) -> Result<(), RelayError> {
    let SettleContext {
        tables,
        ledger,
        claims_marked,
        retry,
        controller,
        mut give_up,
    } = context;
    // Marks are retried until they succeed, also while the relay stops, until `give_up`
    // fires (the shutdown timeout after the stop began): a database that stays away must
    // not hold the process; the rows it could not mark are published again once their
    // leases end.
    while let Some(claim) = settled.recv().await {
        let Some(table) = tables.get(claim.table) else {
            continue;
        };
        crate::crash_points::crash_if_armed(crate::crash_points::CrashPoint::BeforePollMark);
        if let Some(pause) = crate::crash_points::pause_once_if_armed(
            crate::crash_points::CrashPoint::BeforePollMark,
        ) {
            tokio::time::sleep(pause).await;
        }
        loop {
            let Some(conn) = connection.get(&mut give_up).await? else {
                tracing::warn!(table = %table.name, "stopping with claims not marked: their rows are published again when their leases end");
                return Ok(());
            };
            match table.poller.settle(conn, &claim, &retry).await {
                Ok(outcome) => {
                    lock_ledger(&ledger).marked(claim.number);
                    claims_marked.notify_one();
                    ClaimMarked {
                        table: &table.label,
                        settled: &claim,
                        outcome: &outcome,
                    }
                    .emit();
                    break;
                }
                Err(error) => {
                    if let Err(definite) = connection.failed(error) {
                        controller.trigger();
                        return Err(definite);
                    }
                }
            }
        }
    }
    Ok(())
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

/// Renews the leases of the claims in flight, returns expired leases (anyone's) to
/// PENDING, and deletes SENT rows past the retention; until `shutdown`.
async fn run_leases(
    tables: Arc<[PolledTable]>,
    ledger: SharedLedger,
    mut connection: PollConnection,
    poll: crate::poll_config::PollConfig,
    mut shutdown: Shutdown,
) -> Result<(), RelayError> {
    const CLEANUP_EVERY: Duration = Duration::from_secs(60);
    let lease = poll.lease();
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_cleanup: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = shutdown.recv() => return Ok(()),
            _ = tick.tick() => {}
        }
        let Some(conn) = connection.get(&mut shutdown).await? else {
            return Ok(());
        };
        let open = lock_ledger(&ledger).open_tokens();
        let cleanup_due = poll.sent_retention_s > 0
            && last_cleanup.is_none_or(|last| last.elapsed() >= CLEANUP_EVERY);
        let mut result = Ok(());
        for (index, table) in tables.iter().enumerate() {
            let tokens: Vec<&str> = open
                .get(&index)
                .map(|tokens| tokens.iter().map(String::as_str).collect())
                .unwrap_or_default();
            result = async {
                table.poller.renew_leases(conn, &tokens, lease).await?;
                let expired = table.poller.expire_leases(conn).await?;
                LeasesExpired {
                    table: &table.label,
                    rows: expired,
                }
                .emit();
                let status = table.poller.status(conn).await?;
                BacklogMeasured {
                    table: &table.label,
                    status: &status,
                }
                .emit();
                if cleanup_due {
                    let deleted = table
                        .poller
                        .delete_sent(
                            conn,
                            Duration::from_secs(poll.sent_retention_s),
                            poll.cleanup_batch,
                        )
                        .await?;
                    tracing::debug!(table = %table.name, deleted, "deleted SENT rows past the retention");
                }
                Ok::<(), PollError>(())
            }
            .await;
            if result.is_err() {
                break;
            }
        }
        match result {
            Ok(()) => {
                if cleanup_due {
                    last_cleanup = Some(tokio::time::Instant::now());
                }
            }
            Err(error) => connection.failed(error)?,
        }
    }
}

/// One connection of the poll source: opened on demand with the session setup, dropped
/// after a transient failure and reopened after a backoff.
struct PollConnection {
    /// `source.url` with the password.
    url: String,
    /// `[source.tls]`.
    tls: outbox_binlog::TlsOptions,
    /// `source.connect_timeout_ms`.
    timeout: Duration,
    /// `source.startup_attempts`, for the first connect only.
    startup_attempts: u32,
    /// For messages: which task's connection.
    purpose: &'static str,
    /// The open connection, if any.
    conn: Option<mysql_async::Conn>,
    /// Between reconnects.
    backoff: Backoff,
    /// Set after a failure: wait this long before reconnecting.
    retry_in: Option<Duration>,
    /// The claims connection reports the source's readiness (`/readyz`); the others do not,
    /// so a mark's retry does not flap it.
    health: Option<Arc<Metrics>>,
}

impl PollConnection {
    fn new(config: &RelayConfig, purpose: &'static str) -> Self {
        Self {
            url: config.source.connection_url(),
            tls: config.source.tls_options(),
            timeout: Duration::from_millis(config.source.connect_timeout_ms),
            startup_attempts: config.source.startup_attempts,
            purpose,
            conn: None,
            backoff: Backoff::new(
                Duration::from_millis(config.source.reconnect_initial_backoff_ms),
                Duration::from_millis(config.source.reconnect_max_backoff_ms),
            ),
            retry_in: None,
            health: None,
        }
    }

    /// This connection's state is the source's readiness.
    fn reporting_health(mut self, metrics: &Arc<Metrics>) -> Self {
        self.health = Some(metrics.clone());
        self
    }

    /// The first connection: transient failures are retried `startup_attempts` times
    /// (0: forever); `None` if `controller` fired meanwhile.
    async fn connect_at_startup(
        &mut self,
        controller: &ShutdownController,
    ) -> Result<Option<&mut mysql_async::Conn>, RelayError> {
        let mut shutdown = controller.subscribe();
        let started = std::time::Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            match self.open().await {
                Ok(conn) => {
                    self.connected();
                    self.conn = Some(conn);
                    return Ok(self.conn.as_mut());
                }
                Err(error) if !error.is_transient() => return Err(RelayError::Source(error)),
                Err(error) => {
                    if self.startup_attempts != 0 && attempts >= self.startup_attempts {
                        return Err(RelayError::SourceUnreachable {
                            server: crate::redact::redact_url(&self.url),
                            attempts,
                            waited: started.elapsed(),
                            source: Box::new(error),
                        });
                    }
                    let delay = self.backoff.next_delay();
                    tracing::warn!(%error, attempt = attempts, retry_in_ms = delay.as_millis() as u64, "poll source: the server is not reachable yet");
                    tokio::select! {
                        _ = shutdown.recv() => return Ok(None),
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    /// The connection, reconnecting after the backoff a failure asked for; `None` on
    /// shutdown. Definite connect errors (a refused password) stop the relay.
    async fn get(
        &mut self,
        shutdown: &mut Shutdown,
    ) -> Result<Option<&mut mysql_async::Conn>, RelayError> {
        loop {
            if self.conn.is_some() {
                return Ok(self.conn.as_mut());
            }
            if let Some(delay) = self.retry_in.take() {
                tokio::select! {
                    _ = shutdown.recv() => return Ok(None),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            match self.open().await {
                Ok(conn) => {
                    self.backoff.reset();
                    self.connected();
                    self.conn = Some(conn);
                }
                Err(error) if error.is_transient() => {
                    self.retrying(&error.to_string());
                    let delay = self.backoff.next_delay();
                    tracing::warn!(%error, connection = self.purpose, retry_in_ms = delay.as_millis() as u64, "poll source: reconnecting");
                    self.retry_in = Some(delay);
                }
                Err(error) => return Err(RelayError::Source(error)),
            }
        }
    }

    /// After a failed statement: a lock conflict is retried at once; another transient
    /// error drops the connection (reopened after a backoff by the next
    /// [`PollConnection::get`]); a definite one stops the relay.
    fn failed(&mut self, error: PollError) -> Result<(), RelayError> {
        if error.is_lock_conflict() {
            // Deadlocks between claims and marks are part of the protocol: at once again.
            tracing::debug!(%error, connection = self.purpose, "poll source: lock conflict; retrying at once");
            return Ok(());
        }
        if !error.is_transient() {
            return Err(RelayError::Poll(error));
        }
        self.retrying(&error.to_string());
        let delay = self.backoff.next_delay();
        tracing::warn!(%error, connection = self.purpose, retry_in_ms = delay.as_millis() as u64, "poll source: retrying after a transient failure");
        self.conn = None;
        self.retry_in = Some(delay);
        Ok(())
    }

    fn connected(&self) {
        if let Some(metrics) = &self.health {
            metrics.health.source_connected();
        }
    }

    fn retrying(&self, error: &str) {
        if let Some(metrics) = &self.health {
            metrics.health.source_retrying(error);
        }
    }

    async fn open(&self) -> Result<mysql_async::Conn, BinlogError> {
        open_poll_session(&self.url, &self.tls, self.timeout).await
    }
}

/// A connection to the source with the poll session set up ([`SESSION_SETUP`]): the
/// poll source's, and the `poll` commands'.
pub(crate) async fn open_poll_session(
    url: &str,
    tls: &outbox_binlog::TlsOptions,
    timeout: Duration,
) -> Result<mysql_async::Conn, BinlogError> {
    let (mut conn, _tls) = outbox_binlog::connect_to_server(url, tls, timeout).await?;
    for &statement in SESSION_SETUP {
        conn.query_drop(statement)
            .await
            .map_err(|error| BinlogError::Connection {
                server: crate::redact::redact_url(url),
                message: format!("setting up the poll session (`{statement}`): {error}"),
            })?;
    }
    Ok(conn)
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
/// no row. `Ok`: what was checked, for the log.
pub(crate) async fn poll_startup_checks(
    config: &RelayConfig,
    router: &Router,
    conn: &mut mysql_async::Conn,
) -> Result<String, RelayError> {
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
    Ok(format!(
        "{} (SKIP LOCKED); {}: poll-mode columns present, SELECT and UPDATE{} granted",
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
    ))
}
