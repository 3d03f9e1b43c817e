//! The child modes: each measured program runs in a process of its own (this binary started
//! again with a hidden subcommand), so its CPU seconds and peak RSS are its own.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::client::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

use crate::options::WorkloadArgs;
use crate::stats::{sample_self, ProcessSample};
use crate::workload::{Workload, AGGREGATE_TYPES};

/// What a pull or producer child prints (one JSON line on stdout).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ChildReport {
    /// What it counted: binlog events (pull) or acked records (producer).
    pub count: u64,
    /// Wall seconds of the measured work (connect/first send to last event/ack).
    pub elapsed_seconds: f64,
    /// CPU and peak RSS of the whole child process at the end.
    pub process: ProcessSample,
}

/// How long the bare producer waits for its last acks before giving up.
const PRODUCER_ACK_LIMIT: Duration = Duration::from_secs(600);

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn print_report(count: u64, elapsed: Duration) -> Result<()> {
    let report = ChildReport {
        count,
        elapsed_seconds: elapsed.as_secs_f64(),
        process: sample_self()?,
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// Raw binlog pull through outbox-binlog's own replication connection (session, socket reads,
/// packet framing; nothing decoded) from `first_file` to the end position.
pub fn pull(
    url: &str,
    server_id: u32,
    first_file: &str,
    end_file: &str,
    end_position: u64,
) -> Result<()> {
    let runtime = runtime()?;
    let started = Instant::now();
    let events = runtime
        .block_on(outbox_binlog::pull_raw_events(
            url,
            server_id,
            first_file,
            end_file,
            end_position,
        ))
        .with_context(|| format!("raw binlog pull from {first_file} on {url}"))?;
    print_report(events, started.elapsed())
}

/// Counts delivery reports.
#[derive(Default)]
struct CountingContext {
    /// Records Kafka acknowledged.
    acked: AtomicU64,
    /// Records that failed for good.
    failed: AtomicU64,
    /// The first failure, for the error message.
    first_error: Mutex<Option<String>>,
}

impl ClientContext for CountingContext {}

impl ProducerContext for CountingContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err((error, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert_with(|| error.to_string());
                }
            }
        }
    }
}

/// A bare librdkafka producer with the relay's producer properties (`[kafka]` of `config`:
/// idempotent, `acks=all`, the same linger and batch settings and partitioner) sending the
/// workload's records: same topics, keys, payloads and the relay's 4 headers. Timed from the
/// first send to the last ack.
pub fn produce(config: &Path, topic_prefix: &str, workload: &WorkloadArgs) -> Result<()> {
    let text =
        std::fs::read_to_string(config).with_context(|| format!("reading {}", config.display()))?;
    let relay_config = outbox_relay::RelayConfig::parse(&text)
        .map_err(|error| anyhow::anyhow!("{error}"))
        .with_context(|| format!("parsing {}", config.display()))?;
    let properties = outbox_relay::sink::producer_properties(&relay_config.kafka);
    let mut client_config = rdkafka::ClientConfig::new();
    for (key, value) in &properties {
        client_config.set(key, value);
    }
    let producer: BaseProducer<CountingContext> = client_config
        .create_with_context(CountingContext::default())
        .context("creating the bare producer")?;
    let workload = Workload {
        transactions: workload.transactions,
        rows_per_transaction: workload.rows_per_transaction,
        payload_bytes: workload.payload_bytes,
        noise_tables: 0,
    };
    let topics: Vec<String> = AGGREGATE_TYPES
        .iter()
        .map(|kind| format!("{topic_prefix}.outbox.event.{kind}"))
        .collect();
    let events = workload.events();
    let started = Instant::now();
    for index in 0..events {
        let event = workload.event(index);
        let topic = &topics[(index % AGGREGATE_TYPES.len() as u64) as usize];
        let headers = OwnedHeaders::new_with_capacity(4)
            .insert(Header {
                key: "id",
                value: Some(event.id.as_bytes()),
            })
            .insert(Header {
                key: "event_type",
                value: Some(event.event_type.as_bytes()),
            })
            .insert(Header {
                key: "aggregate_type",
                value: Some(event.aggregate_type.as_bytes()),
            })
            .insert(Header {
                key: "aggregate_id",
                value: Some(event.aggregate_id.as_bytes()),
            });
        let mut record = BaseRecord::to(topic)
            .key(event.aggregate_id.as_bytes())
            .payload(event.payload.as_bytes())
            .headers(headers);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    producer.poll(Duration::from_millis(5));
                }
                Err((error, _)) => bail!("bare producer: sending record {index}: {error}"),
            }
        }
        if index % 1024 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    let context = producer.context();
    while context.acked.load(Ordering::Relaxed) + context.failed.load(Ordering::Relaxed) < events {
        if started.elapsed() > PRODUCER_ACK_LIMIT {
            bail!(
                "bare producer: only {} of {events} records acked after {PRODUCER_ACK_LIMIT:?}",
                context.acked.load(Ordering::Relaxed)
            );
        }
        producer.poll(Duration::from_millis(10));
    }
    let elapsed = started.elapsed();
    let failed = context.failed.load(Ordering::Relaxed);
    if failed > 0 {
        let first = context
            .first_error
            .lock()
            .ok()
            .and_then(|first| first.clone())
            .unwrap_or_default();
        bail!("bare producer: {failed} records failed, the first with: {first}");
    }
    print_report(context.acked.load(Ordering::Relaxed), elapsed)
}

/// `outbox-relay run --config FILE`: the relay library's own command in this process (the
/// same code as the `outbox-relay` binary, logging to stderr at `RUST_LOG`, default info).
pub fn relay(config: &Path) -> Result<i32> {
    use clap::Parser;
    let cli = outbox_relay::cli::Cli::try_parse_from([
        "outbox-relay".as_ref(),
        "run".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
    ])
    .context("building the relay's command line")?;
    outbox_relay::commands::init_logging(outbox_relay::cli::LogFormat::Human);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("outbox-relay")
        .build()
        .context("starting the relay's runtime")?;
    let code = runtime.block_on(outbox_relay::commands::execute(cli))?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(code)
}

/// An rdkafka mock cluster (one broker) with `topics`; prints its bootstrap servers on one
/// line, then serves until standard input closes (the orchestrator holds the pipe).
pub fn mock_cluster(topics: &[String], partitions: i32) -> Result<()> {
    let cluster = rdkafka::mocking::MockCluster::new(1).context("creating the mock cluster")?;
    for topic in topics {
        cluster
            .create_topic(topic, partitions, 1)
            .with_context(|| format!("creating mock topic {topic}"))?;
    }
    let mut out = std::io::stdout();
    writeln!(out, "{}", cluster.bootstrap_servers())?;
    out.flush()?;
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    Ok(())
}
