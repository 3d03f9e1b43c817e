//! The ack tracker's safety rule, checked against a simple model: the checkpoint is always
//! the end of the longest fully acked prefix of ended transactions.

use outbox_binlog::{BinlogPosition, Flavor, Gtid, GtidSet};
use outbox_checkpoint::{AckError, AckToken, AckTracker, CheckpointPosition};
use proptest::prelude::*;

/// End position of transaction `index`: files rotate every 7 transactions.
fn end_position(index: usize) -> BinlogPosition {
    BinlogPosition::new(
        format!("binlog.{:06}", 1 + index / 7),
        4 + 100 * (index as u64 % 7 + 1),
    )
}

fn start_position() -> CheckpointPosition {
    CheckpointPosition::at(BinlogPosition::new("binlog.000001", 4))
}

/// A transaction's GTID, `None` for heartbeats. MariaDB: two replication domains,
/// alternating. MySQL: two source UUIDs, alternating (so each has gaps: many intervals).
fn gtid_of(index: usize, heartbeat: bool, mysql: bool) -> Option<Gtid> {
    if heartbeat {
        return None;
    }
    Some(if mysql {
        Gtid::Mysql {
            source_uuid: if index % 2 == 0 {
                "3e11fa47-71ca-11e1-9e33-c80aa9429562"
            } else {
                "4e11fa47-71ca-11e1-9e33-c80aa9429562"
            }
            .to_owned(),
            tag: None,
            transaction_id: index as u64 + 1,
        }
    } else {
        Gtid::Mariadb {
            domain_id: (index % 2) as u32,
            server_id: 1,
            sequence: index as u64 + 1,
        }
    })
}

fn end_of(index: usize, heartbeat: bool) -> CheckpointPosition {
    end_of_flavor(index, heartbeat, false)
}

fn end_of_flavor(index: usize, heartbeat: bool, mysql: bool) -> CheckpointPosition {
    CheckpointPosition {
        binlog: end_position(index),
        gtid: gtid_of(index, heartbeat, mysql),
        gtid_set: GtidSet::Empty,
        timestamp: if heartbeat { 0 } else { 1000 + index as u32 },
    }
}

/// The model's view of one transaction.
struct ModelTransaction {
    /// Token indexes (into `Model::acked`) of its records.
    records: Vec<usize>,
    ended: bool,
    heartbeat: bool,
}

struct Model {
    transactions: Vec<ModelTransaction>,
    acked: Vec<bool>,
    /// MySQL GTIDs instead of MariaDB ones.
    mysql: bool,
}

impl Model {
    /// Index of the last transaction of the longest ended, fully acked prefix.
    fn expected_checkpoint(&self) -> Option<usize> {
        let mut last = None;
        for (index, transaction) in self.transactions.iter().enumerate() {
            if !transaction.ended || transaction.records.iter().any(|&r| !self.acked[r]) {
                break;
            }
            last = Some(index);
        }
        last
    }

    /// GTID set and timestamp after transaction `index`.
    fn expected_gtid_set_and_timestamp(&self, index: usize) -> (GtidSet, u32) {
        let mut set = GtidSet::Empty;
        let mut timestamp = 0;
        for (i, transaction) in self.transactions.iter().enumerate().take(index + 1) {
            if let Some(gtid) = gtid_of(i, transaction.heartbeat, self.mysql) {
                set.add(&gtid);
            }
            if !transaction.heartbeat {
                timestamp = 1000 + i as u32;
            }
        }
        (set, timestamp)
    }

    fn ended_with_unacked(&self) -> usize {
        self.transactions
            .iter()
            .filter(|t| t.ended && t.records.iter().any(|&r| !self.acked[r]))
            .count()
    }
}

enum StreamStep {
    Record(usize),
    End(usize),
}

/// Runs one scenario and checks the invariants after every step.
fn run_scenario(transactions: &[(usize, bool)], choices: &[u32], final_seed: u64, mysql: bool) {
    let mut steps = Vec::new();
    for (index, &(size, heartbeat)) in transactions.iter().enumerate() {
        let size = if heartbeat { 0 } else { size };
        for _ in 0..size {
            steps.push(StreamStep::Record(index));
        }
        steps.push(StreamStep::End(index));
    }
    let mut tracker = AckTracker::new(start_position());
    let mut model = Model {
        transactions: transactions
            .iter()
            .map(|&(_, heartbeat)| ModelTransaction {
                records: Vec::new(),
                ended: false,
                heartbeat,
            })
            .collect(),
        acked: Vec::new(),
        mysql,
    };
    let mut tokens: Vec<AckToken> = Vec::new();
    let mut pending: Vec<usize> = Vec::new();
    let mut next_step = 0;
    let mut last_yielded: Option<usize> = None;

    let mut check = |tracker: &mut AckTracker, model: &Model, pending: &[usize]| {
        let expected = model.expected_checkpoint();
        let checkpoint = tracker.checkpoint().clone();
        match expected {
            None => assert_eq!(checkpoint, start_position()),
            Some(index) => {
                let (set, timestamp) = model.expected_gtid_set_and_timestamp(index);
                assert_eq!(checkpoint.binlog, end_position(index), "checkpoint binlog");
                let last_gtid = (0..=index)
                    .rev()
                    .find_map(|i| gtid_of(i, model.transactions[i].heartbeat, model.mysql));
                assert_eq!(checkpoint.gtid, last_gtid, "gtid after {index}");
                assert_eq!(checkpoint.gtid_set, set, "gtid set after {index}");
                assert_eq!(checkpoint.timestamp, timestamp, "timestamp after {index}");
            }
        }
        // Never past an unacked record: every record of transactions up to the checkpoint is
        // acked (implied by the exact model match, asserted directly for clarity).
        if let Some(index) = expected {
            for transaction in &model.transactions[..=index] {
                assert!(transaction.records.iter().all(|&r| model.acked[r]));
            }
        }
        match tracker.acked_position() {
            Some(position) => {
                let index = expected.expect("moved means some prefix is acked");
                assert_eq!(position, checkpoint);
                assert!(
                    last_yielded.is_none_or(|last| last < index),
                    "monotonic and moved"
                );
                last_yielded = Some(index);
            }
            None => assert_eq!(expected, last_yielded, "a move was not reported"),
        }
        assert_eq!(tracker.in_flight(), pending.len());
        // Bounded memory: one entry per ended transaction with unacked records, at most
        // one merged entry between each two of those, plus the open one.
        assert!(
            tracker.tracked_transactions() <= 2 * model.ended_with_unacked() + 2,
            "tracked {} with {} unacked transactions",
            tracker.tracked_transactions(),
            model.ended_with_unacked()
        );
    };

    let do_step = |tracker: &mut AckTracker,
                   model: &mut Model,
                   pending: &mut Vec<usize>,
                   tokens: &mut Vec<AckToken>,
                   step: &StreamStep| match *step {
        StreamStep::Record(index) => {
            tokens.push(tracker.add_record());
            let record = model.acked.len();
            model.acked.push(false);
            model.transactions[index].records.push(record);
            pending.push(record);
        }
        StreamStep::End(index) => {
            tracker.end_transaction(end_of_flavor(
                index,
                model.transactions[index].heartbeat,
                model.mysql,
            ));
            model.transactions[index].ended = true;
        }
    };

    // Each choice acks a pending record or takes the next stream step; once the choices run
    // out, the remaining steps follow (no acks), each checked like the others.
    let mut remaining_choices = choices.iter().copied();
    loop {
        let choice = remaining_choices.next();
        if choice.is_none() && next_step >= steps.len() {
            break;
        }
        let ack_choice = choice.filter(|&choice| choice % 3 == 0 || next_step == steps.len());
        match ack_choice {
            Some(choice) if !pending.is_empty() => {
                let record = pending.swap_remove((choice / 3) as usize % pending.len());
                tracker.ack(tokens[record]).unwrap();
                model.acked[record] = true;
            }
            _ if next_step < steps.len() => {
                do_step(
                    &mut tracker,
                    &mut model,
                    &mut pending,
                    &mut tokens,
                    &steps[next_step],
                );
                next_step += 1;
            }
            _ => {}
        }
        check(&mut tracker, &model, &pending);
    }
    let mut seed = final_seed | 1;
    while !pending.is_empty() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let record = pending.swap_remove(seed as usize % pending.len());
        tracker.ack(tokens[record]).unwrap();
        model.acked[record] = true;
        check(&mut tracker, &model, &pending);
    }
    // Everything acked: the checkpoint reached the last transaction.
    if let Some(last) = transactions.len().checked_sub(1) {
        assert_eq!(tracker.checkpoint().binlog, end_position(last));
        assert_eq!(model.expected_checkpoint(), Some(last));
    }
    assert_eq!(tracker.in_flight(), 0);
    assert!(tracker.tracked_transactions() <= 1);
    // Every token is now a double ack.
    for token in tokens {
        assert_eq!(tracker.ack(token), Err(AckError::DoubleAck { token }));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Random transaction sizes (0 = an empty transaction), heartbeats, and random
    /// interleavings of the stream with acks in random order.
    #[test]
    fn checkpoint_is_always_the_end_of_the_fully_acked_prefix(
        transactions in prop::collection::vec((0usize..6, prop::bool::weighted(0.25)), 0..40),
        choices in prop::collection::vec(any::<u32>(), 0..300),
        final_seed in any::<u64>(),
        mysql in any::<bool>(),
    ) {
        run_scenario(&transactions, &choices, final_seed, mysql);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The same rule over hundreds of transactions with acks spread across many of them, so
    /// entries complete far from both ends of the tracker's deque (where their merges are
    /// batched) as well as near them.
    #[test]
    fn checkpoint_rule_holds_across_many_out_of_order_entries(
        transactions in prop::collection::vec((0usize..4, prop::bool::weighted(0.2)), 150..300),
        choices in prop::collection::vec(any::<u32>(), 600..1500),
        final_seed in any::<u64>(),
        mysql in any::<bool>(),
    ) {
        run_scenario(&transactions, &choices, final_seed, mysql);
    }
}

#[test]
fn double_ack_and_unknown_tokens_are_errors_and_change_nothing() {
    let mut tracker = AckTracker::new(start_position());
    let first = tracker.add_record();
    let second = tracker.add_record();
    tracker.ack(first).unwrap();
    assert_eq!(
        tracker.ack(first),
        Err(AckError::DoubleAck { token: first })
    );
    assert_eq!(tracker.in_flight(), 1);
    tracker.end_transaction(end_of(0, false));
    assert_eq!(tracker.acked_position(), None, "second record is unacked");
    tracker.ack(second).unwrap();
    assert_eq!(tracker.checkpoint().binlog, end_position(0));
    // Released transactions: acking again is still a double ack, not a panic.
    assert_eq!(
        tracker.ack(second),
        Err(AckError::DoubleAck { token: second })
    );
    assert_eq!(tracker.in_flight(), 0);

    let mut other = AckTracker::new(start_position());
    let foreign = other.add_record();
    let error = tracker.ack(foreign).unwrap_err();
    assert_eq!(error, AckError::UnknownToken { token: foreign });
    assert!(error.to_string().contains("unknown"), "{error}");
    assert_eq!(tracker.checkpoint().binlog, end_position(0));
}

#[test]
fn acked_position_reports_each_move_once() {
    let mut tracker = AckTracker::new(start_position());
    assert_eq!(tracker.acked_position(), None);
    let token = tracker.add_record();
    tracker.ack(token).unwrap();
    assert_eq!(tracker.acked_position(), None, "transaction not ended yet");
    tracker.end_transaction(end_of(0, false));
    let moved = tracker
        .acked_position()
        .expect("acked before the end: moves at the end");
    assert_eq!(moved.binlog, end_position(0));
    assert_eq!(tracker.acked_position(), None);
    assert_eq!(tracker.checkpoint().binlog, end_position(0));
    assert_eq!(tracker.completed_transactions(), 1);
}

#[test]
fn gtid_set_accumulates_from_the_start_set() {
    let mut start = start_position();
    start.gtid_set = GtidSet::parse(Flavor::Mariadb, "0-1-5,7-1-3").unwrap();
    start.timestamp = 99;
    let mut tracker = AckTracker::new(start);
    // A heartbeat first: keeps the set and the timestamp.
    tracker.end_transaction(CheckpointPosition::at(end_position(0)));
    assert_eq!(tracker.checkpoint().gtid_set.to_string(), "0-1-5,7-1-3");
    assert_eq!(tracker.checkpoint().timestamp, 99);
    let token = tracker.add_record();
    let mut end = end_of(1, false);
    end.gtid = Some(Gtid::Mariadb {
        domain_id: 0,
        server_id: 2,
        sequence: 6,
    });
    // Ignored: the tracker owns the set.
    end.gtid_set = GtidSet::parse(Flavor::Mariadb, "9-9-9").unwrap();
    tracker.end_transaction(end);
    assert_eq!(tracker.checkpoint().gtid_set.to_string(), "0-1-5,7-1-3");
    tracker.ack(token).unwrap();
    assert_eq!(tracker.checkpoint().gtid_set.to_string(), "0-2-6,7-1-3");
    assert_eq!(tracker.checkpoint().timestamp, 1001);
    // A heartbeat after it moves the position but keeps the last transaction's GTID.
    tracker.end_transaction(CheckpointPosition::at(end_position(2)));
    assert_eq!(tracker.checkpoint().binlog, end_position(2));
    assert_eq!(
        tracker.checkpoint().gtid,
        Some(Gtid::Mariadb {
            domain_id: 0,
            server_id: 2,
            sequence: 6
        })
    );
    assert_eq!(tracker.checkpoint().timestamp, 1001);
}

#[test]
fn memory_stays_bounded_under_many_heartbeats_behind_a_stuck_record() {
    let mut tracker = AckTracker::new(start_position());
    let stuck = tracker.add_record();
    tracker.end_transaction(end_of(0, false));
    for index in 1..100_000 {
        tracker.end_transaction(CheckpointPosition::at(end_position(index)));
        assert!(tracker.tracked_transactions() <= 2);
    }
    // Fully acked transactions behind the stuck one also coalesce.
    for index in 100_000..150_000 {
        let token = tracker.add_record();
        tracker.end_transaction(end_of(index, false));
        tracker.ack(token).unwrap();
        assert!(tracker.tracked_transactions() <= 2, "at {index}");
    }
    assert_eq!(
        tracker.checkpoint(),
        &start_position(),
        "stuck record holds it back"
    );
    assert_eq!(tracker.in_flight(), 1);
    tracker.ack(stuck).unwrap();
    assert_eq!(tracker.checkpoint().binlog, end_position(149_999));
    assert_eq!(tracker.completed_transactions(), 150_000);
    assert_eq!(tracker.tracked_transactions(), 0);
}

#[test]
fn idle_source_heartbeats_move_the_checkpoint_without_growing() {
    let mut tracker = AckTracker::new(start_position());
    for index in 0..10_000 {
        tracker.end_transaction(CheckpointPosition::at(end_position(index)));
        assert_eq!(tracker.tracked_transactions(), 0);
    }
    assert_eq!(tracker.checkpoint().binlog, end_position(9_999));
}

#[test]
fn a_big_open_transaction_is_not_released_until_it_ends() {
    let mut tracker = AckTracker::new(start_position());
    let tokens: Vec<AckToken> = (0..10_000).map(|_| tracker.add_record()).collect();
    for token in tokens.iter().rev() {
        tracker.ack(*token).unwrap();
    }
    assert_eq!(tracker.in_flight(), 0);
    assert_eq!(tracker.acked_position(), None, "its end is not known yet");
    let late = tracker.add_record();
    tracker.end_transaction(end_of(0, false));
    assert_eq!(tracker.acked_position(), None);
    tracker.ack(late).unwrap();
    assert_eq!(tracker.acked_position().unwrap().binlog, end_position(0));
}

#[test]
fn a_reconnect_inside_a_transaction_holds_the_end_until_both_copies_are_acked() {
    let mut tracker = AckTracker::new(start_position());
    // The first copy: two rows of the transaction, then the stream breaks.
    let partial = [tracker.add_record(), tracker.add_record()];
    // The reader resumes at the last boundary and re-yields all three rows, then the commit.
    let full: Vec<AckToken> = (0..3).map(|_| tracker.add_record()).collect();
    tracker.end_transaction(end_of(0, false));
    for token in &full {
        tracker.ack(*token).unwrap();
    }
    assert_eq!(
        tracker.acked_position(),
        None,
        "the first copy is still in flight"
    );
    tracker.ack(partial[0]).unwrap();
    assert_eq!(tracker.acked_position(), None);
    tracker.ack(partial[1]).unwrap();
    assert_eq!(tracker.acked_position().unwrap().binlog, end_position(0));
    assert_eq!(tracker.in_flight(), 0);
}

#[test]
fn a_position_carries_the_server_it_was_read_from() {
    let new_server = outbox_checkpoint::SourceIdentity {
        flavor: Flavor::Mariadb,
        server_id: 2,
        server_uuid: None,
    };
    let mut tracker = AckTracker::new(start_position());
    let old_record = tracker.add_record();
    tracker.end_transaction(end_of(0, false));
    // The stream moves while a transaction of the new server is open: its end is the new
    // server's, and so are the ends after it.
    let new_record = tracker.add_record();
    tracker.switch_source(new_server.clone());
    tracker.end_transaction(end_of(1, false));
    tracker.ack(new_record).unwrap();
    assert_eq!(tracker.acked_position(), None, "the old record is unacked");
    assert_eq!(
        tracker.checkpoint_source(),
        None,
        "still the starting server"
    );
    tracker.ack(old_record).unwrap();
    let moved = tracker.acked_position().unwrap();
    assert_eq!(moved.binlog, end_position(1));
    assert_eq!(tracker.checkpoint_source(), Some(&new_server));
}

/// `records_passed` splits the record sequence exactly at the checkpoint: records of a
/// transaction that has not ended, or is not fully acked, are never counted as passed,
/// whatever the order of acks (the exactly-once sink relies on it to cut Kafka
/// transactions at binlog transaction boundaries).
#[test]
fn records_passed_counts_exactly_the_records_before_the_checkpoint() {
    let mut tracker = AckTracker::new(start_position());
    assert_eq!(tracker.records_passed(), 0);
    let a = tracker.add_record();
    let b = tracker.add_record();
    tracker.end_transaction(end_of(0, false));
    let c = tracker.add_record();
    tracker.ack(b).unwrap();
    tracker.ack(c).unwrap();
    assert_eq!(tracker.records_passed(), 0, "record a is unacked");
    tracker.ack(a).unwrap();
    assert_eq!(
        tracker.records_passed(),
        2,
        "transaction 0 passed; c's transaction is still open although c is acked"
    );
    // An empty transaction (no records) and a heartbeat move the checkpoint, not the count.
    tracker.end_transaction(end_of(1, false));
    assert_eq!(tracker.records_passed(), 3);
    tracker.end_transaction(end_of(2, true));
    assert_eq!(tracker.records_passed(), 3);
    assert_eq!(tracker.checkpoint().binlog, end_position(2));
}
