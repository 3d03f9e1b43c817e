//! The checkpoint store contract, shared by every backend.
//!
//! # Contract
//! * [`CheckpointStore::load`] at start: `Ok(None)` only when no checkpoint was ever
//!   committed (or it was [`reset`](CheckpointStore::reset)). A store whose content cannot be
//!   read (corrupt, truncated, newer format, unreachable) is an **error**, never `None`: a
//!   silent restart from zero would re-send or, worse, skip history.
//! * [`CheckpointStore::commit`] is durable when it returns `Ok`: after a crash of the relay
//!   or its host, `load` returns this checkpoint or a newer one.
//! * Commits are monotonic: every store **rejects** a commit whose binlog position is older
//!   than the last checkpoint it stored for the same source, with
//!   [`CheckpointStoreError::Regression`] (and stores nothing). A regression means a bug or two
//!   relays writing the same checkpoint; both need an operator. Positions of different
//!   sources (a failover) or of differently named binlogs cannot be ordered and are accepted.
//!   Committing the stored position again is accepted.
//! * [`CheckpointStore::set`] (operator: `outbox-relay checkpoint set`) stores a checkpoint
//!   unconditionally, backwards too; [`CheckpointStore::reset`] (`checkpoint reset`) removes
//!   it, so the next `load` is `None`. Run them only while the relay is stopped.
//! * One writer per checkpoint: stores remember the last stored checkpoint in memory for the
//!   regression check, so two relays sharing one are not detected on every commit, unless
//!   they run under `[ha]` (below).
//! * **Leader epochs** (`[ha]`, standby failover): a checkpoint may carry the leadership term
//!   of the relay that wrote it ([`Checkpoint::leader_epoch`], growing with every leadership
//!   change). A commit whose epoch is older than the stored checkpoint's is refused with
//!   [`CheckpointStoreError::StaleLeader`] and stores nothing: a paused or partitioned old
//!   leader (a zombie) cannot move the checkpoint once a new leader wrote one. A commit
//!   without an epoch counts as older than any epoch (a relay without `[ha]` next to an `[ha]`
//!   group is refused too). A commit of a *newer* epoch starts a new term and is accepted even
//!   if its position is behind the stored one (a new leader resumes from the checkpoint it
//!   took over; see [`CheckpointStore::take_over`]); within one epoch the regression rule
//!   holds. The rule is [`check_commit`]; each store says where it enforces it (the MySQL
//!   store in the database, atomically; the file store on one host only).
//!
//! # Choosing a backend at runtime
//! The trait is dyn-compatible (its methods return boxed futures), so the relay builds a
//! `Box<dyn CheckpointStore>` / [`SharedCheckpointStore`] from its config without an enum.
//! A later backend (a Kafka compacted topic, keyed by connector name, committed in the same
//! producer transaction as the events for exactly-once) is one more type implementing this
//! trait: nothing else changes.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::checkpoint::{compare_binlog_positions, Checkpoint, CheckpointFormatError};

/// The future every store method returns (boxed, so the trait is dyn-compatible).
pub type StoreFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, CheckpointStoreError>> + Send + 'a>>;

/// A store shared between the committer and other users (status endpoint, CLI).
pub type SharedCheckpointStore = Arc<dyn CheckpointStore>;

/// Where checkpoints are kept durably. See the module docs for the contract.
pub trait CheckpointStore: Send + Sync + std::fmt::Debug {
    /// Where this store keeps its checkpoint, for logs and errors
    /// (e.g. `file /var/lib/outbox-relay/checkpoint.json`).
    fn describe(&self) -> String;

    /// The last committed checkpoint; `None` only if none was ever committed.
    fn load(&self) -> StoreFuture<'_, Option<Checkpoint>>;

    /// Stores `checkpoint` durably, rejecting a regression (see the module docs).
    fn commit<'a>(&'a self, checkpoint: &'a Checkpoint) -> StoreFuture<'a, ()>;

    /// Operator override: stores `checkpoint` durably even if it is older than the stored one.
    fn set<'a>(&'a self, checkpoint: &'a Checkpoint) -> StoreFuture<'a, ()>;

    /// Operator reset: removes the checkpoint, so the next `load` returns `None`.
    fn reset(&self) -> StoreFuture<'_, ()>;

    /// A new leader's start (`[ha]`): loads the checkpoint and, if there is one, stores it
    /// again stamped with `epoch`, so from now on every commit of an older leader is refused
    /// ([`CheckpointStoreError::StaleLeader`]). Returns the checkpoint the term resumes from
    /// (with `epoch`). Refuses with `StaleLeader` when the stored epoch is newer than
    /// `epoch`.
    ///
    /// The default is `load` then `commit`, not atomic: an older leader's commit between the
    /// two is overwritten by the loaded (older) position, which means a replay, never a loss.
    /// Stores that can do better (the MySQL store: one transaction) override it.
    fn take_over(&self, epoch: u64) -> StoreFuture<'_, Option<Checkpoint>> {
        Box::pin(async move {
            let Some(stored) = self.load().await? else {
                return Ok(None);
            };
            let stamped = stored.with_leader_epoch(Some(epoch));
            self.commit(&stamped).await?;
            Ok(Some(stamped))
        })
    }
}

/// Everything a checkpoint store can fail with. Each variant names the place (file path,
/// table and connector) so the operator knows what to look at.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointStoreError {
    /// The stored checkpoint is unreadable: the relay refuses to start from scratch.
    #[error("checkpoint in {location} is corrupt: {source}; fix it, or replace it with `outbox-relay checkpoint set` / `checkpoint reset`")]
    Corrupt {
        /// File path or table + connector name.
        location: String,
        /// What is wrong with it (including a newer format).
        source: CheckpointFormatError,
    },
    /// The file store's directory does not exist (it is not created: a missing directory
    /// usually means a missing volume, and starting from zero there would be wrong).
    #[error("checkpoint directory {} does not exist; create it (or mount the volume) before starting the relay", directory.display())]
    MissingDirectory {
        /// The directory that should hold the checkpoint file.
        directory: PathBuf,
    },
    /// A file system operation failed.
    #[error("{operation} {}: {source}", path.display())]
    Io {
        /// What was being done (`writing`, `renaming`, ...).
        operation: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The database store failed (connection, permissions, SQL).
    #[error(
        "checkpoint table {location}: {}",
        outbox_binlog::describe_client_error(source)
    )]
    Database {
        /// `database.table` and connector name.
        location: String,
        /// The driver's error.
        source: mysql_async::Error,
    },
    /// The database store did not answer within its operation timeout (a hung server, a
    /// half-open connection): transient, the commit is retried later; nothing is assumed
    /// stored.
    #[error("checkpoint table {location}: no answer within {after:?} while {operation}; is the server reachable? (the commit is retried)")]
    Timeout {
        /// `database.table` and connector name.
        location: String,
        /// What was being done (`committing`, `loading`, ...).
        operation: &'static str,
        /// The timeout that passed.
        after: std::time::Duration,
    },
    /// A commit would move the stored checkpoint backwards; nothing was stored.
    #[error("refusing to move the checkpoint in {location} backwards from {stored} to {offered} (is another relay using the same checkpoint?)")]
    Regression {
        /// Where the checkpoint is stored.
        location: String,
        /// The stored binlog position.
        stored: String,
        /// The older position that was offered.
        offered: String,
    },
    /// The Kafka store could not do its work: the cluster did not answer within the store's
    /// operation timeout, or a request failed. Transient: the commit is retried later and
    /// nothing is assumed stored; a load that fails this way is never `None`.
    #[error("checkpoint {location}: {operation} failed: {message} (are the brokers reachable? the commit is retried)")]
    Kafka {
        /// Topic, brokers and connector name.
        location: String,
        /// What was being done (`loading`, `committing`, `creating the topic`, ...).
        operation: &'static str,
        /// librdkafka's own reason.
        message: String,
    },
    /// The Kafka store's compacted topic does not exist and the store may not create it.
    #[error("checkpoint topic `{topic}` does not exist on {brokers}; create it (1 partition, cleanup.policy=compact), or set `kafka.create_topics = true` so the relay creates it")]
    KafkaTopicMissing {
        /// The checkpoint topic.
        topic: String,
        /// `bootstrap.servers`, so the operator knows which cluster was asked.
        brokers: String,
    },
    /// Another store instance with the same connector name (a second relay process, or
    /// `outbox-relay checkpoint set` while the relay runs) took over the Kafka store's
    /// transactional id, so this one may never write again: definite, the relay stops.
    #[error("checkpoint {location}: this relay was fenced: {message}; another process with the same connector name writes this checkpoint now (run one relay per connector)")]
    ProducerFenced {
        /// Topic, brokers and connector name.
        location: String,
        /// librdkafka's words.
        message: String,
    },
    /// A commit (or take-over) of an older leadership term than the stored checkpoint's
    /// (`[ha]`): another relay became leader since; nothing was stored. Definite for this
    /// term: the relay stops publishing and goes back to standby.
    #[error("refusing a checkpoint write of leader epoch {} to {location}: it holds a checkpoint of leader epoch {stored_epoch}, so another relay became leader since (this one is a stale leader and must stop publishing){}", describe_epoch(*offered_epoch), hint_without_epoch(*offered_epoch))]
    StaleLeader {
        /// Where the checkpoint is stored.
        location: String,
        /// The stored checkpoint's leader epoch.
        stored_epoch: u64,
        /// The refused write's leader epoch (`None`: a relay without `[ha]`).
        offered_epoch: Option<u64>,
    },
    /// A blocking file operation's task panicked or was cancelled.
    #[error("checkpoint store task for {location} failed: {message}")]
    Task {
        /// Where the checkpoint is stored.
        location: String,
        /// The join error.
        message: String,
    },
}

impl CheckpointStoreError {
    /// Whether trying again later can succeed: the store's server or cluster did not answer
    /// (down, restarting, a network fault). Everything else (corrupt content, a missing
    /// directory or topic, refused access, a regression, fencing) needs the operator.
    pub fn is_transient(&self) -> bool {
        match self {
            CheckpointStoreError::Timeout { .. } | CheckpointStoreError::Kafka { .. } => true,
            CheckpointStoreError::Database { source, .. } => match source {
                mysql_async::Error::Io(_) => true,
                mysql_async::Error::Driver(driver) => matches!(
                    driver,
                    mysql_async::DriverError::ConnectionClosed
                        | mysql_async::DriverError::PoolDisconnected
                ),
                // Too many connections, shutdown in progress, aborted or killed connections.
                mysql_async::Error::Server(error) => [
                    1040, 1053, 1077, 1152, 1153, 1158, 1159, 1160, 1161, 1927, 3169,
                ]
                .contains(&error.code),
                _ => false,
            },
            _ => false,
        }
    }
}

fn describe_epoch(epoch: Option<u64>) -> String {
    match epoch {
        Some(epoch) => epoch.to_string(),
        None => "none".to_owned(),
    }
}

fn hint_without_epoch(epoch: Option<u64>) -> &'static str {
    match epoch {
        Some(_) => "",
        None => "; this relay runs without [ha]: enable [ha] like the other relays, or stop them all and `outbox-relay checkpoint set` before running without it",
    }
}

/// The commit rule every store applies (module docs): `Err(StaleLeader)` when `offered`'s
/// leader epoch is older than `stored`'s (no epoch is older than any); a newer epoch is
/// accepted as is; within the same epoch, `Err(Regression)` when the position moves
/// backwards (same source, comparable files). `location` names the store in the error.
///
/// Public so every backend (also outside this crate, e.g. a Kafka store) applies the same
/// rule.
pub fn check_commit(
    location: &str,
    stored: Option<&Checkpoint>,
    offered: &Checkpoint,
) -> Result<(), CheckpointStoreError> {
    if let Some(stored_epoch) = stored.and_then(|stored| stored.leader_epoch) {
        match offered.leader_epoch {
            Some(offered_epoch) if offered_epoch > stored_epoch => return Ok(()),
            Some(offered_epoch) if offered_epoch == stored_epoch => {}
            offered_epoch => {
                return Err(CheckpointStoreError::StaleLeader {
                    location: location.to_owned(),
                    stored_epoch,
                    offered_epoch,
                })
            }
        }
    } else if offered.leader_epoch.is_some() {
        // The first checkpoint of an [ha] group (stored without an epoch before): a new term.
        return Ok(());
    }
    reject_regression(location, stored, offered)
}

/// `Err(Regression)` when `offered` is older than `stored` (same source, comparable files):
/// the monotonicity rule every store applies in [`CheckpointStore::commit`] (see the module
/// docs), public so stores in other crates apply the very same rule.
pub fn reject_regression(
    location: &str,
    stored: Option<&Checkpoint>,
    offered: &Checkpoint,
) -> Result<(), CheckpointStoreError> {
    let Some(stored) = stored else {
        return Ok(());
    };
    if stored.source != offered.source {
        return Ok(());
    }
    let order = compare_binlog_positions(&offered.position.binlog, &stored.position.binlog);
    if order == Some(std::cmp::Ordering::Less) {
        return Err(CheckpointStoreError::Regression {
            location: location.to_owned(),
            stored: stored.position.binlog.to_string(),
            offered: offered.position.binlog.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{CheckpointPosition, SourceIdentity};
    use outbox_binlog::{BinlogPosition, Flavor};

    fn at(position: u64, epoch: Option<u64>) -> Checkpoint {
        Checkpoint::new(
            SourceIdentity {
                flavor: Flavor::Mariadb,
                server_id: 1,
                server_uuid: None,
            },
            CheckpointPosition::at(BinlogPosition::new("binlog.000001", position)),
        )
        .with_leader_epoch(epoch)
    }

    #[test]
    fn an_older_epoch_is_refused_naming_both_epochs() {
        let error = check_commit("here", Some(&at(100, Some(5))), &at(200, Some(4))).unwrap_err();
        assert!(
            matches!(
                error,
                CheckpointStoreError::StaleLeader {
                    stored_epoch: 5,
                    offered_epoch: Some(4),
                    ..
                }
            ),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains("leader epoch 4") && text.contains("leader epoch 5"),
            "{text}"
        );
    }

    #[test]
    fn no_epoch_after_an_epoch_is_refused_with_the_fix() {
        let error = check_commit("here", Some(&at(100, Some(1))), &at(200, None)).unwrap_err();
        assert!(error.to_string().contains("without [ha]"), "{error}");
    }

    #[test]
    fn a_newer_epoch_starts_a_term_even_behind_the_stored_position() {
        check_commit("here", Some(&at(500, Some(2))), &at(100, Some(3))).unwrap();
        check_commit("here", Some(&at(500, None)), &at(100, Some(1))).unwrap();
        check_commit("here", None, &at(100, Some(1))).unwrap();
    }

    #[test]
    fn within_one_epoch_the_regression_rule_holds() {
        check_commit("here", Some(&at(100, Some(2))), &at(100, Some(2))).unwrap();
        check_commit("here", Some(&at(100, Some(2))), &at(200, Some(2))).unwrap();
        assert!(matches!(
            check_commit("here", Some(&at(200, Some(2))), &at(100, Some(2))),
            Err(CheckpointStoreError::Regression { .. })
        ));
        assert!(matches!(
            check_commit("here", Some(&at(200, None)), &at(100, None)),
            Err(CheckpointStoreError::Regression { .. })
        ));
    }
}
