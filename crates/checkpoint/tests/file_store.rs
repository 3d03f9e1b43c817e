//! File store: the shared store contract, plus crash safety: atomic replace, torn temp
//! files, corrupt files, missing directories, format versions, concurrent commits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use outbox_binlog::{BinlogPosition, Flavor, Gtid, GtidSet};
use outbox_checkpoint::contract::{run_contract, StoreLocations};
use outbox_checkpoint::{
    Checkpoint, CheckpointFormatError, CheckpointPosition, CheckpointStore, CheckpointStoreError,
    FileCheckpointStore, SharedCheckpointStore, SourceIdentity,
};

fn source() -> SourceIdentity {
    SourceIdentity {
        flavor: Flavor::Mariadb,
        server_id: 1,
        server_uuid: None,
    }
}

fn checkpoint_at(file: &str, position: u64, sequence: u64) -> Checkpoint {
    Checkpoint::new(
        source(),
        CheckpointPosition {
            binlog: BinlogPosition::new(file, position),
            gtid: Some(Gtid::Mariadb {
                domain_id: 0,
                server_id: 1,
                sequence,
            }),
            gtid_set: GtidSet::parse(Flavor::Mariadb, &format!("0-1-{sequence}")).unwrap(),
            timestamp: 1_700_000_000,
        },
    )
}

#[tokio::test]
async fn round_trip_through_a_new_store_instance() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let store = FileCheckpointStore::new(&path);
    assert_eq!(store.load().await.unwrap(), None, "never committed");
    let checkpoint = checkpoint_at("binlog.000002", 777, 12);
    store.commit(&checkpoint).await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"format\": 1"), "{text}");
    assert!(text.contains("\"binlog_position\": 777"), "{text}");
    assert!(!store.temp_path().exists(), "temp file was renamed away");
    let reopened = FileCheckpointStore::new(&path);
    assert_eq!(reopened.load().await.unwrap(), Some(checkpoint));
    assert!(reopened.describe().contains("checkpoint.json"));
}

#[tokio::test]
async fn a_torn_temp_file_left_by_a_crash_is_ignored_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let store = FileCheckpointStore::new(&path);
    // Crash before the very first rename: nothing was committed.
    std::fs::write(store.temp_path(), b"{\"format\": 1, \"binlog_fi").unwrap();
    assert_eq!(store.load().await.unwrap(), None);
    let committed = checkpoint_at("binlog.000001", 500, 3);
    store.commit(&committed).await.unwrap();
    // Crash while writing the next one: the committed file is intact.
    std::fs::write(store.temp_path(), b"{\"format\": 1, \"binlog_fi").unwrap();
    let reopened = FileCheckpointStore::new(&path);
    assert_eq!(reopened.load().await.unwrap(), Some(committed));
    let newer = checkpoint_at("binlog.000001", 900, 4);
    reopened.commit(&newer).await.unwrap();
    assert!(!reopened.temp_path().exists());
    assert_eq!(
        FileCheckpointStore::new(&path).load().await.unwrap(),
        Some(newer)
    );
}

#[tokio::test]
async fn a_corrupt_or_truncated_file_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let good = checkpoint_at("binlog.000001", 500, 3).to_json();
    let cases: Vec<Vec<u8>> = vec![
        Vec::new(),
        good.as_bytes()[..good.len() / 2].to_vec(),
        b"not json at all".to_vec(),
        vec![0xff, 0xfe, 0x00, 0x01],
        b"{\"format\": 1}".to_vec(),
    ];
    for content in cases {
        std::fs::write(&path, &content).unwrap();
        let store = FileCheckpointStore::new(&path);
        let error = store.load().await.unwrap_err();
        assert!(
            matches!(error, CheckpointStoreError::Corrupt { .. }),
            "{content:?}: {error:?}"
        );
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        // A commit must not paper over it either (it cannot check monotonicity).
        let commit_error = store
            .commit(&checkpoint_at("binlog.000001", 600, 4))
            .await
            .unwrap_err();
        assert!(matches!(commit_error, CheckpointStoreError::Corrupt { .. }));
        assert_eq!(
            std::fs::read(&path).unwrap(),
            content,
            "file left untouched"
        );
    }
}

#[tokio::test]
async fn a_newer_format_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let newer = checkpoint_at("binlog.000001", 500, 3)
        .to_json()
        .replace("\"format\": 1", "\"format\": 7");
    std::fs::write(&path, newer).unwrap();
    let error = FileCheckpointStore::new(&path).load().await.unwrap_err();
    match &error {
        CheckpointStoreError::Corrupt { source, location } => {
            assert_eq!(
                source,
                &CheckpointFormatError::NewerFormat {
                    found: 7,
                    supported: 2
                }
            );
            assert_eq!(location, &path.display().to_string());
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(error.to_string().contains("upgrade the relay"), "{error}");
}

#[tokio::test]
async fn a_missing_directory_is_a_clear_error_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-mounted");
    let store = FileCheckpointStore::new(missing.join("checkpoint.json"));
    for error in [
        store.load().await.unwrap_err(),
        store
            .commit(&checkpoint_at("binlog.000001", 4, 1))
            .await
            .unwrap_err(),
    ] {
        match &error {
            CheckpointStoreError::MissingDirectory { directory } => {
                assert_eq!(directory, &missing)
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(error.to_string().contains("not-mounted"), "{error}");
    }
    assert!(!missing.exists());
}

/// The file store's locations for the shared contract suite: one file per name in a temp dir.
struct FileLocations(tempfile::TempDir);

impl StoreLocations for FileLocations {
    fn open<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = SharedCheckpointStore> + Send + 'a>> {
        let path = self.0.path().join(format!("{name}.json"));
        Box::pin(async move { Arc::new(FileCheckpointStore::new(path)) as SharedCheckpointStore })
    }
}

/// The contract every store passes (`outbox_checkpoint::contract`): None until the first
/// commit, read back by a new instance, monotonic commits, operator set/reset, independent
/// locations.
#[tokio::test]
async fn the_file_store_passes_the_store_contract() {
    let locations = FileLocations(tempfile::tempdir().unwrap());
    run_contract(&locations, "file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_never_leave_a_torn_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let store = FileCheckpointStore::new(&path);
    let mut tasks = Vec::new();
    for offset in 1..=32u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let result = store
                .commit(&checkpoint_at("binlog.000001", offset * 10, offset))
                .await;
            (offset * 10, result)
        }));
    }
    let mut newest_stored = 0;
    for task in tasks {
        let (offset, result) = task.await.unwrap();
        match result {
            Ok(()) => newest_stored = newest_stored.max(offset),
            Err(CheckpointStoreError::Regression { .. }) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    let loaded = FileCheckpointStore::new(&path)
        .load()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(loaded.position.binlog.position, newest_stored);
    assert!(!store.temp_path().exists());
}

/// Two relays on one host sharing the file (`[ha]`): once the newer leader wrote, the stale
/// one's commit is refused naming both epochs, also when its store instance remembered only
/// its own last write (the file is re-read before an epoch-carrying commit).
#[tokio::test]
async fn a_stale_leader_is_refused_after_a_newer_leader_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let zombie = FileCheckpointStore::new(&path);
    let leader = FileCheckpointStore::new(&path);
    zombie
        .commit(&checkpoint_at("binlog.000001", 500, 3).with_leader_epoch(Some(1)))
        .await
        .unwrap();
    // The new leader takes over: the checkpoint is stamped with its epoch, unchanged.
    let taken = leader.take_over(2).await.unwrap().unwrap();
    assert_eq!(taken.leader_epoch, Some(2));
    assert_eq!(
        taken.position.binlog,
        BinlogPosition::new("binlog.000001", 500)
    );
    let error = zombie
        .commit(&checkpoint_at("binlog.000001", 900, 4).with_leader_epoch(Some(1)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            CheckpointStoreError::StaleLeader {
                stored_epoch: 2,
                offered_epoch: Some(1),
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("checkpoint.json"), "{error}");
    // Nothing was stored by the refused commit; the new leader goes on.
    let reread = FileCheckpointStore::new(&path)
        .load()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reread, taken);
    leader
        .commit(&checkpoint_at("binlog.000001", 700, 4).with_leader_epoch(Some(2)))
        .await
        .unwrap();
    // A stale take-over is refused too.
    assert!(matches!(
        zombie.take_over(1).await,
        Err(CheckpointStoreError::StaleLeader { .. })
    ));
}
