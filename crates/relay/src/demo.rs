//! `outbox-relay demo`: the whole flow on one machine, no setup. Starts a scratch MariaDB
//! (`outbox_testkit::ScratchMariadb`) and an in-process Kafka (`rdkafka`'s mock cluster),
//! creates `shop.orders` and `shop.outbox`, writes sample orders each with its outbox row in
//! one transaction, runs the relay in-process, consumes what arrived, and prints the records
//! and the stored checkpoint.

use std::time::{Duration, Instant};

use anyhow::Context;
use mysql_async::prelude::Queryable;
use outbox_checkpoint::Checkpoint;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;

use crate::config::RelayConfig;
use crate::pipeline::{run_relay, RelayHandles};
use crate::stores::open_checkpoint_store;

/// The topic the demo's orders route to (`outbox.event.${aggregate_type}`).
pub const DEMO_TOPIC: &str = "outbox.event.order";

/// One record the demo consumed back from Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// Topic it was read from.
    pub topic: String,
    /// Record key, lossy UTF-8.
    pub key: Option<String>,
    /// Record value, lossy UTF-8.
    pub value: Option<String>,
    /// Headers, values as lossy UTF-8.
    pub headers: Vec<(String, String)>,
}

impl ConsumedRecord {
    /// The value of the first header called `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// What a demo run produced.
#[derive(Debug, Clone)]
pub struct DemoOutcome {
    /// Records consumed from Kafka, in partition order.
    pub records: Vec<ConsumedRecord>,
    /// The checkpoint stored when the relay stopped.
    pub checkpoint: Option<Checkpoint>,
    /// Records the relay reported delivered.
    pub delivered: u64,
}

/// The demo's tables: the seeds outbox schema.
pub const DEMO_SCHEMA: &[&str] = &[
    "CREATE DATABASE shop",
    "CREATE TABLE shop.orders (id BIGINT PRIMARY KEY, customer VARCHAR(100) NOT NULL, total DECIMAL(10,2) NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE shop.outbox (event_id CHAR(36) PRIMARY KEY, aggregate_type VARCHAR(255) NOT NULL, aggregate_id VARCHAR(255) NOT NULL, event_type VARCHAR(255) NOT NULL, payload JSON, created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
];

/// The relay config of the demo (and of in-process tests): source at `source_url` from
/// the earliest binlog, Kafka at `brokers` (topics must exist: the mock cluster has no
/// CreateTopics API), file checkpoint at `checkpoint_path`.
pub fn demo_config_text(source_url: &str, brokers: &str, checkpoint_path: &str) -> String {
    format!(
        r#"
[source]
url = "{source_url}"
server_id = 4242
start = "earliest"
heartbeat_interval_ms = 500
idle_timeout_ms = 10000

[[outbox]]
table = "shop.outbox"
preset = "seeds"

[route]
topic = "outbox.event.${{aggregate_type}}"

[kafka]
brokers = "{brokers}"
create_topics = false
topic_partitions = 1
topic_replication_factor = 1
retry_initial_backoff_ms = 50
retry_max_backoff_ms = 500
[kafka.properties]
"linger.ms" = "5"

[checkpoint]
store = "file"
path = "{checkpoint_path}"

[pipeline]
max_in_flight = 1000
shutdown_timeout_ms = 5000
commit_interval_ms = 200
commit_max_transactions = 100
"#
    )
}

/// Writes order `n` and its `order_created` outbox row in one transaction.
pub async fn write_sample_order(conn: &mut mysql_async::Conn, n: u32) -> anyhow::Result<()> {
    let mut transaction = conn
        .start_transaction(mysql_async::TxOpts::default())
        .await?;
    let total = format!("{}.{:02}", 10 + n, n % 100);
    transaction
        .exec_drop(
            "INSERT INTO shop.orders (id, customer, total) VALUES (?, ?, ?)",
            (n, format!("customer-{n}"), &total),
        )
        .await?;
    let event_id = format!("00000000-0000-4000-8000-{n:012}");
    let payload = format!(r#"{{"order_id":{n},"customer":"customer-{n}","total":"{total}"}}"#);
    transaction
        .exec_drop(
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'order', ?, 'order_created', ?)",
            (&event_id, n.to_string(), &payload),
        )
        .await?;
    transaction.commit().await?;
    Ok(())
}

/// Reads `count` records of `topic` from `brokers` (from the beginning), waiting up to
/// `timeout`.
pub async fn consume_records(
    brokers: &str,
    topic: &str,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<ConsumedRecord>> {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "outbox-relay-demo")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .context("creating the demo consumer")?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        // Assign every partition from the beginning: no consumer-group rebalance to wait for.
        let metadata = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .context("reading the topic's partitions")?;
        let mut assignment = rdkafka::TopicPartitionList::new();
        for topic_metadata in metadata.topics().iter().filter(|t| t.name() == topic) {
            for partition in topic_metadata.partitions() {
                assignment
                    .add_partition_offset(&topic, partition.id(), rdkafka::Offset::Beginning)
                    .context("building the assignment")?;
            }
        }
        if assignment.count() == 0 {
            anyhow::bail!("topic {topic} has no partitions");
        }
        consumer
            .assign(&assignment)
            .context("assigning the demo consumer")?;
        let mut records = Vec::new();
        while records.len() < count {
            if started.elapsed() > timeout {
                anyhow::bail!(
                    "only {} of {count} records arrived in {topic} within {timeout:?}",
                    records.len()
                );
            }
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(error)) => {
                    tracing::debug!(%error, "demo consumer poll error (retrying)");
                }
                Some(Ok(message)) => {
                    let headers = message
                        .headers()
                        .map(|headers| {
                            headers
                                .iter()
                                .map(|h| {
                                    (
                                        h.key.to_owned(),
                                        h.value
                                            .map(|v| String::from_utf8_lossy(v).into_owned())
                                            .unwrap_or_default(),
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    records.push(ConsumedRecord {
                        topic: message.topic().to_owned(),
                        key: message
                            .key()
                            .map(|k| String::from_utf8_lossy(k).into_owned()),
                        value: message
                            .payload()
                            .map(|v| String::from_utf8_lossy(v).into_owned()),
                        headers,
                    });
                }
            }
        }
        Ok(records)
    })
    .await
    .context("consumer task failed")?
}

/// Runs the demo flow and returns what happened (the `demo` command prints it).
pub async fn run_demo(orders: u32) -> anyhow::Result<DemoOutcome> {
    let server = outbox_testkit::ScratchMariadb::start()
        .await
        .context("starting a scratch MariaDB (are the MariaDB server binaries installed?)")?;
    server
        .exec(DEMO_SCHEMA)
        .await
        .context("creating the demo tables")?;
    let cluster = MockCluster::new(1).context("starting the in-process Kafka mock cluster")?;
    let brokers = cluster.bootstrap_servers();
    cluster
        .create_topic(DEMO_TOPIC, 1, 1)
        .context("creating the demo topic")?;
    let scratch = tempfile::tempdir().context("creating a temporary directory")?;
    let checkpoint_path = scratch.path().join("checkpoint.json");
    let config = RelayConfig::parse(&demo_config_text(
        &server.url(),
        &brokers,
        &checkpoint_path.display().to_string(),
    ))?;
    let checkpoint_config = config.checkpoint.clone();
    let kafka_config = config.kafka.clone();

    let mut conn = server.conn().await?;
    for n in 1..=orders {
        write_sample_order(&mut conn, n).await?;
    }
    conn.disconnect().await?;

    let handles = RelayHandles::default();
    let relay = tokio::spawn(run_relay(config, handles.clone()));
    let consumed = consume_records(
        &brokers,
        DEMO_TOPIC,
        orders as usize,
        Duration::from_secs(60),
    )
    .await;
    // Give the sink time to see the acks of what was consumed, then stop: the final
    // checkpoint covers everything acked.
    let waited = Instant::now();
    while handles.metrics.records_delivered.get() < u64::from(orders)
        && waited.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    handles.shutdown.trigger();
    let summary = relay.await.context("relay task failed")??;
    let records = consumed?;
    let store = open_checkpoint_store(&checkpoint_config, &kafka_config).await?;
    let checkpoint = store.load().await?;
    // librdkafka closes the relay's clients on its own threads after they are dropped; give
    // them a moment while the mock brokers still answer, or they log "brokers down".
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(cluster);
    Ok(DemoOutcome {
        records,
        checkpoint,
        delivered: summary.delivered,
    })
}

/// `outbox-relay demo`.
pub async fn demo_command(orders: u32) -> anyhow::Result<i32> {
    let outcome = run_demo(orders).await?;
    println!("delivered {} record(s) to Kafka:", outcome.records.len());
    for record in &outcome.records {
        let headers: Vec<String> = record
            .headers
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!(
            "  topic={} key={} headers[{}] value={}",
            record.topic,
            record.key.as_deref().unwrap_or("<none>"),
            headers.join(", "),
            record.value.as_deref().unwrap_or("<tombstone>")
        );
    }
    match &outcome.checkpoint {
        Some(checkpoint) => println!("stored checkpoint:\n{}", checkpoint.to_json()),
        None => println!("stored checkpoint: none"),
    }
    Ok(0)
}
