//! Steady-state commit -> ack latency: a writer commits outbox transactions at a fixed rate on
//! its own connection and notes when each COMMIT returned; the topics use
//! `message.timestamp.type=LogAppendTime`, so every record carries the broker's append time,
//! which with one replica and `acks=all` is when the broker acknowledged it (the ack's
//! loopback transit aside). Latency = append time - commit time, per event.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use mysql_async::prelude::Queryable;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, Timestamp, TopicPartitionList};

use crate::measure::{end_offsets, records_in, topics_of};
use crate::stats::quantile;
use crate::workload::Workload;

/// Commits in the first this-long of the phase are not counted (connections and the
/// producer's first metadata warm up).
const WARM_UP: Duration = Duration::from_secs(1);

/// How long the delivery of the phase's last events may take after the writer stopped.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// The latency figures of one side.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Latency {
    /// Events counted (committed after the warm-up).
    pub samples: u64,
    /// The rate the writer reached, events per second (the target may be out of reach on a
    /// busy machine).
    pub achieved_rate: f64,
    /// Median commit -> ack, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// 99.9th percentile, milliseconds.
    pub p999_ms: f64,
    /// The largest, milliseconds.
    pub max_ms: f64,
}

/// Microseconds since the epoch now.
fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_micros() as i64)
        .unwrap_or(0)
}

/// Commits transactions `first..first + count` of `workload` on `conn` paced to
/// `rate_events` events per second, stopping early when `length` has passed (a busy machine
/// may not reach the rate); returns the commit time (µs since the epoch) of each transaction
/// written and the achieved rate.
pub async fn paced_writer(
    conn: &mut mysql_async::Conn,
    workload: &Workload,
    first: u64,
    count: u64,
    rate_events: u64,
    length: Duration,
) -> Result<(Vec<i64>, f64)> {
    let per_transaction = Duration::from_secs_f64(
        f64::from(workload.rows_per_transaction) / rate_events.max(1) as f64,
    );
    let mut commit_micros = Vec::with_capacity(count as usize);
    let started = Instant::now();
    let mut sql = String::new();
    for offset in 0..count {
        if started.elapsed() >= length {
            break;
        }
        let due = started + per_transaction.mul_f64(offset as f64);
        let now = Instant::now();
        if due > now + Duration::from_millis(1) {
            tokio::time::sleep_until(due.into()).await;
        }
        sql.clear();
        workload.push_transaction_sql(first + offset, &mut sql);
        conn.query_drop(sql.as_str())
            .await
            .with_context(|| format!("latency writer: transaction {}", first + offset))?;
        commit_micros.push(now_micros());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let written = commit_micros.len() as u64 * u64::from(workload.rows_per_transaction);
    let rate = written as f64 / elapsed.max(1e-9);
    Ok((commit_micros, rate))
}

/// Reads `expected` records of the partitions from the given offsets on and returns (event
/// index, append time in µs) of each.
fn read_append_times(
    brokers: &str,
    start_offsets: &[(String, i32, i64)],
    expected: u64,
) -> Result<Vec<(u64, i64)>> {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "outbox-relay-bench-latency")
        .set("enable.auto.commit", "false")
        .create()
        .context("creating the latency consumer")?;
    let mut assignment = TopicPartitionList::new();
    for (topic, partition, offset) in start_offsets {
        assignment
            .add_partition_offset(topic, *partition, Offset::Offset(*offset))
            .context("building the assignment")?;
    }
    consumer
        .assign(&assignment)
        .context("assigning partitions")?;
    let mut out = Vec::with_capacity(expected as usize);
    let started = Instant::now();
    while (out.len() as u64) < expected {
        if started.elapsed() > SETTLE_LIMIT {
            bail!(
                "latency: read only {} of {expected} records back",
                out.len()
            );
        }
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.context("reading the latency topics")?;
        let append_millis = match message.timestamp() {
            Timestamp::LogAppendTime(millis) => millis,
            other => bail!("a latency record has no LogAppendTime timestamp: {other:?}"),
        };
        let id = message
            .headers()
            .and_then(|headers| headers.iter().find(|h| h.key == "id"))
            .and_then(|h| h.value)
            .context("a latency record has no `id` header")?;
        let id = std::str::from_utf8(id).context("a latency record's id is not UTF-8")?;
        let index: u64 = id
            .rsplit('-')
            .next()
            .and_then(|digits| digits.parse().ok())
            .with_context(|| format!("a latency record's id {id:?} is not the harness's"))?;
        out.push((index, append_millis * 1000));
    }
    Ok(out)
}

/// Runs the writer for `seconds` at `rate` events/s into a side that is already streaming
/// (caught up) into `PREFIX.outbox.event.TYPE` (topics created with LogAppendTime), waits for
/// every event, and computes the latencies from the records appended after the writer
/// started. `first_transaction` keeps ids apart from the drained log's.
pub async fn measure(
    db_url: &str,
    brokers: &str,
    prefix: &str,
    workload: &Workload,
    first_transaction: u64,
    rate: u64,
    seconds: u64,
) -> Result<Latency> {
    let transactions = (rate * seconds / u64::from(workload.rows_per_transaction)).max(1);
    let topics = topics_of(prefix);
    let start_offsets = end_offsets(brokers, &topics).await?;
    let already: u64 = records_in(brokers, &topics).await?;
    let mut conn = mysql_async::Conn::from_url(db_url)
        .await
        .context("latency writer connects")?;
    let (commit_micros, achieved_rate) = paced_writer(
        &mut conn,
        workload,
        first_transaction,
        transactions,
        rate,
        Duration::from_secs(seconds),
    )
    .await?;
    conn.disconnect()
        .await
        .context("latency writer disconnects")?;
    let expected = commit_micros.len() as u64 * u64::from(workload.rows_per_transaction);
    let settle_started = Instant::now();
    loop {
        let delivered = records_in(brokers, &topics).await?.saturating_sub(already);
        if delivered >= expected {
            break;
        }
        if settle_started.elapsed() > SETTLE_LIMIT {
            bail!("latency: {delivered} of {expected} events delivered {SETTLE_LIMIT:?} after the writer stopped");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let brokers = brokers.to_string();
    let appended =
        tokio::task::spawn_blocking(move || read_append_times(&brokers, &start_offsets, expected))
            .await
            .context("the latency reader task")??;
    let first_event = first_transaction * u64::from(workload.rows_per_transaction);
    let warm_up_end = commit_micros.first().copied().unwrap_or(0) + WARM_UP.as_micros() as i64;
    let mut by_index: HashMap<u64, i64> = HashMap::new();
    for (index, append) in appended {
        // The first copy counts (a redelivery would be later).
        by_index.entry(index).or_insert(append);
    }
    let mut latencies_ms = Vec::with_capacity(by_index.len());
    for (index, append) in by_index {
        let Some(offset) = index.checked_sub(first_event) else {
            continue;
        };
        let transaction = offset / u64::from(workload.rows_per_transaction);
        let Some(&committed) = commit_micros.get(transaction as usize) else {
            continue;
        };
        if committed < warm_up_end {
            continue;
        }
        // The broker's clock has millisecond resolution: a latency below 1 ms may show as
        // slightly negative; it counts as 0.
        latencies_ms.push(((append - committed) as f64 / 1000.0).max(0.0));
    }
    latencies_ms.sort_by(f64::total_cmp);
    let pick = |q: f64| quantile(&latencies_ms, q).unwrap_or(f64::NAN);
    Ok(Latency {
        samples: latencies_ms.len() as u64,
        achieved_rate,
        p50_ms: pick(0.5),
        p99_ms: pick(0.99),
        p999_ms: pick(0.999),
        max_ms: latencies_ms.last().copied().unwrap_or(f64::NAN),
    })
}
