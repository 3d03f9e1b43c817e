//! Reading back what a relay produced, with clients no relay code shares:
//! [`read_all`], a fresh librdkafka consumer with manual assignment, and
//! [`console_consume`], Apache Kafka's own `kafka-console-consumer` (Java), so a bug shared by
//! the relay's producer and our rdkafka-based reader cannot hide.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::process::{
    io_err, jar_folders, java_program, kafka_err, HarnessError, LOG4J2_PROPERTIES,
};

/// One record read back from the broker, with everything a delivery assertion looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// The topic it was read from (checks routing).
    pub topic: String,
    /// The partition it was read from (per-partition order is the only order Kafka keeps).
    pub partition: i32,
    /// Its offset in that partition (orders records within a partition).
    pub offset: i64,
    /// The record key, `None` for a null key (checks aggregate id -> key).
    pub key: Option<Vec<u8>>,
    /// The record value, `None` for a tombstone (checks payload bytes).
    pub value: Option<Vec<u8>>,
    /// All headers in order, a null header value as `None` (checks `id` and others).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The record timestamp in milliseconds, if any.
    pub timestamp: Option<i64>,
}

impl ConsumedRecord {
    /// The value of the first header named `name`, if present and not null.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .and_then(|(_, value)| value.as_deref())
    }

    /// The first header named `name` as UTF-8 text (lossy), if present and not null.
    pub fn header_str(&self, name: &str) -> Option<String> {
        self.header(name)
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
    }

    /// The key as UTF-8 text (lossy), if not null.
    pub fn key_str(&self) -> Option<String> {
        self.key
            .as_deref()
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
    }
}

/// A caller's condition for [`ReadStop::When`]: gets everything read so far.
pub type ReadPredicate = Arc<dyn Fn(&[ConsumedRecord]) -> bool + Send + Sync>;

/// When [`read_all`] stops reading (besides its hard deadline).
#[derive(Clone)]
pub enum ReadStop {
    /// As soon as at least this many records were read.
    Count(usize),
    /// Once nothing new arrived for this long (counted from the start, then from the last
    /// record).
    Quiet(Duration),
    /// As soon as the predicate holds for the records read so far (e.g. "every expected event
    /// id seen"), checked after each batch.
    When(ReadPredicate),
}

impl std::fmt::Debug for ReadStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadStop::Count(count) => write!(f, "Count({count})"),
            ReadStop::Quiet(quiet) => write!(f, "Quiet({quiet:?})"),
            ReadStop::When(_) => f.write_str("When(..)"),
        }
    }
}

static READER_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Reads every record of `topics` from offset 0 with a fresh `read_uncommitted` consumer
/// (manual partition assignment, no offset commits), until `stop` says so or `deadline`
/// passed, whichever is first. Reaching the deadline is **not** an error: the caller gets what
/// arrived and asserts on it (with the evidence of what is missing).
///
/// Topics that do not exist yet are picked up as soon as they appear in metadata (checked
/// about twice a second), so a reader started before the producer works.
/// Records come grouped by partition in offset order; partitions interleave.
pub async fn read_all(
    bootstrap: &str,
    topics: &[&str],
    stop: ReadStop,
    deadline: Duration,
) -> Result<Vec<ConsumedRecord>, HarnessError> {
    let bootstrap = bootstrap.to_string();
    let topics: Vec<String> = topics.iter().map(|topic| topic.to_string()).collect();
    tokio::task::spawn_blocking(move || read_all_blocking(&bootstrap, &topics, &stop, deadline))
        .await
        .map_err(|e| HarnessError::Join(e.to_string()))?
}

fn read_all_blocking(
    bootstrap: &str,
    topics: &[String],
    stop: &ReadStop,
    deadline: Duration,
) -> Result<Vec<ConsumedRecord>, HarnessError> {
    let started = Instant::now();
    let group = format!(
        "outbox-testkit-reader-{}-{}",
        std::process::id(),
        READER_SEQUENCE.fetch_add(1, Ordering::Relaxed)
    );
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_uncommitted")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .set("socket.timeout.ms", "5000")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .map_err(kafka_err("creating the reader consumer"))?;

    let mut assigned: BTreeSet<(String, i32)> = BTreeSet::new();
    let mut records: Vec<ConsumedRecord> = Vec::new();
    let mut last_progress = Instant::now();
    let mut last_metadata_check: Option<Instant> = None;
    let wanted: BTreeSet<&str> = topics.iter().map(String::as_str).collect();

    loop {
        // Assign partitions of topics that appeared since the last check.
        let all_assigned = wanted.iter().all(|topic| {
            assigned
                .iter()
                .any(|(assigned_topic, _)| assigned_topic == topic)
        });
        if !all_assigned
            && last_metadata_check.is_none_or(|at| at.elapsed() >= Duration::from_millis(500))
        {
            last_metadata_check = Some(Instant::now());
            if let Ok(metadata) = consumer
                .client()
                .fetch_metadata(None, Duration::from_secs(2))
            {
                let mut new_partitions = TopicPartitionList::new();
                for topic in metadata.topics() {
                    if topic.error().is_some() || !wanted.contains(topic.name()) {
                        continue;
                    }
                    for partition in topic.partitions() {
                        let entry = (topic.name().to_string(), partition.id());
                        if !assigned.contains(&entry) {
                            new_partitions
                                .add_partition_offset(
                                    topic.name(),
                                    partition.id(),
                                    Offset::Beginning,
                                )
                                .map_err(kafka_err("building the assignment"))?;
                            assigned.insert(entry);
                        }
                    }
                }
                if new_partitions.count() > 0 {
                    consumer
                        .incremental_assign(&new_partitions)
                        .map_err(kafka_err("assigning partitions"))?;
                }
            }
        }

        let mut got_one = false;
        if !assigned.is_empty() {
            // Drain what is buffered, then check the stop conditions.
            let mut wait = Duration::from_millis(100);
            let mut polled_this_round = 0usize;
            while let Some(result) = consumer.poll(wait) {
                wait = Duration::ZERO;
                polled_this_round += 1;
                // Transient consumer errors (broker restarting, frozen) are retried by
                // librdkafka; the deadline bounds how long we keep trying.
                if let Ok(message) = result {
                    records.push(ConsumedRecord {
                        topic: message.topic().to_string(),
                        partition: message.partition(),
                        offset: message.offset(),
                        key: message.key().map(<[u8]>::to_vec),
                        value: message.payload().map(<[u8]>::to_vec),
                        headers: message
                            .headers()
                            .map(|headers| {
                                headers
                                    .iter()
                                    .map(|header| {
                                        (header.key.to_string(), header.value.map(<[u8]>::to_vec))
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        timestamp: message.timestamp().to_millis(),
                    });
                    got_one = true;
                }
                // Check the stop condition at least every 1024 messages.
                if polled_this_round >= 1024 {
                    break;
                }
            }
        } else {
            std::thread::sleep(Duration::from_millis(100));
        }
        if got_one {
            last_progress = Instant::now();
        }

        let done = match stop {
            ReadStop::Count(count) => records.len() >= *count,
            ReadStop::Quiet(quiet) => last_progress.elapsed() >= *quiet,
            ReadStop::When(predicate) => got_one && predicate(&records),
        };
        if done || started.elapsed() >= deadline {
            return Ok(records);
        }
    }
}

/// Field separators for [`console_consume`]: ASCII control characters that outbox payloads,
/// keys and header values in tests never contain, so the console consumer's text output
/// splits back into fields exactly.
const CONSOLE_FIELD: char = '\u{1f}';
const CONSOLE_HEADER: char = '\u{1e}';
const CONSOLE_RECORD: &str = "\u{1d}\n";
const CONSOLE_NULL: &str = "\u{1a}";

/// Reads `topic` from the beginning with Apache Kafka's own console consumer
/// (`kafka-console-consumer`, `org.apache.kafka.tools.consumer.ConsoleConsumer` from
/// kafka-tools 4.4.0, a JVM process) until it printed `max_records` records or `timeout`
/// passed without a new one, and parses what it printed (timestamp, partition, offset,
/// headers, key, value) into [`ConsumedRecord`]s. Values are read as UTF-8 text, as the
/// console consumer prints them; a null key, value or header value comes back as `None`.
pub async fn console_consume(
    bootstrap: &str,
    topic: &str,
    max_records: usize,
    timeout: Duration,
) -> Result<Vec<ConsumedRecord>, HarnessError> {
    console_consume_isolated(bootstrap, topic, max_records, timeout, "read_uncommitted").await
}

/// [`console_consume`] with the console consumer's `--isolation-level`
/// (`read_committed` or `read_uncommitted`, its default): a `read_committed` read shows
/// only records of committed Kafka transactions (and non-transactional ones).
pub async fn console_consume_isolated(
    bootstrap: &str,
    topic: &str,
    max_records: usize,
    timeout: Duration,
    isolation_level: &str,
) -> Result<Vec<ConsumedRecord>, HarnessError> {
    let jars = jar_folders()?;
    let dir = tempfile::Builder::new()
        .prefix("outbox-console-consumer-")
        .tempdir()
        .map_err(io_err("creating the console consumer's directory"))?;
    let log4j = dir.path().join("log4j2.properties");
    std::fs::write(
        &log4j,
        LOG4J2_PROPERTIES
            .replace("rootLogger.level = INFO", "rootLogger.level = WARN")
            .replace("logger.kafka.level = INFO", "logger.kafka.level = WARN")
            .replace(
                "appender.out.type = Console",
                "appender.out.type = Console\nappender.out.target = SYSTEM_ERR",
            ),
    )
    .map_err(io_err("writing the console consumer's log4j2.properties"))?;
    let mut command = tokio::process::Command::new(java_program());
    command
        .args(crate::process::jvm_flags("256m"))
        .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
        .arg("-cp")
        .arg(format!("{}/*", jars.kafka.display()))
        .arg("org.apache.kafka.tools.consumer.ConsoleConsumer")
        .args([
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--from-beginning",
        ])
        .args(["--isolation-level", isolation_level])
        .args(["--max-messages", &max_records.to_string()])
        .args(["--timeout-ms", &timeout.as_millis().to_string()]);
    for (property, value) in [
        ("print.timestamp", "true"),
        ("print.partition", "true"),
        ("print.offset", "true"),
        ("print.headers", "true"),
        ("print.key", "true"),
        ("print.value", "true"),
        ("key.separator", &CONSOLE_FIELD.to_string()),
        ("headers.separator", &CONSOLE_HEADER.to_string()),
        ("line.separator", CONSOLE_RECORD),
        ("null.literal", CONSOLE_NULL),
    ] {
        command
            .arg("--formatter-property")
            .arg(format!("{property}={value}"));
    }
    command
        .env_remove("CLASSPATH")
        .env_remove("KAFKA_OPTS")
        .env_remove("JAVA_TOOL_OPTIONS")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = command
        .output()
        .await
        .map_err(io_err("running kafka-console-consumer"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let records = parse_console_output(topic, &stdout);
    // It exits non-zero when --timeout-ms ends the read; that is how a read of fewer
    // records than asked for ends, not an error. Anything else it printed is evidence.
    if records.is_empty() && !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !stderr.contains("TimeoutException") {
            return Err(HarnessError::Io {
                what: format!("kafka-console-consumer on {topic} at {bootstrap}"),
                source: std::io::Error::other(format!("{}: {stderr}", output.status)),
            });
        }
    }
    Ok(records)
}

/// Parses the console consumer's output in the format [`console_consume`] asks for.
fn parse_console_output(topic: &str, stdout: &str) -> Vec<ConsumedRecord> {
    let text = |field: &str| -> Option<Vec<u8>> {
        (field != CONSOLE_NULL).then(|| field.as_bytes().to_vec())
    };
    stdout
        .split(CONSOLE_RECORD)
        .filter(|chunk| !chunk.trim().is_empty())
        .filter_map(|chunk| {
            let chunk = chunk.trim_start_matches('\n');
            // CreateTime:TS, Partition:P, Offset:O, headers, key, value (the value may hold
            // anything but the record separator, so split at most 6 ways).
            let fields: Vec<&str> = chunk.splitn(6, CONSOLE_FIELD).collect();
            let [timestamp, partition, offset, headers, key, value] = fields.as_slice() else {
                return None;
            };
            let timestamp = timestamp
                .split_once(':')
                .and_then(|(_, ms)| ms.parse().ok());
            let partition = partition.strip_prefix("Partition:")?.parse().ok()?;
            let offset = offset.strip_prefix("Offset:")?.parse().ok()?;
            let headers = if *headers == "NO_HEADERS" {
                Vec::new()
            } else {
                headers
                    .split(CONSOLE_HEADER)
                    .map(|header| match header.split_once(':') {
                        Some((name, value)) => (name.to_string(), text(value)),
                        None => (header.to_string(), None),
                    })
                    .collect()
            };
            Some(ConsumedRecord {
                topic: topic.to_string(),
                partition,
                offset,
                key: text(key),
                value: text(value),
                headers,
                timestamp,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_output_parses_back_into_records() {
        let output = format!(
            "CreateTime:1700000000000{f}Partition:1{f}Offset:7{f}id:e-1{h}trace:{n}{f}o-1{f}{{\"a\": 1}}{r}\
             CreateTime:1700000000001{f}Partition:0{f}Offset:0{f}NO_HEADERS{f}{n}{f}{n}{r}",
            f = CONSOLE_FIELD,
            h = CONSOLE_HEADER,
            n = CONSOLE_NULL,
            r = CONSOLE_RECORD
        );
        let records = parse_console_output("t", &output);
        assert_eq!(records.len(), 2, "{records:?}");
        assert_eq!(records[0].partition, 1);
        assert_eq!(records[0].offset, 7);
        assert_eq!(records[0].timestamp, Some(1_700_000_000_000));
        assert_eq!(records[0].header_str("id").as_deref(), Some("e-1"));
        assert_eq!(records[0].headers[1], ("trace".to_string(), None));
        assert_eq!(records[0].key_str().as_deref(), Some("o-1"));
        assert_eq!(records[0].value.as_deref(), Some(&b"{\"a\": 1}"[..]));
        assert!(records[1].headers.is_empty());
        assert_eq!(records[1].key, None);
        assert_eq!(records[1].value, None);
    }
}
