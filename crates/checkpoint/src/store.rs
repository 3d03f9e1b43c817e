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
//!   regression check, so two relays sharing one are not detected on every commit.
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
    #[error("checkpoint table {location}: {source}")]
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
    /// A blocking file operation's task panicked or was cancelled.
    #[error("checkpoint store task for {location} failed: {message}")]
    Task {
        /// Where the checkpoint is stored.
        location: String,
        /// The join error.
        message: String,
    },
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
