//! The router task: turns rows into records (a routing error into a dead letter, or a
//! stop under policy `fail`), registers each record with the ack tracker, holds the
//! records of XA transactions until their outcome ([`crate::xa_hold`]), and ends
//! transactions in the tracker, in binlog order.

use std::sync::Arc;
use std::time::Duration;

use outbox_binlog::{BinlogPosition, StreamItem, XaBoundary};
use outbox_checkpoint::CheckpointPosition;
use outbox_router::{RouteOutcome, Router};
use tokio::sync::{mpsc, Notify};

use super::error::RelayError;
use super::source::SourceItem;
use super::tracking::{
    lock_records, lock_tracker, RecordTicket, RecordTransactions, SharedTracker,
};
use crate::budget::{row_change_bytes, BudgetPermit};
use crate::dead_letter::{dead_letter_for_routing_error, RecordOrigin};
use crate::internal_events::{
    DeadLettered, InternalEvent, RecordRouted, RowSkipped, XaHeldChanged, XaOutcomeRead,
    XaOutcomeWithoutPrepare, XaPrepareHeld,
};
use crate::metrics::Metrics;
use crate::replay::{ReplayCounter, SentThrough};
use crate::shutdown::Shutdown;
use crate::sink::{OutboundRecord, SinkItem};
use crate::xa_hold::{describe_refused, HeldRecord, XaHolds, XaRelease, XaResolution};

/// What the router task works with besides its channels.
pub(super) struct RouterTaskContext {
    /// Turns rows into records.
    pub(super) router: Arc<Router>,
    /// Log skipped rows at warn (`invalid_operation = "warn"`).
    pub(super) warn_on_skip: bool,
    /// Ordinals of ended transactions that carried records, for the committer's idle rule.
    pub(super) record_transactions: RecordTransactions,
    /// Registers records and transaction ends.
    pub(super) tracker: SharedTracker,
    /// Wakes the committer when a transaction ended.
    pub(super) progress: Arc<Notify>,
    /// Counters.
    pub(super) metrics: Arc<Metrics>,
    /// Routing errors become dead letters unless policy says `fail`.
    pub(super) dead_letter: crate::config::DeadLetterConfig,
    /// `pipeline.max_in_flight_bytes`: bounds the records of XA transactions held.
    pub(super) max_in_flight_bytes: u64,
    /// Advanced at each transaction end that handed records to the sink; the committer
    /// stores it (crate::replay).
    pub(super) sent_through: SentThrough,
    /// Counts the records the previous run had already sent (crate::replay).
    pub(super) replay: ReplayCounter,
}

/// The most records the router hands the sink in one channel message: a source batch's
/// worth ([`super::source::MAX_BATCH_ITEMS`]). The router -> sink channel holds
/// `channel_capacity / SINK_BATCH_ITEMS` batches (`pipeline/attempt.rs`), so it holds about
/// `channel_capacity` records at most, as when it counted records; an XA transaction's
/// released records go in batches of this size too.
pub(super) const SINK_BATCH_ITEMS: usize = super::source::MAX_BATCH_ITEMS;

/// Records handed to the sink in one channel send, in order, never empty: one wake-up of
/// the sink per source batch instead of one per record.
pub(super) type SinkBatch = Vec<SinkItem<RecordTicket>>;

/// A held XA record, released for sending: it gets its ack token now (so the checkpoint
/// waits for it) and keeps its budget permit; `xa_release` is the prepared transaction's
/// shared release, `None` for a one-phase XA commit.
pub(super) fn held_record_to_sink_item(
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

/// Routes rows into records (registering each with the tracker) and ends transactions in
/// the tracker, in binlog order.
pub(super) async fn run_router(
    context: RouterTaskContext,
    mut items: mpsc::Receiver<SourceItem>,
    records: mpsc::Sender<SinkBatch>,
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
    let mut hand_off = SinkHandOff {
        records,
        outgoing: Vec::new(),
        sent_through,
        handed_through: None,
    };
    let mut end_transaction =
        |position: CheckpointPosition,
         records: &mut u64,
         handed_through: &mut Option<BinlogPosition>| {
            ended_transactions += 1;
            if *records > 0 {
                // Before `end_transaction`, so the committer never sees the end without it.
                lock_records(&record_transactions).push_back(ended_transactions);
                *handed_through = Some(position.binlog.clone());
            }
            *records = 0;
            lock_tracker(&tracker).end_transaction(position);
            progress.notify_one();
        };
    let mut xa = XaHolds::new(max_in_flight_bytes);
    let mut xa_ticker = tokio::time::interval(Duration::from_secs(1));
    xa_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Routed records of the open transaction not yet registered with the tracker: they
    // are registered under one lock and sent at the transaction's end or the batch's end,
    // whichever comes first.
    let mut pending: Vec<PendingRecord> = Vec::new();
    loop {
        let batch = tokio::select! {
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
                Some(SourceItem::Batch(batch)) => batch,
                Some(SourceItem::MovedTo(server)) => {
                    lock_tracker(&tracker).switch_source(server);
                    replay.source_moved(&metrics);
                    continue;
                }
                None => return Ok(()),
            },
        };
        // At most one record per item (XA releases beyond it flush at SINK_BATCH_ITEMS): one
        // allocation for the batch's records instead of growing by doubling.
        hand_off.outgoing.reserve(batch.len().min(SINK_BATCH_ITEMS));
        for (item, budget) in batch {
            if !matches!(item, StreamItem::Row(_)) {
                register_pending(
                    &tracker,
                    &mut pending,
                    &mut hand_off.outgoing,
                    &mut records_in_open_transaction,
                );
                if !hand_off.send_when_full(&mut shutdown).await {
                    return Ok(());
                }
            }
            match item {
                StreamItem::Row(mut row) => {
                    // An XA row's size, for its hold's share of the budget, measured before
                    // routing moves the payload out of the row (so counted as the source
                    // counted it). Other rows need none: not measured on the hot path.
                    let xa_row_bytes = row.in_xa_transaction.then(|| row_change_bytes(&row) as u64);
                    let record = match router.route_taking_payload(&mut row) {
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
                            // What was routed before it still goes to the sink, which
                            // delivers it before stopping (as without batching).
                            register_pending(
                                &tracker,
                                &mut pending,
                                &mut hand_off.outgoing,
                                &mut records_in_open_transaction,
                            );
                            hand_off.send(&mut shutdown).await;
                            return Err(RelayError::Routing(Box::new(error)));
                        }
                        // Deterministic: dead-lettered at once, tracked and acked like any record.
                        Err(error) => routing_dead_letter(&error, &row, &dead_letter, &metrics).0,
                    };
                    let origin = RecordOrigin::of_row(&row);
                    if let Some(bytes) = xa_row_bytes {
                        // Held until the XA transaction's outcome (crate::xa_hold).
                        let held = HeldRecord {
                            record,
                            origin,
                            budget,
                            bytes,
                        };
                        if let Err(refused) = xa.hold(held) {
                            return Err(RelayError::XaHoldTooLarge(describe_refused(
                                &refused,
                                &row.event_position,
                            )));
                        }
                        continue;
                    }
                    pending.push(PendingRecord {
                        record,
                        origin,
                        budget,
                    });
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
                                            hand_off.outgoing.push(held_record_to_sink_item(
                                                &tracker,
                                                held,
                                                Some(release.clone()),
                                            ));
                                            if !hand_off.send_when_full(&mut shutdown).await {
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
                                hand_off
                                    .outgoing
                                    .push(held_record_to_sink_item(&tracker, held, None));
                                if !hand_off.send_when_full(&mut shutdown).await {
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
                        &mut hand_off.handed_through,
                    )
                }
                StreamItem::Heartbeat(heartbeat) => {
                    replay.transaction_ended(&heartbeat.position, 0, &metrics);
                    end_transaction(
                        CheckpointPosition::at_heartbeat(&heartbeat),
                        &mut records_in_open_transaction,
                        &mut hand_off.handed_through,
                    )
                }
            }
        }
        // A batch cut inside a transaction: its records go on now, the end follows. Every
        // record routed from the batch goes to the sink in one send.
        register_pending(
            &tracker,
            &mut pending,
            &mut hand_off.outgoing,
            &mut records_in_open_transaction,
        );
        if !hand_off.send(&mut shutdown).await {
            return Ok(());
        }
    }
}

/// A routed record of the open transaction, waiting for [`register_pending`].
struct PendingRecord {
    /// The record (or a routing error's dead letter).
    record: OutboundRecord,
    /// Where its row came from, for a dead letter.
    origin: RecordOrigin,
    /// The row's share of the in-flight budget, moved into the record's ticket.
    budget: Option<BudgetPermit>,
}

/// Registers the pending records with the tracker in order under one lock (they are all of
/// the open transaction), counts them in `records_in_open_transaction`, and moves them to
/// `outgoing`, behind the records registered before them.
fn register_pending(
    tracker: &SharedTracker,
    pending: &mut Vec<PendingRecord>,
    outgoing: &mut SinkBatch,
    records_in_open_transaction: &mut u64,
) {
    if pending.is_empty() {
        return;
    }
    *records_in_open_transaction += pending.len() as u64;
    let mut tracker = lock_tracker(tracker);
    outgoing.extend(pending.drain(..).map(|pending| SinkItem {
        record: pending.record,
        ticket: RecordTicket {
            token: tracker.add_record(),
            budget: pending.budget,
            xa_release: None,
        },
        origin: pending.origin,
    }));
}

/// The router's end of the router -> sink channel: the records registered with the tracker
/// and not yet sent, and how far `sent_through` may advance once they are.
struct SinkHandOff {
    /// The channel to the sink.
    records: mpsc::Sender<SinkBatch>,
    /// Records registered with the tracker, in order, not yet handed to the sink: sent as one
    /// batch at the source batch's end (or when [`SINK_BATCH_ITEMS`] are waiting).
    outgoing: SinkBatch,
    /// How far records were handed on for sending (crate::replay); advanced after a send.
    sent_through: SentThrough,
    /// The newest transaction end whose records are registered but may still wait in
    /// `outgoing`: `sent_through` advances to it only once they went to the sink.
    handed_through: Option<BinlogPosition>,
}

impl SinkHandOff {
    /// [`SinkHandOff::send`] once `outgoing` holds [`SINK_BATCH_ITEMS`] records (a
    /// transaction or XA release longer than that goes in several batches); true when it is
    /// not full yet.
    async fn send_when_full(&mut self, shutdown: &mut Shutdown) -> bool {
        self.outgoing.len() < SINK_BATCH_ITEMS || self.send(shutdown).await
    }

    /// Hands the `outgoing` records to the sink as one batch (none when there are none),
    /// then advances `sent_through` to `handed_through`, whose records are all sent now;
    /// false when the relay is stopping (or the sink is gone): the records stay unsent and
    /// unreported.
    async fn send(&mut self, shutdown: &mut Shutdown) -> bool {
        if !self.outgoing.is_empty() {
            let batch = std::mem::take(&mut self.outgoing);
            let sent = tokio::select! {
                _ = shutdown.recv() => false,
                sent = self.records.send(batch) => sent.is_ok(),
            };
            if !sent {
                return false;
            }
        }
        if let Some(position) = self.handed_through.take() {
            self.sent_through.advance(&position);
        }
        true
    }
}

/// The dead letter of a row the router could not route, with its [`DeadLettered`] event;
/// and the error's text. Routing is deterministic: dead-lettered at the first attempt.
pub(super) fn routing_dead_letter(
    error: &outbox_router::RoutingError,
    row: &outbox_binlog::RowChange,
    dead_letter: &crate::config::DeadLetterConfig,
    metrics: &Metrics,
) -> (OutboundRecord, String) {
    let letter = dead_letter_for_routing_error(error, row, dead_letter);
    let message = error.to_string();
    DeadLettered {
        class: "routing",
        id: error.event_id.as_deref(),
        original_topic: "",
        dead_letter_topic: &dead_letter.topic,
        attempts: 1,
        error: &message,
    }
    .emit(metrics);
    (letter, message)
}
