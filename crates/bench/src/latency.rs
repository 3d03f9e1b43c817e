//! Steady-state commit -> ack latency: a writer commits outbox transactions at a fixed rate on
//! several connections of its own and notes when each COMMIT returned. At-least-once: the
//! topics use `message.timestamp.type=LogAppendTime`, so every record carries the broker's
//! append time, which with one replica and `acks=all` is when the broker acknowledged it
//! (the ack's loopback transit aside); latency = append time - commit time. Exactly-once: a
//! record counts once a `read_committed` consumer can read it (its Kafka transaction
//! committed), so latency = the moment a live `read_committed` consumer (10 ms fetch wait)
//! received it - commit time: an upper bound by up to one fetch wait.

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

/// How long a side frozen through another side's phase may take to catch up before its own.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(180);

/// A process stopped with SIGSTOP so that another side's latency phase has the machine to
/// itself; continued (SIGCONT) when dropped, also when the bench fails in between.
pub struct FrozenProcess {
    /// The stopped process.
    pid: u32,
}

impl FrozenProcess {
    /// Stops `pid` (`what` names it in errors).
    pub fn freeze(pid: u32, what: &str) -> Result<FrozenProcess> {
        send_signal(pid, "STOP").with_context(|| format!("freezing {what} (pid {pid})"))?;
        Ok(FrozenProcess { pid })
    }
}

impl Drop for FrozenProcess {
    fn drop(&mut self) {
        if let Err(error) = send_signal(self.pid, "CONT") {
            eprintln!("continuing process {}: {error:#}", self.pid);
        }
    }
}

fn send_signal(pid: u32, signal: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{signal} {pid} exited with {status}");
    }
    Ok(())
}

/// Waits until the topics of `prefix` hold a record for every outbox row on the server (the
/// drained log and every earlier latency phase): a side that was frozen through another
/// side's phase works off its backlog first, so the backlog does not count as its latency.
pub async fn wait_caught_up(db_url: &str, brokers: &str, prefix: &str) -> Result<()> {
    let mut conn = mysql_async::Conn::from_url(db_url)
        .await
        .context("connecting to count the outbox rows")?;
    let rows: Option<u64> = conn
        .query_first("SELECT COUNT(*) FROM shop.outbox")
        .await
        .context("counting the outbox rows")?;
    conn.disconnect().await.context("disconnecting")?;
    let rows = rows.unwrap_or(0);
    let topics = topics_of(prefix);
    let started = Instant::now();
    loop {
        let held = records_in(brokers, &topics).await?;
        if held >= rows {
            return Ok(());
        }
        if started.elapsed() > CATCH_UP_LIMIT {
            bail!("{held} of {rows} events in {prefix}'s topics {CATCH_UP_LIMIT:?} after the thaw");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

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

/// Commits transactions `first..first + count` of `workload` paced to `rate_events` events
/// per second on `conns` (transaction `first + n` on connection `n % conns.len()`, each at
/// its own due time, so one connection's round trip does not bound the rate), stopping at
/// the first not yet due when `length` has passed; returns the commit time (µs since the
/// epoch) of each transaction written, in order, and the achieved rate.
pub async fn paced_writer(
    conns: Vec<mysql_async::Conn>,
    workload: &Workload,
    first: u64,
    count: u64,
    rate_events: u64,
    length: Duration,
) -> Result<(Vec<i64>, f64)> {
    let per_transaction = Duration::from_secs_f64(
        f64::from(workload.rows_per_transaction) / rate_events.max(1) as f64,
    );
    let writers = conns.len().max(1) as u64;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (lane, mut conn) in conns.into_iter().enumerate() {
        let workload = *workload;
        tasks.push(tokio::spawn(async move {
            let mut commits: Vec<(u64, i64)> = Vec::new();
            let mut sql = String::new();
            let mut offset = lane as u64;
            while offset < count {
                let due = started + per_transaction.mul_f64(offset as f64);
                if due.duration_since(started) >= length {
                    break;
                }
                if due > Instant::now() + Duration::from_micros(200) {
                    tokio::time::sleep_until(due.into()).await;
                }
                sql.clear();
                workload.push_transaction_sql(first + offset, &mut sql);
                conn.query_drop(sql.as_str())
                    .await
                    .with_context(|| format!("latency writer: transaction {}", first + offset))?;
                commits.push((offset, now_micros()));
                offset += writers;
            }
            conn.disconnect()
                .await
                .context("latency writer disconnects")?;
            anyhow::Ok(commits)
        }));
    }
    let mut by_offset: Vec<(u64, i64)> = Vec::new();
    for task in tasks {
        by_offset.extend(task.await.context("a latency writer task")??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    by_offset.sort_unstable();
    // Only the unbroken run from offset 0 counts (every lane stops at the same due time).
    let mut commit_micros = Vec::with_capacity(by_offset.len());
    for (expected, (offset, micros)) in by_offset.into_iter().enumerate() {
        if offset != expected as u64 {
            break;
        }
        commit_micros.push(micros);
    }
    let written = commit_micros.len() as u64 * u64::from(workload.rows_per_transaction);
    let rate = written as f64 / elapsed.max(1e-9);
    Ok((commit_micros, rate))
}

/// What the live reader takes as an event's arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The record's LogAppendTime: the broker's append, i.e. the ack (at-least-once).
    Ack,
    /// The moment a `read_committed` consumer (10 ms fetch wait) received it: the Kafka
    /// transaction's commit, plus the fetch (exactly-once).
    Visible,
}

/// Reads records of the partitions from the given offsets on until `stop` is set and
/// nothing more arrives, counting them in `read`; returns (event index, arrival in µs) of
/// each.
fn read_arrivals(
    brokers: &str,
    start_offsets: &[(String, i32, i64)],
    arrival: Arrival,
    read: &std::sync::atomic::AtomicU64,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Vec<(u64, i64)>> {
    use std::sync::atomic::Ordering;
    let isolation = match arrival {
        Arrival::Ack => "read_uncommitted",
        Arrival::Visible => "read_committed",
    };
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "outbox-relay-bench-latency")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .set("fetch.wait.max.ms", "10")
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
    let mut out = Vec::new();
    loop {
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            if stop.load(Ordering::Relaxed) {
                return Ok(out);
            }
            continue;
        };
        let received = now_micros();
        let message = message.context("reading the latency topics")?;
        let at = match (arrival, message.timestamp()) {
            (Arrival::Visible, _) => received,
            (Arrival::Ack, Timestamp::LogAppendTime(millis)) => millis * 1000,
            (Arrival::Ack, other) => {
                bail!("a latency record has no LogAppendTime timestamp: {other:?}")
            }
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
        out.push((index, at));
        read.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs the writer (`writers` connections) for `seconds` at `rate` events/s into a side
/// that is already streaming (caught up) into `PREFIX.outbox.event.TYPE` (topics created
/// with LogAppendTime), while a live consumer reads the topics; waits for every event and
/// computes the latencies (commit -> `arrival`) of the events committed after the warm-up.
/// `first_transaction` keeps ids apart from the drained log's.
#[allow(clippy::too_many_arguments)]
pub async fn measure(
    db_url: &str,
    brokers: &str,
    prefix: &str,
    workload: &Workload,
    first_transaction: u64,
    rate: u64,
    seconds: u64,
    writers: u32,
    arrival: Arrival,
) -> Result<Latency> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let transactions = (rate * seconds / u64::from(workload.rows_per_transaction)).max(1);
    let topics = topics_of(prefix);
    let start_offsets = end_offsets(brokers, &topics).await?;
    let read = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (brokers, read, stop) = (brokers.to_string(), read.clone(), stop.clone());
        tokio::task::spawn_blocking(move || {
            read_arrivals(&brokers, &start_offsets, arrival, &read, &stop)
        })
    };
    let mut conns = Vec::new();
    for _ in 0..writers.max(1) {
        conns.push(
            mysql_async::Conn::from_url(db_url)
                .await
                .context("latency writer connects")?,
        );
    }
    let written = paced_writer(
        conns,
        workload,
        first_transaction,
        transactions,
        rate,
        Duration::from_secs(seconds),
    )
    .await;
    let settled = match &written {
        Ok((commit_micros, _)) => {
            let expected = commit_micros.len() as u64 * u64::from(workload.rows_per_transaction);
            let settle_started = Instant::now();
            loop {
                let delivered = read.load(Ordering::Relaxed);
                if delivered >= expected {
                    break Ok(());
                }
                if settle_started.elapsed() > SETTLE_LIMIT {
                    break Err(anyhow::anyhow!(
                        "latency: {delivered} of {expected} events read {SETTLE_LIMIT:?} after the writer stopped"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Err(_) => Ok(()),
    };
    stop.store(true, Ordering::Relaxed);
    let appended = reader.await.context("the latency reader task")??;
    let (commit_micros, achieved_rate) = written?;
    settled?;
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
