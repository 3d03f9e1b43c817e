//! The ack tracker: turns out-of-order Kafka acknowledgements into the newest binlog position
//! whose whole prefix is delivered.
//!
//! # Invariant
//! [`AckTracker::checkpoint`] is always the end of a transaction (or a heartbeat position)
//! such that **every record added before it has been acked**. It never passes an unacked
//! record, and it only moves forward.
//!
//! # Usage (in binlog order)
//! * [`AckTracker::add_record`] for each record of the currently open transaction, as rows
//!   stream in (a transaction's end is not known yet; big transactions are never buffered);
//! * [`AckTracker::end_transaction`] at each `Commit` (even with 0 records) and each heartbeat;
//! * [`AckTracker::ack`] whenever Kafka acknowledges a record, in any order;
//! * [`AckTracker::acked_position`] to learn when the safe position moved.
//!
//! # GTID sets
//! The tracker owns the GTID set: it starts from the start position's `gtid_set` and folds in
//! each ended transaction's `gtid` in binlog order. The `gtid_set` of a position passed to
//! `end_transaction` is ignored. A heartbeat (no `gtid`, timestamp 0) keeps the previous
//! `gtid` and timestamp, so the checkpoint always names the last delivered transaction.
//!
//! # Which server a position belongs to
//! A file+position only means something on the server that wrote it. After a failover the
//! relay calls [`AckTracker::switch_source`] in stream order, before the first item read from
//! the new server: every transaction ended from then on (the open one included, since its
//! end comes from the new server) is tagged with it, and [`AckTracker::checkpoint_source`]
//! names the server of the current checkpoint, read under the same lock as the position, so
//! a position of one server is never stored under another's name.
//!
//! # Memory
//! The tracker keeps one entry per ended transaction that still has unacked records, at most
//! one merged entry for each run of fully acked transactions between them (empty
//! transactions and heartbeats coalesce into such runs), the open transaction, and one bit
//! per record of those entries that are not fully acked. An idle source sending heartbeats
//! therefore does not grow it; the pipeline's in-flight limit bounds the rest.
//!
//! # Resending after a producer is recreated
//! There is no `nack`. When the relay recreates its producer and resends every unacked
//! record, it keeps each record's [`AckToken`] and acks it when the resend is acknowledged.
//! The tracker only cares that each token is acked exactly once, eventually. A duplicate in
//! Kafka is fine (at-least-once); a lost token holds the checkpoint back forever, which is
//! the safe failure.
//!
//! # Reconnecting inside a transaction
//! If the binlog stream breaks while a transaction is open, the reader resumes at the last
//! transaction boundary and re-yields that transaction's rows. Keep the open transaction's
//! tokens and add the re-read rows as new records of the same open transaction: the
//! transaction ends once, after the re-read, and its position is released only when both the
//! first partial copy and the full re-read copy are acked. To restart from the checkpoint
//! instead (dropping everything in flight), create a new tracker; acks of the old tracker's
//! tokens are then [`AckError::UnknownToken`], which the relay may ignore.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use outbox_binlog::{BinlogPosition, Gtid, GtidSet};

use crate::checkpoint::{Checkpoint, CheckpointPosition, SourceIdentity};
use crate::gtid_union::{add_optional, union_into};

/// Distinguishes trackers so a token of one tracker is never mistaken for one of another.
static NEXT_TRACKER_ID: AtomicU64 = AtomicU64::new(1);

/// Identifies one record handed to [`AckTracker::add_record`]; ack it exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AckToken {
    /// Which tracker issued it, so acks reaching the wrong (or a recreated) tracker are
    /// detected instead of acking some other record.
    tracker_id: u64,
    /// Position of the record in the tracker's record order (0, 1, 2, ...).
    sequence: u64,
}

impl AckToken {
    /// The record's number in the order records were added (starting at 0), for logs.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }
}

/// A misuse of the tracker. Never a panic: the relay decides whether it is fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    /// The token was already acked. The tracker state is unchanged.
    #[error("record {} was acked twice", token.sequence)]
    DoubleAck {
        /// The token acked again.
        token: AckToken,
    },
    /// The token was not issued by this tracker (another or a replaced tracker).
    #[error("record {} is unknown to this ack tracker (issued by another tracker)", token.sequence)]
    UnknownToken {
        /// The foreign token.
        token: AckToken,
    },
}

/// Where a Kafka transaction of the exactly-once sink may end: what
/// [`AckTracker::exactly_once_boundary`] returns once the records sent so far are whole
/// binlog transactions the checkpoint has passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactlyOnceBoundary {
    /// The checkpoint to commit with the Kafka transaction (its last record): every record
    /// of every binlog transaction up to it is delivered, and none after it was sent.
    pub checkpoint: Checkpoint,
    /// No transaction is tracked any more (every record read so far is delivered), so the
    /// lag gauge may read 0 instead of the checkpoint's age.
    pub caught_up: bool,
}

/// A run of records in binlog order: one transaction, or several merged fully acked ones.
#[derive(Debug)]
struct Entry {
    /// Sequence number of the entry's first record (its records are contiguous).
    first_sequence: u64,
    /// How many records the entry covers.
    record_count: u64,
    /// How many of them are not acked yet.
    unacked_count: u64,
    /// One bit per record (`1` = acked), to tell a double ack from a first one; released once
    /// the entry is complete (any ack in range is then a double ack).
    acked_bits: AckBits,
    /// Where the entry's last transaction ends; `None` while the transaction is open.
    end: Option<EntryEnd>,
    /// How many transactions (or heartbeats) the entry stands for (more than 1 once merged),
    /// so [`AckTracker::completed_transactions`] stays exact.
    transaction_count: u64,
}

/// The end of an entry: what the checkpoint becomes when the entry is released.
///
/// Entries do not carry a snapshot of the whole GTID set (a clone per transaction); they
/// carry their own GTIDs, folded into the checkpoint's set on release.
#[derive(Debug)]
struct EntryEnd {
    /// Position after the entry's last transaction.
    binlog: BinlogPosition,
    /// The GTID of the entry's last transaction that had one (becomes
    /// [`CheckpointPosition::gtid`]); `None` if none had one.
    last_gtid: Option<Gtid>,
    /// GTIDs of the entry's other (merged, earlier) transactions; empty, without an
    /// allocation, for a single transaction, and always empty when `last_gtid` is `None`.
    earlier_gtids: GtidSet,
    /// Event timestamp after the last transaction (heartbeats' 0 already replaced).
    timestamp: u32,
    /// Which server `binlog` belongs to: an index into [`AckTracker::sources`] (0: the
    /// server the tracker started on), so the position and its server move together.
    source: usize,
}

impl EntryEnd {
    /// Appends `later` (the next entry's end) to this one.
    fn absorb(&mut self, later: EntryEnd) {
        // `later` without a last GTID holds only heartbeats or GTID-less transactions (its
        // `earlier_gtids` is empty then): it keeps this entry's last GTID.
        if later.last_gtid.is_some() {
            // Binlog order matters for MariaDB (last GTID per domain wins).
            add_optional(&mut self.earlier_gtids, self.last_gtid.as_ref());
            union_into(&mut self.earlier_gtids, later.earlier_gtids);
            self.last_gtid = later.last_gtid;
        }
        self.binlog = later.binlog;
        self.timestamp = later.timestamp;
        self.source = later.source;
    }
}

/// One bit per record; the first 64 inline, so small transactions allocate nothing.
#[derive(Debug, Default)]
struct AckBits {
    /// Bits of records 0..64.
    first_word: u64,
    /// Bits of records 64.., 64 per word.
    more_words: Vec<u64>,
}

impl AckBits {
    /// Ensures record `index` (the next one added) has a bit.
    fn make_room_for(&mut self, index: u64) {
        if index >= 64 && index % 64 == 0 {
            self.more_words.push(0);
        }
    }

    /// The word holding record `index`'s bit.
    fn word_mut(&mut self, index: u64) -> Option<&mut u64> {
        if index < 64 {
            return Some(&mut self.first_word);
        }
        let word = usize::try_from(index / 64 - 1).ok()?;
        self.more_words.get_mut(word)
    }
}

impl Entry {
    fn is_complete(&self) -> bool {
        self.end.is_some() && self.unacked_count == 0
    }

    fn contains(&self, sequence: u64) -> bool {
        sequence >= self.first_sequence && sequence - self.first_sequence < self.record_count
    }

    /// Merges `later` (the complete entry right after this complete one) into this one.
    fn absorb(&mut self, later: Entry) {
        self.record_count += later.record_count;
        self.transaction_count += later.transaction_count;
        absorb_end(&mut self.end, later.end);
    }
}

/// Tracks records in flight and yields the newest position whose whole prefix is acked.
/// See the module docs for the contract.
#[derive(Debug)]
pub struct AckTracker {
    /// Stamped into tokens; see [`AckToken`].
    tracker_id: u64,
    /// The safe position: everything before it is acked.
    checkpoint: CheckpointPosition,
    /// Set when `checkpoint` moved and [`AckTracker::acked_position`] was not called since.
    checkpoint_moved: bool,
    /// Entries in binlog order, keyed by `(first_sequence, entry number)`; the entry number
    /// keeps empty entries (which share their first sequence with the next) apart.
    entries: BTreeMap<(u64, u64), Entry>,
    /// Key of the open transaction's entry, if a record was added since the last end.
    open_entry: Option<(u64, u64)>,
    /// Next record sequence number to hand out.
    next_sequence: u64,
    /// Next entry number to hand out.
    next_entry_number: u64,
    /// Timestamp of the newest ended transaction with a non-zero timestamp.
    read_head_timestamp: u32,
    /// Records added and not yet acked.
    in_flight: usize,
    /// Transactions (and heartbeats) whose end the checkpoint has passed, since creation.
    completed_transactions: u64,
    /// The servers switched to with [`AckTracker::switch_source`], in order; entry ends
    /// refer to them by index + 1 (0 is the server the tracker started on).
    sources: Vec<SourceIdentity>,
    /// The source index that transactions ended from now on are tagged with.
    current_source: usize,
    /// The source index of `checkpoint`'s binlog position.
    checkpoint_source: usize,
}

impl AckTracker {
    /// A tracker whose checkpoint is `start` (where the stream starts) with nothing in flight.
    pub fn new(start: CheckpointPosition) -> Self {
        Self {
            tracker_id: NEXT_TRACKER_ID.fetch_add(1, Ordering::Relaxed),
            read_head_timestamp: start.timestamp,
            checkpoint: start,
            checkpoint_moved: false,
            entries: BTreeMap::new(),
            open_entry: None,
            next_sequence: 0,
            next_entry_number: 0,
            in_flight: 0,
            completed_transactions: 0,
            sources: Vec::new(),
            current_source: 0,
            checkpoint_source: 0,
        }
    }

    /// The stream moved to another server (failover): transactions ended from now on,
    /// including the open one, belong to `source` (see the module docs).
    pub fn switch_source(&mut self, source: SourceIdentity) {
        self.sources.push(source);
        self.current_source = self.sources.len();
    }

    /// The server the current checkpoint's binlog position belongs to, when the stream
    /// moved since the tracker was created; `None` while it is still the starting server.
    pub fn checkpoint_source(&self) -> Option<&SourceIdentity> {
        self.checkpoint_source
            .checked_sub(1)
            .and_then(|index| self.sources.get(index))
    }

    /// Registers one record of the currently open transaction; ack its token once Kafka
    /// acknowledged the record.
    pub fn add_record(&mut self) -> AckToken {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.in_flight += 1;
        let key = match self.open_entry {
            Some(key) => key,
            None => {
                let key = (sequence, self.take_entry_number());
                self.entries.insert(
                    key,
                    Entry {
                        first_sequence: sequence,
                        record_count: 0,
                        unacked_count: 0,
                        acked_bits: AckBits::default(),
                        end: None,
                        transaction_count: 1,
                    },
                );
                self.open_entry = Some(key);
                key
            }
        };
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.acked_bits.make_room_for(entry.record_count);
            entry.record_count += 1;
            entry.unacked_count += 1;
        }
        AckToken {
            tracker_id: self.tracker_id,
            sequence,
        }
    }

    /// Ends the open transaction (a `Commit`, possibly with no records) or records a
    /// heartbeat (no records): once every record before and in it is acked, the checkpoint
    /// may move to `position`. `position.gtid_set` is ignored (see the module docs).
    pub fn end_transaction(&mut self, position: CheckpointPosition) {
        let CheckpointPosition {
            binlog,
            gtid,
            gtid_set: _,
            timestamp,
        } = position;
        if timestamp != 0 {
            self.read_head_timestamp = timestamp;
        }
        let end = EntryEnd {
            binlog,
            last_gtid: gtid,
            earlier_gtids: GtidSet::Empty,
            timestamp: self.read_head_timestamp,
            source: self.current_source,
        };
        let key = match self.open_entry.take() {
            Some(key) => {
                if let Some(entry) = self.entries.get_mut(&key) {
                    entry.end = Some(end);
                }
                key
            }
            None => {
                let key = (self.next_sequence, self.take_entry_number());
                self.entries.insert(
                    key,
                    Entry {
                        first_sequence: self.next_sequence,
                        record_count: 0,
                        unacked_count: 0,
                        acked_bits: AckBits::default(),
                        end: Some(end),
                        transaction_count: 1,
                    },
                );
                key
            }
        };
        self.after_entry_changed(key);
    }

    /// Marks a record delivered. Acks may come in any order.
    pub fn ack(&mut self, token: AckToken) -> Result<(), AckError> {
        if token.tracker_id != self.tracker_id || token.sequence >= self.next_sequence {
            return Err(AckError::UnknownToken { token });
        }
        // The last entry whose first sequence is at or before the token's: the entry holding
        // it, if it is still tracked (released entries were fully acked).
        let found = self
            .entries
            .range(..=(token.sequence, u64::MAX))
            .next_back()
            .map(|(key, entry)| (*key, entry.contains(token.sequence)));
        let key = match found {
            Some((key, true)) => key,
            _ => return Err(AckError::DoubleAck { token }),
        };
        let Some(entry) = self.entries.get_mut(&key) else {
            return Err(AckError::DoubleAck { token });
        };
        if entry.is_complete() {
            // Every record of a complete entry is acked (its bits are released).
            return Err(AckError::DoubleAck { token });
        }
        let index = token.sequence - entry.first_sequence;
        let bit = 1u64 << (index % 64);
        let Some(word) = entry.acked_bits.word_mut(index) else {
            return Err(AckError::DoubleAck { token });
        };
        if *word & bit != 0 {
            return Err(AckError::DoubleAck { token });
        }
        *word |= bit;
        entry.unacked_count -= 1;
        self.in_flight -= 1;
        if entry.unacked_count == 0 && entry.end.is_some() {
            self.after_entry_changed(key);
        }
        Ok(())
    }

    /// The newest position whose whole prefix is acked, if it moved since the last call
    /// (`None` when it did not move).
    pub fn acked_position(&mut self) -> Option<CheckpointPosition> {
        if std::mem::take(&mut self.checkpoint_moved) {
            Some(self.checkpoint.clone())
        } else {
            None
        }
    }

    /// The current safe position (everything before it is acked), whether or not it moved.
    pub fn checkpoint(&self) -> &CheckpointPosition {
        &self.checkpoint
    }

    /// How many records (by sequence, from 0) the checkpoint has passed: every record whose
    /// [`AckToken::sequence`] is below this number belongs to a transaction at or before
    /// [`AckTracker::checkpoint`], and every record at or above it to a later one. The
    /// exactly-once sink commits a Kafka transaction with the checkpoint only when the last
    /// record it sent is below this number: the transaction then holds whole binlog
    /// transactions and nothing after its checkpoint.
    pub fn records_passed(&self) -> u64 {
        self.entries
            .keys()
            .next()
            .map_or(self.next_sequence, |(first_sequence, _)| *first_sequence)
    }

    /// The checkpoint a Kafka transaction may be committed with, or `None` while it must
    /// stay open: the exactly-once rule (ARCHITECTURE.md, invariant 15).
    ///
    /// `last_sent` is the [`AckToken::sequence`] of the last record sent in the Kafka
    /// transaction (`None`: it holds no records yet, e.g. an idle commit of heartbeat
    /// progress). The transaction may end only when that record is below
    /// [`AckTracker::records_passed`]: it then holds whole binlog transactions, all
    /// delivered, and nothing after the checkpoint, so a restart from the checkpoint
    /// neither repeats nor skips a record a `read_committed` consumer saw.
    ///
    /// The checkpoint names `identity` (the server the stream started on) while the
    /// checkpoint's position was read from it. After [`AckTracker::switch_source`] moved the
    /// stream to another server and the checkpoint reached a position read from there, it
    /// names that server and carries `gtid_only_binlog` (the binlog position meaning "resume
    /// by GTID set") instead of a file+position, exactly as the at-least-once committer
    /// stores it ([`crate::CheckpointCommitter::move_to_source`]). The leader epoch is left
    /// unset; the sink stamps it.
    pub fn exactly_once_boundary(
        &self,
        identity: &SourceIdentity,
        last_sent: Option<u64>,
        gtid_only_binlog: &BinlogPosition,
    ) -> Option<ExactlyOnceBoundary> {
        if last_sent.is_some_and(|sequence| sequence >= self.records_passed()) {
            return None;
        }
        let mut position = self.checkpoint.clone();
        let source = match self.checkpoint_source() {
            Some(moved) if moved != identity => {
                position.binlog = gtid_only_binlog.clone();
                moved.clone()
            }
            _ => identity.clone(),
        };
        Some(ExactlyOnceBoundary {
            checkpoint: Checkpoint::new(source, position),
            caught_up: self.tracked_transactions() == 0,
        })
    }

    /// Records added and not yet acked.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// How many ended transactions (including heartbeats) the checkpoint has passed since
    /// the tracker was created; a counter for commit batching and metrics.
    pub fn completed_transactions(&self) -> u64 {
        self.completed_transactions
    }

    /// Transactions the tracker is holding (ended but not yet passed by the checkpoint, plus
    /// the open one): what its memory grows with.
    pub fn tracked_transactions(&self) -> usize {
        self.entries.len()
    }

    fn take_entry_number(&mut self) -> u64 {
        let number = self.next_entry_number;
        self.next_entry_number += 1;
        number
    }

    /// Called when the entry at `key` may have become complete (ended and fully acked):
    /// merges it with complete neighbours, then releases complete entries from the front.
    fn after_entry_changed(&mut self, key: (u64, u64)) {
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        if !entry.is_complete() {
            return;
        }
        entry.acked_bits = AckBits::default();
        // Merge into a complete predecessor.
        let mut key = key;
        let previous_key = self
            .entries
            .range(..key)
            .next_back()
            .map(|(k, e)| (*k, e.is_complete()));
        if let Some((previous_key, true)) = previous_key {
            if let Some(current) = self.entries.remove(&key) {
                if let Some(previous) = self.entries.get_mut(&previous_key) {
                    previous.absorb(current);
                }
                key = previous_key;
            }
        }
        // Merge a complete successor into it.
        let next_key = self
            .entries
            .range((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded))
            .next()
            .map(|(k, e)| (*k, e.is_complete()));
        if let Some((next_key, true)) = next_key {
            if let Some(next) = self.entries.remove(&next_key) {
                if let Some(current) = self.entries.get_mut(&key) {
                    current.absorb(next);
                }
            }
        }
        self.release_front();
    }

    /// Moves the checkpoint past complete entries at the front.
    fn release_front(&mut self) {
        while let Some(mut front) = self.entries.first_entry() {
            if !front.get().is_complete() {
                break;
            }
            let entry = front.get_mut();
            if let Some(end) = entry.end.take() {
                let checkpoint = &mut self.checkpoint;
                union_into(&mut checkpoint.gtid_set, end.earlier_gtids);
                if let Some(gtid) = end.last_gtid {
                    checkpoint.gtid_set.add(&gtid);
                    checkpoint.gtid = Some(gtid);
                }
                checkpoint.binlog = end.binlog;
                checkpoint.timestamp = end.timestamp;
                self.checkpoint_source = end.source;
                self.checkpoint_moved = true;
            }
            self.completed_transactions += entry.transaction_count;
            front.remove();
        }
    }
}

/// Appends `later` to `earlier` (both are set for complete entries).
fn absorb_end(earlier: &mut Option<EntryEnd>, later: Option<EntryEnd>) {
    match (earlier.as_mut(), later) {
        (Some(earlier), Some(later)) => earlier.absorb(later),
        (None, later) => *earlier = later,
        (Some(_), None) => {}
    }
}

#[cfg(test)]
mod tests {
    use outbox_binlog::Flavor;

    use super::*;

    fn at(offset: u64) -> CheckpointPosition {
        CheckpointPosition::at(BinlogPosition::new("binlog.000001", offset))
    }

    fn server(server_id: u32) -> SourceIdentity {
        SourceIdentity {
            flavor: Flavor::Mariadb,
            server_id,
            server_uuid: None,
        }
    }

    fn gtid_only() -> BinlogPosition {
        BinlogPosition::new("", 4)
    }

    fn mariadb_gtid(server_id: u32, sequence: u64) -> Gtid {
        Gtid::Mariadb {
            domain_id: 0,
            server_id,
            sequence,
        }
    }

    /// The offset of the boundary's checkpoint, or `None` when the transaction must stay open.
    fn boundary_offset(tracker: &AckTracker, last_sent: Option<u64>) -> Option<u64> {
        tracker
            .exactly_once_boundary(&server(1), last_sent, &gtid_only())
            .map(|boundary| boundary.checkpoint.position.binlog.position)
    }

    #[test]
    fn a_kafka_transaction_never_ends_inside_a_binlog_transaction() {
        let mut tracker = AckTracker::new(at(4));
        // Binlog transaction 1 (records 0, 1) ends at 500; transaction 2 (record 2) is open.
        let first = tracker.add_record();
        let second = tracker.add_record();
        tracker.end_transaction(at(500));
        let third = tracker.add_record();
        // Nothing delivered: not even the records of the ended transaction may be committed.
        assert_eq!(boundary_offset(&tracker, Some(first.sequence())), None);
        tracker.ack(first).unwrap();
        assert_eq!(
            boundary_offset(&tracker, Some(first.sequence())),
            None,
            "record 1 of the same binlog transaction is still in flight"
        );
        tracker.ack(second).unwrap();
        assert_eq!(
            boundary_offset(&tracker, Some(second.sequence())),
            Some(500),
            "both records of transaction 1 are delivered: commit at its end"
        );
        // Record 2 belongs to the open transaction: once sent, the Kafka transaction waits
        // for its binlog transaction's end, even when the record itself is delivered.
        tracker.ack(third).unwrap();
        assert_eq!(boundary_offset(&tracker, Some(third.sequence())), None);
        tracker.end_transaction(at(900));
        assert_eq!(boundary_offset(&tracker, Some(third.sequence())), Some(900));
    }

    #[test]
    fn an_empty_kafka_transaction_commits_the_current_checkpoint() {
        let mut tracker = AckTracker::new(at(4));
        let start = tracker
            .exactly_once_boundary(&server(1), None, &gtid_only())
            .unwrap();
        assert_eq!(start.checkpoint.position, at(4));
        assert_eq!(start.checkpoint.source, server(1));
        assert!(start.caught_up);
        assert_eq!(
            start.checkpoint.leader_epoch, None,
            "the sink stamps the epoch"
        );
        // A heartbeat moves the checkpoint without records.
        tracker.end_transaction(at(300));
        assert_eq!(boundary_offset(&tracker, None), Some(300));
        // An open transaction with a record in flight: the checkpoint stays, not caught up.
        let token = tracker.add_record();
        let held = tracker
            .exactly_once_boundary(&server(1), None, &gtid_only())
            .unwrap();
        assert_eq!(held.checkpoint.position.binlog.position, 300);
        assert!(!held.caught_up);
        tracker.ack(token).unwrap();
        tracker.end_transaction(at(700));
        let done = tracker
            .exactly_once_boundary(&server(1), Some(token.sequence()), &gtid_only())
            .unwrap();
        assert_eq!(done.checkpoint.position.binlog.position, 700);
        assert!(done.caught_up);
    }

    #[test]
    fn after_a_failover_the_boundary_names_the_new_server_and_is_gtid_only() {
        let mut tracker = AckTracker::new(at(4));
        tracker.end_transaction(CheckpointPosition {
            gtid: Some(mariadb_gtid(1, 5)),
            ..at(500)
        });
        // The old server's position keeps its name and its file+position.
        let old = tracker
            .exactly_once_boundary(&server(1), None, &gtid_only())
            .unwrap();
        assert_eq!(
            (old.checkpoint.source, old.checkpoint.position.binlog),
            (server(1), BinlogPosition::new("binlog.000001", 500))
        );
        // The stream moved; until the checkpoint passes a position of the new server, the
        // boundary still names the old one.
        tracker.switch_source(server(2));
        let token = tracker.add_record();
        let before = tracker
            .exactly_once_boundary(&server(1), None, &gtid_only())
            .unwrap();
        assert_eq!(before.checkpoint.source, server(1));
        tracker.ack(token).unwrap();
        tracker.end_transaction(CheckpointPosition {
            gtid: Some(mariadb_gtid(2, 6)),
            ..at(900)
        });
        let moved = tracker
            .exactly_once_boundary(&server(1), Some(token.sequence()), &gtid_only())
            .unwrap();
        assert_eq!(moved.checkpoint.source, server(2));
        assert_eq!(moved.checkpoint.position.binlog, gtid_only());
        assert_eq!(moved.checkpoint.position.gtid_set.to_string(), "0-2-6");
        // Asked with the new server as the starting identity, the position stays as read.
        let same = tracker
            .exactly_once_boundary(&server(2), None, &gtid_only())
            .unwrap();
        assert_eq!(same.checkpoint.position.binlog.position, 900);
    }
}
