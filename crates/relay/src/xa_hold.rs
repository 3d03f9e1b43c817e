//! Two-phase XA: the outbox records of an XA transaction are held from its rows until its
//! outcome, so a rolled-back XA transaction publishes nothing.
//!
//! # Contract
//! * Records of rows flagged `in_xa_transaction` are not sent at once: they are held
//!   ([`XaHolds::hold`]) with their share of the in-flight byte budget.
//! * At the `XA PREPARE` commit ([`XaHolds::prepare`]) they become a prepared transaction,
//!   and the XA PREPARE transaction gets one extra, unsent record in the ack tracker (the
//!   **hold token**): the checkpoint cannot pass the prepare (it stays at the boundary before
//!   the XA transaction) until that token is acked. A restart therefore re-reads the XA
//!   transaction and holds it again.
//! * At `XA COMMIT` ([`XaHolds::resolve`]) the records are sent as records of the
//!   XA COMMIT transaction, each ticket carrying an [`XaRelease`]: when the last of them is
//!   acked, the hold token is acked too. So the checkpoint passes the prepare only once
//!   every record of the transaction was delivered.
//! * At `XA ROLLBACK` the records (and their budget) are dropped and the hold token acked.
//! * A one-phase XA commit (an ordinary `Commit` after held rows) publishes them at once, as
//!   the transaction's records.
//! * Held bytes are bounded: more than [`XaHolds::limit_bytes`] (half of
//!   `pipeline.max_in_flight_bytes`) is a definite error, since the source would otherwise
//!   wait for budget forever, never reading the outcome that would free it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use outbox_binlog::BinlogPosition;
use outbox_checkpoint::AckToken;

use crate::budget::BudgetPermit;
use crate::dead_letter::RecordOrigin;
use crate::sink::OutboundRecord;

/// A routed record (or dead letter) of an XA transaction, waiting for the outcome.
pub(crate) struct HeldRecord {
    /// What is sent if the transaction commits.
    pub(crate) record: OutboundRecord,
    /// The row it came from, for dead letters.
    pub(crate) origin: RecordOrigin,
    /// The row's share of the in-flight budget, held while the record is.
    pub(crate) budget: Option<BudgetPermit>,
    /// The row's estimated size, counted against [`XaHolds::limit_bytes`].
    pub(crate) bytes: u64,
}

/// A prepared XA transaction's records and the tracker record that holds the checkpoint.
pub(crate) struct PreparedXa {
    /// The records, in binlog order.
    pub(crate) records: Vec<HeldRecord>,
    /// The unsent tracker record of the XA PREPARE transaction (see the module docs).
    pub(crate) hold_token: AckToken,
    /// Server timestamp of the XA PREPARE, for the age gauge.
    prepare_timestamp: u32,
}

/// Shared by the tickets of a committed XA transaction's records: acks the hold token when
/// the last of them is acked.
#[derive(Debug)]
pub(crate) struct XaRelease {
    /// Records of the transaction not acked yet.
    remaining: AtomicUsize,
    /// Acked when `remaining` reaches 0.
    hold_token: AckToken,
}

impl XaRelease {
    /// A release for `records` records (at least one) holding `hold_token`.
    pub(crate) fn new(records: usize, hold_token: AckToken) -> Self {
        Self {
            remaining: AtomicUsize::new(records),
            hold_token,
        }
    }

    /// One record was acked; returns the hold token when it was the last one.
    pub(crate) fn record_acked(&self) -> Option<AckToken> {
        (self.remaining.fetch_sub(1, Ordering::AcqRel) == 1).then_some(self.hold_token)
    }
}

/// What [`XaHolds::resolve`] found for an outcome.
pub(crate) enum XaResolution {
    /// The prepared transaction's records and hold token.
    Held(PreparedXa),
    /// It was prepared without outbox records: nothing to do.
    PreparedWithoutRecords,
    /// Its XA PREPARE was not read by this run (it lies before the stream's start).
    PrepareNotRead,
}

/// Why holding another record failed: too many bytes held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XaHoldTooLarge {
    /// Bytes held with the refused record.
    pub(crate) held_bytes: u64,
    /// The limit.
    pub(crate) limit_bytes: u64,
    /// Prepared transactions held besides the open one.
    pub(crate) prepared: usize,
}

/// The XA transactions the router holds records of; see the module docs.
pub(crate) struct XaHolds {
    /// Records of the XA transaction being read (before its XA PREPARE).
    open: Vec<HeldRecord>,
    /// Prepared transactions by XID.
    prepared: HashMap<String, PreparedXa>,
    /// XIDs prepared without outbox rows: their outcome is expected, not unknown.
    prepared_without_records: HashSet<String>,
    /// Bytes of all held records.
    held_bytes: u64,
    /// Most bytes held at once (see the module docs).
    limit_bytes: u64,
}

impl XaHolds {
    /// Holds with a limit of half the in-flight budget `max_in_flight_bytes`.
    pub(crate) fn new(max_in_flight_bytes: u64) -> Self {
        Self {
            open: Vec::new(),
            prepared: HashMap::new(),
            prepared_without_records: HashSet::new(),
            held_bytes: 0,
            limit_bytes: (max_in_flight_bytes / 2).max(1),
        }
    }

    /// Most bytes held at once.
    #[cfg(test)]
    pub(crate) fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Holds a record of the XA transaction being read.
    pub(crate) fn hold(&mut self, record: HeldRecord) -> Result<(), XaHoldTooLarge> {
        let held_bytes = self.held_bytes.saturating_add(record.bytes);
        if held_bytes > self.limit_bytes {
            return Err(XaHoldTooLarge {
                held_bytes,
                limit_bytes: self.limit_bytes,
                prepared: self.prepared.len(),
            });
        }
        self.held_bytes = held_bytes;
        self.open.push(record);
        Ok(())
    }

    /// True when records of the transaction being read are held.
    pub(crate) fn has_open_records(&self) -> bool {
        !self.open.is_empty()
    }

    /// The held records of the transaction being read, for an ordinary (one-phase) commit:
    /// they are sent now.
    pub(crate) fn take_open(&mut self) -> Vec<HeldRecord> {
        let records = std::mem::take(&mut self.open);
        self.release_bytes(&records);
        records
    }

    /// The transaction being read was prepared as `xid`. With records, `hold_token` (a
    /// tracker record of the XA PREPARE transaction, from `make_hold_token`) holds the
    /// checkpoint until the outcome; returns how many records are held.
    pub(crate) fn prepare(
        &mut self,
        xid: &str,
        prepare_timestamp: u32,
        make_hold_token: impl FnOnce() -> AckToken,
    ) -> usize {
        let records = std::mem::take(&mut self.open);
        if records.is_empty() {
            self.prepared_without_records.insert(xid.to_owned());
            return 0;
        }
        let count = records.len();
        self.prepared.insert(
            xid.to_owned(),
            PreparedXa {
                records,
                hold_token: make_hold_token(),
                prepare_timestamp,
            },
        );
        count
    }

    /// The outcome of `xid` was read: what was held for it.
    pub(crate) fn resolve(&mut self, xid: &str) -> XaResolution {
        if let Some(prepared) = self.prepared.remove(xid) {
            self.release_bytes(&prepared.records);
            return XaResolution::Held(prepared);
        }
        if self.prepared_without_records.remove(xid) {
            return XaResolution::PreparedWithoutRecords;
        }
        XaResolution::PrepareNotRead
    }

    /// Prepared transactions held.
    pub(crate) fn prepared_count(&self) -> usize {
        self.prepared.len()
    }

    /// Server timestamp of the oldest held XA PREPARE.
    pub(crate) fn oldest_prepare_timestamp(&self) -> Option<u32> {
        self.prepared
            .values()
            .map(|prepared| prepared.prepare_timestamp)
            .min()
    }

    fn release_bytes(&mut self, records: &[HeldRecord]) {
        let bytes: u64 = records.iter().map(|record| record.bytes).sum();
        self.held_bytes = self.held_bytes.saturating_sub(bytes);
    }
}

/// Describes where a refused XA record is, for the error.
pub(crate) fn describe_refused(error: &XaHoldTooLarge, at: &BinlogPosition) -> String {
    format!(
        "the outbox rows of XA transactions take {} bytes (up to the row at {at}; {} prepared transactions held besides the one being read), more than their share, half of pipeline.max_in_flight_bytes ({} bytes): the relay holds them until their XA COMMIT/ROLLBACK and would run out of budget before reading it. Raise pipeline.max_in_flight_bytes, or end the prepared XA transactions (XA RECOVER lists them)",
        error.held_bytes, error.prepared, error.limit_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_checkpoint::{AckTracker, CheckpointPosition};

    fn record(bytes: u64) -> HeldRecord {
        HeldRecord {
            record: OutboundRecord {
                topic: "t".into(),
                key: None,
                payload: None,
                headers: Vec::new(),
                null_headers: Vec::new(),
                timestamp_ms: None,
                partition: None,
            },
            origin: RecordOrigin::default(),
            budget: None,
            bytes,
        }
    }

    #[test]
    fn held_bytes_are_bounded_and_released_by_the_outcome() {
        let mut tracker = AckTracker::new(CheckpointPosition::at(BinlogPosition::new("b.1", 4)));
        let mut holds = XaHolds::new(1000);
        assert_eq!(holds.limit_bytes(), 500);
        holds.hold(record(300)).unwrap();
        assert_eq!(holds.prepare("x1", 10, || tracker.add_record()), 1);
        holds.hold(record(150)).unwrap();
        let refused = holds.hold(record(100)).unwrap_err();
        assert_eq!(
            (refused.held_bytes, refused.prepared),
            (550, 1),
            "{refused:?}"
        );
        assert_eq!(holds.prepare("x2", 20, || tracker.add_record()), 1);
        assert_eq!(holds.oldest_prepare_timestamp(), Some(10));
        let XaResolution::Held(first) = holds.resolve("x1") else {
            panic!("x1 is held");
        };
        assert_eq!(first.records.len(), 1);
        holds.hold(record(300)).unwrap();
        assert_eq!(holds.oldest_prepare_timestamp(), Some(20));
        assert_eq!(holds.prepare("x3", 30, || tracker.add_record()), 1);
        assert_eq!(holds.prepared_count(), 2);
        assert_eq!(holds.prepare("empty", 40, || unreachable!()), 0);
        assert!(matches!(
            holds.resolve("empty"),
            XaResolution::PreparedWithoutRecords
        ));
        assert!(matches!(
            holds.resolve("never-prepared"),
            XaResolution::PrepareNotRead
        ));
    }

    #[test]
    fn the_hold_token_is_released_by_the_last_ack() {
        let mut tracker = AckTracker::new(CheckpointPosition::at(BinlogPosition::new("b.1", 4)));
        let hold = tracker.add_record();
        let release = XaRelease::new(2, hold);
        assert_eq!(release.record_acked(), None);
        assert_eq!(release.record_acked(), Some(hold));
    }
}
