//! Commit batching by count and by (paused) time, forced final flush, no regressions.

use std::sync::Arc;
use std::time::Duration;

use outbox_binlog::{BinlogPosition, Flavor};
use outbox_checkpoint::contract::RecordingStore;
use outbox_checkpoint::{
    CheckpointCommitter, CheckpointPosition, CheckpointStore, CommitPolicy, FileCheckpointStore,
    SharedCheckpointStore, SourceIdentity,
};

fn source() -> SourceIdentity {
    SourceIdentity {
        flavor: Flavor::Mariadb,
        server_id: 1,
        server_uuid: None,
    }
}

fn at(offset: u64) -> CheckpointPosition {
    CheckpointPosition::at(BinlogPosition::new("binlog.000001", offset))
}

/// A committer over a fresh [`RecordingStore`], resumed from `resumed`.
fn recording_committer(
    policy: CommitPolicy,
    resumed: Option<CheckpointPosition>,
) -> (Arc<RecordingStore>, CheckpointCommitter) {
    let store = Arc::new(RecordingStore::default());
    let shared: SharedCheckpointStore = store.clone();
    let committer = CheckpointCommitter::new(shared, source(), policy, resumed);
    (store, committer)
}

/// A commit policy: commit after `max_interval` or `max_transactions`, whichever comes first.
fn policy(max_interval: Duration, max_transactions: u64) -> CommitPolicy {
    CommitPolicy {
        max_interval,
        max_transactions,
    }
}

#[tokio::test(start_paused = true)]
async fn commits_by_count() {
    let (store, mut committer) = recording_committer(policy(Duration::from_secs(3600), 3), None);
    assert!(!committer.offer(at(10)).await.unwrap());
    assert!(!committer.offer(at(20)).await.unwrap());
    assert!(store.committed_offsets().is_empty());
    assert!(committer.offer(at(30)).await.unwrap());
    assert_eq!(store.committed_offsets(), vec![30]);
    // A batch of several transactions in one offer counts them all.
    assert!(committer.offer_transactions(at(40), 5).await.unwrap());
    assert_eq!(store.committed_offsets(), vec![30, 40]);
    assert_eq!(committer.last_committed(), Some(&at(40)));
}

#[tokio::test(start_paused = true)]
async fn commits_by_time() {
    let (store, mut committer) = recording_committer(policy(Duration::from_secs(1), 1_000), None);
    assert!(!committer.offer(at(10)).await.unwrap());
    let due = committer.next_due().unwrap();
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(!committer.offer(at(20)).await.unwrap());
    assert!(!committer.commit_if_due().await.unwrap());
    assert!(store.committed_offsets().is_empty());
    tokio::time::sleep_until(due).await;
    assert!(committer.commit_if_due().await.unwrap(), "interval passed");
    assert_eq!(store.committed_offsets(), vec![20], "the newest offered");
    assert_eq!(committer.next_due(), None, "nothing pending");
    assert!(!committer.commit_if_due().await.unwrap());
    // The interval restarts at the commit; an offer after it commits at once.
    assert!(!committer.offer(at(30)).await.unwrap());
    tokio::time::advance(Duration::from_millis(1_001)).await;
    assert!(committer.offer(at(40)).await.unwrap());
    assert_eq!(store.committed_offsets(), vec![20, 40]);
}

/// A caught-up caller stores the newest position at once, at most once per spacing (commits
/// by count do not delay it); a failed commit falls back to the interval.
#[tokio::test(start_paused = true)]
async fn a_caught_up_commit_goes_out_at_once_at_most_once_per_spacing() {
    let spacing = Duration::from_millis(100);
    let (store, mut committer) = recording_committer(policy(Duration::from_secs(60), 1_000), None);
    assert_eq!(committer.caught_up_due(spacing), None, "nothing pending");
    assert!(!committer.offer(at(10)).await.unwrap(), "by policy not due");
    assert!(
        committer.commit_caught_up(spacing).await.unwrap(),
        "at once"
    );
    assert_eq!(store.committed_offsets(), vec![10]);
    assert_eq!(committer.caught_up_due(spacing), None);
    // The next one within the spacing waits for it.
    tokio::time::advance(Duration::from_millis(40)).await;
    assert!(!committer.offer(at(20)).await.unwrap());
    let due = committer.caught_up_due(spacing).unwrap();
    assert!(
        !committer.commit_caught_up(spacing).await.unwrap(),
        "too soon"
    );
    tokio::time::sleep_until(due).await;
    assert!(!committer.offer(at(30)).await.unwrap(), "by policy not due");
    assert!(committer.commit_caught_up(spacing).await.unwrap());
    assert_eq!(
        store.committed_offsets(),
        vec![10, 30],
        "the newest offered"
    );
    // A commit by count does not restart the spacing: after it, the caught-up one still
    // waits only for the spacing since the last caught-up commit.
    tokio::time::advance(Duration::from_millis(60)).await;
    assert!(committer.offer_transactions(at(40), 1_000).await.unwrap());
    assert!(!committer.offer(at(50)).await.unwrap());
    assert!(
        !committer.commit_caught_up(spacing).await.unwrap(),
        "too soon"
    );
    tokio::time::advance(Duration::from_millis(40)).await;
    assert!(committer.commit_caught_up(spacing).await.unwrap());
    assert_eq!(store.committed_offsets(), vec![10, 30, 40, 50]);
    // A failing store is retried by the interval only, not at the spacing.
    store.set_failing(true);
    tokio::time::advance(spacing).await;
    assert!(!committer.offer(at(60)).await.unwrap());
    assert!(committer.commit_caught_up(spacing).await.is_err());
    assert_eq!(
        committer.caught_up_due(spacing),
        None,
        "failed: wait for the interval"
    );
    store.set_failing(false);
    tokio::time::advance(spacing * 5).await;
    assert!(!committer.commit_caught_up(spacing).await.unwrap());
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(
        committer.commit_if_due().await.unwrap(),
        "the interval retries"
    );
    assert_eq!(store.committed_offsets(), vec![10, 30, 40, 50, 60]);
    // After a successful retry, caught-up commits go out again.
    assert!(!committer.offer(at(70)).await.unwrap());
    assert!(committer.commit_caught_up(spacing).await.unwrap());
    assert_eq!(store.committed_offsets(), vec![10, 30, 40, 50, 60, 70]);
}

/// On a running clock: the first caught-up commit is due "now", and a call after that
/// instant commits (a regression: the due time was re-read from the clock at each call, so
/// it always lay just ahead and the relay waited out the whole interval while waking every
/// millisecond).
#[tokio::test]
async fn the_first_caught_up_commit_is_due_on_a_running_clock() {
    let spacing = Duration::from_millis(100);
    let (store, mut committer) = recording_committer(policy(Duration::from_secs(60), 1_000), None);
    assert!(!committer.offer(at(10)).await.unwrap());
    let due = committer.caught_up_due(spacing).unwrap();
    tokio::time::sleep_until(due + Duration::from_millis(2)).await;
    assert!(committer.commit_caught_up(spacing).await.unwrap());
    assert_eq!(store.committed_offsets(), vec![10]);
}

#[tokio::test(start_paused = true)]
async fn flush_forces_the_final_commit_once() {
    let (store, mut committer) = recording_committer(CommitPolicy::default(), None);
    assert!(!committer.flush().await.unwrap(), "nothing offered");
    committer.offer(at(10)).await.unwrap();
    committer.offer(at(20)).await.unwrap();
    assert!(store.committed_offsets().is_empty());
    assert!(committer.flush().await.unwrap());
    assert_eq!(store.committed_offsets(), vec![20]);
    assert!(!committer.flush().await.unwrap(), "already stored");
    assert_eq!(store.committed_offsets(), vec![20]);
}

#[tokio::test(start_paused = true)]
async fn never_commits_an_older_position() {
    let (store, mut committer) =
        recording_committer(policy(Duration::from_secs(3600), 1), Some(at(100)));
    assert!(
        !committer.offer(at(50)).await.unwrap(),
        "older than resumed"
    );
    assert!(!committer.offer(at(100)).await.unwrap(), "equal to resumed");
    assert!(committer.offer(at(150)).await.unwrap());
    assert!(!committer.offer(at(120)).await.unwrap());
    assert!(!committer.flush().await.unwrap());
    assert_eq!(store.committed_offsets(), vec![150]);
    // A position in a later binlog file is newer even with a smaller offset.
    let rotated = CheckpointPosition::at(BinlogPosition::new("binlog.000002", 4));
    assert!(committer.offer(rotated.clone()).await.unwrap());
    assert_eq!(committer.last_committed(), Some(&rotated));
}

#[tokio::test(start_paused = true)]
async fn a_failed_commit_keeps_the_position_and_is_retried() {
    let (store, mut committer) = recording_committer(policy(Duration::from_secs(1), 1), None);
    store.set_failing(true);
    assert!(committer.offer(at(10)).await.is_err());
    assert_eq!(committer.pending(), Some(&at(10)));
    store.set_failing(false);
    // The retry waits one interval (no hammering on every offer) ...
    assert!(!committer.commit_if_due().await.unwrap());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(committer.commit_if_due().await.unwrap());
    assert_eq!(store.committed_offsets(), vec![10]);
    // ... and a flush always retries at once.
    store.set_failing(true);
    assert!(committer.offer(at(20)).await.is_err());
    store.set_failing(false);
    assert!(committer.flush().await.unwrap());
    assert_eq!(store.committed_offsets(), vec![10, 20]);
}

#[tokio::test(start_paused = true)]
async fn works_with_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let file_store = Arc::new(FileCheckpointStore::new(dir.path().join("c.json")));
    let shared: SharedCheckpointStore = file_store.clone();
    let mut committer = CheckpointCommitter::new(shared, source(), CommitPolicy::default(), None);
    committer.offer(at(10)).await.unwrap();
    committer.offer(at(20)).await.unwrap();
    assert_eq!(file_store.load().await.unwrap(), None);
    assert!(committer.flush().await.unwrap());
    let stored = file_store.load().await.unwrap().unwrap();
    assert_eq!(stored.position, at(20));
    assert_eq!(stored.source, source());
    assert_eq!(stored.writer_version, outbox_checkpoint::WRITER_VERSION);
}

/// After a failover the pending position and every later one are stored with the GTID-only
/// marker and name the new server; positions that differ only by their GTID set still
/// commit (they are all "equal" by binlog position).
#[tokio::test(start_paused = true)]
async fn after_a_failover_checkpoints_name_the_new_server_and_are_gtid_only() {
    use outbox_binlog::{Gtid, GtidSet};
    let (store, mut committer) = recording_committer(policy(Duration::from_secs(3600), 2), None);
    let with_gtid = |offset: u64, sequence: u64| {
        let mut position = at(offset);
        let mut set = GtidSet::Empty;
        set.add(&Gtid::Mariadb {
            domain_id: 0,
            server_id: 1,
            sequence,
        });
        position.gtid_set = set;
        position
    };
    // Pending (not yet committed: the policy waits for two transactions).
    assert!(!committer.offer(with_gtid(100, 5)).await.unwrap());
    let new_server = SourceIdentity {
        server_id: 2,
        ..source()
    };
    let marker = BinlogPosition::new("", 4);
    committer.move_to_source(new_server.clone(), marker.clone());
    assert!(committer.offer(with_gtid(700, 6)).await.unwrap());
    assert!(!committer.offer(with_gtid(900, 7)).await.unwrap());
    assert!(committer.offer(with_gtid(950, 8)).await.unwrap());
    let commits = store.commits.lock().unwrap().clone();
    assert_eq!(commits.len(), 2);
    for (commit, sequence) in commits.iter().zip(["0-1-6", "0-1-8"]) {
        assert_eq!(commit.source, new_server);
        assert_eq!(commit.position.binlog, marker);
        assert_eq!(commit.position.gtid_set.to_string(), sequence);
    }
}

/// How far records were handed on is stored with the checkpoint when it lies after it, and
/// while the acked position stands still, by storing that position again once per interval
/// (never more often, never when nothing new was sent).
#[tokio::test(start_paused = true)]
async fn sent_through_is_stored_with_the_checkpoint_and_while_acks_stand_still() {
    let (store, mut committer) = recording_committer(policy(Duration::from_secs(1), 1), None);
    let sent = |offset| BinlogPosition::new("binlog.000001", offset);
    let stored_sent = |store: &RecordingStore| {
        store
            .commits
            .lock()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c.position.binlog.position,
                    c.sent_through.as_ref().map(|s| s.position),
                )
            })
            .collect::<Vec<_>>()
    };
    committer.note_sent_through(sent(300));
    assert!(committer.offer(at(100)).await.unwrap());
    assert_eq!(stored_sent(&store), vec![(100, Some(300))]);
    // Nothing acked, more sent: nothing due before the interval...
    committer.note_sent_through(sent(500));
    committer.note_sent_through(sent(400)); // older: ignored
    assert!(!committer.commit_if_due().await.unwrap());
    let due = committer
        .next_due()
        .expect("a sent_through-only commit is due");
    tokio::time::sleep_until(due).await;
    // ...then the stored position again, with the newer sent_through.
    assert!(committer.commit_if_due().await.unwrap());
    assert_eq!(
        stored_sent(&store),
        vec![(100, Some(300)), (100, Some(500))]
    );
    // Unchanged since: nothing more to store.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(committer.next_due().is_none());
    assert!(!committer.commit_if_due().await.unwrap());
    // Acked past it: no sent_through stored (nothing after the checkpoint was sent).
    assert!(committer.offer(at(600)).await.unwrap());
    assert_eq!(stored_sent(&store).last(), Some(&(600, None)));
}

/// A resumed checkpoint's sent_through is kept while the new run is still behind it.
#[tokio::test(start_paused = true)]
async fn a_resumed_sent_through_is_kept_until_passed() {
    let (store, mut committer) =
        recording_committer(policy(Duration::from_secs(1), 1), Some(at(100)));
    committer.resume_sent_through(Some(BinlogPosition::new("binlog.000001", 900)));
    assert!(committer.next_due().is_none(), "already stored");
    assert!(committer.offer(at(200)).await.unwrap());
    let last = store.commits.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.sent_through.map(|s| s.position), Some(900));
}
