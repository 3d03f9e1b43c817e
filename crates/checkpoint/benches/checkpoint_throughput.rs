//! Throughput of the ack tracker and commit latency of the file store.
//!
//! Run: `cargo bench -p outbox-checkpoint --bench checkpoint_throughput`
//! Prints one line per scenario, numbered; the numbers are written down in the crate README.
//!
//! For instruction counts (stable on a busy machine), run the built binary under
//! `valgrind --tool=callgrind` twice with different sizes and divide the difference of the
//! totals by the difference of the sizes; two environment variables make that practical:
//! * `CHECKPOINT_BENCH_RECORDS`: records (or heartbeats) per tracker scenario, default
//!   2 000 000;
//! * `CHECKPOINT_BENCH_ONLY`: run only the scenario with this number (the file store's
//!   scenario, which measures fsync rather than CPU, runs only when asked for or when this
//!   is unset).

use std::time::{Duration, Instant};

use outbox_binlog::{BinlogPosition, Flavor, Gtid};
use outbox_checkpoint::{
    AckToken, AckTracker, Checkpoint, CheckpointPosition, CheckpointStore, FileCheckpointStore,
    SourceIdentity,
};

/// Records per tracker scenario unless `CHECKPOINT_BENCH_RECORDS` says otherwise.
const DEFAULT_RECORDS: u64 = 2_000_000;
/// Acks arrive out of order within a window like this (the pipeline's in-flight limit).
const WINDOW: usize = 10_000;
/// "Nearly in order": each ack is one of this many oldest records in flight, as when a few
/// partitions' acks interleave (what the relay sees; issue 16).
const NEARLY_IN_ORDER_SPREAD: u64 = 16;

/// Which in-flight record is acked when the window is full.
#[derive(Clone, Copy)]
enum AckOrder {
    /// The oldest one.
    InOrder,
    /// One of the `NEARLY_IN_ORDER_SPREAD` oldest ones, at random.
    NearlyInOrder,
    /// Any one of the window, at random.
    Shuffled,
}

impl std::fmt::Display for AckOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AckOrder::InOrder => write!(f, "acks in order"),
            AckOrder::NearlyInOrder => write!(
                f,
                "acks nearly in order (one of the {NEARLY_IN_ORDER_SPREAD} oldest)"
            ),
            AckOrder::Shuffled => write!(f, "acks shuffled in a {WINDOW} window"),
        }
    }
}

/// A number from the environment, or `default` when unset; a bad value is a panic (the
/// bench is run by hand).
fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|error| panic!("{name}={text:?}: {error}")),
        Err(_) => default,
    }
}

/// A small xorshift so runs are repeatable without extra dependencies.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn gtid(flavor: Flavor, sequence: u64) -> Gtid {
    match flavor {
        Flavor::Mariadb => Gtid::Mariadb {
            domain_id: 0,
            server_id: 1,
            sequence,
        },
        Flavor::Mysql => Gtid::Mysql {
            source_uuid: "3e11fa47-71ca-11e1-9e33-c80aa9429562".to_owned(),
            tag: None,
            transaction_id: sequence,
        },
    }
}

/// Streams `records` records in transactions of 1..=`max_size` records, acking a record of
/// the in-flight window whenever it is full (which one: `order`); returns records per
/// second and how often the checkpoint moved.
fn tracker_throughput(flavor: Flavor, max_size: u64, order: AckOrder, records: u64) -> (f64, u64) {
    let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
    let mut tracker = AckTracker::new(CheckpointPosition::at(BinlogPosition::new(
        "binlog.000001",
        4,
    )));
    let mut window: std::collections::VecDeque<AckToken> =
        std::collections::VecDeque::with_capacity(WINDOW);
    let mut moves = 0u64;
    let mut added = 0u64;
    let mut transaction = 0u64;
    let started = Instant::now();
    while added < records {
        let size = 1 + random.next() % max_size;
        for _ in 0..size {
            if window.len() == WINDOW {
                let token = match order {
                    AckOrder::InOrder => window.pop_front(),
                    AckOrder::NearlyInOrder => {
                        let pick = (random.next() % NEARLY_IN_ORDER_SPREAD) as usize;
                        window.remove(pick)
                    }
                    AckOrder::Shuffled => {
                        let pick = (random.next() % WINDOW as u64) as usize;
                        window.swap_remove_back(pick)
                    }
                };
                let Some(token) = token else {
                    panic!("the window is full");
                };
                if tracker.ack(token).is_err() {
                    panic!("the bench acks each token once");
                }
                if tracker.acked_position().is_some() {
                    moves += 1;
                }
            }
            window.push_back(tracker.add_record());
            added += 1;
        }
        transaction += 1;
        tracker.end_transaction(CheckpointPosition {
            binlog: BinlogPosition::new("binlog.000001", 4 + transaction * 100),
            gtid: Some(gtid(flavor, transaction)),
            gtid_set: outbox_binlog::GtidSet::Empty,
            timestamp: 1_700_000_000,
        });
    }
    for token in window.drain(..) {
        if tracker.ack(token).is_err() {
            panic!("the bench acks each token once");
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(tracker.in_flight(), 0);
    assert_eq!(
        tracker.checkpoint().binlog,
        BinlogPosition::new("binlog.000001", 4 + transaction * 100)
    );
    (records as f64 / elapsed.as_secs_f64(), moves)
}

fn heartbeat_throughput(count: u64) -> f64 {
    let mut tracker = AckTracker::new(CheckpointPosition::at(BinlogPosition::new(
        "binlog.000001",
        4,
    )));
    let stuck = tracker.add_record();
    tracker.end_transaction(CheckpointPosition::at(BinlogPosition::new(
        "binlog.000001",
        10,
    )));
    let started = Instant::now();
    for index in 0..count {
        tracker.end_transaction(CheckpointPosition::at(BinlogPosition::new(
            "binlog.000001",
            20 + index,
        )));
    }
    let elapsed = started.elapsed();
    assert!(tracker.tracked_transactions() <= 2);
    if tracker.ack(stuck).is_err() {
        panic!("acked once");
    }
    count as f64 / elapsed.as_secs_f64()
}

fn file_store_commit_latency(runtime: &tokio::runtime::Runtime) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let store = FileCheckpointStore::new(dir.path().join("checkpoint.json"));
    let source = SourceIdentity {
        flavor: Flavor::Mariadb,
        server_id: 1,
        server_uuid: None,
    };
    let mut latencies = Vec::new();
    runtime.block_on(async {
        for index in 0..200u64 {
            let mut position =
                CheckpointPosition::at(BinlogPosition::new("binlog.000001", 4 + index));
            position.gtid_set.add(&gtid(Flavor::Mariadb, index + 1));
            let checkpoint = Checkpoint::new(source.clone(), position);
            let started = Instant::now();
            if let Err(error) = store.commit(&checkpoint).await {
                panic!("commit: {error}");
            }
            latencies.push(started.elapsed());
        }
    });
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    let p99 = latencies[latencies.len() * 99 / 100];
    (median, p99)
}

fn main() {
    let records = env_number("CHECKPOINT_BENCH_RECORDS", DEFAULT_RECORDS);
    let only = std::env::var("CHECKPOINT_BENCH_ONLY")
        .ok()
        .map(|_| env_number("CHECKPOINT_BENCH_ONLY", 0));
    let runs = |number: u64| only.is_none_or(|only| only == number);
    let tracker_scenarios = [
        (Flavor::Mariadb, 1, AckOrder::InOrder),
        (Flavor::Mariadb, 1, AckOrder::Shuffled),
        (Flavor::Mariadb, 10, AckOrder::Shuffled),
        (Flavor::Mysql, 1, AckOrder::Shuffled),
        (Flavor::Mysql, 10, AckOrder::Shuffled),
        (Flavor::Mariadb, 1, AckOrder::NearlyInOrder),
        (Flavor::Mysql, 1, AckOrder::InOrder),
    ];
    let mut number = 0;
    for (flavor, max_size, order) in tracker_scenarios {
        number += 1;
        if !runs(number) {
            continue;
        }
        let (rate, moves) = tracker_throughput(flavor, max_size, order, records);
        println!(
            "{number}. ack tracker, {flavor} GTIDs, 1..={max_size} records/transaction, {order}: {:.2} M records/s ({moves} checkpoint moves)",
            rate / 1e6
        );
    }
    number += 1;
    if runs(number) {
        println!(
            "{number}. ack tracker, heartbeats behind one stuck record: {:.2} M heartbeats/s",
            heartbeat_throughput(records) / 1e6
        );
    }
    number += 1;
    if !runs(number) {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|error| panic!("runtime: {error}"));
    let (median, p99) = file_store_commit_latency(&runtime);
    println!(
        "{number}. file store commit (write, fsync, rename, fsync dir) on {}: median {:?}, p99 {:?}",
        std::env::temp_dir().display(),
        median,
        p99
    );
}
