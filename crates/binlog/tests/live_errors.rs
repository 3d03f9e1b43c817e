//! Errors of the live source against a scratch MariaDB (what is transient, what is definite,
//! and that each names server and position), and heartbeats on an idle server.

mod live_support;

use std::time::{Duration, Instant};

use live_support::*;
use outbox_binlog::{BinlogError, BinlogReader, Flavor, GtidSet, StartPosition, StreamItem};

/// What MariaDB really does when a second replica connects with a `server_id` already in
/// use: the NEW connection wins and streams normally; the OLDER one receives error 4052
/// ("A slave with the same server_uuid/server_id is already connected"), which the reader
/// reports as the definite `DuplicateServerId`.
#[tokio::test]
async fn duplicate_server_id_newer_reader_takes_over_older_fails_definitely() {
    let server = server_with_app_outbox().await;
    let config_older = config(&server, StartPosition::Latest, &["app.outbox"]);
    let config_newer = config_older.clone();
    let shared_id = config_older.server_id;
    let mut older = BinlogReader::connect(config_older).await.unwrap();
    sql(&server, &["INSERT INTO app.outbox VALUES (1)"]).await;
    assert_eq!(ids(&next_transaction_with_rows(&mut older).await), vec![1]);

    let mut newer = BinlogReader::connect(config_newer).await.unwrap();
    sql(&server, &["INSERT INTO app.outbox VALUES (2)"]).await;
    assert_eq!(ids(&next_transaction_with_rows(&mut newer).await), vec![2]);

    let (more_data, error) = items_until_error(&mut older).await;
    assert!(
        more_data.is_empty(),
        "the older reader must not get more data: {more_data:?}"
    );
    assert!(!error.is_transient(), "{error}");
    match &error {
        BinlogError::DuplicateServerId {
            server: address,
            server_id,
            position,
            ..
        } => {
            assert_eq!(*server_id, shared_id);
            assert_eq!(address, &format!("127.0.0.1:{}", server.port()));
            assert!(position.starts_with("binlog.000001:"), "{position}");
        }
        other => panic!("expected DuplicateServerId, got {other:?}"),
    }
    // The reader stays failed.
    assert!(older.next_item().await.is_err());
}

#[tokio::test]
async fn purged_start_is_definite_and_names_the_oldest_file() {
    let server = server_with_app_outbox().await;
    let mut reader = connect_reader(&server, StartPosition::Latest, &["app.outbox"]).await;
    sql(&server, &["INSERT INTO app.outbox VALUES (1)"]).await;
    let first = next_transaction_with_rows(&mut reader).await;
    let purged_position = first.commit.position.clone();
    assert_eq!(purged_position.file, "binlog.000001");
    let purged_gtids =
        GtidSet::parse(Flavor::Mariadb, &first.commit.gtid.unwrap().to_string()).unwrap();
    drop(reader);
    sql(
        &server,
        &[
            "FLUSH BINARY LOGS",
            "INSERT INTO app.outbox VALUES (2)",
            "FLUSH BINARY LOGS",
            "INSERT INTO app.outbox VALUES (3)",
        ],
    )
    .await;
    purge_until_oldest_is(&server, "binlog.000003").await;

    let by_position = BinlogReader::connect(config(
        &server,
        StartPosition::Position(purged_position.clone()),
        &["app.outbox"],
    ))
    .await
    .expect_err("a purged file cannot be streamed");
    assert!(!by_position.is_transient());
    match &by_position {
        BinlogError::PositionPurged {
            position,
            oldest_available,
            ..
        } => {
            assert_eq!(position, &purged_position.to_string());
            assert!(
                oldest_available.starts_with("binlog.000003:4"),
                "{oldest_available}"
            );
        }
        other => panic!("expected PositionPurged, got {other:?}"),
    }
    let message = by_position.to_string();
    assert!(message.contains("binlog.000003"), "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{}", server.port())),
        "{message}"
    );

    let by_gtid = BinlogReader::connect(config(
        &server,
        StartPosition::Gtid(purged_gtids),
        &["app.outbox"],
    ))
    .await
    .expect_err("a purged GTID cannot be streamed");
    assert!(!by_gtid.is_transient());
    match &by_gtid {
        BinlogError::PositionPurged {
            oldest_available, ..
        } => {
            assert!(
                oldest_available.contains("binlog.000003"),
                "{oldest_available}"
            );
            assert!(
                oldest_available.contains("GTID state"),
                "{oldest_available}"
            );
        }
        other => panic!("expected PositionPurged, got {other:?}"),
    }

    // A start after the purge point still works.
    let mut oldest = connect_reader(&server, StartPosition::Earliest, &["app.outbox"]).await;
    assert_eq!(ids(&next_transaction_with_rows(&mut oldest).await), vec![3]);
}

#[tokio::test]
async fn heartbeats_arrive_on_an_idle_server_and_a_silent_one_times_out() {
    let server = server_with_app_outbox().await;
    let mut quiet_config = config(&server, StartPosition::Latest, &["app.outbox"]);
    quiet_config.heartbeat_interval = Duration::from_millis(500);
    quiet_config.idle_timeout = Duration::from_secs(3);
    let mut reader = BinlogReader::connect(quiet_config).await.unwrap();
    let StartPosition::Position(start) = reader.resume_point() else {
        panic!("a Latest start resumes by position");
    };
    let started = Instant::now();
    let mut heartbeats = Vec::new();
    while heartbeats.len() < 3 {
        match tokio::time::timeout(ITEM_TIMEOUT, reader.next_item())
            .await
            .expect("items within the timeout")
            .expect("no error on an idle server")
        {
            StreamItem::Heartbeat(heartbeat) => heartbeats.push(heartbeat),
            other => panic!("nothing but heartbeats expected: {other:?}"),
        }
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    for heartbeat in &heartbeats {
        assert_eq!(
            heartbeat.position, start,
            "heartbeats report the idle position"
        );
    }
    assert_eq!(
        reader.resume_point(),
        StartPosition::Position(start.clone())
    );

    // A frozen server sends nothing at all: the idle timeout turns that into a transient
    // error instead of waiting forever.
    server.pause();
    let silent_since = Instant::now();
    let (unexpected, error) = items_until_error(&mut reader).await;
    assert!(unexpected.is_empty(), "unexpected items {unexpected:?}");
    // Connecting to the frozen server times out (transient) instead of hanging.
    let mut frozen_config = config(&server, StartPosition::Latest, &["app.outbox"]);
    frozen_config.connect_timeout = Duration::from_secs(2);
    let connect_started = Instant::now();
    let connect_error = BinlogReader::connect(frozen_config)
        .await
        .expect_err("a frozen server cannot be connected to");
    assert!(connect_started.elapsed() < Duration::from_secs(15));
    server.resume();
    assert!(connect_error.is_transient(), "{connect_error}");
    assert!(
        matches!(connect_error, BinlogError::ConnectTimeout { .. }),
        "{connect_error:?}"
    );
    assert!(silent_since.elapsed() >= Duration::from_secs(2));
    assert!(error.is_transient(), "{error}");
    assert!(
        matches!(&error, BinlogError::IdleTimeout { position, .. } if position == &start.to_string()),
        "{error:?}"
    );
}

#[tokio::test]
async fn refused_connection_is_transient_and_wrong_gtid_flavor_is_definite() {
    let server = server_with_app_outbox().await;
    let mut refused = config(&server, StartPosition::Latest, &["app.outbox"]);
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    refused.url = format!("mysql://root@127.0.0.1:{closed_port}");
    let check_error =
        outbox_binlog::check_server(&refused.url, &outbox_binlog::TlsOptions::default())
            .await
            .expect_err("nothing listens there");
    assert!(check_error.is_transient(), "{check_error}");
    let error = BinlogReader::connect(refused).await.expect_err("refused");
    assert!(error.is_transient(), "{error}");
    assert!(
        error
            .to_string()
            .contains(&format!("127.0.0.1:{closed_port}")),
        "{error}"
    );

    let mysql_set =
        GtidSet::parse(Flavor::Mysql, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5").unwrap();
    let error = BinlogReader::connect(config(
        &server,
        StartPosition::Gtid(mysql_set),
        &["app.outbox"],
    ))
    .await
    .expect_err("a MySQL GTID set on MariaDB");
    assert!(!error.is_transient());
    assert!(
        matches!(error, BinlogError::InvalidReaderConfig { .. }),
        "{error:?}"
    );

    for bad_id in [0, server.server_id()] {
        let mut bad_server_id = config(&server, StartPosition::Latest, &["app.outbox"]);
        bad_server_id.server_id = bad_id;
        let error = BinlogReader::connect(bad_server_id)
            .await
            .expect_err("server_id rejected");
        assert!(
            matches!(error, BinlogError::InvalidReaderConfig { ref field, .. } if field == "server_id"),
            "{error:?}"
        );
    }

    let mut bad_heartbeat = config(&server, StartPosition::Latest, &["app.outbox"]);
    bad_heartbeat.heartbeat_interval = bad_heartbeat.idle_timeout;
    let error = BinlogReader::connect(bad_heartbeat)
        .await
        .expect_err("rejected");
    assert!(
        matches!(error, BinlogError::InvalidReaderConfig { ref field, .. } if field == "heartbeat_interval"),
        "{error:?}"
    );
}

/// `PURGE BINARY LOGS TO 'oldest'`, repeated until `SHOW BINARY LOGS` starts there: the
/// server skips a file a dump thread still reads, and the dump thread of a reader dropped a
/// moment ago can take a while to end on a loaded machine.
async fn purge_until_oldest_is(server: &outbox_testkit::ScratchMariadb, oldest: &str) {
    use mysql_async::prelude::Queryable;
    let started = Instant::now();
    let mut conn = server.conn().await.expect("connect");
    loop {
        conn.query_drop(format!("PURGE BINARY LOGS TO '{oldest}'"))
            .await
            .expect("PURGE BINARY LOGS");
        let first: Option<(String, u64)> = conn
            .query_first("SHOW BINARY LOGS")
            .await
            .expect("SHOW BINARY LOGS");
        let first = first.map(|(name, _size)| name);
        if first.as_deref() == Some(oldest) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the server kept {first:?} for 30 s after PURGE BINARY LOGS TO '{oldest}'"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    conn.disconnect().await.expect("disconnect");
}
