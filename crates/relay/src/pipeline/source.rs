//! The source task: reads the binlog into the router's channel, reserving each row's bytes
//! in the in-flight budget first, and reconnects after transient errors from the reader's
//! resume point (moving to another server by GTID set after a failover, or refusing).
//!
//! A rows event of [`RESERVE_BEFORE_DECODING_BYTES`] or more (or of the whole budget, when
//! that is smaller) reserves its raw size *before* the reader decodes it
//! ([`BinlogReader::next_item_or_large_event`]): while it waits for budget only its raw
//! bytes are held, never a decoded copy beside them. Its rows take their shares out of that
//! reservation (the credit); what they leave is released at the transaction's end or at
//! the next large event.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use outbox_binlog::{BinlogReader, GtidSet, NextItem, ReaderConfig, StartPosition, StreamItem};
use outbox_checkpoint::SourceIdentity;
use tokio::sync::mpsc;

use super::error::RelayError;
use super::identity::{describe_identity, describe_start, identity_of, source_identity};
use crate::backoff::Backoff;
use crate::budget::{row_change_bytes, BudgetPermit, InFlightBudget};
use crate::internal_events::{
    HeartbeatRead, InternalEvent, RowRead, SourceConnected, SourceReconnecting, TransactionRead,
};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// Source task settings.
pub(super) struct SourceSettings {
    /// First reconnect delay.
    pub(super) reconnect_initial: Duration,
    /// Largest reconnect delay.
    pub(super) reconnect_max: Duration,
    /// For logs.
    pub(super) redacted_url: String,
    /// Each row reserves its size here before it is handed on.
    pub(super) budget: InFlightBudget,
    /// Who the source was at startup: a reconnect that reaches another server (failover
    /// behind the same address) must not resume by file+position there.
    pub(super) identity: SourceIdentity,
    /// The GTID set the stream started from (the checkpoint's, or empty); the source adds
    /// every commit's GTID it hands on, so it can move to another server by GTID.
    pub(super) start_gtids: GtidSet,
}

/// Rows events of this many raw bytes or more reserve their size in the budget before they
/// are decoded (see the module docs). A smaller event is decoded first and its rows reserve
/// afterwards, as before: while one of its rows waits, its raw and decoded bytes (about
/// twice its size, so under 2 MiB) are held beyond the budget. 1 MiB: where the sink starts
/// handing payloads over to librdkafka, and far above the rows of usual outbox events,
/// which thus pay nothing for it.
pub(super) const RESERVE_BEFORE_DECODING_BYTES: usize = 1 << 20;

/// The most stream items the source hands the router in one [`SourceItem::Batch`]: a
/// transaction longer than this goes in several batches (it is never buffered whole).
pub(super) const MAX_BATCH_ITEMS: usize = 256;

/// A stream item and, for a row, its share of the in-flight byte budget (released when its
/// record is acked, or when it is dropped).
pub(super) type BudgetedItem = (StreamItem, Option<BudgetPermit>);

/// What the source hands the router, in stream order.
pub(super) enum SourceItem {
    /// Stream items in order (never empty), one channel send for many: a batch ends when
    /// the reader has no next item ready, after [`MAX_BATCH_ITEMS`] items, or when the
    /// source must wait for budget or reconnect. So an item never waits in a batch while
    /// the source waits on the server or on budget its rows' acks would release, and a
    /// batch may hold the ends of many transactions, or part of one.
    Batch(Vec<BudgetedItem>),
    /// The source moved to another server by GTID set (failover): every item after this
    /// one comes from that server. In the stream, not beside it, so the router tags exactly
    /// the positions read from the new server with it ([`AckTracker::switch_source`]); the
    /// committer then names it and stores those checkpoints GTID-only.
    MovedTo(SourceIdentity),
}

/// Reads the binlog into `items` until shutdown or a definite error; reconnects on
/// transient errors from the reader's resume point.
pub(super) async fn run_source(
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
    // Items read and not yet handed on (see `SourceItem::Batch` for when they go).
    let mut batch: Vec<BudgetedItem> = Vec::new();
    // Budget reserved for the last large rows event before it was decoded; its rows take
    // their shares from it (module docs).
    let mut credit: Option<BudgetPermit> = None;
    let large_event_bytes = usize::try_from(settings.budget.total_bytes())
        .unwrap_or(usize::MAX)
        .min(RESERVE_BEFORE_DECODING_BYTES);
    loop {
        // An item the reader has ready (decoded, or in its read-ahead) joins the batch at
        // once (`next_item_or_large_event` is cancel-safe); when none is, the batch goes on
        // before the source waits for the server, so nothing sits in it while the stream is
        // idle.
        let ready = if batch.is_empty() || shutdown.is_shutdown() {
            None
        } else {
            reader
                .next_item_or_large_event(large_event_bytes)
                .now_or_never()
        };
        let next = match ready {
            Some(next) => next,
            None => {
                if !hand_on(&items, &mut shutdown, &mut batch).await {
                    return Ok(());
                }
                tokio::select! {
                    _ = shutdown.recv() => return Ok(()),
                    next = reader.next_item_or_large_event(large_event_bytes) => next,
                }
            }
        };
        match next {
            Ok(NextItem::LargeRowsEvent { bytes }) => {
                // What the last large event's rows left goes back first: the source holds
                // no budget it does not use while it waits for more.
                drop(credit.take());
                let reserved =
                    reserve_budget(&settings.budget, bytes, &items, &mut shutdown, &mut batch);
                let Some(reserved) = reserved.await else {
                    return Ok(());
                };
                credit = reserved;
                metrics
                    .in_flight_bytes
                    .set(i64::try_from(settings.budget.reserved_bytes()).unwrap_or(i64::MAX));
            }
            Ok(NextItem::Item(item)) => {
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
                        let bytes = row_change_bytes(row);
                        // From the credit of the row's large event, if any; the rest (all
                        // of it for a row of a small event) is reserved now.
                        let (taken, missing) = match credit {
                            None => (None, bytes),
                            Some(_) => settings.budget.take_from_credit(&mut credit, bytes),
                        };
                        let permit = if missing == 0 {
                            taken
                        } else {
                            let more = reserve_budget(
                                &settings.budget,
                                missing,
                                &items,
                                &mut shutdown,
                                &mut batch,
                            );
                            let Some(more) = more.await else {
                                return Ok(());
                            };
                            match (taken, more) {
                                (Some(mut taken), Some(more)) => {
                                    taken.merge(more);
                                    Some(taken)
                                }
                                (taken, more) => taken.or(more),
                            }
                        };
                        metrics.in_flight_bytes.set(
                            i64::try_from(settings.budget.reserved_bytes()).unwrap_or(i64::MAX),
                        );
                        permit
                    }
                    StreamItem::Commit(_) | StreamItem::Heartbeat(_) => {
                        // A large event's rows all came before its transaction's end.
                        credit = None;
                        None
                    }
                };
                batch.push((item, permit));
                if batch.len() >= MAX_BATCH_ITEMS
                    && !hand_on(&items, &mut shutdown, &mut batch).await
                {
                    return Ok(());
                }
            }
            Err(error) if error.is_transient() => {
                credit = None;
                // Rows of the open transaction read before the break go on as before (the
                // reader reads them again after the reconnect: duplicates, never loss), and
                // before any `MovedTo`.
                if !hand_on(&items, &mut shutdown, &mut batch).await {
                    return Ok(());
                }
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
            Err(error) => {
                // What was read before the failure still goes on: the sink delivers it and
                // the checkpoint ends right before the problem, as without batching.
                hand_on(&items, &mut shutdown, &mut batch).await;
                return Err(RelayError::Source(error));
            }
        }
    }
}

/// Reserves `bytes` of the budget: at once when they fit; otherwise only acks free budget,
/// and the rows batched here hold some, so they are handed on first, then the source waits.
/// `None` when the relay is stopping or the router is gone; `Some(None)` only if the
/// budget was closed (never).
async fn reserve_budget(
    budget: &InFlightBudget,
    bytes: usize,
    items: &mpsc::Sender<SourceItem>,
    shutdown: &mut Shutdown,
    batch: &mut Vec<BudgetedItem>,
) -> Option<Option<BudgetPermit>> {
    if let Some(reserved) = budget.reserve(bytes).now_or_never() {
        return Some(reserved);
    }
    if !hand_on(items, shutdown, batch).await {
        return None;
    }
    tokio::select! {
        _ = shutdown.recv() => None,
        permit = budget.reserve(bytes) => Some(permit),
    }
}

/// Sends the batched items to the router (nothing when there are none); false when the
/// relay is stopping or the router is gone.
async fn hand_on(
    items: &mpsc::Sender<SourceItem>,
    shutdown: &mut Shutdown,
    batch: &mut Vec<BudgetedItem>,
) -> bool {
    if batch.is_empty() {
        return true;
    }
    // The next batch is likely about as long (transactions of one workload look alike).
    let capacity = batch.len();
    let full = std::mem::replace(batch, Vec::with_capacity(capacity));
    tokio::select! {
        _ = shutdown.recv() => false,
        sent = items.send(SourceItem::Batch(full)) => sent.is_ok(),
    }
}
