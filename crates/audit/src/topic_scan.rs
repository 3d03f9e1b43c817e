//! The routed topics read from the window's start to their ends, as digests: a thread of
//! its own (librdkafka's consumer blocks) handing batches to the audit over a bounded
//! channel, so memory stays a few batches whatever the topics hold.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;

use crate::digest::RecordDigest;
use crate::error::AuditError;

/// Records per batch handed to the audit.
const BATCH_RECORDS: usize = 1024;
/// How long one poll waits before the reader checks where the partitions stand.
const POLL_WAIT: Duration = Duration::from_millis(200);

/// One record read, reduced to what the audit compares and reports.
#[derive(Debug)]
pub(crate) struct SeenRecord {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    /// Its Kafka timestamp (ms), when it has one.
    pub timestamp_ms: Option<i64>,
    /// Its `id` header (`None`: a record without one, not an outbox event).
    pub id: Option<Vec<u8>>,
    pub digest: RecordDigest,
}

/// What the reader found besides the records.
#[derive(Debug, Default)]
pub(crate) struct TopicReading {
    /// Routed topics that do not exist in the cluster (every row routed there is missing).
    pub topics_absent: Vec<String>,
}

fn kafka(action: &'static str) -> impl FnOnce(rdkafka::error::KafkaError) -> AuditError {
    move |source| AuditError::Kafka { action, source }
}

/// Reads every partition of `topics` from the first record at or after `start_ms` (from
/// the start when `None`) to the end it had when the reading began, sending the records in
/// batches. Ends with an error when no record arrives for `stall_timeout` while partitions
/// remain.
pub(crate) fn read_topics(
    mut config: ClientConfig,
    topics: &[String],
    start_ms: Option<i64>,
    stall_timeout: Duration,
    batches: &mpsc::Sender<Vec<SeenRecord>>,
) -> Result<TopicReading, AuditError> {
    config
        .set("enable.partition.eof", "false")
        .set("allow.auto.create.topics", "false")
        // A few MiB queued per partition is plenty for a sequential read.
        .set("queued.max.messages.kbytes", "16384");
    let consumer: BaseConsumer = config.create().map_err(kafka("creating the consumer"))?;
    let timeout = stall_timeout;
    let mut reading = TopicReading::default();
    // (topic, partition) -> the offset the reading ends before.
    let mut remaining: BTreeMap<(Arc<str>, i32), i64> = BTreeMap::new();
    let mut starts = TopicPartitionList::new();
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(kafka("reading the topics' metadata"))?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|found| found.name() == topic && found.error().is_none())
            .flat_map(|found| found.partitions().iter().map(|p| p.id()))
            .collect();
        if partitions.is_empty() {
            reading.topics_absent.push(topic.clone());
            continue;
        }
        let name: Arc<str> = Arc::from(topic.as_str());
        let mut by_time = TopicPartitionList::new();
        for partition in partitions {
            let (low, high) = consumer
                .fetch_watermarks(topic, partition, timeout)
                .map_err(kafka("reading the partitions' ends"))?;
            if high <= low {
                continue;
            }
            remaining.insert((name.clone(), partition), high);
            match start_ms {
                Some(ms) => {
                    by_time
                        .add_partition_offset(topic, partition, Offset::Offset(ms))
                        .map_err(kafka("building the assignment"))?;
                }
                None => {
                    starts
                        .add_partition_offset(topic, partition, Offset::Offset(low))
                        .map_err(kafka("building the assignment"))?;
                }
            }
        }
        if by_time.count() > 0 {
            let found = consumer
                .offsets_for_times(by_time, timeout)
                .map_err(kafka("finding the window's start offsets"))?;
            for element in found.elements() {
                match element.offset() {
                    Offset::Offset(offset) => starts
                        .add_partition_offset(topic, element.partition(), Offset::Offset(offset))
                        .map_err(kafka("building the assignment"))?,
                    // No record at or after the window's start.
                    _ => {
                        remaining.remove(&(name.clone(), element.partition()));
                    }
                }
            }
        }
    }
    if remaining.is_empty() {
        return Ok(reading);
    }
    consumer
        .assign(&starts)
        .map_err(kafka("assigning the partitions"))?;
    let mut batch = Vec::with_capacity(BATCH_RECORDS);
    let mut progressed = Instant::now();
    while !remaining.is_empty() {
        match consumer.poll(POLL_WAIT) {
            Some(Ok(message)) => {
                progressed = Instant::now();
                let key = remaining
                    .keys()
                    .find(|(topic, partition)| {
                        &**topic == message.topic() && *partition == message.partition()
                    })
                    .cloned();
                let Some(key) = key else { continue };
                let end = remaining[&key];
                if message.offset() >= end {
                    remaining.remove(&key);
                    continue;
                }
                let id = message.headers().and_then(|headers| {
                    headers
                        .iter()
                        .find(|header| header.key == "id")
                        .and_then(|header| header.value.map(<[u8]>::to_vec))
                });
                batch.push(SeenRecord {
                    topic: key.0.clone(),
                    partition: key.1,
                    offset: message.offset(),
                    timestamp_ms: message.timestamp().to_millis(),
                    id,
                    digest: RecordDigest::of(message.topic(), message.key(), message.payload()),
                });
                if message.offset() + 1 >= end {
                    remaining.remove(&key);
                }
                if batch.len() >= BATCH_RECORDS
                    && batches.blocking_send(std::mem::take(&mut batch)).is_err()
                {
                    return Err(AuditError::ReaderStopped(
                        "the audit stopped taking records".to_owned(),
                    ));
                }
            }
            Some(Err(error)) => return Err(kafka("reading a record")(error)),
            None => {
                // A partition whose last offsets are transaction markers has no record
                // left to deliver: its position tells that it is read.
                let positions = consumer.position().map_err(kafka("reading positions"))?;
                for element in positions.elements() {
                    if let Offset::Offset(position) = element.offset() {
                        let key = (Arc::from(element.topic()), element.partition());
                        if remaining.get(&key).is_some_and(|end| position >= *end) {
                            remaining.remove(&key);
                            progressed = Instant::now();
                        }
                    }
                }
                if !remaining.is_empty() && progressed.elapsed() > stall_timeout {
                    return Err(AuditError::KafkaStalled {
                        seconds: stall_timeout.as_secs(),
                        partitions: remaining.len(),
                    });
                }
            }
        }
    }
    if !batch.is_empty() && batches.blocking_send(batch).is_err() {
        return Err(AuditError::ReaderStopped(
            "the audit stopped taking records".to_owned(),
        ));
    }
    Ok(reading)
}
