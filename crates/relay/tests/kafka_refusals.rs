//! Situations where the only correct move is to refuse: the binlog the checkpoint points into
//! was purged, or the stored checkpoint is unreadable. The relay must never silently start
//! somewhere else (that would skip events).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The events after the checkpoint were purged from the server while the relay was stopped:
/// the relay must not jump over the gap (no later event delivered, checkpoint unchanged) and
/// must say so (non-zero exit or an error in its log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purged_binlog_after_the_checkpoint_is_refused_not_skipped() {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    let mut writer = ShopWriter::connect(&db, "purge").await;
    relay.start();
    writer.transaction("order", "order-1", 2, true, false).await;
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    relay.stop_gracefully("graceful stop").await;
    let stored = relay.checkpoint();
    let delivered_before = writer.committed.len();

    // Events the relay never saw, then their binlog file is purged.
    writer.transaction("order", "order-1", 3, true, false).await;
    let stored_file = stored.position.clone().expect("a stored checkpoint").file;
    let current = purge_binlogs_until_gone(&db, &stored_file).await;
    writer.transaction("order", "order-1", 2, true, false).await;

    relay.start();
    let started = Instant::now();
    let mut exit = None;
    while started.elapsed() < Duration::from_secs(15) {
        if let Some(status) = relay.exited() {
            exit = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = relay.checkpoint();
    let log_errors = log_count(&relay, "ERROR") + log_count(&relay, "error:");
    let records = read_until_quiet(
        &broker.bootstrap(),
        &[topic_for(&db, "order")],
        Duration::from_millis(1000),
        Duration::from_secs(10),
    )
    .await;
    let skipped_ahead: Vec<String> = writer.committed[delivered_before..]
        .iter()
        .filter(|event| {
            records
                .iter()
                .any(|r| r.header_str("id").as_deref() == Some(event.id.as_str()))
        })
        .map(|event| event.id.clone())
        .collect();
    assert!(
        skipped_ahead.is_empty(),
        "events after a purged gap were delivered, so the gap was skipped: {skipped_ahead:?}; \
         checkpoint {}",
        after.raw
    );
    assert_eq!(
        after.position, stored.position,
        "checkpoint moved over a purged gap: {} -> {}",
        stored.raw, after.raw
    );
    assert!(
        exit.is_some_and(|status| !status.success()) && log_errors > 0,
        "the relay did not exit with an error ({exit:?}) about the purged binlog; log:\n{}",
        relay.log_tail(20)
    );
    // The message names the checkpoint, the oldest position still there and both ways out.
    let log = std::fs::read_to_string(&relay.log_path).unwrap_or_default();
    let error_line = log
        .lines()
        .find(|line| line.contains("error:") && line.contains("no longer on the source server"))
        .unwrap_or_else(|| {
            panic!(
                "no purged-checkpoint error in the log:\n{}",
                relay.log_tail(20)
            )
        });
    let checkpoint_position = format!(
        "{}:{}",
        stored_file,
        stored.position.as_ref().unwrap().position
    );
    for needle in [
        checkpoint_position.as_str(),
        relay.checkpoint_path.to_str().unwrap(),
        "the oldest still available is",
        current.file.as_str(),
        "outbox-relay inspect",
        "outbox-relay checkpoint set",
    ] {
        assert!(
            error_line.contains(needle),
            "the purged-checkpoint error lacks `{needle}`: {error_line}"
        );
    }
    writer.close().await;
}

/// A corrupt checkpoint file: `run` and `checkpoint show` refuse (non-zero exit naming the
/// file) instead of starting from `source.start`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_checkpoint_file_is_refused() {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    let mut writer = ShopWriter::connect(&db, "corrupt").await;
    writer.transaction("order", "order-1", 2, true, false).await;
    std::fs::write(&relay.checkpoint_path, b"{\"format\": 1, \"binlog_file\": ").unwrap();

    let output = std::process::Command::new(RELAY_BIN)
        .args(["checkpoint", "show", "--config"])
        .arg(&relay.config_path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "checkpoint show accepted a corrupt file: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        stderr.contains("checkpoint.json"),
        "the error does not name the file: {stderr}"
    );

    relay.start();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = relay.exited() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(15) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let records = read_until_quiet(
        &broker.bootstrap(),
        &[topic_for(&db, "order")],
        Duration::from_millis(500),
        Duration::from_secs(5),
    )
    .await;
    assert!(
        status.is_some_and(|status| !status.success()),
        "relay run with a corrupt checkpoint did not fail ({status:?}); delivered {} records; log:\n{}",
        records.len(),
        relay.log_tail(15)
    );
    assert!(
        records.is_empty(),
        "relay delivered {} records despite the corrupt checkpoint",
        records.len()
    );
    assert!(
        log_count(&relay, "checkpoint.json") > 0,
        "the relay's error does not name the checkpoint file; log:\n{}",
        relay.log_tail(15)
    );
    writer.close().await;
}
