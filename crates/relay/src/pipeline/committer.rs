//! The checkpoint committer task (at-least-once only; exactly-once commits inside the
//! sink's Kafka transactions): feeds the tracker's acked positions to a
//! [`CheckpointCommitter`], limits idle-only commits ([`IdleCommitLimiter`]), follows a
//! move to another server, and flushes the newest position at shutdown.

use std::sync::Arc;
use std::time::Duration;

use outbox_binlog::BinlogPosition;
use outbox_checkpoint::{
    Checkpoint, CheckpointCommitter, CheckpointPosition, CheckpointStoreError, CommitPolicy,
    SharedCheckpointStore, SourceIdentity,
};
use tokio::sync::Notify;

use super::error::RelayError;
use super::identity::{describe_identity, gtid_only_binlog_position};
use super::tracking::{lock_records, lock_tracker, RecordTransactions, SharedTracker};
use crate::internal_events::{CheckpointCommitFailed, CheckpointCommitted, InternalEvent};
use crate::metrics::Metrics;
use crate::replay::SentThrough;
use crate::shutdown::Shutdown;

/// Committer settings.
pub(super) struct CommitterSettings {
    /// Written into every checkpoint.
    pub(super) identity: SourceIdentity,
    /// When to store: by time and by transaction count.
    pub(super) policy: CommitPolicy,
    /// The checkpoint the relay resumed from, so it is not stored again.
    pub(super) resumed_from: Option<CheckpointPosition>,
    /// Ordinals of ended transactions that carried records; tells record progress from
    /// idle progress.
    pub(super) record_transactions: RecordTransactions,
    /// `[ha]`: the term's epoch, stamped into every checkpoint ([`super::RelayHandles`]).
    pub(super) leader_epoch: Option<u64>,
    /// How far the router handed records to the sink: stored with each checkpoint
    /// (crate::replay).
    pub(super) sent_through: SentThrough,
    /// The resumed checkpoint's sent-through position, kept until passed.
    pub(super) resumed_sent_through: Option<BinlogPosition>,
}

/// Limits commits that cover only transactions without outbox records (other tables'
/// transactions, DDL, and above all the MySQL checkpoint store's own writes when it lives on
/// the source server: there every commit would otherwise cause the next, forever).
///
/// Rule: a position that adds no records is offered at once unless the previous offer was
/// such an idle one too, within `interval`; then it is held (newest wins) and offered when
/// `interval` has passed, or at shutdown. Holding a position only delays the checkpoint,
/// which is always safe.
#[derive(Debug)]
pub(super) struct IdleCommitLimiter {
    /// Least time between two idle-only offers.
    interval: Duration,
    /// When the last offer happened and whether it was idle-only.
    last_offer: Option<(tokio::time::Instant, bool)>,
    /// A held idle-only position and the transactions it covers.
    held: Option<(CheckpointPosition, u64)>,
}

impl IdleCommitLimiter {
    fn new(commit_interval: Duration) -> Self {
        Self {
            interval: commit_interval
                .saturating_mul(10)
                .max(Duration::from_secs(5)),
            last_offer: None,
            held: None,
        }
    }

    /// The position to offer now, or `None` when it is held.
    fn on_moved(
        &mut self,
        position: CheckpointPosition,
        transactions: u64,
        covers_records: bool,
        now: tokio::time::Instant,
    ) -> Option<(CheckpointPosition, u64)> {
        let idle = !covers_records;
        let transactions = transactions + self.held.take().map_or(0, |(_, count)| count);
        let recent_idle_offer = matches!(
            self.last_offer,
            Some((at, true)) if now.saturating_duration_since(at) < self.interval
        );
        if idle && recent_idle_offer {
            self.held = Some((position, transactions));
            return None;
        }
        self.last_offer = Some((now, idle));
        Some((position, transactions))
    }

    /// The held position, once `interval` has passed since the last offer (or `force`).
    fn take_due(
        &mut self,
        now: tokio::time::Instant,
        force: bool,
    ) -> Option<(CheckpointPosition, u64)> {
        let due = force
            || self
                .last_offer
                .is_none_or(|(at, _)| now.saturating_duration_since(at) >= self.interval);
        if !due {
            return None;
        }
        let held = self.held.take()?;
        self.last_offer = Some((now, true));
        Some(held)
    }
}

/// The least time between two commits of a caught-up relay (every transaction read acked,
/// see [`run_committer`]): a tenth of `commit_interval_ms` (100 ms by default). A drained
/// backlog or a quiet moment is checkpointed at once rather than up to a whole interval
/// later, and a slow trickle of events, which keeps the relay caught up most of the time,
/// costs at most ten such commits per interval.
fn caught_up_commit_spacing(policy: &CommitPolicy) -> Duration {
    policy.max_interval / 10
}

/// Feeds the tracker's acked positions to a [`CheckpointCommitter`] (which batches them by
/// `pipeline.commit_interval_ms` / `commit_max_transactions`); on `stop`, flushes the newest
/// one and returns the last stored checkpoint.
///
/// When the relay has caught up (every transaction read is acked: a backlog drained, or a
/// quiet moment between events), the newest position is stored at once instead of waiting
/// out the interval or the transaction count, at most once per
/// [`caught_up_commit_spacing`].
///
/// A failing store is retried at the next due time (the relay keeps running: the replay
/// after a crash grows, nothing is lost); a regression (another relay writing the same
/// checkpoint) or a failing final flush stops the relay.
pub(super) async fn run_committer(
    settings: CommitterSettings,
    store: SharedCheckpointStore,
    tracker: SharedTracker,
    progress: Arc<Notify>,
    metrics: Arc<Metrics>,
    mut stop: Shutdown,
) -> Result<Option<Checkpoint>, RelayError> {
    let mut identity = settings.identity.clone();
    let leader_epoch = settings.leader_epoch;
    let mut committer = CheckpointCommitter::new(
        store,
        settings.identity,
        settings.policy,
        settings.resumed_from,
    )
    .with_leader_epoch(leader_epoch);
    committer.resume_sent_through(settings.resumed_sent_through.clone());
    let mut seen_transactions = lock_tracker(&tracker).completed_transactions();
    let mut limiter = IdleCommitLimiter::new(settings.policy.max_interval);
    let record_transactions = settings.record_transactions.clone();
    let mut lag_ticker = tokio::time::interval(Duration::from_secs(1));
    lag_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let caught_up_spacing = caught_up_commit_spacing(&settings.policy);
    // Whether every transaction read was acked at the last look (see the `caught_up`
    // below): then a pending position held back by the caught-up spacing is due when it
    // ends.
    let mut was_caught_up = false;
    loop {
        let caught_up_due = if was_caught_up {
            committer.caught_up_due(caught_up_spacing)
        } else {
            None
        };
        let due = committer.next_due().into_iter().chain(caught_up_due).min();
        let due_sleep = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let stopping = tokio::select! {
            _ = stop.recv() => true,
            _ = progress.notified() => false,
            _ = due_sleep => false,
            _ = lag_ticker.tick() => false,
        };
        // The position and the server it belongs to are read under one lock: a position of
        // the new server is never stored under the old one's name (tracker module docs).
        let (moved, completed, caught_up, position_source) = {
            let mut tracker = lock_tracker(&tracker);
            (
                tracker.acked_position(),
                tracker.completed_transactions(),
                tracker.tracked_transactions() == 0,
                tracker.checkpoint_source().cloned(),
            )
        };
        if let Some(new_source) = position_source.filter(|source| *source != identity) {
            tracing::warn!(server = %describe_identity(&new_source), "the source moved to another server: checkpoints now name it and resume by GTID set");
            committer.move_to_source(new_source.clone(), gtid_only_binlog_position());
            identity = new_source;
        }
        if let Some(sent) = settings.sent_through.get() {
            committer.note_sent_through(sent);
        }
        let before = committer.last_committed().cloned();
        let now = tokio::time::Instant::now();
        let offer = match moved {
            Some(position) => {
                let transactions = completed.saturating_sub(seen_transactions);
                seen_transactions = completed;
                let covers_records = {
                    let mut ordinals = lock_records(&record_transactions);
                    let mut covered = false;
                    while ordinals
                        .front()
                        .is_some_and(|&ordinal| ordinal <= completed)
                    {
                        ordinals.pop_front();
                        covered = true;
                    }
                    covered
                };
                if covers_records {
                    crate::crash_points::crash_if_armed(
                        crate::crash_points::CrashPoint::BeforeCheckpointCommit,
                    );
                }
                limiter.on_moved(position, transactions, covers_records, now)
            }
            None => None,
        };
        let offer = offer.or_else(|| limiter.take_due(now, stopping));
        let outcome = match offer {
            Some((position, transactions)) => {
                committer.offer_transactions(position, transactions).await
            }
            None => committer.commit_if_due().await,
        };
        let outcome = match (outcome, stopping) {
            (Ok(_), true) => committer.flush().await,
            // Everything read is acked: the newest position need not wait out the
            // interval (a drained backlog is stored at once).
            (Ok(false), false) if caught_up => committer.commit_caught_up(caught_up_spacing).await,
            (other, _) => other,
        };
        was_caught_up = caught_up;
        match outcome {
            Ok(_) => {}
            // Definite: a regression, another process fenced this one's Kafka store, or a
            // newer leader's epoch under [ha].
            Err(
                error @ (CheckpointStoreError::Regression { .. }
                | CheckpointStoreError::ProducerFenced { .. }
                | CheckpointStoreError::StaleLeader { .. }),
            ) => return Err(RelayError::Checkpoint(error)),
            Err(error) if stopping => return Err(RelayError::Checkpoint(error)),
            Err(error) => CheckpointCommitFailed { error: &error }.emit(&metrics),
        }
        let after = committer.last_committed().cloned();
        if after != before {
            if let Some(position) = &after {
                CheckpointCommitted {
                    position: &position.binlog,
                    gtid_set: Some(position.gtid_set.to_string()),
                    transaction_timestamp: position.timestamp,
                    caught_up: caught_up && committer.pending().is_none(),
                }
                .emit(&metrics);
            }
        } else {
            let timestamp = after.as_ref().map_or(0, |p| p.timestamp);
            metrics
                .checkpoint_lag_seconds
                .set(crate::internal_events::lag_seconds(
                    timestamp,
                    caught_up && committer.pending().is_none(),
                ));
        }
        if stopping {
            if let Some(position) = &after {
                tracing::info!(position = %position.binlog, gtid_set = %position.gtid_set, "final checkpoint stored");
            }
            return Ok(after.map(|position| {
                Checkpoint::new(identity.clone(), position).with_leader_epoch(leader_epoch)
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use outbox_checkpoint::contract::RecordingStore;
    use outbox_checkpoint::AckTracker;

    use super::*;
    use crate::shutdown::ShutdownController;

    /// The failover identity race: once the checkpoint reaches a position read from the new
    /// server, it is stored naming that server and GTID-only, whatever the committer saw
    /// before; positions of the old server before it keep the old server's name.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_position_read_from_the_new_server_is_never_stored_under_the_old_name() {
        let dir = tempfile::tempdir().unwrap();
        let store: SharedCheckpointStore = Arc::new(outbox_checkpoint::FileCheckpointStore::new(
            dir.path().join("checkpoint.json"),
        ));
        let old_server = SourceIdentity {
            flavor: outbox_binlog::Flavor::Mariadb,
            server_id: 1,
            server_uuid: None,
        };
        let new_server = SourceIdentity {
            server_id: 2,
            ..old_server.clone()
        };
        let tracker: SharedTracker = Arc::new(Mutex::new(AckTracker::new(position(4))));
        let progress = Arc::new(Notify::new());
        let stop = ShutdownController::new();
        let committer = tokio::spawn(run_committer(
            CommitterSettings {
                identity: old_server.clone(),
                policy: CommitPolicy {
                    max_interval: Duration::from_millis(1),
                    max_transactions: 1,
                },
                resumed_from: None,
                record_transactions: Arc::new(Mutex::new(VecDeque::from([1, 2]))),
                leader_epoch: None,
                sent_through: SentThrough::default(),
                resumed_sent_through: None,
            },
            store.clone(),
            tracker.clone(),
            progress.clone(),
            Metrics::new(),
            stop.subscribe(),
        ));
        let gtid = |server_id, sequence| outbox_binlog::Gtid::Mariadb {
            domain_id: 0,
            server_id,
            sequence,
        };
        async fn wait_for(
            store: &SharedCheckpointStore,
            predicate: impl Fn(&Checkpoint) -> bool,
        ) -> Checkpoint {
            let started = std::time::Instant::now();
            loop {
                if let Some(stored) = store.load().await.unwrap() {
                    if predicate(&stored) {
                        return stored;
                    }
                }
                assert!(started.elapsed() < Duration::from_secs(10), "not stored");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // A transaction of the old server.
        lock_tracker(&tracker).end_transaction(CheckpointPosition {
            gtid: Some(gtid(1, 5)),
            ..position(500)
        });
        progress.notify_one();
        let stored = wait_for(&store, |c| c.position.binlog.position == 500).await;
        assert_eq!(stored.source, old_server);
        // The source moved (in stream order) and a transaction of the new server ended; the
        // committer learns of the move from the position itself.
        {
            let mut tracker = lock_tracker(&tracker);
            tracker.switch_source(new_server.clone());
            tracker.end_transaction(CheckpointPosition {
                gtid: Some(gtid(2, 6)),
                ..position(900)
            });
        }
        progress.notify_one();
        let stored = wait_for(&store, |c| c.position.gtid_set.to_string() == "0-2-6").await;
        assert_eq!(
            (stored.source, stored.position.binlog),
            (new_server, gtid_only_binlog_position()),
            "the new server's position is stored under its own name, GTID-only"
        );
        stop.trigger();
        committer.await.unwrap().unwrap();
    }

    /// Once every transaction read is acked, the newest position is stored at once, not after
    /// the interval or the transaction count, and at most once per tenth of the interval;
    /// while a record is unacked, nothing is stored early.
    #[tokio::test(start_paused = true)]
    async fn a_caught_up_relay_stores_its_position_after_a_tenth_of_the_interval() {
        // In memory, so the test can run on paused time.
        let store = Arc::new(RecordingStore::default());
        let shared: SharedCheckpointStore = store.clone();
        let tracker: SharedTracker = Arc::new(Mutex::new(AckTracker::new(position(4))));
        let progress = Arc::new(Notify::new());
        let stop = ShutdownController::new();
        let interval = Duration::from_secs(60);
        let committer = tokio::spawn(run_committer(
            CommitterSettings {
                identity: SourceIdentity {
                    flavor: outbox_binlog::Flavor::Mariadb,
                    server_id: 1,
                    server_uuid: None,
                },
                policy: CommitPolicy {
                    max_interval: interval,
                    max_transactions: 10_000,
                },
                resumed_from: None,
                record_transactions: Arc::new(Mutex::new(VecDeque::from([1, 2]))),
                leader_epoch: None,
                sent_through: SentThrough::default(),
                resumed_sent_through: None,
            },
            shared,
            tracker.clone(),
            progress.clone(),
            Metrics::new(),
            stop.subscribe(),
        ));
        // A transaction with a record: not acked yet, so not caught up.
        let token = {
            let mut tracker = lock_tracker(&tracker);
            let token = tracker.add_record();
            tracker.end_transaction(position(500));
            token
        };
        progress.notify_one();
        tokio::time::sleep(interval / 2).await;
        assert!(
            store.committed_offsets().is_empty(),
            "nothing acked, nothing stored"
        );
        // Acked: everything read is acked, and the last commit (none: the committer's
        // start) is more than the spacing ago, so the position goes out at once.
        lock_tracker(&tracker).ack(token).unwrap();
        progress.notify_one();
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(
            store.committed_offsets(),
            vec![500],
            "stored once caught up"
        );
        // The next one waits for the spacing (a tenth of the interval) from that commit.
        {
            let mut tracker = lock_tracker(&tracker);
            let token = tracker.add_record();
            tracker.end_transaction(position(900));
            tracker.ack(token).unwrap();
        }
        progress.notify_one();
        tokio::time::sleep(interval / 20).await;
        assert_eq!(
            store.committed_offsets(),
            vec![500],
            "within the spacing of the last commit"
        );
        tokio::time::sleep(interval / 20 + Duration::from_millis(10)).await;
        assert_eq!(store.committed_offsets(), vec![500, 900]);
        stop.trigger();
        committer.await.unwrap().unwrap();
    }

    fn position(offset: u64) -> CheckpointPosition {
        CheckpointPosition::at(BinlogPosition::new("binlog.000001", offset))
    }

    #[test]
    fn idle_only_progress_is_committed_at_most_once_per_interval() {
        let start = tokio::time::Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut limiter = IdleCommitLimiter::new(Duration::from_millis(100));
        assert_eq!(limiter.interval, Duration::from_secs(5));
        // First progress (idle, nothing routed yet) goes out at once.
        assert!(limiter.on_moved(position(100), 1, false, at(0)).is_some());
        // A second idle-only move right after is held...
        assert!(limiter.on_moved(position(200), 1, false, at(10)).is_none());
        // ...newest wins, counts add up...
        assert!(limiter.on_moved(position(300), 2, false, at(20)).is_none());
        assert!(limiter.take_due(at(1000), false).is_none());
        // ...and it is offered once the interval passed.
        let (held, transactions) = limiter.take_due(at(5000), false).unwrap();
        assert_eq!((held.binlog.position, transactions), (300, 3));
        assert!(limiter.take_due(at(6000), false).is_none());
        // Progress with records always goes out at once, and resets the rule.
        assert!(limiter.on_moved(position(400), 1, true, at(5010)).is_some());
        assert!(limiter
            .on_moved(position(500), 1, false, at(5020))
            .is_some());
        assert!(limiter
            .on_moved(position(600), 1, false, at(5030))
            .is_none());
        // Shutdown forces the held position out.
        let (forced, _) = limiter.take_due(at(5040), true).unwrap();
        assert_eq!(forced.binlog.position, 600);
    }
}
