//! The table of bad inputs, through the real binary against a real MariaDB (and Apache Kafka where
//! records flow): each bad config, unreachable server, refused login, missing grant, wrong
//! binlog setting or unusable row gets a clear error naming what and where, or a dead
//! letter; never a panic, never a silent loss.

mod common;

use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;
use outbox_testkit::consume::{read_all, ConsumedRecord, ReadStop};
use outbox_testkit::kafka::KafkaBroker;

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// One startup case: how to break the setup, and what the operator must read.
struct StartupCase {
    /// For failure messages.
    name: &'static str,
    /// Config edits: `(from, to)`, applied to the harness's config text.
    edits: Vec<(String, String)>,
    /// SQL run on the server before the relay starts (undone by `cleanup`).
    prepare: Vec<String>,
    /// SQL that restores the server for the next case.
    cleanup: Vec<String>,
    /// Each must appear in the relay's output.
    expect: Vec<String>,
    /// Lines of the log that must appear at least twice (a visible retry with backoff).
    retried_with: Option<&'static str>,
}

/// Every way to start the relay wrong: it must exit non-zero within the limit, say what is
/// wrong and how to fix it, and not panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_startup_inputs_stop_with_an_error_naming_what_and_where() {
    let db = start_shop_database().await;
    let closed = closed_port();
    let port = db.port();
    let cases = vec![
        StartupCase {
            name: "malformed TOML",
            edits: vec![("[source]".into(), "[source".into())],
            prepare: vec![],
            cleanup: vec![],
            expect: vec!["relay.toml is invalid".into(), "line 1".into()],
            retried_with: None,
        },
        StartupCase {
            name: "unknown key",
            edits: vec![("server_id = 4242".into(), "server_idd = 4242".into())],
            prepare: vec![],
            cleanup: vec![],
            expect: vec!["unknown field `server_idd`".into()],
            retried_with: None,
        },
        StartupCase {
            name: "value out of range",
            edits: vec![("server_id = 4242".into(), "server_id = 0".into())],
            prepare: vec![],
            cleanup: vec![],
            expect: vec!["source.server_id".into()],
            retried_with: None,
        },
        StartupCase {
            name: "unreachable MySQL",
            edits: vec![
                (format!("127.0.0.1:{port}"), format!("127.0.0.1:{closed}")),
                (
                    "server_id = 4242".into(),
                    "server_id = 4242\nstartup_attempts = 3\nreconnect_initial_backoff_ms = 100"
                        .into(),
                ),
            ],
            prepare: vec![],
            cleanup: vec![],
            expect: vec![
                format!("cannot reach the source server mysql://root@127.0.0.1:{closed}"),
                "3 attempts".into(),
                "check source.url".into(),
            ],
            retried_with: Some("binlog source unavailable; retrying after delay_ms"),
        },
        StartupCase {
            name: "wrong password",
            edits: vec![(
                format!("root@127.0.0.1:{port}"),
                format!("outbox:wrong@127.0.0.1:{port}"),
            )],
            prepare: vec![
                "CREATE USER outbox@'%' IDENTIFIED BY 'right'".into(),
                "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO outbox@'%'".into(),
            ],
            cleanup: vec!["DROP USER outbox@'%'".into()],
            expect: vec!["Access denied for user 'outbox'".into()],
            retried_with: None,
        },
        StartupCase {
            name: "missing REPLICATION grants",
            edits: vec![(
                format!("root@127.0.0.1:{port}"),
                format!("reader:pw@127.0.0.1:{port}"),
            )],
            prepare: vec![
                "CREATE USER reader@'%' IDENTIFIED BY 'pw'".into(),
                "GRANT SELECT ON *.* TO reader@'%'".into(),
            ],
            cleanup: vec!["DROP USER reader@'%'".into()],
            expect: vec!["REPLICATION SLAVE".into()],
            retried_with: None,
        },
        StartupCase {
            name: "binlog_row_image=MINIMAL",
            edits: vec![],
            prepare: vec!["SET GLOBAL binlog_row_image = 'MINIMAL'".into()],
            cleanup: vec!["SET GLOBAL binlog_row_image = 'FULL'".into()],
            expect: vec!["binlog_row_image".into(), "FULL".into(), "MINIMAL".into()],
            retried_with: None,
        },
        StartupCase {
            name: "binlog_format=STATEMENT",
            edits: vec![],
            prepare: vec!["SET GLOBAL binlog_format = 'STATEMENT'".into()],
            cleanup: vec!["SET GLOBAL binlog_format = 'ROW'".into()],
            expect: vec!["binlog_format".into(), "ROW".into(), "STATEMENT".into()],
            retried_with: None,
        },
        StartupCase {
            name: "unreachable Kafka",
            edits: vec![(
                "create_topics = true".into(),
                "create_topics = true\nstartup_attempts = 2\nadmin_timeout_ms = 1000\n\
                     retry_initial_backoff_ms = 100"
                    .into(),
            )],
            prepare: vec![],
            cleanup: vec![],
            expect: vec![
                format!("cannot reach the Kafka cluster at 127.0.0.1:{closed}"),
                "2 metadata requests".into(),
                "check kafka.brokers".into(),
            ],
            retried_with: Some("cannot reach the Kafka cluster at startup; retrying"),
        },
    ];
    let mut failures = Vec::new();
    for case in cases {
        let mut relay = Relay::prepare(&RelaySetup::new(&db, &format!("127.0.0.1:{closed}")));
        let edits: Vec<(&str, &str)> = case
            .edits
            .iter()
            .map(|(from, to)| (from.as_str(), to.as_str()))
            .collect();
        relay.edit_config(&edits);
        let prepare: Vec<&str> = case.prepare.iter().map(String::as_str).collect();
        db.exec(&prepare).await.expect("prepare the case");
        relay.start();
        let status = relay.wait_for_exit(Duration::from_secs(60)).await;
        let cleanup: Vec<&str> = case.cleanup.iter().map(String::as_str).collect();
        db.exec(&cleanup).await.expect("clean up after the case");
        let log = relay.log();
        let mut problems = Vec::new();
        if status.success() || status.code() != Some(1) {
            problems.push(format!("exit status {status}, expected 1"));
        }
        for needle in &case.expect {
            if !log.contains(needle.as_str()) {
                problems.push(format!("no `{needle}` in the output"));
            }
        }
        if log.contains("panicked") {
            problems.push("the relay panicked".into());
        }
        if let Some(line) = case.retried_with {
            let retries = log_count(&relay, line);
            if retries < 1 {
                problems.push(format!("no visible retry (`{line}`)"));
            }
        }
        eprintln!(
            "case `{}`: {status}; output:\n{}",
            case.name,
            relay.log_tail(6)
        );
        if !problems.is_empty() {
            failures.push(format!(
                "{}: {}\n{}",
                case.name,
                problems.join("; "),
                relay.log_tail(12)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "bad startup inputs:\n{}",
        failures.join("\n\n")
    );
}

/// Inserts one row into `shop.outbox_raw`.
async fn insert_raw(
    conn: &mut mysql_async::Conn,
    event_id: &str,
    aggregate_type: Vec<u8>,
    aggregate_id: Option<String>,
    payload: Option<String>,
) {
    conn.exec_drop(
        "INSERT INTO shop.outbox_raw (event_id, aggregate_type, aggregate_id, event_type, \
         payload) VALUES (?, ?, ?, 'order_created', ?)",
        (event_id, aggregate_type, aggregate_id, payload),
    )
    .await
    .expect("insert a raw outbox row")
}

/// What one unusable row must become.
struct RowCase {
    /// The row's event id (the dead letter's `id` header).
    event_id: &'static str,
    /// `aggregate_type` bytes (a VARBINARY column: may be invalid UTF-8).
    aggregate_type: Vec<u8>,
    /// `aggregate_id`, NULL allowed.
    aggregate_id: Option<String>,
    /// `payload`, NULL allowed.
    payload: Option<String>,
    /// Expected `dlq.error_class`.
    class: &'static str,
    /// Must appear in `dlq.error_message`.
    message: &'static str,
}

/// Rows the relay cannot turn into records become dead letters naming the column and the
/// cause; the good events around them arrive; the checkpoint passes all of them; the relay
/// keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_rows_become_dead_letters_and_the_rest_flows() {
    let (db, broker) = tokio::join!(start_shop_database(), KafkaBroker::shared());
    let broker = broker.expect("the shared Kafka broker starts");
    db.exec(&[
        "CREATE TABLE shop.outbox_raw (event_id VARCHAR(64) NOT NULL PRIMARY KEY, \
         aggregate_type VARBINARY(255) NOT NULL, aggregate_id MEDIUMTEXT NULL, \
         event_type VARCHAR(64) NOT NULL, payload MEDIUMTEXT NULL) ENGINE=InnoDB",
    ])
    .await
    .expect("raw outbox table");
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup
        .extra_outbox_tables
        .push(("shop.outbox_raw".into(), "seeds".into()));
    setup.route_extra.push("payload = \"require_json\"".into());
    let mut relay = Relay::prepare(&setup);

    // A key of 1.2 MB: the producer's message.max.bytes (1 MB by default) refuses the record.
    let gigantic_key = "k".repeat(1_200_000);
    let cases = vec![
        RowCase {
            event_id: "not-utf8",
            aggregate_type: vec![b'o', 0xC3, 0x28, b'r'],
            aggregate_id: Some("a-1".into()),
            payload: Some("{\"n\":1}".into()),
            class: "routing",
            message: "aggregate_type",
        },
        RowCase {
            event_id: "null-aggregate-id",
            aggregate_type: b"order".to_vec(),
            aggregate_id: None,
            payload: Some("{\"n\":2}".into()),
            class: "routing",
            message: "aggregate_id",
        },
        RowCase {
            event_id: "invalid-json",
            aggregate_type: b"order".to_vec(),
            aggregate_id: Some("a-3".into()),
            payload: Some("{\"n\": 3,".into()),
            class: "routing",
            message: "JSON",
        },
        RowCase {
            event_id: "null-payload",
            aggregate_type: b"order".to_vec(),
            aggregate_id: Some("a-4".into()),
            payload: None,
            class: "routing",
            message: "payload",
        },
        RowCase {
            event_id: "gigantic-key",
            aggregate_type: b"order".to_vec(),
            aggregate_id: Some(gigantic_key.clone()),
            payload: Some("{\"n\":5}".into()),
            class: "message_too_large",
            message: "",
        },
    ];
    let mut conn = db.conn().await.expect("connect");
    insert_raw(
        &mut conn,
        "good-before",
        b"order".to_vec(),
        Some("a-0".into()),
        Some("{\"n\":0}".into()),
    )
    .await;
    for case in &cases {
        insert_raw(
            &mut conn,
            case.event_id,
            case.aggregate_type.clone(),
            case.aggregate_id.clone(),
            case.payload.clone(),
        )
        .await;
    }
    insert_raw(
        &mut conn,
        "good-after",
        b"order".to_vec(),
        Some("a-9".into()),
        Some("{\"n\":9}".into()),
    )
    .await;
    let end = master_position(&mut conn).await;
    conn.disconnect().await.expect("disconnect");

    relay.start();
    let letters = read_all(
        &broker.bootstrap(),
        &[&dlq_topic(&db)],
        ReadStop::Count(cases.len()),
        Duration::from_secs(90),
    )
    .await
    .expect("read dead letters");
    let delivered = read_all(
        &broker.bootstrap(),
        &[&topic_for(&db, "order")],
        ReadStop::Count(2),
        Duration::from_secs(30),
    )
    .await
    .expect("read the order topic");
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    relay.assert_running("after the bad rows");
    relay.stop_gracefully("stop after the bad rows").await;

    let ids: Vec<String> = delivered
        .iter()
        .filter_map(|r| r.header_str("id"))
        .collect();
    assert_eq!(
        ids,
        vec!["good-before", "good-after"],
        "the good events arrive, once each"
    );
    let mut problems = Vec::new();
    for case in &cases {
        let found: Vec<&ConsumedRecord> = letters
            .iter()
            .filter(|r| r.header_str("id").as_deref() == Some(case.event_id))
            .collect();
        let [letter] = found.as_slice() else {
            problems.push(format!("{}: {} dead letters", case.event_id, found.len()));
            continue;
        };
        let class = letter.header_str("dlq.error_class").unwrap_or_default();
        let message = letter.header_str("dlq.error_message").unwrap_or_default();
        eprintln!("{}: {class}: {message}", case.event_id);
        if class != case.class {
            problems.push(format!(
                "{}: class {class}, expected {}",
                case.event_id, case.class
            ));
        }
        if !message.contains(case.message) {
            problems.push(format!(
                "{}: message `{message}` lacks `{}`",
                case.event_id, case.message
            ));
        }
    }
    // The gigantic key is kept as a bounded prefix with its size and hash.
    if let Some(letter) = letters
        .iter()
        .find(|r| r.header_str("id").as_deref() == Some("gigantic-key"))
    {
        assert_eq!(letter.key.as_ref().map(Vec::len), Some(1024));
        assert_eq!(
            letter.header_str("dlq.key_truncated").as_deref(),
            Some("true")
        );
        assert_eq!(
            letter.header_str("dlq.key_size").as_deref(),
            Some(gigantic_key.len().to_string().as_str())
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(log_count(&relay, "panicked"), 0);
}
