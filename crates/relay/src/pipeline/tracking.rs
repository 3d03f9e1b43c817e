//! The state the tasks share around the ack tracker: the tracker itself, the ordinals of
//! transactions that carried records, the sink's ticket for a record, and what the sinks
//! call on a delivery ([`delivery_acker`]) or to end a Kafka transaction
//! ([`exactly_once_boundary`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use outbox_checkpoint::{AckToken, AckTracker, SourceIdentity};
use tokio::sync::Notify;

use super::identity::gtid_only_binlog_position;
use crate::budget::{BudgetPermit, InFlightBudget};
use crate::metrics::Metrics;
use crate::sink::{BatchBoundary, SequencedTicket, SinkTicket};
use crate::xa_hold::XaRelease;

/// The ack tracker shared by the router task (adds records, ends transactions) and the
/// sink (acks); a plain mutex, held for a few instructions at a time.
pub(super) type SharedTracker = Arc<Mutex<AckTracker>>;

/// Ordinals (1-based, in end order, heartbeats included) of ended transactions that carried
/// records: pushed by the router, popped by the committer as the checkpoint passes them.
/// Bounded by the transactions in flight.
pub(super) type RecordTransactions = Arc<Mutex<VecDeque<u64>>>;

/// Locks the record-transaction ordinals (a poisoned lock is taken over, as for the tracker).
pub(super) fn lock_records(
    records: &RecordTransactions,
) -> std::sync::MutexGuard<'_, VecDeque<u64>> {
    records
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Locks the tracker.
pub(super) fn lock_tracker(tracker: &SharedTracker) -> std::sync::MutexGuard<'_, AckTracker> {
    // A poisoned lock means another task panicked mid-update; the tracker's state is still
    // consistent at instruction granularity, and that task's failure stops the relay anyway.
    tracker
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The sink's ticket for a record: the tracker's token, and the row's budget reservation,
/// released once the record (or its dead letter) is acknowledged.
pub(super) struct RecordTicket {
    /// Acked in the tracker on delivery.
    pub(super) token: AckToken,
    /// Dropped on delivery.
    pub(super) budget: Option<BudgetPermit>,
    /// For a record of a committed XA transaction: releases the hold on its XA PREPARE once
    /// every record of the transaction is acked ([`crate::xa_hold`]).
    pub(super) xa_release: Option<Arc<XaRelease>>,
}

/// What the sink calls for each delivered record: acks it in the tracker (and the XA hold
/// it releases), frees its byte budget, and wakes the committer.
pub(super) fn delivery_acker(
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

/// A dead letter is acked under its record's token: the checkpoint passes either alike.
impl SinkTicket for RecordTicket {}

impl SequencedTicket for RecordTicket {
    fn sequence(&self) -> u64 {
        self.token.sequence()
    }
}

/// The checkpoint a Kafka transaction may be committed with, for the exactly-once sink:
/// [`AckTracker::exactly_once_boundary`] (the rule and its tests live there), read under the
/// tracker's lock, with this relay's GTID-only position for a checkpoint after a failover.
pub(super) fn exactly_once_boundary(
    tracker: &SharedTracker,
    identity: &SourceIdentity,
    last_sent: Option<u64>,
) -> Option<BatchBoundary> {
    lock_tracker(tracker).exactly_once_boundary(identity, last_sent, &gtid_only_binlog_position())
}
