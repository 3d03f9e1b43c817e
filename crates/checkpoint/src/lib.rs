//! outbox-checkpoint: where the relay is in the source's binlog, stored only after Kafka
//! acknowledged everything before it.
//!
//! # The safety rule
//! **The checkpoint never passes an unacked event.** (Maxwell bug #241 lost data by
//! checkpointing the position of rows that were still in flight.) Concretely:
//!
//! * [`AckTracker`] hands out an [`AckToken`] per record as rows stream in, learns each
//!   transaction's end position from `end_transaction`, takes acks in any order, and only
//!   ever yields a position whose whole prefix is acked: never past an unacked record, never
//!   backwards, and always a transaction boundary (or heartbeat position).
//! * [`CheckpointCommitter`] stores those positions in batches (time and count), never an
//!   older one than it stored, and `flush` stores the newest one at shutdown.
//! * A [`CheckpointStore`] makes a commit durable before returning; reading a damaged
//!   checkpoint is an error naming where it is, never a silent restart from zero; commits
//!   that would move backwards are rejected.
//!
//! ```
//! use outbox_binlog::BinlogPosition;
//! use outbox_checkpoint::{AckTracker, CheckpointPosition};
//!
//! let start = CheckpointPosition::at(BinlogPosition::new("binlog.000001", 4));
//! let mut tracker = AckTracker::new(start);
//! let first = tracker.add_record();
//! let second = tracker.add_record();
//! tracker.end_transaction(CheckpointPosition::at(BinlogPosition::new("binlog.000001", 500)));
//! tracker.ack(second)?;
//! assert_eq!(tracker.acked_position(), None, "the first record is still in flight");
//! tracker.ack(first)?;
//! assert_eq!(tracker.acked_position().map(|p| p.binlog.position), Some(500));
//! assert!(tracker.ack(first).is_err(), "a double ack is an error, not a panic");
//! # Ok::<(), outbox_checkpoint::AckError>(())
//! ```
//!
//! # Resumption
//! A stored [`Checkpoint`] names its source ([`SourceIdentity`]), the binlog file+position
//! just after the last fully delivered transaction, and the GTID set up to there. Starting the
//! binlog reader there re-delivers at most what was acked after the last commit (at-least-once,
//! stable event ids) and skips nothing.
//!
//! # Backends
//! [`FileCheckpointStore`] (atomic JSON file, the embedded default) and
//! [`MysqlCheckpointStore`] (a row per connector in a MySQL/MariaDB table). The trait is
//! dyn-compatible ([`SharedCheckpointStore`]), so the backend is chosen at runtime and a later
//! Kafka compacted-topic store is just one more implementation (it lives in `outbox-kafka`).
//! Every backend passes the same contract suite (module `contract`, feature `contract-tests`).

#![warn(missing_docs)]

mod checkpoint;
mod committer;
#[cfg(feature = "contract-tests")]
pub mod contract;
mod file_store;
mod gtid_union;
pub mod internal_events;
mod mysql_store;
mod store;
mod tracker;

pub use checkpoint::{
    compare_binlog_positions, Checkpoint, CheckpointFormatError, CheckpointPosition,
    SourceIdentity, CHECKPOINT_FORMAT_VERSION, WRITER_VERSION,
};
pub use committer::{CheckpointCommitter, CommitPolicy};
pub use file_store::FileCheckpointStore;
pub use internal_events::register_metrics;
pub use mysql_store::{MysqlCheckpointStore, DEFAULT_OPERATION_TIMEOUT};
pub use store::{
    check_commit, reject_regression, CheckpointStore, CheckpointStoreError, SharedCheckpointStore,
    StoreFuture,
};
pub use tracker::{AckError, AckToken, AckTracker, ExactlyOnceBoundary};
