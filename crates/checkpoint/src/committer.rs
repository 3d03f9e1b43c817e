//! Batches checkpoint commits: storing every acked position would make the store the
//! bottleneck, so positions are offered as they come and stored by time or count, and the
//! newest one is always stored on shutdown.
//!
//! # Contract
//! * [`CheckpointCommitter::offer`] remembers the position and commits it when a commit is
//!   due: `policy.max_transactions` transactions were offered since the last commit, or
//!   `policy.max_interval` passed since the last commit (or since the committer was created).
//! * [`CheckpointCommitter::commit_if_due`] commits a pending position whose interval has
//!   passed; call it when [`CheckpointCommitter::next_due`] is reached, so a pending position
//!   is stored even if no further offer comes.
//! * [`CheckpointCommitter::commit_caught_up`] commits a pending position at once, for a
//!   caller that knows no further position is coming soon (everything read is acked): a
//!   drained backlog is stored right away instead of waiting out the interval. At most one
//!   such commit per spacing (a slow trickle keeps the caller caught up most of the time),
//!   and never after a failed commit (the failing store waits for the interval); call it
//!   again when [`CheckpointCommitter::caught_up_due`] is reached.
//! * [`CheckpointCommitter::flush`] always stores the newest offered position if it is not
//!   stored yet (shutdown).
//! * Monotonic: a position older than the newest offered one is ignored (counted as
//!   [`crate::internal_events::CheckpointRegressionIgnored`]), so the committer never commits
//!   a position older than the last committed one.
//! * [`CheckpointCommitter::note_sent_through`]: how far records were handed on for
//!   sending is stored with each checkpoint ([`Checkpoint::sent_through`]) when it lies
//!   after the checkpoint's position, and, while the acked position stands still behind it,
//!   by committing the stored position again once per `policy.max_interval`.
//! * A failed commit keeps the position pending and returns the error; it is retried (with
//!   the newest position by then) when the next commit is due again (one more interval or
//!   batch, so a failing store is not hammered) or by `flush`.
//!
//! Time is [`tokio::time::Instant`], so tests can pause it.

use std::time::Duration;

use tokio::time::Instant;

use outbox_binlog::BinlogPosition;

use crate::checkpoint::{compare_binlog_positions, Checkpoint, CheckpointPosition, SourceIdentity};
use crate::internal_events::{
    CheckpointCommitFailed, CheckpointCommitted, CheckpointRegressionIgnored, InternalEvent,
};
use crate::store::{CheckpointStoreError, SharedCheckpointStore};

/// When to commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitPolicy {
    /// Longest time a newer acked position waits before it is stored: bounds how much is
    /// re-sent after a crash when traffic is slow.
    pub max_interval: Duration,
    /// Commit as soon as this many transactions were offered since the last commit: bounds
    /// the replay after a crash when traffic is fast. `0` or `1` commits every offer.
    pub max_transactions: u64,
}

impl Default for CommitPolicy {
    /// One second or 10 000 transactions, whichever comes first.
    fn default() -> Self {
        Self {
            max_interval: Duration::from_secs(1),
            max_transactions: 10_000,
        }
    }
}

/// Stores the newest acked position by [`CommitPolicy`]; see the module docs.
#[derive(Debug)]
pub struct CheckpointCommitter {
    /// Where checkpoints go.
    store: SharedCheckpointStore,
    /// `store.describe()`, computed once for events.
    store_name: String,
    /// When to commit.
    policy: CommitPolicy,
    /// The source every stored checkpoint names.
    source: SourceIdentity,
    /// The newest offered position not yet stored.
    pending: Option<CheckpointPosition>,
    /// Transactions offered since the last commit.
    pending_transactions: u64,
    /// The last stored position.
    last_committed: Option<CheckpointPosition>,
    /// When the last commit happened (or the committer was created): the interval's start.
    last_commit_at: Instant,
    /// Set after a failover ([`CheckpointCommitter::move_to_source`]): every position is
    /// stored with this binlog position (the relay's "resume by GTID set" marker) instead of
    /// its own, since file offsets are only meaningful on the server that wrote them.
    gtid_only_binlog: Option<BinlogPosition>,
    /// The leadership term (`[ha]`) stamped into every stored checkpoint, so the store can
    /// refuse this committer's writes once a newer leader wrote
    /// ([`CheckpointStoreError::StaleLeader`]); `None` without `[ha]`.
    leader_epoch: Option<u64>,
    /// The newest transaction end whose records were handed on for sending
    /// ([`CheckpointCommitter::note_sent_through`]), stored with each checkpoint as
    /// [`Checkpoint::sent_through`] so a restart after a crash can count what it re-sends.
    sent_through: Option<BinlogPosition>,
    /// `sent_through` as last stored, so an unchanged one is not stored again.
    stored_sent_through: Option<BinlogPosition>,
    /// When [`CheckpointCommitter::commit_caught_up`] last tried a commit: the next one
    /// waits for its spacing from then (commits by count or interval do not delay it).
    last_caught_up_commit_at: Option<Instant>,
    /// Whether the last commit failed: [`CheckpointCommitter::commit_caught_up`] then waits
    /// for the interval like every other retry, so a failing store is not hammered at the
    /// caught-up spacing.
    last_commit_failed: bool,
}

impl CheckpointCommitter {
    /// A committer storing checkpoints of `source` into `store`. If the relay resumed from a
    /// stored checkpoint, pass its position as `already_committed` so an equal position is not
    /// stored again and older ones are ignored.
    pub fn new(
        store: SharedCheckpointStore,
        source: SourceIdentity,
        policy: CommitPolicy,
        already_committed: Option<CheckpointPosition>,
    ) -> Self {
        Self {
            store_name: store.describe(),
            store,
            policy,
            source,
            pending: None,
            pending_transactions: 0,
            last_committed: already_committed,
            last_commit_at: Instant::now(),
            gtid_only_binlog: None,
            leader_epoch: None,
            sent_through: None,
            stored_sent_through: None,
            last_caught_up_commit_at: None,
            last_commit_failed: false,
        }
    }

    /// The `sent_through` of the checkpoint the relay resumed from: kept (and stored again)
    /// until the relay sends past it, so a second crash during the replay still counts the
    /// replayed records.
    pub fn resume_sent_through(&mut self, stored: Option<BinlogPosition>) {
        self.stored_sent_through = stored.clone();
        self.sent_through = stored;
    }

    /// Records that every record of the transactions up to `position` was handed on for
    /// sending (the newest such position wins). It is stored with the next checkpoint; and
    /// while the acked position stands still behind it (Kafka slow or away), once per
    /// commit interval with the stored position again, so the record of how far the relay
    /// had sent stays at most one interval behind a crash.
    pub fn note_sent_through(&mut self, position: BinlogPosition) {
        let newer = self.sent_through.as_ref().is_none_or(|current| {
            compare_binlog_positions(&position, current) != Some(std::cmp::Ordering::Less)
        });
        if newer {
            self.sent_through = Some(position);
        }
    }

    /// The `sent_through` to store with a checkpoint at `position`: only when it lies after
    /// it (else nothing stored is unacked) and positions are the server's own (not after a
    /// failover).
    fn sent_through_after(&self, position: &BinlogPosition) -> Option<BinlogPosition> {
        if self.gtid_only_binlog.is_some() {
            return None;
        }
        self.sent_through.clone().filter(|sent| {
            compare_binlog_positions(sent, position) == Some(std::cmp::Ordering::Greater)
        })
    }

    /// Whether a newer `sent_through` than the stored one waits while nothing else is
    /// pending: then the stored position is committed again to record it.
    fn sent_through_waits(&self) -> bool {
        self.pending.is_none()
            && self.last_committed.as_ref().is_some_and(|committed| {
                let sent = self.sent_through_after(&committed.binlog);
                sent.is_some() && sent != self.stored_sent_through
            })
    }

    /// The same committer stamping `epoch` into every checkpoint it stores (see
    /// [`crate::Checkpoint::leader_epoch`]).
    pub fn with_leader_epoch(mut self, epoch: Option<u64>) -> Self {
        self.leader_epoch = epoch;
        self
    }

    /// After a failover to `source`: later checkpoints name it, and every position (the
    /// pending one included, which may come from the old server) is stored with
    /// `gtid_only_binlog` as its binlog position, so a restart resumes by GTID set on
    /// whichever server it finds.
    pub fn move_to_source(&mut self, source: SourceIdentity, gtid_only_binlog: BinlogPosition) {
        self.source = source;
        if let Some(pending) = &mut self.pending {
            pending.binlog = gtid_only_binlog.clone();
        }
        self.gtid_only_binlog = Some(gtid_only_binlog);
    }

    /// Offers the newest acked position as one completed transaction; commits if due.
    /// Returns whether a commit happened.
    pub async fn offer(
        &mut self,
        position: CheckpointPosition,
    ) -> Result<bool, CheckpointStoreError> {
        self.offer_transactions(position, 1).await
    }

    /// Offers the newest acked position covering `transactions` completed transactions
    /// (e.g. the growth of [`crate::AckTracker::completed_transactions`]); commits if due.
    /// Returns whether a commit happened.
    pub async fn offer_transactions(
        &mut self,
        position: CheckpointPosition,
        transactions: u64,
    ) -> Result<bool, CheckpointStoreError> {
        let mut position = position;
        if let Some(binlog) = &self.gtid_only_binlog {
            position.binlog = binlog.clone();
        }
        let newest = self.pending.as_ref().or(self.last_committed.as_ref());
        if let Some(newest) = newest {
            match compare_binlog_positions(&position.binlog, &newest.binlog) {
                Some(std::cmp::Ordering::Less) => {
                    CheckpointRegressionIgnored {
                        offered: &position,
                        newest,
                    }
                    .emit();
                    return Ok(false);
                }
                Some(std::cmp::Ordering::Equal)
                    if self.pending.is_none() && position.gtid_set == newest.gtid_set =>
                {
                    // Already stored (e.g. a heartbeat at the resume position).
                    return Ok(false);
                }
                _ => {}
            }
        }
        self.pending = Some(position);
        self.pending_transactions = self.pending_transactions.saturating_add(transactions);
        if self.pending_transactions >= self.policy.max_transactions.max(1)
            || self.last_commit_at.elapsed() >= self.policy.max_interval
        {
            return self.commit_pending().await;
        }
        Ok(false)
    }

    /// Commits the pending position if its interval has passed. Returns whether a commit
    /// happened.
    pub async fn commit_if_due(&mut self) -> Result<bool, CheckpointStoreError> {
        if self.last_commit_at.elapsed() < self.policy.max_interval {
            return Ok(false);
        }
        if self.pending.is_none() && self.sent_through_waits() {
            // The acked position stands still: store it again with the newer sent_through.
            self.pending = self.last_committed.clone();
        }
        if self.pending.is_some() {
            return self.commit_pending().await;
        }
        Ok(false)
    }

    /// When [`CheckpointCommitter::commit_if_due`] will commit the pending position; `None`
    /// when nothing is pending.
    pub fn next_due(&self) -> Option<Instant> {
        (self.pending.is_some() || self.sent_through_waits())
            .then(|| self.last_commit_at + self.policy.max_interval)
    }

    /// Commits the pending position now, whatever the policy's interval and count, unless
    /// the previous call's commit was less than `spacing` ago: for a caller that knows no
    /// further position is coming soon (the relay caught up: every record read is acked), so
    /// the newest position need not wait out `policy.max_interval`. `spacing` bounds how
    /// often this commits while a slow trickle keeps the caller caught up. Does nothing after
    /// a failed commit (the retry waits for the interval). Returns whether a commit happened.
    pub async fn commit_caught_up(
        &mut self,
        spacing: Duration,
    ) -> Result<bool, CheckpointStoreError> {
        let now = Instant::now();
        if self.caught_up_due(spacing).is_none_or(|due| due > now) {
            return Ok(false);
        }
        self.last_caught_up_commit_at = Some(now);
        self.commit_pending().await
    }

    /// When [`CheckpointCommitter::commit_caught_up`] with `spacing` will commit: `spacing`
    /// after its last commit, or, before its first, the last commit's time (already past:
    /// due now, and never a fresh reading of the clock, which a caller comparing it with its
    /// own `now` would find just ahead); `None` when nothing is pending or the last commit
    /// failed.
    pub fn caught_up_due(&self, spacing: Duration) -> Option<Instant> {
        if self.pending.is_none() || self.last_commit_failed {
            return None;
        }
        Some(match self.last_caught_up_commit_at {
            Some(at) => at + spacing.min(self.policy.max_interval),
            None => self.last_commit_at,
        })
    }

    /// Stores the newest offered position if it is not stored yet (shutdown). Returns whether
    /// a commit happened.
    pub async fn flush(&mut self) -> Result<bool, CheckpointStoreError> {
        self.commit_pending().await
    }

    /// The last stored position.
    pub fn last_committed(&self) -> Option<&CheckpointPosition> {
        self.last_committed.as_ref()
    }

    /// The newest offered position not stored yet.
    pub fn pending(&self) -> Option<&CheckpointPosition> {
        self.pending.as_ref()
    }

    async fn commit_pending(&mut self) -> Result<bool, CheckpointStoreError> {
        let Some(position) = self.pending.take() else {
            return Ok(false);
        };
        let sent_through = self.sent_through_after(&position.binlog);
        let checkpoint = Checkpoint::new(self.source.clone(), position)
            .with_leader_epoch(self.leader_epoch)
            .with_sent_through(sent_through);
        let started = Instant::now();
        let result = self.store.commit(&checkpoint).await;
        // Success or failure, the next attempt waits one more interval (or batch): a failed
        // commit is retried then, not on every offer.
        self.pending_transactions = 0;
        self.last_commit_at = Instant::now();
        self.last_commit_failed = result.is_err();
        match result {
            Ok(()) => {
                CheckpointCommitted {
                    position: &checkpoint.position,
                    duration: started.elapsed(),
                    store: &self.store_name,
                }
                .emit();
                self.stored_sent_through = checkpoint.sent_through.clone();
                self.last_committed = Some(checkpoint.position);
                Ok(true)
            }
            Err(error) => {
                CheckpointCommitFailed {
                    error: &error,
                    position: &checkpoint.position,
                    store: &self.store_name,
                }
                .emit();
                self.pending = Some(checkpoint.position);
                Err(error)
            }
        }
    }
}
