//! One measurement each: the raw pull and the bare producer (child processes that time
//! themselves), outbox-relay's drain (a child process running `outbox-relay run`, timed from
//! its start to the checkpoint covering the last transaction) and Debezium's drain (a Kafka
//! Connect worker, timed from streaming to the last record in the topics).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use outbox_testkit::connect::{DebeziumConnect, DebeziumOptions};
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::ScratchMariadb;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::children::ChildReport;
use crate::stats::{sample, ProcessSample};
use crate::workload::{LogPoint, AGGREGATE_TYPES};

/// The most a drain may take before the run is given up.
const DRAIN_LIMIT: Duration = Duration::from_secs(1_800);

/// How often the orchestrator looks at a checkpoint file or the topics' end offsets.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// One measured figure of one program in one round.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    /// Outbox events the measured work covered.
    pub events: u64,
    /// Wall seconds of the measured work.
    pub seconds: f64,
    /// `events / seconds`.
    pub events_per_second: f64,
    /// CPU seconds (user + system) of the program's process for the work.
    pub cpu_seconds: f64,
    /// `cpu_seconds` per million events.
    pub cpu_seconds_per_million_events: f64,
    /// Peak RSS of the program's process, bytes.
    pub peak_rss_bytes: u64,
    /// CPU seconds per million events of the harness's Apache Kafka broker (its JVM) from
    /// just before the program started to just after its work was checked: what the
    /// program's requests cost the broker, which shares the cores. `None` for the raw
    /// pull and for drains into the mock cluster.
    pub broker_cpu_seconds_per_million_events: Option<f64>,
}

impl Figure {
    /// A figure from its parts.
    pub fn new(events: u64, seconds: f64, cpu_seconds: f64, peak_rss_bytes: u64) -> Figure {
        Figure {
            events,
            seconds,
            events_per_second: events as f64 / seconds.max(1e-9),
            cpu_seconds,
            cpu_seconds_per_million_events: cpu_seconds * 1e6 / (events.max(1) as f64),
            peak_rss_bytes,
            broker_cpu_seconds_per_million_events: None,
        }
    }

    /// The figure with the broker's CPU seconds over the program's work.
    pub fn with_broker_cpu(mut self, broker_cpu_seconds: f64) -> Figure {
        self.broker_cpu_seconds_per_million_events =
            Some(broker_cpu_seconds * 1e6 / (self.events.max(1) as f64));
        self
    }
}

/// CPU seconds of the broker process so far (`None` without a process to look at).
pub fn broker_cpu_seconds(broker: &KafkaBroker) -> Option<f64> {
    let pid = broker.pid()?;
    sample(Some(pid)).ok().map(|sample| sample.cpu_seconds)
}

/// `PREFIX.outbox.event.TYPE` for every aggregate type.
pub fn topics_of(prefix: &str) -> Vec<String> {
    AGGREGATE_TYPES
        .iter()
        .map(|kind| format!("{prefix}.outbox.event.{kind}"))
        .collect()
}

/// The topics of every prefix plus each prefix's dead-letter topic.
pub fn all_topics(prefixes: &[String]) -> Vec<String> {
    prefixes
        .iter()
        .flat_map(|prefix| {
            let mut topics = topics_of(prefix);
            topics.push(format!("{prefix}.outbox.dlq"));
            topics
        })
        .collect()
}

/// Creates the topics of `prefix` (and its dead-letter topic) on `broker`.
pub async fn create_topics(
    broker: &KafkaBroker,
    prefix: &str,
    partitions: i32,
    config: &[(&str, &str)],
) -> Result<()> {
    for topic in all_topics(&[prefix.to_string()]) {
        broker
            .create_topic_with_config(&topic, partitions, config)
            .await
            .with_context(|| format!("creating topic {topic}"))?;
    }
    // The Kafka store's topic, as the relay creates it (one partition, compacted); only
    // exactly-once relays write to it.
    let topic = checkpoint_topic(prefix);
    broker
        .create_topic_with_config(&topic, 1, &[("cleanup.policy", "compact")])
        .await
        .with_context(|| format!("creating topic {topic}"))?;
    Ok(())
}

/// Records appended to `topics` so far: the sum of the partitions' high watermarks. Every
/// topic counted is created empty for one drain or phase, so the high watermark is the count;
/// high minus low would not be: the rdkafka mock cluster keeps at most 100 000 message sets
/// or 5 MiB per partition and drops the oldest, which raises the low watermark.
pub async fn records_in(brokers: &str, topics: &[String]) -> Result<u64> {
    let offsets = end_offsets(brokers, topics).await?;
    Ok(offsets
        .iter()
        .map(|(_, _, high)| u64::try_from(*high).unwrap_or(0))
        .sum())
}

/// Records in `topics` a `read_committed` consumer reads from the beginning: reads until
/// `expected` arrived, then 500 ms more (so a surplus shows).
pub async fn committed_records_in(brokers: &str, topics: &[String], expected: u64) -> Result<u64> {
    let brokers = brokers.to_string();
    let topics = topics.to_vec();
    tokio::task::spawn_blocking(move || -> Result<u64> {
        use rdkafka::consumer::Consumer;
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", "outbox-relay-bench-count")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .context("creating the counting consumer")?;
        let mut assignment = rdkafka::TopicPartitionList::new();
        for topic in &topics {
            let metadata = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(10))
                .with_context(|| format!("metadata of {topic}"))?;
            let partitions = metadata
                .topics()
                .first()
                .map_or(0, |t| t.partitions().len());
            for partition in 0..partitions as i32 {
                assignment
                    .add_partition_offset(topic, partition, rdkafka::Offset::Beginning)
                    .context("building the counting assignment")?;
            }
        }
        consumer.assign(&assignment).context("assigning")?;
        let started = Instant::now();
        let mut count = 0u64;
        let mut reached: Option<Instant> = None;
        loop {
            if let Some(at) = reached {
                if at.elapsed() > Duration::from_millis(500) {
                    return Ok(count);
                }
            } else if started.elapsed() > Duration::from_secs(300) {
                return Ok(count);
            }
            if let Some(message) = consumer.poll(Duration::from_millis(100)) {
                message.context("counting committed records")?;
                count += 1;
                if count >= expected && reached.is_none() {
                    reached = Some(Instant::now());
                }
            }
        }
    })
    .await
    .context("the counting task")?
}

/// Every partition of `topics` with its high watermark now.
pub async fn end_offsets(brokers: &str, topics: &[String]) -> Result<Vec<(String, i32, i64)>> {
    let brokers = brokers.to_string();
    let topics = topics.to_vec();
    tokio::task::spawn_blocking(move || -> Result<Vec<(String, i32, i64)>> {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", "outbox-relay-bench-watermarks")
            .create()
            .context("creating the watermark consumer")?;
        let mut out = Vec::new();
        for topic in &topics {
            let metadata = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(10))
                .with_context(|| format!("metadata of {topic}"))?;
            let partitions = metadata
                .topics()
                .first()
                .map(|t| t.partitions().len())
                .unwrap_or(0);
            for partition in 0..partitions as i32 {
                let (_low, high) = consumer
                    .fetch_watermarks(topic, partition, Duration::from_secs(10))
                    .with_context(|| format!("watermarks of {topic}/{partition}"))?;
                out.push((topic.clone(), partition, high));
            }
        }
        Ok(out)
    })
    .await
    .context("the watermark task")?
}

/// The relay's log line (`outbox_relay::internal_events`) written when its binlog stream is
/// up: the drain clock's start.
const STREAMING_LOG_LINE: &str = "binlog source connected";

/// What the polling relay logs when it starts claiming (its drain's clock starts there).
pub const POLL_STREAMING_LOG_LINE: &str = "poll source connected";

/// The UTC time a log line of the relay's human format starts with
/// (`2026-12-04T13:31:00.581331Z`, possibly wrapped in ANSI colour codes).
fn parse_log_timestamp(line: &str) -> Option<SystemTime> {
    let mut clean = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An escape sequence `ESC [ ... m`.
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            clean.push(c);
        }
    }
    let token = clean.split_whitespace().next()?.strip_suffix('Z')?;
    let (date, time) = token.split_once('T')?;
    let mut date_parts = date.splitn(3, '-').map(str::parse::<i64>);
    let (year, month, day) = (
        date_parts.next()?.ok()?,
        date_parts.next()?.ok()?,
        date_parts.next()?.ok()?,
    );
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock_parts = clock.splitn(3, ':').map(str::parse::<u64>);
    let (hours, minutes, seconds) = (
        clock_parts.next()?.ok()?,
        clock_parts.next()?.ok()?,
        clock_parts.next()?.ok()?,
    );
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hours > 23 || minutes > 59 {
        return None;
    }
    let nanos = if fraction.is_empty() {
        0
    } else {
        let digits: String = fraction
            .chars()
            .chain(std::iter::repeat('0'))
            .take(9)
            .collect();
        digits.parse::<u32>().ok()?
    };
    // Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = u64::try_from(era * 146_097 + day_of_era - 719_468).ok()?;
    let since_epoch = Duration::new(
        days * 86_400 + hours * 3_600 + minutes * 60 + seconds,
        nanos,
    );
    SystemTime::UNIX_EPOCH.checked_add(since_epoch)
}

/// The producer's `message.max.bytes` for records of `payload_bytes` (with room for the key
/// and headers), when above librdkafka's 1 MB default.
pub fn max_message_bytes(payload_bytes: usize) -> Option<usize> {
    (payload_bytes > 900_000).then(|| payload_bytes + (1 << 20))
}

/// The path of this program, to start its child modes.
fn this_program() -> Result<PathBuf> {
    std::env::current_exe().context("finding this program's path")
}

/// Runs this program with `args` and reads the [`ChildReport`] it prints.
pub async fn run_reporting_child(args: &[String], what: &str) -> Result<ChildReport> {
    let output = tokio::process::Command::new(this_program()?)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("starting the {what} child"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "the {what} child failed ({}): {}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .with_context(|| format!("reading the {what} child's report {line:?}"))
}

/// Where a relay child keeps its files.
pub struct RelayDir {
    /// Owns the directory.
    dir: tempfile::TempDir,
    /// Exactly-once: the brokers and the Kafka store's topic the checkpoint records go to
    /// (`None`: at-least-once with a checkpoint file).
    kafka_checkpoint: Option<(String, String)>,
}

/// How a relay child is configured besides its source, brokers and topics.
#[derive(Debug, Clone, Copy, Default)]
pub struct RelayShape {
    /// `[kafka] delivery = "exactly_once"` with `[checkpoint] store = "kafka"` on the topic
    /// `PREFIX.checkpoints` (created by [`create_topics`]).
    pub exactly_once: bool,
    /// The producer's `message.max.bytes` when records exceed librdkafka's 1 MB default.
    pub max_message_bytes: Option<usize>,
    /// `[pipeline] commit_interval_ms` (`None`: the relay's default).
    pub commit_interval_ms: Option<u64>,
    /// `[pipeline] max_in_flight_bytes` (`None`: the relay's default).
    pub max_in_flight_bytes: Option<u64>,
    /// `[pipeline] max_in_flight` (`None`: the relay's default).
    pub max_in_flight: Option<usize>,
    /// `[kafka] linger_ms` (`None`: the relay's default, 5 ms); the bare producer, which
    /// takes the relay's producer properties, lingers as long.
    pub linger_ms: Option<u64>,
    /// `Some`: `[source] mode = "poll"` with these `[source.poll]` settings (no checkpoint
    /// store).
    pub poll: Option<PollShape>,
}

/// A polling relay's `[source.poll]` settings.
#[derive(Debug, Clone, Copy)]
pub struct PollShape {
    /// `interval_ms`.
    pub interval_ms: u64,
    /// `batch_size`.
    pub batch_size: u32,
}

/// The Kafka store's record key in the harness's exactly-once configs.
pub const CHECKPOINT_CONNECTOR: &str = "bench";

/// The Kafka store's topic of `prefix`.
pub fn checkpoint_topic(prefix: &str) -> String {
    format!("{prefix}.checkpoints")
}

impl RelayDir {
    /// A fresh directory.
    pub fn new() -> Result<RelayDir> {
        Ok(RelayDir {
            dir: tempfile::Builder::new()
                .prefix("outbox-relay-bench-")
                .tempdir()
                .context("creating the relay's directory")?,
            kafka_checkpoint: None,
        })
    }

    /// Whether the written config is exactly-once.
    pub fn exactly_once(&self) -> bool {
        self.kafka_checkpoint.is_some()
    }

    /// The config file.
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("relay.toml")
    }

    /// The checkpoint file.
    pub fn checkpoint(&self) -> PathBuf {
        self.dir.path().join("checkpoint.json")
    }

    /// The relay's log (stdout and stderr).
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("relay.log")
    }

    /// Writes the relay's config: the Debezium-preset outbox table, topics under `prefix`
    /// (created beforehand by the harness), everything else the relay's defaults.
    pub fn write_config(
        &mut self,
        source_url: &str,
        brokers: &str,
        prefix: &str,
        start: &str,
        shape: RelayShape,
    ) -> Result<()> {
        let poll_lines = shape
            .poll
            .map(|poll| {
                format!(
                    "mode = \"poll\"\n\n[source.poll]\ninterval_ms = {}\nbatch_size = {}\n",
                    poll.interval_ms, poll.batch_size
                )
            })
            .unwrap_or_default();
        let mut text = format!(
            r#"[source]
url = "{source_url}"
server_id = 4343
start = "{start}"
{poll_lines}

[[outbox]]
table = "shop.outbox"
preset = "debezium"

[route]
topic = "{prefix}.outbox.event.${{aggregate_type}}"

[dead_letter]
topic = "{prefix}.outbox.dlq"

[kafka]
brokers = "{brokers}"
create_topics = false
delivery = "{delivery}"
"#,
            delivery = if shape.exactly_once {
                "exactly_once"
            } else {
                "at_least_once"
            },
        );
        if let Some(linger) = shape.linger_ms {
            text.push_str(&format!("linger_ms = {linger}\n"));
        }
        if let Some(bytes) = shape.max_message_bytes {
            text.push_str(&format!(
                "\n[kafka.properties]\n\"message.max.bytes\" = \"{bytes}\"\n"
            ));
        }
        if shape.commit_interval_ms.is_some()
            || shape.max_in_flight_bytes.is_some()
            || shape.max_in_flight.is_some()
        {
            text.push_str("\n[pipeline]\n");
        }
        if let Some(records) = shape.max_in_flight {
            text.push_str(&format!("max_in_flight = {records}\n"));
        }
        if let Some(interval) = shape.commit_interval_ms {
            text.push_str(&format!("commit_interval_ms = {interval}\n"));
        }
        if let Some(bytes) = shape.max_in_flight_bytes {
            text.push_str(&format!("max_in_flight_bytes = {bytes}\n"));
        }
        if shape.poll.is_some() {
            // Poll mode keeps its state in the outbox table.
            self.kafka_checkpoint = None;
        } else if shape.exactly_once {
            let topic = checkpoint_topic(prefix);
            text.push_str(&format!(
                "\n[checkpoint]\nstore = \"kafka\"\ntopic = \"{topic}\"\nconnector = \"{CHECKPOINT_CONNECTOR}\"\n"
            ));
            self.kafka_checkpoint = Some((brokers.to_string(), topic));
        } else {
            text.push_str(&format!(
                "\n[checkpoint]\nstore = \"file\"\npath = \"{}\"\n",
                self.checkpoint().display()
            ));
            self.kafka_checkpoint = None;
        }
        std::fs::write(self.config(), text).context("writing the relay's config")
    }

    /// The last lines of the relay's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The binlog point of the stored checkpoint, if any.
    pub fn checkpoint_point(&self) -> Option<LogPoint> {
        let text = std::fs::read_to_string(self.checkpoint()).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        find_log_point(&json)
    }
}

/// The first object in `json` with a string `file`/`binlog_file` and a number
/// `position`/`binlog_position`.
fn find_log_point(json: &serde_json::Value) -> Option<LogPoint> {
    match json {
        serde_json::Value::Object(map) => {
            for (file_key, position_key) in
                [("binlog_file", "binlog_position"), ("file", "position")]
            {
                if let (Some(file), Some(position)) = (
                    map.get(file_key).and_then(|v| v.as_str()),
                    map.get(position_key).and_then(|v| v.as_u64()),
                ) {
                    return Some(LogPoint {
                        file: file.to_string(),
                        position,
                    });
                }
            }
            map.values().find_map(find_log_point)
        }
        serde_json::Value::Array(items) => items.iter().find_map(find_log_point),
        _ => None,
    }
}

/// Names a program (with arguments) to run the relay child under, e.g. `valgrind
/// --tool=callgrind --callgrind-out-file=/tmp/relay.%p.out`.
pub const RELAY_WRAPPER_ENV: &str = "OUTBOX_BENCH_RELAY_WRAPPER";

/// A running relay child.
pub struct RelayProcess {
    /// The child.
    child: tokio::process::Child,
    /// Its directory (config, checkpoint, log).
    pub dir: RelayDir,
    /// When it was started.
    pub started: Instant,
}

impl RelayProcess {
    /// Starts `outbox-relay run --config` (this program's `child-relay`) on `dir`'s config.
    pub fn start(dir: RelayDir) -> Result<RelayProcess> {
        let log = std::fs::File::create(dir.log()).context("creating the relay's log")?;
        let log_err = log.try_clone().context("cloning the relay's log handle")?;
        let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_string());
        // `OUTBOX_BENCH_RELAY_WRAPPER="valgrind --tool=callgrind ..."` runs the relay under
        // that program (for instruction counts, which stay stable on a noisy machine).
        let wrapper: Vec<String> = std::env::var(RELAY_WRAPPER_ENV)
            .map(|text| text.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).arg(this_program()?);
                command
            }
            None => tokio::process::Command::new(this_program()?),
        };
        let child = command
            .arg("child-relay")
            .arg("--config")
            .arg(dir.config())
            .env("RUST_LOG", filter)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(true)
            .spawn()
            .context("starting the relay child")?;
        Ok(RelayProcess {
            child,
            dir,
            started: Instant::now(),
        })
    }

    /// Its process id.
    pub fn pid(&self) -> Result<u32> {
        self.child.id().context("the relay child has exited")
    }

    /// Fails when the child has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait().context("polling the relay child")? {
            bail!(
                "the relay exited ({status}); its log {}:\n{}",
                self.dir.log().display(),
                self.dir.log_tail(30)
            );
        }
        Ok(())
    }

    /// Waits until its log contains `needle`.
    pub async fn wait_for_log(&mut self, needle: &str, limit: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            let text = std::fs::read_to_string(self.dir.log()).unwrap_or_default();
            if text.contains(needle) {
                return Ok(());
            }
            self.check_running()?;
            if started.elapsed() > limit {
                bail!(
                    "the relay did not log `{needle}` within {limit:?}:\n{}",
                    self.dir.log_tail(30)
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Seconds since the relay connected to its source and began reading at its start
    /// position: since the timestamp of its `binlog source connected` log line (like
    /// Debezium's clock, which starts when its worker reports streaming, this leaves out the
    /// process's start, its startup checks and connecting: ~70 ms here).
    fn seconds_streaming(&self) -> Result<f64> {
        self.seconds_since_log_line(STREAMING_LOG_LINE)
    }

    /// Seconds since the timestamp of the relay's first log line containing `needle`.
    fn seconds_since_log_line(&self, needle: &str) -> Result<f64> {
        let text = std::fs::read_to_string(self.dir.log()).context("reading the relay's log")?;
        let connected = text
            .lines()
            .find(|line| line.contains(needle))
            .with_context(|| {
                format!(
                    "the relay's log has no `{needle}` line:\n{}",
                    self.dir.log_tail(30)
                )
            })?;
        let at = parse_log_timestamp(connected).with_context(|| {
            format!("no timestamp at the start of the relay's log line `{connected}`")
        })?;
        let seconds = SystemTime::now()
            .duration_since(at)
            .context("the relay's log line is dated in the future")?;
        Ok(seconds.as_secs_f64())
    }

    /// Waits until the stored checkpoint reaches `end`; returns the seconds since the relay
    /// began streaming ([`RelayProcess::seconds_streaming`]) and the process's sample at
    /// that moment.
    pub async fn wait_for_checkpoint(&mut self, end: &LogPoint) -> Result<(f64, ProcessSample)> {
        if let Some((brokers, topic)) = self.dir.kafka_checkpoint.clone() {
            return self
                .wait_for_committed_checkpoint(&brokers, &topic, end)
                .await;
        }
        loop {
            if let Some(point) = self.dir.checkpoint_point() {
                if point >= *end {
                    let seconds = self.seconds_streaming()?;
                    return Ok((seconds, sample(Some(self.pid()?))?));
                }
            }
            self.check_running()?;
            if self.started.elapsed() > DRAIN_LIMIT {
                bail!(
                    "the relay's checkpoint did not reach {}:{} within {DRAIN_LIMIT:?} (at {:?}):\n{}",
                    end.file,
                    end.position,
                    self.dir.checkpoint_point(),
                    self.dir.log_tail(30)
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Exactly-once: waits until a `read_committed` consumer of the Kafka store's topic sees
    /// the connector's checkpoint record at or past `end` (its transaction, which also holds
    /// the batch's records, has committed); returns the seconds since the start and the
    /// process's sample at that moment.
    async fn wait_for_committed_checkpoint(
        &mut self,
        brokers: &str,
        topic: &str,
        end: &LogPoint,
    ) -> Result<(f64, ProcessSample)> {
        let watcher = CommittedCheckpointWatcher::start(brokers, topic)?;
        let mut last = None;
        loop {
            while let Ok(point) = watcher.points.try_recv() {
                last = Some(point);
            }
            if let Some(error) = watcher.error() {
                bail!("watching the Kafka store's topic {topic}: {error}");
            }
            if last.as_ref().is_some_and(|point| point >= end) {
                let seconds = self.seconds_streaming()?;
                return Ok((seconds, sample(Some(self.pid()?))?));
            }
            self.check_running()?;
            if self.started.elapsed() > DRAIN_LIMIT {
                bail!(
                    "the relay's committed checkpoint did not reach {}:{} within {DRAIN_LIMIT:?} (at {last:?}):\n{}",
                    end.file,
                    end.position,
                    self.dir.log_tail(30)
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// SIGTERM (the relay's graceful stop), then waits for it to exit (SIGKILL after 30 s).
    pub async fn stop(mut self) -> Result<()> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
        }
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(_) => Ok(()),
            Err(_) => {
                let _ = self.child.kill().await;
                bail!(
                    "the relay did not stop within 30 s of SIGTERM:\n{}",
                    self.dir.log_tail(20)
                )
            }
        }
    }
}

/// A thread tailing the Kafka store's topic with `isolation.level=read_committed` (10 ms
/// fetch wait), sending the binlog point of every checkpoint record of
/// [`CHECKPOINT_CONNECTOR`] it reads; it stops when dropped.
struct CommittedCheckpointWatcher {
    /// The points read, in order.
    points: std::sync::mpsc::Receiver<LogPoint>,
    /// Set on drop: the thread stops.
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The thread's error, if it failed.
    failure: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl CommittedCheckpointWatcher {
    fn start(brokers: &str, topic: &str) -> Result<CommittedCheckpointWatcher> {
        use rdkafka::message::Message;
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", "outbox-relay-bench-checkpoint")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("fetch.wait.max.ms", "10")
            .create()
            .context("creating the checkpoint watcher")?;
        let mut assignment = rdkafka::TopicPartitionList::new();
        assignment
            .add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
            .context("building the checkpoint watcher's assignment")?;
        consumer
            .assign(&assignment)
            .context("assigning the checkpoint topic")?;
        let (sender, points) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let failure = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (thread_stop, thread_failure) = (stop.clone(), failure.clone());
        std::thread::Builder::new()
            .name("bench-checkpoint-watcher".into())
            .spawn(move || {
                while !thread_stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Some(message) = consumer.poll(Duration::from_millis(50)) else {
                        continue;
                    };
                    let message = match message {
                        Ok(message) => message,
                        Err(error) => {
                            if let Ok(mut failure) = thread_failure.lock() {
                                *failure = Some(error.to_string());
                            }
                            return;
                        }
                    };
                    if message.key() != Some(CHECKPOINT_CONNECTOR.as_bytes()) {
                        continue;
                    }
                    let point = message
                        .payload()
                        .and_then(|value| serde_json::from_slice::<serde_json::Value>(value).ok())
                        .and_then(|json| find_log_point(&json));
                    if let Some(point) = point {
                        if sender.send(point).is_err() {
                            return;
                        }
                    }
                }
            })
            .context("starting the checkpoint watcher thread")?;
        Ok(CommittedCheckpointWatcher {
            points,
            stop,
            failure,
        })
    }

    fn error(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|failure| failure.clone())
    }
}

impl Drop for CommittedCheckpointWatcher {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// outbox-relay's drain: from its start (`start = "earliest"`) to the checkpoint covering
/// `end`; then checks the topics hold exactly `events` records. With `keep_running` the relay
/// is handed back still running (it streams on: the latency phase uses it).
pub async fn relay_drain(
    db: &ScratchMariadb,
    brokers: &str,
    prefix: &str,
    end: &LogPoint,
    events: u64,
    keep_running: bool,
    shape: RelayShape,
) -> Result<(Figure, Option<RelayProcess>)> {
    let mut dir = RelayDir::new()?;
    dir.write_config(&db.url(), brokers, prefix, "earliest", shape)?;
    let mut relay = RelayProcess::start(dir)?;
    let (seconds, process) = relay.wait_for_checkpoint(end).await?;
    let delivered = if shape.exactly_once {
        // The topics' offsets also count the transactions' commit markers.
        committed_records_in(brokers, &topics_of(prefix), events).await?
    } else {
        records_in(brokers, &topics_of(prefix)).await?
    };
    if delivered != events {
        bail!("outbox-relay delivered {delivered} records for {events} events (prefix {prefix})");
    }
    let figure = Figure::new(events, seconds, process.cpu_seconds, process.peak_rss_bytes);
    if keep_running {
        return Ok((figure, Some(relay)));
    }
    relay.stop().await?;
    Ok((figure, None))
}

/// What the database did during a polling drain: the polling relay's load on the primary.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct DatabaseLoad {
    /// Statements per second (`Questions`; the harness's own progress query, one per
    /// 20 ms, is not subtracted: about 50/s).
    pub queries_per_second: f64,
    /// The server process's CPU seconds per million events.
    pub cpu_seconds_per_million_events: f64,
}

/// The server's `Questions` counter and its process's CPU seconds.
async fn database_counters(conn: &mut mysql_async::Conn) -> Result<(u64, f64)> {
    use mysql_async::prelude::Queryable;
    let questions: Option<(String, u64)> = conn
        .query_first("SHOW GLOBAL STATUS LIKE 'Questions'")
        .await
        .context("reading the server's Questions")?;
    let pid_file: Option<String> = conn
        .query_first("SELECT @@pid_file")
        .await
        .context("reading the server's pid file name")?;
    let pid = pid_file
        .and_then(|file| std::fs::read_to_string(file).ok())
        .and_then(|text| text.trim().parse::<u32>().ok())
        .context("the server's pid")?;
    Ok((
        questions.map_or(0, |(_, value)| value),
        sample(Some(pid))?.cpu_seconds,
    ))
}

/// Makes every outbox row PENDING again (due now, no claim), for a polling drain of the
/// same rows, and waits until the server purged what that rewrote.
pub async fn reset_poll_rows(db: &ScratchMariadb) -> Result<()> {
    use mysql_async::prelude::Queryable;
    let mut conn = db.conn().await.context("connecting")?;
    conn.query_drop(
        "UPDATE shop.outbox SET poll_status = 'PENDING', poll_attempts = 0, \
         poll_next_attempt_at = NOW(6), poll_locked_until = NULL, poll_claim_token = '', \
         poll_last_error = NULL, poll_sent_at = NULL",
    )
    .await
    .context("making the outbox rows PENDING")?;
    // Rows rewritten in place by that UPDATE drain slower than rows as the writer inserts
    // them (the pages and indexes it leaves: 21 300 -> 18 700 -> 17 800 rows/s over three
    // rounds of `examples/claim_cost.rs` in outbox-poll, flat with a rebuild between): so
    // rebuild the table, as a relay in service sees rows inserted, claimed, marked and
    // deleted in order. Then wait until the server purged what the UPDATE rewrote, so the
    // drain does not pay for the harness's reset either.
    conn.query_drop("ALTER TABLE shop.outbox FORCE")
        .await
        .context("rebuilding the outbox table")?;
    let started = std::time::Instant::now();
    loop {
        let history: Option<u64> = conn
            .query_first(
                "SELECT COUNT FROM information_schema.INNODB_METRICS \
                 WHERE NAME = 'trx_rseg_history_len'",
            )
            .await
            .context("reading the purge backlog")?;
        if history.is_none_or(|length| length < 100)
            || started.elapsed() > std::time::Duration::from_secs(120)
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    conn.disconnect().await.context("disconnecting")?;
    Ok(())
}

/// A polling relay (`[source] mode = "poll"`) drains the outbox table's PENDING rows: from
/// its `poll source connected` log line to the moment no row is left unsent, with the
/// database's load meanwhile. The rows must be PENDING ([`reset_poll_rows`]).
pub async fn poll_drain(
    db: &ScratchMariadb,
    brokers: &str,
    prefix: &str,
    events: u64,
    shape: RelayShape,
) -> Result<(Figure, DatabaseLoad)> {
    use mysql_async::prelude::Queryable;
    let mut conn = db.conn().await.context("connecting")?;
    let (questions_before, db_cpu_before) = database_counters(&mut conn).await?;
    let mut dir = RelayDir::new()?;
    dir.write_config(&db.url(), brokers, prefix, "latest", shape)?;
    let mut relay = RelayProcess::start(dir)?;
    let (seconds, process) = loop {
        // One index entry read, not a count of the backlog: 50 counts a second of 100 000
        // unsent rows cost the server more than the relay's claims did.
        let unsent: Option<u8> = conn
            .query_first(
                "SELECT 1 FROM shop.outbox WHERE poll_status IN ('PENDING', 'PROCESSING') LIMIT 1",
            )
            .await
            .context("looking for unsent rows")?;
        if unsent.is_none() {
            let seconds = relay.seconds_since_log_line(POLL_STREAMING_LOG_LINE)?;
            break (seconds, sample(Some(relay.pid()?))?);
        }
        relay.check_running()?;
        if relay.started.elapsed() > DRAIN_LIMIT {
            bail!(
                "the polling relay left rows unsent after {DRAIN_LIMIT:?}:\n{}",
                relay.dir.log_tail(30)
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    };
    let (questions_after, db_cpu_after) = database_counters(&mut conn).await?;
    conn.disconnect().await.context("disconnecting")?;
    let delivered = records_in(brokers, &topics_of(prefix)).await?;
    if delivered != events {
        bail!(
            "the polling relay delivered {delivered} records for {events} events (prefix {prefix})"
        );
    }
    relay.stop().await?;
    let figure = Figure::new(events, seconds, process.cpu_seconds, process.peak_rss_bytes);
    let load = DatabaseLoad {
        queries_per_second: questions_after.saturating_sub(questions_before) as f64
            / seconds.max(1e-9),
        cpu_seconds_per_million_events: (db_cpu_after - db_cpu_before) * 1e6
            / (events.max(1) as f64),
    };
    Ok((figure, load))
}

/// Debezium's throughput settings, as its connector documentation and Kafka Connect's name
/// them: bigger batches and queue than the defaults (2048 / 8192), a short poll interval
/// (default 500 ms), and the worker's producer batching.
pub const DEBEZIUM_THROUGHPUT_SETTINGS: &[(&str, &str)] = &[
    ("max.batch.size", "8192"),
    ("max.queue.size", "32768"),
    ("poll.interval.ms", "10"),
    ("producer.override.linger.ms", "5"),
    ("producer.override.batch.size", "262144"),
];

/// Debezium's options for a run reading `shop.outbox` into `PREFIX.outbox.event.TYPE`.
pub fn debezium_options(
    name: &str,
    prefix: &str,
    server_id: u32,
    partitions: i32,
) -> DebeziumOptions {
    let mut options = DebeziumOptions::outbox(name, "shop.outbox");
    options.server_id = server_id;
    options.extra.push((
        "transforms.outbox.route.topic.replacement".into(),
        format!("{prefix}.outbox.event.${{routedByValue}}"),
    ));
    options.extra.push((
        "topic.creation.default.partitions".into(),
        partitions.to_string(),
    ));
    for (key, value) in DEBEZIUM_THROUGHPUT_SETTINGS {
        options.extra.push(((*key).into(), (*value).into()));
    }
    options
}

/// Debezium's drain of the whole log: no snapshot, streaming from the first binlog file
/// (`snapshot.mode=configuration_based` with neither data nor schema snapshot), timed from
/// the moment the worker reports streaming to the moment the topics hold every event. CPU
/// is the worker JVM's during that time; peak RSS its whole life's. With `keep_running` the
/// worker is handed back still streaming (the latency phase uses it).
#[allow(clippy::too_many_arguments)]
pub async fn debezium_drain(
    db: &ScratchMariadb,
    broker: &KafkaBroker,
    name: &str,
    prefix: &str,
    server_id: u32,
    partitions: i32,
    events: u64,
    keep_running: bool,
) -> Result<(Figure, Option<DebeziumConnect>)> {
    let mut options = debezium_options(name, prefix, server_id, partitions);
    for (key, value) in [
        ("snapshot.mode", "configuration_based"),
        ("snapshot.mode.configuration.based.snapshot.data", "false"),
        ("snapshot.mode.configuration.based.snapshot.schema", "false"),
        ("snapshot.mode.configuration.based.start.stream", "true"),
    ] {
        options.extra.push((key.into(), value.into()));
    }
    let connect = DebeziumConnect::start(db, broker, options)
        .await
        .context("starting Debezium")?;
    let started = Instant::now();
    let pid = connect.pid().context("the Connect worker has no process")?;
    let before = sample(Some(pid))?;
    let topics = topics_of(prefix);
    loop {
        let delivered = records_in(&broker.bootstrap(), &topics).await?;
        if delivered >= events {
            let seconds = started.elapsed().as_secs_f64();
            let after = sample(Some(pid))?;
            if delivered != events {
                bail!("Debezium delivered {delivered} records for {events} events");
            }
            let figure = Figure::new(
                events,
                seconds,
                after.cpu_seconds - before.cpu_seconds,
                after.peak_rss_bytes,
            );
            return Ok((figure, keep_running.then_some(connect)));
        }
        if started.elapsed() > DRAIN_LIMIT {
            bail!(
                "Debezium delivered only {delivered} of {events} within {DRAIN_LIMIT:?}; its log: {}",
                connect.log_path().display()
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The raw pull child's figure: `events` outbox events' worth of log per second.
pub async fn raw_pull(
    db: &ScratchMariadb,
    server_id: u32,
    first: &str,
    end: &LogPoint,
    events: u64,
) -> Result<Figure> {
    let args = [
        "child-pull".to_string(),
        "--url".into(),
        db.url(),
        "--server-id".into(),
        server_id.to_string(),
        "--first-file".into(),
        first.to_string(),
        "--end-file".into(),
        end.file.clone(),
        "--end-position".into(),
        end.position.to_string(),
    ];
    let report = run_reporting_child(&args, "raw pull").await?;
    if report.count == 0 {
        bail!("the raw pull read no binlog events");
    }
    Ok(Figure::new(
        events,
        report.elapsed_seconds,
        report.process.cpu_seconds,
        report.process.peak_rss_bytes,
    ))
}

/// The bare producer child's figure.
pub async fn bare_producer(
    config_dir: &Path,
    brokers: &str,
    prefix: &str,
    workload: &crate::workload::Workload,
    linger_ms: Option<u64>,
) -> Result<Figure> {
    let mut dir = RelayDir {
        dir: tempfile::Builder::new()
            .prefix("outbox-relay-bench-producer-")
            .tempdir_in(config_dir)
            .context("creating the producer's directory")?,
        kafka_checkpoint: None,
    };
    // Only `[kafka]` is read: the relay's (at-least-once) producer properties for these
    // brokers.
    dir.write_config(
        "mysql://unused@127.0.0.1:1",
        brokers,
        prefix,
        "earliest",
        RelayShape {
            poll: None,
            exactly_once: false,
            max_message_bytes: max_message_bytes(workload.payload_bytes),
            commit_interval_ms: None,
            max_in_flight_bytes: None,
            max_in_flight: None,
            linger_ms,
        },
    )?;
    let args = [
        "child-produce".to_string(),
        "--config".into(),
        dir.config().display().to_string(),
        "--topic-prefix".into(),
        prefix.to_string(),
        "--transactions".into(),
        workload.transactions.to_string(),
        "--rows-per-transaction".into(),
        workload.rows_per_transaction.to_string(),
        "--payload-bytes".into(),
        workload.payload_bytes.to_string(),
    ];
    let report = run_reporting_child(&args, "bare producer").await?;
    if report.count != workload.events() {
        bail!(
            "the bare producer acked {} of {} records",
            report.count,
            workload.events()
        );
    }
    let delivered = records_in(brokers, &topics_of(prefix)).await?;
    if delivered != workload.events() {
        bail!(
            "the bare producer's topics hold {delivered} records for {} sent",
            workload.events()
        );
    }
    Ok(Figure::new(
        report.count,
        report.elapsed_seconds,
        report.process.cpu_seconds,
        report.process.peak_rss_bytes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(text: &str) -> Option<f64> {
        parse_log_timestamp(text).map(|at| {
            at.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        })
    }

    /// The relay's human log format, coloured and plain; the expected values are Python's
    /// `datetime.fromisoformat(...).timestamp()` in UTC.
    #[test]
    fn reads_the_utc_time_a_relay_log_line_starts_with() {
        let coloured = "\u{1b}[2m2026-12-04T13:31:00.581331Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m outbox_relay::internal_events: binlog source connected";
        assert_eq!(seconds(coloured), Some(1_796_391_060.581_331));
        assert_eq!(seconds("2000-02-29T23:59:59Z x"), Some(951_868_799.0));
        assert_eq!(seconds("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(seconds("2026-12-04 13:31:00 no T"), None);
        assert_eq!(seconds("2026-13-04T13:31:00Z"), None);
        assert_eq!(seconds("INFO 2026-12-04T13:31:00Z"), None);
    }
}
