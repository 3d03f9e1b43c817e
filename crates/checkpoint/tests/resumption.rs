//! End to end: tracker -> committer -> file store -> reload, with a "crash" while records are
//! unacked. The reloaded checkpoint is the end of the acked prefix, never past the unacked
//! record, and a new tracker started there continues from it.

use std::sync::Arc;
use std::time::Duration;

use outbox_binlog::{BinlogPosition, Commit, Flavor, Gtid, Heartbeat};
use outbox_checkpoint::{
    AckTracker, CheckpointCommitter, CheckpointPosition, CheckpointStore, CommitPolicy,
    FileCheckpointStore, SharedCheckpointStore, SourceIdentity,
};

fn commit(offset: u64, sequence: u64, row_count: u64) -> Commit {
    Commit {
        position: BinlogPosition::new("binlog.000004", offset),
        gtid: Some(Gtid::Mariadb {
            domain_id: 0,
            server_id: 1,
            sequence,
        }),
        timestamp: 1_700_000_000 + sequence as u32,
        row_count,
        xa: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_crash_resumes_at_the_end_of_the_acked_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let source = SourceIdentity {
        flavor: Flavor::Mariadb,
        server_id: 1,
        server_uuid: None,
    };
    let store: SharedCheckpointStore = Arc::new(FileCheckpointStore::new(&path));
    let mut committer = CheckpointCommitter::new(
        store.clone(),
        source.clone(),
        CommitPolicy {
            max_interval: Duration::from_millis(100),
            max_transactions: 1_000,
        },
        None,
    );
    let mut tracker = AckTracker::new(CheckpointPosition::at(BinlogPosition::new(
        "binlog.000004",
        4,
    )));

    // T1: two records; T2: one record (its ack is lost in the crash); T3: one record;
    // then a heartbeat.
    let t1 = [tracker.add_record(), tracker.add_record()];
    tracker.end_transaction(CheckpointPosition::after_commit(&commit(100, 1, 2)));
    let t2 = tracker.add_record();
    tracker.end_transaction(CheckpointPosition::after_commit(&commit(200, 2, 1)));
    let t3 = tracker.add_record();
    tracker.end_transaction(CheckpointPosition::after_commit(&commit(300, 3, 1)));
    tracker.end_transaction(CheckpointPosition::at_heartbeat(&Heartbeat {
        position: BinlogPosition::new("binlog.000004", 300),
    }));

    tracker.ack(t3).unwrap();
    tracker.ack(t1[1]).unwrap();
    assert_eq!(tracker.acked_position(), None, "t1[0] still unacked");
    tracker.ack(t1[0]).unwrap();
    let acked = tracker.acked_position().unwrap();
    assert_eq!(acked.binlog, BinlogPosition::new("binlog.000004", 100));
    committer.offer(acked).await.unwrap();
    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(committer.commit_if_due().await.unwrap());
    // Crash: t2 is never acked; whatever is pending is lost.
    drop(committer);
    drop(tracker);
    let _ = t2;

    let reloaded = FileCheckpointStore::new(&path)
        .load()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reloaded.source, source);
    assert_eq!(
        reloaded.position.binlog,
        BinlogPosition::new("binlog.000004", 100),
        "not past T2, whose record was never acked"
    );
    assert_eq!(reloaded.position.gtid_set.to_string(), "0-1-1");
    assert_eq!(reloaded.position.timestamp, 1_700_000_001);

    // The restarted relay re-reads T2 and T3 from there.
    let mut tracker = AckTracker::new(reloaded.position.clone());
    let t2_again = tracker.add_record();
    tracker.end_transaction(CheckpointPosition::after_commit(&commit(200, 2, 1)));
    let t3_again = tracker.add_record();
    tracker.end_transaction(CheckpointPosition::after_commit(&commit(300, 3, 1)));
    tracker.ack(t3_again).unwrap();
    tracker.ack(t2_again).unwrap();
    let acked = tracker.acked_position().unwrap();
    assert_eq!(acked.binlog, BinlogPosition::new("binlog.000004", 300));
    assert_eq!(acked.gtid_set.to_string(), "0-1-3");
    let mut committer = CheckpointCommitter::new(
        store.clone(),
        source,
        CommitPolicy::default(),
        Some(reloaded.position),
    );
    committer.offer(acked.clone()).await.unwrap();
    assert!(committer.flush().await.unwrap());
    assert_eq!(store.load().await.unwrap().unwrap().position, acked);
}
