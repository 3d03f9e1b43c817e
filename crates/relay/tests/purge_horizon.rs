//! The purge horizon on a real server: with a short binlog expiry it is the expiry minus
//! the age of the file after the checkpoint's, it falls as that file ages, and a checkpoint
//! in the active file has the whole expiry left.

use std::collections::HashMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use outbox_relay::purge_horizon::{first_event_time, measure};
use outbox_testkit::{ScratchMariadb, ScratchOptions};

const EXPIRY_SECONDS: f64 = 3600.0;

async fn binary_logs(db: &ScratchMariadb) -> Vec<(String, u64)> {
    let mut conn = mysql_async::Conn::from_url(db.url()).await.unwrap();
    let files = conn
        .query_map("SHOW BINARY LOGS", |row: mysql_async::Row| {
            (
                row.get::<String, _>(0).unwrap(),
                row.get::<u64, _>(1).unwrap(),
            )
        })
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_horizon_falls_as_the_checkpoints_binlog_ages() {
    let db = ScratchMariadb::start_with(ScratchOptions {
        extra_args: vec![format!("--binlog-expire-logs-seconds={EXPIRY_SECONDS}")],
        ..ScratchOptions::default()
    })
    .await
    .unwrap();
    db.exec(&[
        "CREATE DATABASE horizon",
        "CREATE TABLE horizon.t (id INT PRIMARY KEY, v VARCHAR(100))",
        "INSERT INTO horizon.t VALUES (1, 'a'), (2, 'b')",
    ])
    .await
    .unwrap();
    let checkpoint_file = binary_logs(&db).await.last().unwrap().0.clone();
    let mut first_events = HashMap::new();

    // In the active file: the whole expiry is left, and the bytes behind are the rest of it.
    let active = measure(
        &db.url(),
        &outbox_binlog::TlsOptions::default(),
        &checkpoint_file,
        4,
        &mut first_events,
    )
    .await
    .unwrap();
    assert_eq!(active.seconds, EXPIRY_SECONDS, "{active:?}");
    assert_eq!(
        active.bytes,
        f64::INFINITY,
        "no max_binlog_total_size on 10.11"
    );
    assert!(active.bytes_behind > 100, "{active:?}");

    // Rotate: the checkpoint's file is closed now, its age counts from the next file's start.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    db.exec(&["FLUSH BINARY LOGS", "INSERT INTO horizon.t VALUES (3, 'c')"])
        .await
        .unwrap();
    let files = binary_logs(&db).await;
    let next = &files[files
        .iter()
        .position(|(f, _)| *f == checkpoint_file)
        .unwrap()
        + 1]
    .0;
    let started = first_event_time(&db.url(), &outbox_binlog::TlsOptions::default(), next)
        .await
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        (now.saturating_sub(5)..=now).contains(&u64::from(started)),
        "the next file started at {started}, now is {now}"
    );
    let first = measure(
        &db.url(),
        &outbox_binlog::TlsOptions::default(),
        &checkpoint_file,
        4,
        &mut first_events,
    )
    .await
    .unwrap();
    assert!(
        first.seconds < EXPIRY_SECONDS && first.seconds > EXPIRY_SECONDS - 10.0,
        "{first:?}"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let later = measure(
        &db.url(),
        &outbox_binlog::TlsOptions::default(),
        &checkpoint_file,
        4,
        &mut first_events,
    )
    .await
    .unwrap();
    let fell = first.seconds - later.seconds;
    assert!(
        (2.0..4.0).contains(&fell),
        "fell by {fell}: {first:?} then {later:?}"
    );
    // More binlog written: the checkpoint is further behind.
    db.exec(&["INSERT INTO horizon.t VALUES (4, REPEAT('x', 90))"])
        .await
        .unwrap();
    let after_write = measure(
        &db.url(),
        &outbox_binlog::TlsOptions::default(),
        &checkpoint_file,
        4,
        &mut first_events,
    )
    .await
    .unwrap();
    assert!(
        after_write.bytes_behind > later.bytes_behind,
        "{later:?} {after_write:?}"
    );

    // A file the server no longer has is an error, not a number.
    assert!(measure(
        &db.url(),
        &outbox_binlog::TlsOptions::default(),
        "mysql-bin.999999",
        4,
        &mut first_events
    )
    .await
    .is_err());
}
