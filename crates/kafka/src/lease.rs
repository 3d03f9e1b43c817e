//! The standby lease: which of several relays with the same connector name is active,
//! decided by Kafka's group coordinator. No home-made election, no ZooKeeper or etcd.
//!
//! # How leadership is decided
//! Every relay joins the consumer group `outbox-relay-lease-<connector>` on a one-partition
//! lease topic (created when missing and allowed). The coordinator hands partition 0 to
//! exactly one member of the current generation: that member leads. The group uses the
//! classic protocol with `cooperative-sticky` assignment, so a standby joining or leaving
//! does not take the partition away from the leader (an eager rebalance would revoke it on
//! every join). Nothing is ever read from the topic (the partition is paused).
//!
//! # The leader epoch
//! Leadership alone is not enough to keep a paused old leader (a zombie) from writing: it
//! does not know it lost. So every term gets a number that grows with every leadership
//! change and that Kafka itself fences: on gaining partition 0 the member reads the
//! group's committed offset `n` of the lease partition and synchronously commits `n + 1`
//! (or more, see [`LeaderLease::relinquish_above`]). The committed value is the **epoch**.
//! The coordinator accepts an offset commit only from a member of the current generation,
//! so a member that was expired (session timeout) cannot commit, and a member that owns the
//! partition commits before it can hand it over (it gives it up only in the revoke callback,
//! which runs in its own poll loop, after the commit returned). So the next leader reads an
//! offset at least as new as every earlier leader's epoch, and epochs only grow. The
//! relay stamps its epoch into every checkpoint it writes; the stores refuse an older one
//! (`outbox_checkpoint::CheckpointStoreError::StaleLeader`).
//!
//! # Losing leadership
//! [`LeaderLease::subscribe`] watches the [`LeaseState`]; it leaves `Leader` when:
//! * the partition is revoked (a rebalance moved it, the process leaves the group), or the
//!   assignment is lost (librdkafka learned from a heartbeat that the session expired);
//! * the poll loop itself was not run for longer than the session timeout (the process was
//!   stopped or starved): the group has probably moved on, so leadership is dropped at once,
//!   before librdkafka hears it from the coordinator; if the partition is still ours, a new
//!   epoch is taken (which the coordinator refuses if the group did move on);
//! * the relay reports that a store refused its epoch ([`LeaderLease::relinquish_above`]).
//!
//! The poll loop runs on its own named thread (`leader-lease`): librdkafka serves the
//! rebalance callbacks and `max.poll.interval.ms` only from `poll`, and the relay's tasks
//! must not be able to starve it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::sync::watch;

/// The only partition of the lease topic that matters: its owner leads.
const LEASE_PARTITION: i32 = 0;

/// How long one `poll` of the lease loop waits: how soon a stop request is seen.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Wait before the next attempt to take an epoch after a failed one.
const ACQUIRE_RETRY: Duration = Duration::from_millis(500);

/// The group id of a connector's lease: relays with the same connector name compete.
pub fn lease_group_id(connector: &str) -> String {
    format!("outbox-relay-lease-{connector}")
}

/// What the lease needs.
#[derive(Clone)]
pub struct LeaseSettings {
    /// `bootstrap.servers` and the security properties (the relay's `[kafka]`); the lease
    /// adds its group settings on top.
    pub client: ClientConfig,
    /// The one-partition lease topic.
    pub topic: String,
    /// The consumer group ([`lease_group_id`] of the connector name).
    pub group_id: String,
    /// `session.timeout.ms`: how long a silent leader (crashed, paused, cut off) keeps
    /// leadership before the coordinator gives it to a standby. The broker bounds it by
    /// `group.min.session.timeout.ms` (6 s by default) and `group.max.session.timeout.ms`.
    pub session_timeout: Duration,
    /// Create the lease topic (one partition) when it is missing (`kafka.create_topics`).
    pub create_topic: bool,
    /// Replication factor of a created lease topic.
    pub replication_factor: i32,
    /// Bound of the metadata and topic-creation calls at start and of each epoch commit.
    pub request_timeout: Duration,
    /// Failure tests only (always false in production): the lease ends a term only when
    /// told to ([`LeaderLease::relinquish_above`]), not on a revoke, a lost assignment or a
    /// stalled loop. Simulates a zombie that learns of its loss late, so the tests can show
    /// that the checkpoint store fences it on its own.
    pub deaf_to_loss: bool,
}

impl std::fmt::Debug for LeaseSettings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client config may hold a password: only the lease's own settings are shown.
        formatter
            .debug_struct("LeaseSettings")
            .field("topic", &self.topic)
            .field("group_id", &self.group_id)
            .field("session_timeout", &self.session_timeout)
            .field("create_topic", &self.create_topic)
            .finish_non_exhaustive()
    }
}

/// Where the lease is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseState {
    /// Not leading (waiting for partition 0, or just lost it).
    Standby {
        /// Why (`"starting"`, `"partition revoked"`, ...), for logs.
        reason: String,
    },
    /// Leading in term `epoch`.
    Leader {
        /// The leader epoch committed for this term.
        epoch: u64,
    },
}

/// Why the lease could not start.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lease topic does not exist and may not be created.
    #[error("the lease topic `{topic}` does not exist; create it with one partition (e.g. `kafka-topics.sh --create --topic {topic} --partitions 1`) or set kafka.create_topics = true")]
    TopicMissing {
        /// The configured `ha.lease_topic`.
        topic: String,
    },
    /// A Kafka call failed (broker unreachable, timeout, authorization).
    #[error("lease topic `{topic}`: {operation}: {source}")]
    Kafka {
        /// The lease topic.
        topic: String,
        /// What was being done.
        operation: &'static str,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// The lease thread could not be started.
    #[error("cannot start the lease thread: {0}")]
    Thread(std::io::Error),
}

impl LeaseError {
    /// Whether retrying may help (a broker that did not answer), as opposed to a setting
    /// the operator must fix.
    pub fn is_transient(&self) -> bool {
        match self {
            LeaseError::TopicMissing { .. } | LeaseError::Thread(_) => false,
            LeaseError::Kafka { source, .. } => !matches!(
                source.rdkafka_error_code(),
                Some(
                    RDKafkaErrorCode::TopicAuthorizationFailed
                        | RDKafkaErrorCode::GroupAuthorizationFailed
                        | RDKafkaErrorCode::ClusterAuthorizationFailed
                        | RDKafkaErrorCode::InvalidConfig
                        | RDKafkaErrorCode::InvalidReplicationFactor
                        | RDKafkaErrorCode::PolicyViolation
                )
            ),
        }
    }
}

/// State shared by the lease thread, its rebalance callbacks and the [`LeaderLease`].
#[derive(Debug)]
struct LeaseShared {
    /// The lease topic (to recognise partition 0 in rebalance callbacks).
    topic: String,
    /// Whether this member currently owns partition 0 (set by the rebalance callbacks).
    owns_partition: AtomicBool,
    /// Counts every assign or revoke of partition 0: a leader whose counter moved since it
    /// took its epoch may have lost the partition in between.
    ownership_changes: AtomicU64,
    /// Set by [`LeaderLease::relinquish_above`]: the next epoch must exceed this (0: none).
    epoch_floor: AtomicU64,
    /// Set by [`LeaderLease::relinquish_above`] until the lease thread dropped leadership.
    relinquish_requested: AtomicBool,
    /// Set to stop the lease thread.
    stop: AtomicBool,
    /// [`LeaseSettings::deaf_to_loss`].
    deaf_to_loss: bool,
    /// The state every watcher sees.
    state: watch::Sender<LeaseState>,
}

impl LeaseShared {
    fn standby(&self, reason: String) {
        let was_leader = matches!(*self.state.borrow(), LeaseState::Leader { .. });
        if was_leader {
            tracing::warn!(topic = %self.topic, %reason, "leadership lost");
        }
        self.state.send_replace(LeaseState::Standby { reason });
    }

    fn is_lease_partition(&self, partitions: &TopicPartitionList) -> bool {
        partitions
            .find_partition(&self.topic, LEASE_PARTITION)
            .is_some()
    }
}

/// The lease consumer's context: rebalance callbacks update [`LeaseShared`], librdkafka's
/// logs go to `tracing`.
struct LeaseContext {
    /// What the callbacks update.
    shared: Arc<LeaseShared>,
}

impl ClientContext for LeaseContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if crate::kafka_context::explain_confwarn(facility, message) {
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility, "lease: {message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", facility, "lease: {message}")
            }
            _ => tracing::debug!(target: "librdkafka", facility, "lease: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", %error, "lease client error: {reason}");
    }
}

impl ConsumerContext for LeaseContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(partitions) if self.shared.is_lease_partition(partitions) => {
                self.shared.owns_partition.store(false, Ordering::SeqCst);
                self.shared.ownership_changes.fetch_add(1, Ordering::SeqCst);
                let reason = if consumer.assignment_lost() {
                    "the lease partition was lost (the group session expired)"
                } else {
                    "the lease partition was revoked (rebalance)"
                };
                if !self.shared.deaf_to_loss {
                    self.shared.standby(reason.to_owned());
                }
            }
            Rebalance::Error(error) => {
                self.shared.owns_partition.store(false, Ordering::SeqCst);
                self.shared.ownership_changes.fetch_add(1, Ordering::SeqCst);
                if !self.shared.deaf_to_loss {
                    self.shared
                        .standby(format!("rebalance of the lease group failed: {error}"));
                }
            }
            _ => {}
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(partitions) = rebalance {
            if self.shared.is_lease_partition(partitions) {
                // Nothing is read from the lease topic: the partition only means leadership.
                if let Err(error) = consumer.pause(partitions) {
                    tracing::debug!(%error, "cannot pause the lease partition (harmless)");
                }
                self.shared.ownership_changes.fetch_add(1, Ordering::SeqCst);
                self.shared.owns_partition.store(true, Ordering::SeqCst);
                tracing::info!(topic = %self.shared.topic, "lease partition assigned; taking a leader epoch");
            }
        }
    }
}

/// A relay's membership in its connector's lease group. See the module docs.
#[derive(Debug)]
pub struct LeaderLease {
    /// Shared with the lease thread.
    shared: Arc<LeaseShared>,
    /// The lease thread; joined by [`LeaderLease::close`].
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LeaderLease {
    /// Checks (or creates) the lease topic, joins the group and starts the lease thread.
    /// The lease starts as a standby; [`LeaderLease::wait_until_leader`] waits for a term.
    pub async fn start(settings: LeaseSettings) -> Result<Self, LeaseError> {
        ensure_lease_topic(&settings).await?;
        let (state, _) = watch::channel(LeaseState::Standby {
            reason: "starting".to_owned(),
        });
        let shared = Arc::new(LeaseShared {
            topic: settings.topic.clone(),
            owns_partition: AtomicBool::new(false),
            ownership_changes: AtomicU64::new(0),
            epoch_floor: AtomicU64::new(0),
            relinquish_requested: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            deaf_to_loss: settings.deaf_to_loss,
            state,
        });
        let consumer = lease_consumer(&settings, shared.clone())?;
        let thread_shared = shared.clone();
        let session_timeout = settings.session_timeout;
        let request_timeout = settings.request_timeout;
        let span = tracing::info_span!("task", name = "leader-lease");
        let thread = std::thread::Builder::new()
            .name("leader-lease".to_owned())
            .spawn(move || {
                let _entered = span.enter();
                run_lease_loop(consumer, &thread_shared, session_timeout, request_timeout);
            })
            .map_err(LeaseError::Thread)?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Watches the lease's state (fires on every change, e.g. when leadership is lost).
    pub fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.shared.state.subscribe()
    }

    /// The current state.
    pub fn state(&self) -> LeaseState {
        self.shared.state.borrow().clone()
    }

    /// Waits until this relay leads; returns the term's epoch.
    pub async fn wait_until_leader(&self) -> u64 {
        let mut state = self.subscribe();
        loop {
            if let LeaseState::Leader { epoch } = *state.borrow_and_update() {
                return epoch;
            }
            if state.changed().await.is_err() {
                // The sender lives in `self`: cannot happen while we are borrowed.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Completes when term `epoch` is over (the state is anything but `Leader { epoch }`);
    /// returns why.
    pub async fn lost(&self, epoch: u64) -> String {
        let mut state = self.subscribe();
        loop {
            match &*state.borrow_and_update() {
                LeaseState::Leader { epoch: current } if *current == epoch => {}
                LeaseState::Leader { epoch: newer } => {
                    return format!("a new term (epoch {newer}) replaced epoch {epoch}")
                }
                LeaseState::Standby { reason } => return reason.clone(),
            }
            if state.changed().await.is_err() {
                return "the lease stopped".to_owned();
            }
        }
    }

    /// The relay's checkpoint store refused term `epoch` because it holds a checkpoint of
    /// `stored_epoch` (another relay led since, or the group's committed epoch was lost, e.g.
    /// offsets expired or the lease topic was recreated). Ends the current term; if this
    /// member still owns the lease partition it takes a new epoch above `stored_epoch`
    /// (which the coordinator allows only if it really is the current owner).
    pub fn relinquish_above(&self, stored_epoch: u64) {
        self.shared
            .epoch_floor
            .fetch_max(stored_epoch, Ordering::SeqCst);
        self.shared
            .relinquish_requested
            .store(true, Ordering::SeqCst);
    }

    /// Leaves the group (a standby takes over at once instead of after the session
    /// timeout) and stops the lease thread.
    pub async fn close(mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

impl Drop for LeaderLease {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

fn kafka_error(topic: &str, operation: &'static str) -> impl FnOnce(KafkaError) -> LeaseError {
    let topic = topic.to_owned();
    move |source| LeaseError::Kafka {
        topic,
        operation,
        source,
    }
}

/// The lease topic exists afterwards, or a clear error says why not.
async fn ensure_lease_topic(settings: &LeaseSettings) -> Result<(), LeaseError> {
    let topic = settings.topic.clone();
    let client = settings.client.clone();
    let timeout = settings.request_timeout;
    let exists = tokio::task::spawn_blocking(move || -> Result<bool, LeaseError> {
        let consumer: BaseConsumer = client
            .create()
            .map_err(kafka_error(&topic, "creating a metadata client"))?;
        let metadata = consumer
            .fetch_metadata(Some(&topic), timeout)
            .map_err(kafka_error(&topic, "reading metadata"))?;
        Ok(metadata.topics().iter().any(|found| {
            found.name() == topic && found.error().is_none() && !found.partitions().is_empty()
        }))
    })
    .await
    .map_err(|join| LeaseError::Thread(std::io::Error::other(join.to_string())))??;
    if exists {
        return Ok(());
    }
    if !settings.create_topic {
        return Err(LeaseError::TopicMissing {
            topic: settings.topic.clone(),
        });
    }
    let admin: AdminClient<DefaultClientContext> = settings
        .client
        .create()
        .map_err(kafka_error(&settings.topic, "creating an admin client"))?;
    let new_topic = NewTopic::new(
        &settings.topic,
        1,
        TopicReplication::Fixed(settings.replication_factor),
    );
    let options = AdminOptions::new().operation_timeout(Some(settings.request_timeout));
    let results = admin
        .create_topics([&new_topic], &options)
        .await
        .map_err(kafka_error(&settings.topic, "creating the lease topic"))?;
    for result in results {
        match result {
            Ok(_) => {
                tracing::info!(topic = %settings.topic, "created the lease topic (one partition)")
            }
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(LeaseError::Kafka {
                    topic: settings.topic.clone(),
                    operation: "creating the lease topic",
                    source: KafkaError::AdminOp(code),
                })
            }
        }
    }
    Ok(())
}

fn lease_consumer(
    settings: &LeaseSettings,
    shared: Arc<LeaseShared>,
) -> Result<BaseConsumer<LeaseContext>, LeaseError> {
    let session_ms = settings.session_timeout.as_millis().max(1);
    let heartbeat_ms = (session_ms / 3).max(100);
    let mut config = settings.client.clone();
    config
        .set("group.id", &settings.group_id)
        .set("session.timeout.ms", session_ms.to_string())
        .set("heartbeat.interval.ms", heartbeat_ms.to_string())
        // The lease thread polls every 100 ms; a process that stops polling for a session
        // has lost the lease anyway (librdkafka requires at least the session timeout).
        .set("max.poll.interval.ms", session_ms.to_string())
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("group.protocol", "classic")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "latest")
        .set("enable.partition.eof", "false");
    let consumer: BaseConsumer<LeaseContext> = config
        .create_with_context(LeaseContext { shared })
        .map_err(kafka_error(&settings.topic, "creating the lease consumer"))?;
    consumer
        .subscribe(&[settings.topic.as_str()])
        .map_err(kafka_error(
            &settings.topic,
            "subscribing to the lease topic",
        ))?;
    Ok(consumer)
}

/// Reads the group's committed epoch of the lease partition and commits the next one
/// (above `floor`), synchronously. The coordinator refuses the commit unless this member is
/// in the group's current generation.
fn take_epoch(
    consumer: &BaseConsumer<LeaseContext>,
    topic: &str,
    floor: u64,
    timeout: Duration,
) -> Result<u64, KafkaError> {
    let mut partition = TopicPartitionList::new();
    partition.add_partition(topic, LEASE_PARTITION);
    let committed = consumer.committed_offsets(partition, timeout)?;
    let current = committed
        .find_partition(topic, LEASE_PARTITION)
        .and_then(|element| match element.offset() {
            Offset::Offset(offset) => u64::try_from(offset).ok(),
            _ => None,
        })
        .unwrap_or(0);
    let epoch = current.max(floor).saturating_add(1);
    let mut next = TopicPartitionList::new();
    next.add_partition_offset(
        topic,
        LEASE_PARTITION,
        Offset::Offset(i64::try_from(epoch).unwrap_or(i64::MAX)),
    )?;
    consumer.commit(&next, CommitMode::Sync)?;
    Ok(epoch)
}

/// The lease thread: polls (serving rebalance callbacks and heartbeats' consequences),
/// takes an epoch when partition 0 is ours, drops leadership on every sign of loss.
fn run_lease_loop(
    consumer: BaseConsumer<LeaseContext>,
    shared: &LeaseShared,
    session_timeout: Duration,
    request_timeout: Duration,
) {
    let epoch_timeout = request_timeout.min(session_timeout / 2);
    // (epoch, ownership_changes when it was taken)
    let mut term: Option<(u64, u64)> = None;
    let mut last_poll = Instant::now();
    let mut next_attempt = Instant::now();
    let mut last_error_logged: Option<Instant> = None;
    while !shared.stop.load(Ordering::SeqCst) {
        if let Some(Err(error)) = consumer.poll(POLL_INTERVAL) {
            // Join errors (coordinator unavailable, a refused session timeout) repeat while
            // they last: log one every few seconds.
            if last_error_logged.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                tracing::warn!(%error, topic = %shared.topic, "lease consumer error");
                last_error_logged = Some(Instant::now());
            }
        }
        let now = Instant::now();
        let stalled_for = now.saturating_duration_since(last_poll);
        last_poll = now;
        if let Some((epoch, changes)) = term {
            let lost = if shared.relinquish_requested.load(Ordering::SeqCst) {
                Some(format!(
                    "the checkpoint store refused leader epoch {epoch} (a newer epoch wrote)"
                ))
            } else if shared.deaf_to_loss {
                None
            } else if stalled_for > session_timeout {
                Some(format!("the lease loop did not run for {stalled_for:?}, longer than the session timeout {session_timeout:?} (process paused or starved): the group may have moved on"))
            } else if shared.ownership_changes.load(Ordering::SeqCst) != changes
                || !shared.owns_partition.load(Ordering::SeqCst)
            {
                Some("the lease partition was revoked".to_owned())
            } else {
                None
            };
            if let Some(reason) = lost {
                term = None;
                shared.standby(reason);
            }
        }
        if term.is_none() {
            shared.relinquish_requested.store(false, Ordering::SeqCst);
        }
        if term.is_none() && shared.owns_partition.load(Ordering::SeqCst) && now >= next_attempt {
            let changes = shared.ownership_changes.load(Ordering::SeqCst);
            let floor = shared.epoch_floor.load(Ordering::SeqCst);
            match take_epoch(&consumer, &shared.topic, floor, epoch_timeout) {
                Ok(epoch)
                    if shared.ownership_changes.load(Ordering::SeqCst) == changes
                        && shared.owns_partition.load(Ordering::SeqCst) =>
                {
                    tracing::info!(epoch, topic = %shared.topic, "leadership gained");
                    term = Some((epoch, changes));
                    shared.state.send_replace(LeaseState::Leader { epoch });
                }
                Ok(epoch) => {
                    tracing::info!(
                        epoch,
                        "the lease partition moved while taking an epoch; not leading"
                    );
                }
                Err(error) => {
                    tracing::warn!(%error, topic = %shared.topic, "cannot take a leader epoch (not the current owner, or the coordinator is unavailable); retrying");
                    next_attempt = Instant::now() + ACQUIRE_RETRY;
                }
            }
        }
    }
    shared.standby("the lease is closing".to_owned());
    tracing::info!(topic = %shared.topic, "leaving the lease group");
    consumer.unsubscribe();
    drop(consumer);
}
