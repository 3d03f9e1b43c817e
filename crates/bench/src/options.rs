//! The command line: what to generate, what to measure, how to print it; plus the hidden
//! child modes the orchestrator runs each measured program in (so each has its own process,
//! peak RSS and CPU seconds).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// `outbox-relay-bench`: one run measures the machine's two limits, outbox-relay and
/// Debezium on the same binlog and broker, and the commit -> ack latency, then prints one
/// table (or `--json`).
#[derive(Debug, Parser)]
#[command(name = "outbox-relay-bench", version, about)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// A child mode (internal: the orchestrator starts itself with one of these).
    #[command(subcommand)]
    pub child: Option<ChildMode>,
    /// The benchmark's options (when no child mode is given).
    #[command(flatten)]
    pub bench: BenchOptions,
}

/// What one benchmark run generates and measures.
#[derive(Debug, Clone, Args)]
pub struct BenchOptions {
    /// Transactions written before the drains (each one `orders` row, `--rows-per-transaction`
    /// outbox rows and one row per noise table).
    #[arg(long, default_value_t = 200_000)]
    pub transactions: u64,
    /// Outbox rows per transaction (multi-row transactions).
    #[arg(long, default_value_t = 1)]
    pub rows_per_transaction: u32,
    /// Size of each outbox payload in bytes (at least the ~150-byte base JSON; larger
    /// payloads are padded inside the JSON).
    #[arg(long, default_value_t = 150)]
    pub payload_bytes: usize,
    /// Non-outbox tables that get one row per transaction (noise the readers must skip).
    #[arg(long, default_value_t = 0)]
    pub noise_tables: u32,
    /// Partitions of every topic.
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    /// Drain rounds; each round runs raw pull, bare producer, outbox-relay, Debezium in turn
    /// (so outbox-relay and Debezium alternate).
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// Target rate of the steady-state latency phase, events per second.
    #[arg(long, default_value_t = 5_000)]
    pub latency_rate: u64,
    /// Length of the steady-state latency phase of each side, seconds (0: no latency phase).
    #[arg(long, default_value_t = 10)]
    pub latency_seconds: u64,
    /// Skip Debezium (no JVM worker; ratios to Debezium are then absent).
    #[arg(long)]
    pub skip_debezium: bool,
    /// The JVM flags of the broker and Debezium's Connect worker: `harness` (the test
    /// harness's: C1 only, serial collector, heap from 64 MiB) or `kafka-scripts` (Kafka's
    /// start scripts': G1, full tiered compilation, fixed heap). On 2 cores and drains of a
    /// few seconds `harness` costs both JVMs less CPU (docs/benchmarks.md, "Session 11").
    #[arg(long, value_enum, default_value_t = JvmFlags::Harness)]
    pub jvm_flags: JvmFlags,
    /// Drain the bare producer and outbox-relay into an out-of-process librdkafka mock
    /// cluster instead of the Apache Kafka broker (Debezium, which needs a real broker, is
    /// then skipped; the latency phase stays on Apache Kafka).
    #[arg(long)]
    pub mock_cluster: bool,
    /// The relay's delivery guarantee: `at_least_once` (checkpoint file), `exactly_once`
    /// (`[kafka] delivery = "exactly_once"` with `[checkpoint] store = "kafka"`; the drain
    /// ends when the checkpoint record covering the log's end is visible to a
    /// `read_committed` consumer), or `both`: each round drains with both, in alternating
    /// order, so the exactly-once / at-least-once ratio is taken within a round.
    #[arg(long, value_enum, default_value_t = Delivery::AtLeastOnce)]
    pub delivery: Delivery,
    /// The relays' `[pipeline] commit_interval_ms` (default: the relay's, 1 000 ms). In
    /// exactly-once mode it is how long a Kafka transaction collects records before it is
    /// committed, so it bounds what a `read_committed` consumer waits for.
    #[arg(long)]
    pub commit_interval_ms: Option<u64>,
    /// The relays' `[pipeline] max_in_flight_bytes` (default: the relay's, 64 MiB): for
    /// memory runs with big rows.
    #[arg(long)]
    pub max_in_flight_bytes: Option<u64>,
    /// The relays' `[pipeline] max_in_flight` (default: the relay's, 10 000 records): how
    /// many records may wait for their ack.
    #[arg(long)]
    pub max_in_flight: Option<usize>,
    /// The relays' and the bare producer's `[kafka] linger_ms` (default: the relay's,
    /// 5 ms): how long librdkafka waits to fill a batch (bigger batches cost the broker
    /// less per record; the commit -> ack latency cannot fall below it).
    #[arg(long)]
    pub linger_ms: Option<u64>,
    /// Writer connections of the latency phase: transaction `n` is committed on connection
    /// `n % writers` at its due time, so the rate is not bound by one connection's round
    /// trip.
    #[arg(long, default_value_t = 4)]
    pub latency_writers: u32,
    /// `binlog` (the default) or `poll`: also drain the same rows with the polling source
    /// (`[source] mode = "poll"`: the poll-mode columns are added before the rows are
    /// written), with the database's queries/s and CPU, and measure its commit -> ack
    /// latency beside the binlog relay's.
    #[arg(long, value_enum, default_value_t = Source::Binlog)]
    pub source: Source,
    /// The polling relay's `[source.poll] interval_ms`.
    #[arg(long, default_value_t = 100)]
    pub poll_interval_ms: u64,
    /// The polling relay's `[source.poll] batch_size` (rows per claim).
    #[arg(long, default_value_t = 2000)]
    pub poll_batch_size: u32,
    /// Print the figures as one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Keep going quietly: no progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// `--jvm-flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JvmFlags {
    /// The test harness's flags ([`outbox_testkit::process::JvmProfile::Test`]).
    Harness,
    /// Kafka's start scripts' flags ([`outbox_testkit::process::JvmProfile::Production`]).
    KafkaScripts,
}

impl JvmFlags {
    /// The testkit's profile for these flags.
    pub fn profile(self) -> outbox_testkit::process::JvmProfile {
        match self {
            JvmFlags::Harness => outbox_testkit::process::JvmProfile::Test,
            JvmFlags::KafkaScripts => outbox_testkit::process::JvmProfile::Production,
        }
    }
}

/// `--source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The binlog relay only.
    Binlog,
    /// The binlog relay and, on the same rows, the polling one.
    Poll,
}

/// `--delivery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// At-least-once only.
    AtLeastOnce,
    /// Exactly-once only.
    ExactlyOnce,
    /// Both in each round, alternating which goes first.
    Both,
}

impl Delivery {
    /// At-least-once drains are run.
    pub fn at_least_once(self) -> bool {
        matches!(self, Delivery::AtLeastOnce | Delivery::Both)
    }

    /// Exactly-once drains are run.
    pub fn exactly_once(self) -> bool {
        matches!(self, Delivery::ExactlyOnce | Delivery::Both)
    }
}

/// The hidden child modes.
#[derive(Debug, Subcommand)]
pub enum ChildMode {
    /// Raw binlog pull through outbox-binlog's replication connection, nothing decoded;
    /// prints one JSON line of [`crate::measure::ChildReport`].
    #[command(hide = true, name = "child-pull")]
    Pull {
        /// `mysql://` URL of the scratch server.
        #[arg(long)]
        url: String,
        /// Replica server id of this pull.
        #[arg(long)]
        server_id: u32,
        /// First binlog file.
        #[arg(long)]
        first_file: String,
        /// Binlog file of the end position.
        #[arg(long)]
        end_file: String,
        /// End position (after the last transaction).
        #[arg(long)]
        end_position: u64,
    },
    /// Bare librdkafka producer sending the workload's records with the relay's producer
    /// properties; prints one JSON line of [`crate::measure::ChildReport`].
    #[command(hide = true, name = "child-produce")]
    Produce {
        /// The relay config whose `[kafka]` section gives brokers and properties.
        #[arg(long)]
        config: PathBuf,
        /// Topic prefix (`PREFIX.outbox.event.TYPE`).
        #[arg(long)]
        topic_prefix: String,
        /// The workload (same generator as the database rows).
        #[command(flatten)]
        workload: WorkloadArgs,
    },
    /// outbox-relay itself: `outbox-relay run --config FILE`, the relay library's own
    /// command, in this process.
    #[command(hide = true, name = "child-relay")]
    Relay {
        /// The relay's config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// An rdkafka mock cluster with the given topics; prints its bootstrap servers, then
    /// serves until its standard input closes.
    #[command(hide = true, name = "child-mock-cluster")]
    MockCluster {
        /// Topics to create.
        #[arg(long, value_delimiter = ',')]
        topics: Vec<String>,
        /// Partitions of each topic.
        #[arg(long)]
        partitions: i32,
    },
}

/// The workload's shape as the producer child needs it.
#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    /// Transactions.
    #[arg(long)]
    pub transactions: u64,
    /// Outbox rows per transaction.
    #[arg(long)]
    pub rows_per_transaction: u32,
    /// Payload bytes.
    #[arg(long)]
    pub payload_bytes: usize,
}
