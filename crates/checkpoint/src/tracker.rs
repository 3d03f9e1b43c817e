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
//! [`AckTracker::tracked_transactions`] is that count of entries. They are stored in a deque
//! in binlog order; merging a run far from both ends of it is deferred and done in batches,
//! so the deque holds at most twice that count plus a small constant.
//!
//! # Cost
//! Adding a record and ending a transaction are O(1). An ack of a record in the oldest or
//! the newest entry (acks come almost in order) is O(1); any other finds its entry by
//! binary search. Merges and releases are amortised O(1).
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

mod entries;
mod gtid_add;

use std::sync::atomic::{AtomicU64, Ordering};

use outbox_binlog::{BinlogPosition, GtidSet};

use crate::checkpoint::{Checkpoint, CheckpointPosition, SourceIdentity};
use crate::gtid_union::union_into;
use entries::{Entries, Entry, EntryEnd};
use gtid_add::add_gtid;

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
    /// Entries in binlog order: the ended transactions the checkpoint has not passed yet
    /// (fully acked runs merged) and, last, the open transaction's entry, if a record was
    /// added since the last end.
    entries: Entries,
    /// Next record sequence number to hand out.
    next_sequence: u64,
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
            entries: Entries::default(),
            next_sequence: 0,
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
        self.entries.add_record(sequence);
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
        match self.entries.back_mut() {
            // The open transaction ends; it may be complete already (acked before its end).
            Some(open) if open.end.is_none() => {
                open.end = Some(end);
                if open.unacked_count == 0 {
                    self.entry_completed(self.entries.back_index());
                }
            }
            // No records since the last end, right behind a complete run (an incomplete
            // entry before it holds the checkpoint back): the run grows, the entries do not.
            Some(run) if run.is_complete() => {
                run.transaction_count += 1;
                if let Some(run_end) = run.end.as_mut() {
                    run_end.absorb(end);
                }
            }
            // No records since the last end, behind an incomplete entry.
            Some(_) => {
                self.entries
                    .push_ended(Entry::empty(self.next_sequence, end));
                self.entry_completed(self.entries.back_index());
            }
            // Nothing tracked: the checkpoint moves at once.
            None => self.release(end, 1),
        }
    }

    /// Marks a record delivered. Acks may come in any order.
    pub fn ack(&mut self, token: AckToken) -> Result<(), AckError> {
        if token.tracker_id != self.tracker_id || token.sequence >= self.next_sequence {
            return Err(AckError::UnknownToken { token });
        }
        let Some(index) = self.entries.find(token.sequence) else {
            return Err(AckError::DoubleAck { token });
        };
        let Some(entry) = self.entries.get_mut(index) else {
            return Err(AckError::DoubleAck { token });
        };
        if entry.is_complete() {
            // Every record of a complete entry is acked (its bits are released).
            return Err(AckError::DoubleAck { token });
        }
        let index_in_entry = token.sequence - entry.first_sequence;
        let bit = 1u64 << (index_in_entry % 64);
        let Some(word) = entry.acked_bits.word_mut(index_in_entry) else {
            return Err(AckError::DoubleAck { token });
        };
        if *word & bit != 0 {
            return Err(AckError::DoubleAck { token });
        }
        *word |= bit;
        entry.unacked_count -= 1;
        self.in_flight -= 1;
        if entry.unacked_count == 0 && entry.end.is_some() {
            self.entry_completed(Some(index));
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
            .front()
            .map_or(self.next_sequence, |entry| entry.first_sequence)
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
        self.entries.logical_len()
    }

    /// Called when the entry at `index` became complete (ended and fully acked): merges it
    /// with complete neighbours, then releases complete entries from the front.
    fn entry_completed(&mut self, index: Option<usize>) {
        if let Some(index) = index {
            self.entries.completed(index);
        }
        while let Some(entry) = self.entries.pop_front_complete() {
            if let Some(end) = entry.end {
                self.release(end, entry.transaction_count);
            }
        }
        self.entries.compact_if_sparse();
    }

    /// Moves the checkpoint past `end`, the end of `transactions` transactions (or
    /// heartbeats) whose records are all acked.
    fn release(&mut self, end: EntryEnd, transactions: u64) {
        let checkpoint = &mut self.checkpoint;
        union_into(&mut checkpoint.gtid_set, end.earlier_gtids);
        if let Some(gtid) = end.last_gtid {
            add_gtid(&mut checkpoint.gtid_set, &gtid);
            checkpoint.gtid = Some(gtid);
        }
        checkpoint.binlog = end.binlog;
        checkpoint.timestamp = end.timestamp;
        self.checkpoint_source = end.source;
        self.checkpoint_moved = true;
        self.completed_transactions += transactions;
    }
}

#[cfg(test)]
mod tests {
    use outbox_binlog::{Flavor, Gtid};

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

    /// A small xorshift, so the shuffled tests are repeatable.
    struct Xorshift(u64);

    impl Xorshift {
        fn below(&mut self, bound: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % bound as u64) as usize
        }
    }

    /// The deque's physical size stays within twice the logical bound (plus the slack), and
    /// the logical count within the module docs' bound (here every transaction has one
    /// record, so the ended ones with unacked records are at most the records in flight).
    fn assert_bounded(tracker: &AckTracker) {
        let logical = tracker.tracked_transactions();
        assert!(
            tracker.entries.physical_len() <= 2 * logical + entries::COMPACTION_SLACK,
            "{} entries stored for {logical} tracked",
            tracker.entries.physical_len()
        );
        assert!(logical <= 2 * tracker.in_flight() + 2, "{logical} tracked");
        tracker.entries.assert_links_counted();
    }

    /// One-record transactions acked in a random order within a wide window: the checkpoint
    /// is always the end of the longest acked prefix, with the GTID of its last transaction.
    #[test]
    fn shuffled_acks_across_many_entries_keep_the_prefix_rule_and_the_bound() {
        const TRANSACTIONS: usize = 20_000;
        const WINDOW: usize = 2_000;
        let mut random = Xorshift(0x2545_f491_4f6c_dd1d);
        let mut tracker = AckTracker::new(at(4));
        let mut window: Vec<(usize, AckToken)> = Vec::new();
        let mut unacked = std::collections::BTreeSet::new();
        let check = |tracker: &AckTracker, unacked: &std::collections::BTreeSet<usize>, ended| {
            // The last transaction of the acked prefix: before the first unacked one.
            let prefix_end = unacked.first().copied().unwrap_or(ended);
            let checkpoint = tracker.checkpoint();
            match prefix_end.checked_sub(1) {
                None => assert_eq!(checkpoint, &at(4)),
                Some(last) => {
                    assert_eq!(checkpoint.binlog.position, 100 + last as u64);
                    let gtid = mariadb_gtid(1, last as u64 + 1);
                    assert_eq!(checkpoint.gtid.as_ref(), Some(&gtid));
                    assert_eq!(checkpoint.gtid_set.to_string(), gtid.to_string());
                }
            }
            assert_eq!(tracker.records_passed(), prefix_end as u64);
            assert_bounded(tracker);
        };
        for index in 0..TRANSACTIONS {
            if window.len() == WINDOW {
                let (acked, token) = window.swap_remove(random.below(WINDOW));
                tracker.ack(token).unwrap();
                unacked.remove(&acked);
                check(&tracker, &unacked, index);
            }
            window.push((index, tracker.add_record()));
            unacked.insert(index);
            tracker.end_transaction(CheckpointPosition {
                gtid: Some(mariadb_gtid(1, index as u64 + 1)),
                ..at(100 + index as u64)
            });
            check(&tracker, &unacked, index + 1);
        }
        while !window.is_empty() {
            let (acked, token) = window.swap_remove(random.below(window.len()));
            tracker.ack(token).unwrap();
            unacked.remove(&acked);
            check(&tracker, &unacked, TRANSACTIONS);
        }
        assert_eq!(tracker.completed_transactions(), TRANSACTIONS as u64);
        assert_eq!(tracker.tracked_transactions(), 0);
        assert_eq!(tracker.entries.physical_len(), 0);
    }

    /// Transactions completing in the middle of a long deque are merged in a batch once the
    /// unmerged pairs outnumber the runs, not one removal at a time, and not never.
    #[test]
    fn complete_entries_far_from_both_ends_are_compacted() {
        let mut tracker = AckTracker::new(at(4));
        let tokens: Vec<AckToken> = (0..1_000u64)
            .map(|index| {
                let token = tracker.add_record();
                tracker.end_transaction(at(100 + index));
                token
            })
            .collect();
        let mut smallest = tracker.entries.physical_len();
        for token in &tokens[100..900] {
            tracker.ack(*token).unwrap();
            assert_bounded(&tracker);
            smallest = smallest.min(tracker.entries.physical_len());
        }
        // 100 incomplete entries, one run of 800, 100 incomplete.
        assert_eq!(tracker.tracked_transactions(), 201);
        assert!(smallest < 1_000, "never compacted");
        assert_eq!(tracker.checkpoint(), &at(4));
        for token in &tokens[..100] {
            tracker.ack(*token).unwrap();
        }
        assert_eq!(tracker.checkpoint().binlog.position, 100 + 899);
        assert_eq!(tracker.tracked_transactions(), 100);
        assert_eq!(tracker.completed_transactions(), 900);
        for token in tokens[900..].iter().rev() {
            tracker.ack(*token).unwrap();
            assert_bounded(&tracker);
        }
        assert_eq!(tracker.checkpoint().binlog.position, 100 + 999);
        assert_eq!(tracker.entries.physical_len(), 0);
    }

    /// A stuck first record, then many transactions acked slightly out of order, with empty
    /// transactions and heartbeats between them: the tracker holds the stuck entry and one
    /// run, however many transactions pass, and stores not much more.
    #[test]
    fn a_stuck_record_followed_by_many_acked_transactions_does_not_grow_the_tracker() {
        let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
        let mut tracker = AckTracker::new(at(4));
        let stuck = tracker.add_record();
        tracker.end_transaction(at(10));
        let mut window: Vec<AckToken> = Vec::new();
        for index in 0..100_000u64 {
            match index % 5 {
                0 => tracker.end_transaction(at(100 + index)),
                1 => tracker.end_transaction(CheckpointPosition {
                    gtid: Some(mariadb_gtid(1, index)),
                    ..at(100 + index)
                }),
                _ => {
                    window.push(tracker.add_record());
                    tracker.end_transaction(CheckpointPosition {
                        gtid: Some(mariadb_gtid(1, index)),
                        ..at(100 + index)
                    });
                }
            }
            if window.len() == 8 {
                while !window.is_empty() {
                    let token = window.swap_remove(random.below(window.len()));
                    tracker.ack(token).unwrap();
                }
            }
            // The stuck entry, one run, up to 8 unacked transactions and runs between them.
            assert!(tracker.tracked_transactions() <= 2 + 2 * 8, "at {index}");
            assert!(tracker.entries.physical_len() <= 2 + 2 * 8, "at {index}");
        }
        for token in window {
            tracker.ack(token).unwrap();
        }
        assert_eq!(tracker.tracked_transactions(), 2);
        assert_eq!(tracker.checkpoint(), &at(4));
        tracker.ack(stuck).unwrap();
        assert_eq!(tracker.checkpoint().binlog.position, 100 + 99_999);
        assert_eq!(
            tracker.checkpoint().gtid_set.to_string(),
            "0-1-99999",
            "the last transaction with a GTID"
        );
        assert_eq!(tracker.completed_transactions(), 100_001);
        assert_eq!(tracker.tracked_transactions(), 0);
    }

    /// Transaction `index`'s end in the model test: three MariaDB domains in turn (so the
    /// order GTIDs are folded in matters), none for a heartbeat.
    fn model_end(index: usize, heartbeat: bool) -> CheckpointPosition {
        CheckpointPosition {
            gtid: (!heartbeat).then_some(Gtid::Mariadb {
                domain_id: (index % 3) as u32,
                server_id: 1,
                sequence: index as u64 + 1,
            }),
            timestamp: if heartbeat { 0 } else { 1000 + index as u32 },
            ..at(100 + index as u64)
        }
    }

    /// Checks the tracker against the transactions of the model (`records` tokens per
    /// transaction, `ended` of them ended) and `acked` (per record sequence).
    fn check_against_model(
        tracker: &AckTracker,
        transactions: &[(Vec<u64>, bool)],
        ended: usize,
        acked: &[bool],
    ) {
        let passed = transactions[..ended]
            .iter()
            .take_while(|(records, _)| records.iter().all(|&r| acked[r as usize]))
            .count();
        let mut expected = at(4);
        for (index, (_, heartbeat)) in transactions[..passed].iter().enumerate() {
            let end = model_end(index, *heartbeat);
            if let Some(gtid) = end.gtid {
                expected.gtid_set.add(&gtid);
                expected.gtid = Some(gtid);
            }
            if end.timestamp != 0 {
                expected.timestamp = end.timestamp;
            }
            expected.binlog = end.binlog;
        }
        assert_eq!(tracker.checkpoint(), &expected);
        assert_eq!(tracker.completed_transactions(), passed as u64);
        let records_passed: usize = transactions[..passed].iter().map(|(r, _)| r.len()).sum();
        assert_eq!(tracker.records_passed(), records_passed as u64);
        assert_eq!(
            tracker.in_flight(),
            acked.iter().filter(|acked| !**acked).count()
        );
        let ended_unacked = transactions[..ended]
            .iter()
            .filter(|(records, _)| records.iter().any(|&r| !acked[r as usize]))
            .count();
        let logical = tracker.tracked_transactions();
        assert!(logical <= 2 * ended_unacked + 2, "{logical} tracked");
        assert!(tracker.entries.physical_len() <= 2 * logical + entries::COMPACTION_SLACK);
        tracker.entries.assert_links_counted();
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512, ..proptest::prelude::ProptestConfig::default()
        })]

        /// Every path of the deque (merges at either end, batched merges in the middle,
        /// compaction; the constants are tiny in unit tests) keeps the checkpoint at the end
        /// of the fully acked prefix, with the right GTID set, timestamp and counts.
        #[test]
        fn the_deque_keeps_the_prefix_rule_on_every_path(
            sizes in proptest::collection::vec(
                (0usize..5, proptest::bool::weighted(0.2)), 0..80),
            choices in proptest::collection::vec(0u32..3000, 0..500),
        ) {
            let mut tracker = AckTracker::new(at(4));
            let mut transactions: Vec<(Vec<u64>, bool)> = Vec::new();
            let mut tokens: Vec<AckToken> = Vec::new();
            let mut acked: Vec<bool> = Vec::new();
            let mut pending: Vec<usize> = Vec::new();
            // The stream: each transaction's records, then its end.
            let mut stream = sizes.iter().enumerate().flat_map(|(index, &(size, heartbeat))| {
                let size = if heartbeat { 0 } else { size };
                std::iter::repeat_n(None, size).chain([Some((index, heartbeat))])
            });
            let mut ended = 0;
            let mut choices = choices.into_iter();
            loop {
                let choice = choices.next();
                let ack = match choice {
                    Some(choice) if choice % 3 == 0 && !pending.is_empty() => Some(choice / 3),
                    None if !pending.is_empty() => Some(7),
                    _ => None,
                };
                if let Some(choice) = ack {
                    let record = pending.swap_remove(choice as usize % pending.len());
                    tracker.ack(tokens[record]).unwrap();
                    acked[record] = true;
                } else {
                    match stream.next() {
                        Some(None) => {
                            if transactions.len() == ended {
                                transactions.push((Vec::new(), false));
                            }
                            let token = tracker.add_record();
                            transactions[ended].0.push(token.sequence());
                            pending.push(tokens.len());
                            tokens.push(token);
                            acked.push(false);
                        }
                        Some(Some((index, heartbeat))) => {
                            if transactions.len() == ended {
                                transactions.push((Vec::new(), heartbeat));
                            }
                            tracker.end_transaction(model_end(index, heartbeat));
                            ended += 1;
                        }
                        None if choice.is_none() => break,
                        None => {}
                    }
                }
                check_against_model(&tracker, &transactions, ended, &acked);
            }
            proptest::prop_assert_eq!(tracker.tracked_transactions(), 0);
            for token in tokens {
                proptest::prop_assert_eq!(tracker.ack(token), Err(AckError::DoubleAck { token }));
            }
        }
    }
}
