//! A real Kafka-protocol broker for process-level tests: [Tansu](https://github.com/tansu-io/tansu)
//! started as its own process on a free loopback port, with in-memory storage, plus
//! [`read_all`], an independent rdkafka consumer that reads back what a relay produced.
//!
//! # Contract
//! * [`TansuBroker::start`] returns only once the broker answers a metadata request, so the
//!   first produce of a test never races the broker's startup.
//! * Tansu does **not** auto-create topics: create them with [`TansuBroker::create_topic`]
//!   (idempotent; it returns once the topic's partitions have a leader in metadata), or let
//!   the code under test create them through the admin API.
//! * Storage is `memory://`: nothing survives [`TansuBroker::kill`]. [`TansuBroker::restart_empty`]
//!   starts a new, empty broker on the **same port**, which is what a client configured with
//!   that bootstrap address sees as "the broker came back and lost everything".
//! * [`TansuBroker::freeze`] / [`TansuBroker::thaw`] send SIGSTOP / SIGCONT: the TCP
//!   connections stay open but nothing answers, which is how a hung broker or a network
//!   partition looks to a client (the case timeouts and retries exist for).
//! * The process is killed (SIGKILL) when the [`TansuBroker`] is dropped, frozen or not.
//! * Tansu 0.6 has no transactions and `read_committed` consumers see nothing: [`read_all`]
//!   always reads `read_uncommitted`.
//! * After [`TansuBroker::restart_empty`] the new broker does not know the producer ids the
//!   old one handed out: an idempotent producer created before the restart gets
//!   `UNKNOWN_PRODUCER_ID` on every produce (librdkafka bumps the epoch locally and retries,
//!   forever, until `message.timeout.ms`); only a producer created after the restart (a new
//!   `InitProducerId`) can write. Code under test has to recreate its producer to recover.
//!
//! # Finding the binary
//! `$TANSU_BIN`, then `tansu` on `PATH`, then `$CARGO_HOME/bin` / `~/.cargo/bin`. When it is
//! missing, [`TansuError::MissingBinary`] says how to install it.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

/// The command that installs the broker binary these tests need.
pub const TANSU_INSTALL_COMMAND: &str = "cargo install tansu@0.6.0 --locked --features dynostore";

/// How long [`TansuBroker::start`] / [`TansuBroker::restart_empty`] wait for the broker to
/// answer metadata before giving up.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);

/// Why the broker harness failed.
#[derive(Debug, thiserror::Error)]
pub enum TansuError {
    /// The `tansu` binary was not found.
    #[error(
        "the `tansu` broker binary was not found ($TANSU_BIN, PATH, {searched}); the relay's \
         process-level tests need it: run the README's test command `scripts/test.sh` (it installs \
         the broker) or install it with `{TANSU_INSTALL_COMMAND}`"
    )]
    MissingBinary {
        /// The cargo bin directory that was searched besides `PATH`.
        searched: String,
    },
    /// An I/O error (spawning, signalling, temporary files).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The broker exited or did not answer metadata in time.
    #[error("tansu broker on port {port} did not become ready within {waited:?} ({reason}); its log {log}:\n{tail}")]
    StartTimeout {
        /// The port it was told to listen on.
        port: u16,
        /// How long we waited.
        waited: Duration,
        /// Why we stopped waiting (exited, timeout, last client error).
        reason: String,
        /// Path of the broker's combined stdout/stderr log.
        log: String,
        /// The end of that log.
        tail: String,
    },
    /// A Kafka client operation (admin, metadata, consumer) failed.
    #[error("{what}: {source}")]
    Kafka {
        /// What was being done.
        what: String,
        /// The underlying client error.
        source: KafkaError,
    },
    /// Creating a topic failed on the broker side.
    #[error("creating topic `{topic}` failed: {code:?}")]
    CreateTopic {
        /// The topic.
        topic: String,
        /// The broker's error code.
        code: RDKafkaErrorCode,
    },
    /// A topic did not show up in metadata with leaders for all its partitions in time.
    #[error("topic `{topic}` did not appear in metadata with {partitions} led partitions within {waited:?}")]
    TopicTimeout {
        /// The topic.
        topic: String,
        /// The partition count that was expected.
        partitions: i32,
        /// How long we waited.
        waited: Duration,
    },
    /// The operation needs a running broker process, but it was killed.
    #[error("the tansu broker on port {port} is not running (killed); call restart_empty first")]
    NotRunning {
        /// The broker's port.
        port: u16,
    },
    /// A blocking helper task panicked or was cancelled.
    #[error("a blocking client task failed: {0}")]
    Join(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> TansuError {
    let what = what.into();
    move |source| TansuError::Io { what, source }
}

fn kafka_err(what: impl Into<String>) -> impl FnOnce(KafkaError) -> TansuError {
    let what = what.into();
    move |source| TansuError::Kafka { what, source }
}

/// Locates the `tansu` binary (see the module docs for the search order).
pub fn find_tansu_binary() -> Result<PathBuf, TansuError> {
    if let Some(explicit) = std::env::var_os("TANSU_BIN") {
        let explicit = PathBuf::from(explicit);
        if explicit.is_file() {
            return Ok(explicit);
        }
    }
    let path_dirs = std::env::var_os("PATH").unwrap_or_default();
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .map(|cargo_home| cargo_home.join("bin"))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo/bin"));
    std::env::split_paths(&path_dirs)
        .chain(std::iter::once(cargo_bin.clone()))
        .map(|dir| dir.join("tansu"))
        .find(|candidate| candidate.is_file())
        .ok_or(TansuError::MissingBinary {
            searched: cargo_bin.display().to_string(),
        })
}

fn free_port() -> Result<u16, TansuError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io_err("finding a free port"))?;
    let port = listener
        .local_addr()
        .map_err(io_err("finding a free port"))?
        .port();
    Ok(port)
}

/// Sends a signal with the `kill` program (no libc dependency in this crate).
fn send_signal(pid: u32, signal: &str) -> Result<(), TansuError> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(io_err(format!("running `kill -{signal} {pid}`")))?;
    if status.success() {
        Ok(())
    } else {
        Err(TansuError::Io {
            what: format!("`kill -{signal} {pid}`"),
            source: io::Error::other(status.to_string()),
        })
    }
}

/// The last `lines` lines of a text file (empty when unreadable).
fn file_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A running Tansu broker process with in-memory storage. Killed on drop.
pub struct TansuBroker {
    /// The broker process; `None` after [`TansuBroker::kill`] until a restart.
    child: Option<Child>,
    /// Owns the directory with the broker's log, so the log outlives restarts and can be quoted
    /// in failure messages.
    dir: tempfile::TempDir,
    /// The `tansu` binary, resolved once so a restart runs the same program.
    program: PathBuf,
    /// TCP port on 127.0.0.1 the broker listens on and advertises; kept across restarts so
    /// clients configured with [`TansuBroker::bootstrap`] find the new broker.
    port: u16,
    /// How many times the process was launched; numbers the log files so each launch's log is
    /// kept separately.
    launches: u32,
    /// Whether the process is currently stopped with SIGSTOP; lets [`Drop`] and
    /// [`TansuBroker::kill`] resume it first, so it never lingers stopped.
    frozen: bool,
}

impl TansuBroker {
    /// Starts a broker on a free loopback port and waits until it answers metadata.
    pub async fn start() -> Result<Self, TansuError> {
        let program = find_tansu_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("outbox-tansu-")
            .tempdir()
            .map_err(io_err("creating the broker's scratch directory"))?;
        let mut broker = TansuBroker {
            child: None,
            dir,
            program,
            port: free_port()?,
            launches: 0,
            frozen: false,
        };
        broker.launch().await?;
        Ok(broker)
    }

    /// The log file of the current (latest) launch.
    pub fn log_path(&self) -> PathBuf {
        self.dir
            .path()
            .join(format!("tansu-{}.log", self.launches.max(1)))
    }

    /// The last `lines` lines of the current launch's log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        file_tail(&self.log_path(), lines)
    }

    async fn launch(&mut self) -> Result<(), TansuError> {
        self.launches += 1;
        let log_path = self.log_path();
        let log = std::fs::File::create(&log_path)
            .map_err(io_err(format!("creating {}", log_path.display())))?;
        let log_for_stderr = log
            .try_clone()
            .map_err(io_err("duplicating the log file handle"))?;
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let child = Command::new(&self.program)
            .arg("broker")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&url)
            .arg("--storage-engine")
            .arg("memory://tansu/")
            // Tansu reads these from the environment too; make sure a developer's shell
            // cannot redirect the scratch broker somewhere else.
            .env_remove("LISTENER_URL")
            .env_remove("ADVERTISED_LISTENER_URL")
            .env_remove("STORAGE_ENGINE")
            .env_remove("SCHEMA_REGISTRY")
            .env("RUST_LOG", "warn")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_for_stderr))
            .spawn()
            .map_err(io_err(format!("spawning {}", self.program.display())))?;
        self.child = Some(child);
        self.frozen = false;
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> Result<(), TansuError> {
        let started = Instant::now();
        let mut last_error = String::from("no connection yet");
        loop {
            let exited = match self.child.as_mut() {
                Some(child) => child
                    .try_wait()
                    .map_err(io_err("polling the broker process"))?,
                None => return Err(TansuError::NotRunning { port: self.port }),
            };
            if let Some(status) = exited {
                self.child = None;
                return Err(self.start_timeout(started, format!("broker exited: {status}")));
            }
            if started.elapsed() > STARTUP_LIMIT {
                return Err(self.start_timeout(started, format!("timed out: {last_error}")));
            }
            let connectable = tokio::time::timeout(
                Duration::from_millis(200),
                tokio::net::TcpStream::connect(("127.0.0.1", self.port)),
            )
            .await
            .is_ok_and(|connected| connected.is_ok());
            if connectable {
                match fetch_topic_partitions(self.bootstrap(), Duration::from_secs(2)).await {
                    Ok(_) => return Ok(()),
                    Err(error) => last_error = error.to_string(),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn start_timeout(&self, started: Instant, reason: String) -> TansuError {
        TansuError::StartTimeout {
            port: self.port,
            waited: started.elapsed(),
            reason,
            log: self.log_path().display().to_string(),
            tail: self.log_tail(30),
        }
    }

    /// `127.0.0.1:PORT`, the `bootstrap.servers` value for clients.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The loopback TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The broker's process id, `None` after [`TansuBroker::kill`].
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the broker process is currently stopped by [`TansuBroker::freeze`].
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// Creates `name` with `partitions` partitions (replication factor 1) through the admin
    /// API and waits until metadata shows every partition with a leader. Creating an existing
    /// topic is not an error.
    pub async fn create_topic(&self, name: &str, partitions: i32) -> Result<(), TansuError> {
        if self.child.is_none() {
            return Err(TansuError::NotRunning { port: self.port });
        }
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("socket.timeout.ms", "10000")
            .create()
            .map_err(kafka_err("creating an admin client"))?;
        let new_topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
        let results = admin
            .create_topics([&new_topic], &options)
            .await
            .map_err(kafka_err(format!("creating topic `{name}`")))?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => return Err(TansuError::CreateTopic { topic, code }),
            }
        }
        let started = Instant::now();
        let limit = Duration::from_secs(15);
        loop {
            if let Ok(topics) =
                fetch_topic_partitions(self.bootstrap(), Duration::from_secs(2)).await
            {
                if topics
                    .get(name)
                    .is_some_and(|led| *led >= usize::try_from(partitions).unwrap_or(0))
                {
                    return Ok(());
                }
            }
            if started.elapsed() > limit {
                return Err(TansuError::TopicTimeout {
                    topic: name.to_string(),
                    partitions,
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Topic names and their count of partitions that have a leader, as metadata reports now.
    pub async fn topics(&self) -> Result<BTreeMap<String, usize>, TansuError> {
        fetch_topic_partitions(self.bootstrap(), Duration::from_secs(5)).await
    }

    /// Stops the broker process with SIGSTOP: connections stay open, nothing answers.
    pub fn freeze(&mut self) -> Result<(), TansuError> {
        self.signal_running_broker("STOP", true)
    }

    /// Resumes a frozen broker with SIGCONT.
    pub fn thaw(&mut self) -> Result<(), TansuError> {
        self.signal_running_broker("CONT", false)
    }

    /// Sends `signal` to the running broker process, then records whether it is `frozen`.
    fn signal_running_broker(&mut self, signal: &str, frozen: bool) -> Result<(), TansuError> {
        let pid = self
            .pid()
            .ok_or(TansuError::NotRunning { port: self.port })?;
        send_signal(pid, signal)?;
        self.frozen = frozen;
        Ok(())
    }

    /// Kills the broker (SIGKILL) and waits for it to exit; all its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.frozen = false;
    }

    /// Kills the broker if it runs, then starts a new, empty one on the same port and waits
    /// until it answers metadata. Topics must be created again.
    pub async fn restart_empty(&mut self) -> Result<(), TansuError> {
        self.kill();
        // The old listener's port can take a moment to become bindable again. Probe with
        // SO_REUSEADDR (tokio sets it, as the broker's own listener does), so connections left
        // in TIME_WAIT do not count as "in use".
        let started = Instant::now();
        while tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .is_err()
            && started.elapsed() < Duration::from_secs(10)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.launch().await
    }
}

impl Drop for TansuBroker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Topic name -> number of partitions with a leader, from one metadata request.
async fn fetch_topic_partitions(
    bootstrap: String,
    timeout: Duration,
) -> Result<BTreeMap<String, usize>, TansuError> {
    tokio::task::spawn_blocking(move || {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("socket.timeout.ms", "5000")
            .create()
            .map_err(kafka_err("creating a metadata client"))?;
        let metadata = producer
            .client()
            .fetch_metadata(None, timeout)
            .map_err(kafka_err(format!("fetching metadata from {bootstrap}")))?;
        Ok(metadata
            .topics()
            .iter()
            .filter(|topic| topic.error().is_none())
            .map(|topic| {
                let led = topic
                    .partitions()
                    .iter()
                    .filter(|partition| partition.leader() >= 0)
                    .count();
                (topic.name().to_string(), led)
            })
            .collect())
    })
    .await
    .map_err(|e| TansuError::Join(e.to_string()))?
}

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
) -> Result<Vec<ConsumedRecord>, TansuError> {
    let bootstrap = bootstrap.to_string();
    let topics: Vec<String> = topics.iter().map(|topic| topic.to_string()).collect();
    tokio::task::spawn_blocking(move || read_all_blocking(&bootstrap, &topics, &stop, deadline))
        .await
        .map_err(|e| TansuError::Join(e.to_string()))?
}

fn read_all_blocking(
    bootstrap: &str,
    topics: &[String],
    stop: &ReadStop,
    deadline: Duration,
) -> Result<Vec<ConsumedRecord>, TansuError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};

    /// An idempotent producer (its producer id comes from the broker it first talks to).
    fn idempotent_producer(bootstrap: String, message_timeout_ms: &str) -> FutureProducer {
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", message_timeout_ms)
            .create()
            .unwrap()
    }

    /// Sends `payload` with key `k` to `harness.roundtrip`.
    async fn send_to_roundtrip(
        producer: &FutureProducer,
        payload: &str,
        queue_timeout: Duration,
    ) -> Result<(), rdkafka::error::KafkaError> {
        producer
            .send(
                FutureRecord::to("harness.roundtrip")
                    .key("k")
                    .payload(payload),
                queue_timeout,
            )
            .await
            .map(|_| ())
            .map_err(|(error, _message)| error)
    }

    #[tokio::test]
    async fn broker_round_trip_freeze_and_restart_empty() {
        let mut broker = TansuBroker::start().await.unwrap();
        broker.create_topic("harness.roundtrip", 2).await.unwrap();
        // Idempotent.
        broker.create_topic("harness.roundtrip", 2).await.unwrap();
        assert_eq!(
            broker.topics().await.unwrap().get("harness.roundtrip"),
            Some(&2)
        );

        let producer = idempotent_producer(broker.bootstrap(), "30000");
        for index in 0..10 {
            let key = format!("k{}", index % 3);
            let value = format!("{{\"n\":{index}}}");
            let headers = OwnedHeaders::new().insert(Header {
                key: "id",
                value: Some(&format!("id-{index}")),
            });
            producer
                .send(
                    FutureRecord::to("harness.roundtrip")
                        .key(&key)
                        .payload(&value)
                        .headers(headers),
                    Duration::from_secs(10),
                )
                .await
                .unwrap();
        }
        let records = read_all(
            &broker.bootstrap(),
            &["harness.roundtrip", "harness.absent"],
            ReadStop::Count(10),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
        assert_eq!(records.len(), 10, "{records:?}");
        let ids: BTreeSet<String> = records
            .iter()
            .map(|record| record.header_str("id").unwrap())
            .collect();
        assert_eq!(ids.len(), 10);
        let seven = records
            .iter()
            .find(|record| record.header_str("id").as_deref() == Some("id-7"))
            .unwrap();
        assert_eq!(seven.key_str().as_deref(), Some("k1"));
        assert_eq!(seven.value.as_deref(), Some(&b"{\"n\":7}"[..]));

        // A frozen broker does not answer; a thawed one does again.
        broker.freeze().unwrap();
        assert!(broker.is_frozen());
        let frozen = fetch_topic_partitions(broker.bootstrap(), Duration::from_millis(800)).await;
        assert!(
            frozen.is_err(),
            "metadata answered while frozen: {frozen:?}"
        );
        broker.thaw().unwrap();
        assert!(broker
            .topics()
            .await
            .unwrap()
            .contains_key("harness.roundtrip"));

        // An idempotent producer that got its producer id from this broker instance.
        let old_producer = idempotent_producer(broker.bootstrap(), "3000");
        send_to_roundtrip(&old_producer, "before", Duration::from_secs(5))
            .await
            .unwrap();

        // Restarted empty on the same port: the topic is gone until created again.
        let port = broker.port();
        broker.restart_empty().await.unwrap();
        assert_eq!(broker.port(), port);
        assert!(!broker
            .topics()
            .await
            .unwrap()
            .contains_key("harness.roundtrip"));
        broker.create_topic("harness.roundtrip", 1).await.unwrap();
        let quiet = read_all(
            &broker.bootstrap(),
            &["harness.roundtrip"],
            ReadStop::Quiet(Duration::from_millis(500)),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert!(quiet.is_empty(), "restarted broker kept data: {quiet:?}");

        // The new broker never issued the old producer's id: its sends keep failing until
        // they time out (what makes restart_empty a real state loss, see the module docs).
        let stale = send_to_roundtrip(&old_producer, "stale", Duration::from_secs(5)).await;
        assert!(
            stale.is_err(),
            "a producer from before restart_empty could still write: {stale:?}"
        );

        // A producer created after the restart works against the new broker.
        let fresh = idempotent_producer(broker.bootstrap(), "10000");
        send_to_roundtrip(&fresh, "after", Duration::from_secs(10))
            .await
            .unwrap();
        let after = read_all(
            &broker.bootstrap(),
            &["harness.roundtrip"],
            ReadStop::Count(1),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(after.len(), 1, "{after:?}");
        assert_eq!(after[0].offset, 0);
        assert_eq!(after[0].value.as_deref(), Some(&b"after"[..]));
    }

    #[tokio::test]
    async fn missing_binary_error_names_the_install_command() {
        let error = TansuError::MissingBinary {
            searched: "/nowhere/bin".into(),
        };
        let message = error.to_string();
        assert!(message.contains(TANSU_INSTALL_COMMAND), "{message}");
        assert!(message.contains("/nowhere/bin"), "{message}");
    }
}
