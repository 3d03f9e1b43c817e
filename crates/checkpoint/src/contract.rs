//! The checkpoint store contract as tests (feature `contract-tests`): one suite every
//! backend runs, so the file, MySQL and Kafka stores are held to the same rules (see
//! [`crate::store`]'s module docs).
//!
//! A backend's test implements [`StoreLocations`] (a new store instance over a named
//! location: a file in a temp dir, a connector row, a connector key on a topic) and calls
//! [`run_contract`], or one rule function. Each rule uses its own location, never written
//! before, and panics with the rule and the store's `describe()` on a violation.
//!
//! ```toml
//! [dev-dependencies]
//! outbox-checkpoint = { workspace = true, features = ["contract-tests"] }
//! ```

use std::future::Future;
use std::pin::Pin;

use outbox_binlog::{BinlogPosition, Flavor, Gtid, GtidSet};

use crate::checkpoint::{Checkpoint, CheckpointPosition, SourceIdentity};
use crate::store::{CheckpointStore, CheckpointStoreError, SharedCheckpointStore, StoreFuture};

/// Where a backend's test keeps checkpoints for the contract suite.
pub trait StoreLocations: Sync {
    /// A new store instance over the location `name`: the same name twice means the same
    /// stored checkpoint (as after a relay restart), a new name a location never written.
    fn open<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = SharedCheckpointStore> + Send + 'a>>;
}

/// A MariaDB checkpoint of server `server_id` at `file:position`, GTID sequence `sequence`.
pub fn checkpoint_at(server_id: u32, file: &str, position: u64, sequence: u64) -> Checkpoint {
    Checkpoint::new(
        SourceIdentity {
            flavor: Flavor::Mariadb,
            server_id,
            server_uuid: None,
        },
        CheckpointPosition {
            binlog: BinlogPosition::new(file, position),
            gtid: Some(Gtid::Mariadb {
                domain_id: 0,
                server_id,
                sequence,
            }),
            gtid_set: GtidSet::parse(Flavor::Mariadb, &format!("0-{server_id}-{sequence},3-9-1"))
                .unwrap_or(GtidSet::Empty),
            timestamp: 1_700_000_000 + (sequence % 1_000_000) as u32,
        },
    )
}

/// Every rule, each on the location `{prefix}-{rule}`.
pub async fn run_contract(locations: &dyn StoreLocations, prefix: &str) {
    load_is_none_until_the_first_commit(locations, &format!("{prefix}-none")).await;
    a_commit_is_read_back_by_a_new_instance(locations, &format!("{prefix}-roundtrip")).await;
    commits_never_move_backwards(locations, &format!("{prefix}-monotonic")).await;
    set_moves_anywhere_and_reset_removes(locations, &format!("{prefix}-operator")).await;
    locations_are_independent(locations, &format!("{prefix}-independent")).await;
}

/// `load` is `None` on a location never written, in several instances, and stays so.
pub async fn load_is_none_until_the_first_commit(locations: &dyn StoreLocations, name: &str) {
    let store = locations.open(name).await;
    assert_eq!(
        store.load().await.expect("load of a fresh location"),
        None,
        "{}: never committed, so load must be None",
        store.describe()
    );
    let again = locations.open(name).await;
    assert_eq!(again.load().await.expect("second load"), None);
}

/// A commit is durable on `Ok`: a new instance (a restarted relay) loads exactly it; a
/// later commit replaces it.
pub async fn a_commit_is_read_back_by_a_new_instance(locations: &dyn StoreLocations, name: &str) {
    let store = locations.open(name).await;
    let first = checkpoint_at(1, "binlog.000002", 777, 12);
    store.commit(&first).await.expect("first commit");
    assert_eq!(store.load().await.expect("load"), Some(first.clone()));
    let reopened = locations.open(name).await;
    assert_eq!(
        reopened.load().await.expect("load in a new instance"),
        Some(first),
        "{}: a committed checkpoint must be read back after a restart",
        reopened.describe()
    );
    let second = checkpoint_at(1, "binlog.000003", 4, 13);
    store.commit(&second).await.expect("second commit");
    assert_eq!(
        locations.open(name).await.load().await.expect("load"),
        Some(second)
    );
}

/// Same position again, a later file with a smaller offset, and another source are
/// accepted; an older position of the same source is rejected with `Regression` (by the
/// instance that wrote, and by a new one that must read first) and nothing is stored.
pub async fn commits_never_move_backwards(locations: &dyn StoreLocations, name: &str) {
    let store = locations.open(name).await;
    let newer = checkpoint_at(1, "binlog.000010", 100, 20);
    store.commit(&newer).await.expect("commit");
    store.commit(&newer).await.expect("the same position again");
    let rotated = checkpoint_at(1, "binlog.000011", 4, 21);
    store.commit(&rotated).await.expect("a later file");
    let older = checkpoint_at(1, "binlog.000010", 900, 19);
    for instance in [store.clone(), locations.open(name).await] {
        let error = instance
            .commit(&older)
            .await
            .expect_err("a regression must be rejected");
        assert!(
            matches!(error, CheckpointStoreError::Regression { .. }),
            "{}: {error:?}",
            instance.describe()
        );
        assert!(error.to_string().contains("binlog.000010:900"), "{error}");
        assert_eq!(
            instance.load().await.expect("load"),
            Some(rotated.clone()),
            "{}: a rejected commit must store nothing",
            instance.describe()
        );
    }
    // A different source (a failover) cannot be ordered: accepted.
    let other_source = checkpoint_at(2, "binlog.000001", 4, 1);
    store.commit(&other_source).await.expect("another source");
    assert_eq!(
        locations.open(name).await.load().await.expect("load"),
        Some(other_source)
    );
}

/// `set` stores backwards too; `reset` removes (twice is fine), after which `load` is
/// `None` in every instance and any position may be committed again.
pub async fn set_moves_anywhere_and_reset_removes(locations: &dyn StoreLocations, name: &str) {
    let store = locations.open(name).await;
    let newer = checkpoint_at(1, "binlog.000010", 100, 20);
    store.commit(&newer).await.expect("commit");
    let older = checkpoint_at(1, "binlog.000002", 4, 3);
    store.set(&older).await.expect("set backwards");
    assert_eq!(
        locations.open(name).await.load().await.expect("load"),
        Some(older.clone())
    );
    // After `set`, commits are checked against the set position.
    store
        .commit(&checkpoint_at(1, "binlog.000002", 50, 4))
        .await
        .expect("a commit after the set position");
    store.reset().await.expect("reset");
    assert_eq!(store.load().await.expect("load"), None);
    assert_eq!(
        locations.open(name).await.load().await.expect("load"),
        None,
        "reset must remove the checkpoint for every instance"
    );
    store.reset().await.expect("a second reset");
    let fresh = checkpoint_at(1, "binlog.000001", 4, 1);
    store.commit(&fresh).await.expect("commit after reset");
    assert_eq!(
        locations.open(name).await.load().await.expect("load"),
        Some(fresh)
    );
}

/// Two locations do not see each other's checkpoints, and resetting one keeps the other.
pub async fn locations_are_independent(locations: &dyn StoreLocations, name: &str) {
    let first_name = format!("{name}-a");
    let second_name = format!("{name}-b");
    let first = locations.open(&first_name).await;
    let second = locations.open(&second_name).await;
    let first_checkpoint = checkpoint_at(1, "binlog.000005", 500, 50);
    let second_checkpoint = checkpoint_at(2, "mysql-bin.000007", 1234, 90);
    first.commit(&first_checkpoint).await.expect("commit a");
    assert_eq!(second.load().await.expect("load b"), None);
    second.commit(&second_checkpoint).await.expect("commit b");
    first.reset().await.expect("reset a");
    assert_eq!(
        locations.open(&first_name).await.load().await.expect("a"),
        None
    );
    assert_eq!(
        locations.open(&second_name).await.load().await.expect("b"),
        Some(second_checkpoint)
    );
}

/// A test double for the tests of a store's callers (the committers): it keeps every
/// committed checkpoint in memory, in order, and fails its commits while told to. It does
/// not hold itself to the contract above (a regression is recorded like any commit): the
/// callers' own rules are what their tests check.
#[derive(Debug, Default)]
pub struct RecordingStore {
    /// Every checkpoint committed (or set), oldest first.
    pub commits: std::sync::Mutex<Vec<Checkpoint>>,
    /// While true, commits fail with an I/O error ("disk full").
    pub failing: std::sync::Mutex<bool>,
}

impl RecordingStore {
    /// The binlog offsets of the committed checkpoints, oldest first.
    pub fn committed_offsets(&self) -> Vec<u64> {
        self.commits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|checkpoint| checkpoint.position.binlog.position)
            .collect()
    }

    /// Makes the following commits fail (`true`) or succeed again.
    pub fn set_failing(&self, failing: bool) {
        *self
            .failing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = failing;
    }
}

impl CheckpointStore for RecordingStore {
    fn describe(&self) -> String {
        "recording store".to_owned()
    }
    fn load(&self) -> StoreFuture<'_, Option<Checkpoint>> {
        Box::pin(async {
            Ok(self
                .commits
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .last()
                .cloned())
        })
    }
    fn commit<'a>(&'a self, checkpoint: &'a Checkpoint) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            if *self
                .failing
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
            {
                return Err(CheckpointStoreError::Io {
                    operation: "writing",
                    path: "/recording".into(),
                    source: std::io::Error::other("disk full"),
                });
            }
            self.commits
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(checkpoint.clone());
            Ok(())
        })
    }
    fn set<'a>(&'a self, checkpoint: &'a Checkpoint) -> StoreFuture<'a, ()> {
        self.commit(checkpoint)
    }
    fn reset(&self) -> StoreFuture<'_, ()> {
        Box::pin(async {
            self.commits
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clear();
            Ok(())
        })
    }
}
