//! The startup check against real scratch servers (wrong settings, missing grants), and the
//! MINIMAL-metadata path that takes column names from information_schema.

mod live_support;

use live_support::*;
use mysql_async::prelude::Queryable;
use outbox_binlog::{check_server, BinlogError, BinlogReader, Severity, StartPosition};
use outbox_testkit::{ScratchMariadb, ScratchOptions};

#[tokio::test]
async fn wrong_settings_are_reported_and_refuse_to_start() {
    let server = ScratchMariadb::start_with(ScratchOptions {
        extra_args: vec![
            "--binlog-format=STATEMENT".into(),
            "--binlog-row-image=MINIMAL".into(),
            "--log-bin-compress=ON".into(),
        ],
        binlog_row_metadata: "MINIMAL",
        ..ScratchOptions::default()
    })
    .await
    .unwrap();
    let report = check_server(&server.url(), &outbox_binlog::TlsOptions::default())
        .await
        .unwrap();
    assert_eq!(report.identity.server_id, 1);
    assert_eq!(
        report.identity.server_uuid, None,
        "MariaDB has no server_uuid"
    );
    assert!(report.identity.hostname.is_some());
    let found: Vec<(String, String, String, Severity)> = report
        .checks
        .iter()
        .map(|c| {
            (
                c.setting.clone(),
                c.expected.clone(),
                c.actual.clone(),
                c.severity,
            )
        })
        .collect();
    let expected = |setting: &str, want: &str, actual: &str, severity| {
        (
            setting.to_owned(),
            want.to_owned(),
            actual.to_owned(),
            severity,
        )
    };
    assert_eq!(
        found,
        vec![
            expected("binlog_format", "ROW", "STATEMENT", Severity::Error),
            expected("binlog_row_image", "FULL", "MINIMAL", Severity::Error),
            expected("binlog_row_metadata", "FULL", "MINIMAL", Severity::Warning),
            expected("log_bin_compress", "OFF", "ON", Severity::Error),
        ]
    );
    assert!(!report.is_usable());

    let error = BinlogReader::connect(config(&server, StartPosition::Latest, &["a.b"]))
        .await
        .expect_err("a misconfigured server is refused");
    assert!(!error.is_transient());
    let BinlogError::ServerMisconfigured { problems, .. } = &error else {
        panic!("expected ServerMisconfigured, got {error:?}");
    };
    assert!(
        problems.contains("binlog_format: expected ROW, actual STATEMENT"),
        "{problems}"
    );
    assert!(
        problems.contains("binlog_row_image: expected FULL, actual MINIMAL"),
        "{problems}"
    );
    assert!(
        problems.contains("log_bin_compress: expected OFF, actual ON"),
        "{problems}"
    );
    assert!(
        !problems.contains("binlog_row_metadata"),
        "warnings do not stop: {problems}"
    );
}

#[tokio::test]
async fn users_without_replication_grants_are_reported_and_granted_users_pass() {
    let server = ScratchMariadb::start().await.unwrap();
    sql(
        &server,
        &[
            "CREATE DATABASE app",
            "CREATE TABLE app.outbox (id INT PRIMARY KEY) ENGINE=InnoDB",
            "CREATE USER 'plain'@'%' IDENTIFIED BY 'plain-pw'",
            "GRANT SELECT ON app.* TO 'plain'@'%'",
            "CREATE USER 'relay'@'%' IDENTIFIED BY 'relay-pw'",
            "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'relay'@'%'",
            "GRANT SELECT ON app.* TO 'relay'@'%'",
        ],
    )
    .await;
    let plain_url = format!("mysql://plain:plain-pw@127.0.0.1:{}", server.port());
    let report = check_server(&plain_url, &outbox_binlog::TlsOptions::default())
        .await
        .unwrap();
    let missing: Vec<(&str, &str, Severity)> = report
        .checks
        .iter()
        .map(|c| (c.setting.as_str(), c.actual.as_str(), c.severity))
        .collect();
    assert_eq!(
        missing,
        vec![
            ("grant REPLICATION SLAVE", "not granted", Severity::Error),
            ("grant BINLOG MONITOR", "not granted", Severity::Error),
        ]
    );
    let mut plain_config = config(&server, StartPosition::Latest, &["app.outbox"]);
    plain_config.url = plain_url;
    let error = BinlogReader::connect(plain_config)
        .await
        .expect_err("refused");
    assert!(!error.is_transient());
    assert!(
        error.to_string().contains("grant REPLICATION SLAVE"),
        "{error}"
    );
    assert!(!error.to_string().contains("plain-pw"), "{error}");

    let relay_url = format!("mysql://relay:relay-pw@127.0.0.1:{}", server.port());
    let report = check_server(&relay_url, &outbox_binlog::TlsOptions::default())
        .await
        .unwrap();
    assert_eq!(report.checks, vec![]);
    let mut relay_config = config(&server, StartPosition::Latest, &["app.outbox"]);
    relay_config.url = relay_url;
    let mut reader = BinlogReader::connect(relay_config).await.unwrap();
    sql(&server, &["INSERT INTO app.outbox VALUES (1)"]).await;
    assert_eq!(ids(&next_transaction_with_rows(&mut reader).await), vec![1]);

    // A wrong password is a definite access error.
    let mut wrong_password = config(&server, StartPosition::Latest, &["app.outbox"]);
    wrong_password.url = format!("mysql://relay:nope@127.0.0.1:{}", server.port());
    let error = BinlogReader::connect(wrong_password)
        .await
        .expect_err("denied");
    assert!(!error.is_transient());
    assert!(
        matches!(error, BinlogError::AccessDenied { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn minimal_metadata_takes_column_names_from_information_schema_and_follows_alter_table() {
    let server = start_server(
        ScratchOptions {
            binlog_row_metadata: "MINIMAL",
            ..ScratchOptions::default()
        },
        &[
            "CREATE DATABASE app",
            "CREATE TABLE app.outbox (id INT PRIMARY KEY, payload VARCHAR(20)) ENGINE=InnoDB",
        ],
    )
    .await;
    let report = check_server(&server.url(), &outbox_binlog::TlsOptions::default())
        .await
        .unwrap();
    assert_eq!(report.checks.len(), 1);
    assert_eq!(report.checks[0].setting, "binlog_row_metadata");
    assert_eq!(report.checks[0].severity, Severity::Warning);

    let mut reader = connect_reader(&server, StartPosition::Latest, &["app.outbox"]).await;
    sql(&server, &["INSERT INTO app.outbox VALUES (1, 'a')"]).await;
    let first = next_transaction_with_rows(&mut reader).await;
    let columns = &first.rows[0].after.as_ref().unwrap().columns;
    assert_eq!(
        columns.to_vec(),
        vec!["id".to_owned(), "payload".to_owned()]
    );
    assert_eq!(text(after(&first.rows[0], "payload")), "a");

    // The reader keeps a side connection for lookups; the server may close it while idle
    // (wait_timeout). Kill every idle connection: the next lookup must reconnect.
    let mut admin = server.conn().await.unwrap();
    let others: Vec<(u64, String)> = admin
        .query(
            "SELECT ID, COMMAND FROM information_schema.PROCESSLIST \
             WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Binlog Dump' AND USER = 'root'",
        )
        .await
        .unwrap();
    assert!(
        !others.is_empty(),
        "the reader keeps its side connection open"
    );
    for (id, _command) in others {
        // A connection that closes meanwhile answers 1094 (unknown thread): fine.
        let _ = admin.query_drop(format!("KILL {id}")).await;
    }
    admin.disconnect().await.unwrap();

    sql(
        &server,
        &[
            "ALTER TABLE app.outbox ADD COLUMN topic VARCHAR(20) AFTER id",
            "INSERT INTO app.outbox VALUES (2, 'orders', 'b')",
        ],
    )
    .await;
    let second = next_transaction_with_rows(&mut reader).await;
    let columns = &second.rows[0].after.as_ref().unwrap().columns;
    assert_eq!(
        columns.to_vec(),
        vec!["id".to_owned(), "topic".to_owned(), "payload".to_owned()]
    );
    assert_eq!(text(after(&second.rows[0], "topic")), "orders");
    assert_eq!(text(after(&second.rows[0], "payload")), "b");
}

#[tokio::test]
async fn a_server_without_binary_log_is_refused() {
    let server = ScratchMariadb::start_with(ScratchOptions {
        extra_args: vec!["--skip-log-bin".into()],
        ..ScratchOptions::default()
    })
    .await
    .unwrap();
    let report = check_server(&server.url(), &outbox_binlog::TlsOptions::default())
        .await
        .unwrap();
    let log_bin = report
        .checks
        .iter()
        .find(|c| c.setting == "log_bin")
        .expect("log_bin reported");
    assert_eq!(
        (
            log_bin.expected.as_str(),
            log_bin.actual.as_str(),
            log_bin.severity
        ),
        ("ON", "OFF", Severity::Error)
    );
    let error = BinlogReader::connect(config(&server, StartPosition::Latest, &["a.b"]))
        .await
        .expect_err("no binlog, no stream");
    assert!(!error.is_transient());
    assert!(
        error
            .to_string()
            .contains("log_bin: expected ON, actual OFF"),
        "{error}"
    );
}

/// A TCP proxy to `target` that forwards both ways until the client sends a packet holding
/// `freeze_on`; from then on it forwards nothing more but keeps both sockets open: a server
/// that stops answering in the middle of a query, as behind a half-open connection.
async fn freezing_proxy(target: u16, freeze_on: &'static [u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let server = tokio::net::TcpStream::connect(("127.0.0.1", target))
                .await
                .unwrap();
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let frozen_up = frozen.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 65536];
                while let Ok(read) = client_read.read(&mut buffer).await {
                    if read == 0 {
                        break;
                    }
                    let chunk = &buffer[..read];
                    if chunk.windows(freeze_on.len()).any(|w| w == freeze_on) {
                        frozen_up.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    if frozen_up.load(std::sync::atomic::Ordering::SeqCst) {
                        continue;
                    }
                    if server_write.write_all(chunk).await.is_err() {
                        break;
                    }
                }
                // Keep the sockets open while frozen (half-open: no FIN reaches anyone).
                std::future::pending::<()>().await;
                drop(server_write);
            });
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 65536];
                while let Ok(read) = server_read.read(&mut buffer).await {
                    if read == 0 {
                        break;
                    }
                    if frozen.load(std::sync::atomic::Ordering::SeqCst) {
                        continue;
                    }
                    if client_write.write_all(&buffer[..read]).await.is_err() {
                        break;
                    }
                }
                std::future::pending::<()>().await;
                drop(client_write);
            });
        }
    });
    port
}

/// The server check gives up when the server stops answering after the connection is up
/// (a half-open TCP connection): a transient timeout within the limit, never a hang.
#[tokio::test]
async fn the_server_check_gives_up_on_a_server_that_stops_answering() {
    let server = ScratchMariadb::start().await.unwrap();
    let port = freezing_proxy(server.port(), b"SHOW GLOBAL VARIABLES").await;
    let url = format!("mysql://root@127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let checked = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        outbox_binlog::check_server_within(
            &url,
            &outbox_binlog::TlsOptions::default(),
            std::time::Duration::from_secs(2),
        ),
    )
    .await
    .expect("check_server_within hung on a server that stopped answering");
    let error = checked.expect_err("a frozen server cannot pass the check");
    assert!(error.is_transient(), "{error}");
    assert!(
        matches!(error, BinlogError::ConnectTimeout { .. }),
        "{error:?}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}
