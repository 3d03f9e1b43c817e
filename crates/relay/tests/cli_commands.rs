//! The operator commands as processes: `check` (names what is wrong, exit code) and
//! `inspect --config` over the scratch server's binlog files (exactly the records the relay
//! would send, in binlog order).

mod common;

use std::path::PathBuf;

use common::*;
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::ScratchMariadb;

fn run(args: &[&str]) -> (i32, String, String) {
    run_relay_command(args)
}

/// `check` fails (exit 1) naming the missing outbox table, passes once it exists, and fails
/// naming Kafka when the broker is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_what_is_wrong_and_exits_non_zero() {
    let (db, broker) = tokio::join!(ScratchMariadb::start(), KafkaBroker::start());
    let db = db.expect("scratch MariaDB starts");
    let mut broker = broker.expect("a private Kafka broker starts");
    let relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    let config = relay.config_path.to_str().unwrap().to_string();

    let (code, stdout, stderr) = run(&["check", "--config", &config]);
    assert_eq!(
        code, 1,
        "check must fail without the outbox table:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("FAIL") && line.contains("shop.outbox")),
        "no FAIL line naming shop.outbox:\n{stdout}"
    );

    db.exec(SHOP_SCHEMA).await.unwrap();
    let (code, stdout, stderr) = run(&["check", "--config", &config]);
    assert_eq!(code, 0, "check must pass:\n{stdout}\n{stderr}");
    assert!(
        !stdout.lines().any(|line| line.starts_with("FAIL")),
        "{stdout}"
    );

    broker.kill();
    let (code, stdout, stderr) = run(&["check", "--config", &config]);
    assert_eq!(
        code, 1,
        "check must fail with the broker gone:\n{stdout}\n{stderr}"
    );
    let kafka_line = stdout
        .lines()
        .find(|line| line.starts_with("FAIL") && line.to_lowercase().contains("kafka"));
    assert!(
        kafka_line.is_some_and(|line| line.contains(&broker.bootstrap())),
        "no FAIL line naming kafka and the broker address {}:\n{stdout}",
        broker.bootstrap()
    );
}

/// `inspect --config` over the server's binlog files prints exactly the committed outbox
/// events, once each, in commit order, with the topic/key/id/payload the relay would send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_with_config_routes_exactly_the_committed_events() {
    let db = start_shop_database().await;
    let relay = Relay::prepare(&RelaySetup::new(&db, "127.0.0.1:1"));
    let mut writer = ShopWriter::connect(&db, "inspect").await;
    for index in 0..12u32 {
        let kind = ["order", "customer", "invoice"][(index % 3) as usize];
        writer
            .transaction(
                kind,
                &format!("{kind}-{}", index % 4),
                1 + (index % 3) as usize,
                index % 5 != 2,
                index % 4 == 1,
            )
            .await;
        if index == 6 {
            // Events continue in the next binlog file.
            db.exec(&["FLUSH BINARY LOGS"]).await.unwrap();
        }
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(db.datadir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| {
                    name.starts_with("binlog.") && name[7..].chars().all(|c| c.is_ascii_digit())
                })
        })
        .collect();
    files.sort();
    assert!(files.len() >= 2, "expected a rotated binlog: {files:?}");
    let mut args: Vec<String> = vec![
        "inspect".into(),
        "--config".into(),
        relay.config_path.display().to_string(),
    ];
    args.extend(files.iter().map(|path| path.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, 0, "inspect failed:\n{stderr}\n{stdout}");

    let mut routed: Vec<(String, String, String, String)> = Vec::new();
    for line in stdout.lines().filter(|line| !line.trim().is_empty()) {
        let transaction: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("inspect line is not JSON ({e}): {line}"));
        for record in transaction["records"].as_array().into_iter().flatten() {
            if record.get("skipped").is_some() {
                continue;
            }
            let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_string();
            routed.push((
                text(&record["headers"]["id"]),
                text(&record["topic"]),
                text(&record["key"]),
                text(&record["value"]),
            ));
        }
    }
    let expected: Vec<(String, String, String, String)> = writer
        .committed
        .iter()
        .map(|event| {
            (
                event.id.clone(),
                event.topic(),
                event.aggregate_id.clone(),
                event.payload.clone(),
            )
        })
        .collect();
    assert_eq!(
        routed.len(),
        expected.len(),
        "inspect routed {} records, {} events were committed; inspect output:\n{stdout}",
        routed.len(),
        expected.len()
    );
    for (index, (got, want)) in routed.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "record #{index} differs");
    }
    writer.close().await;
}

/// `recover` over a damaged binlog file stops with exit 1 naming the file and the offset,
/// and does not wait for a Kafka cluster it can no longer use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_of_a_truncated_file_names_the_file_and_offset() {
    let relay = Relay::prepare(&RelaySetup::with_url(
        "mysql://root@127.0.0.1:1",
        "127.0.0.1:1",
    ));
    relay.edit_config(&[(
        "create_topics = true",
        "create_topics = true\nstartup_attempts = 1\nadmin_timeout_ms = 1000",
    )]);
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/binlogs/binlog_truncated_event.000001");
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = run(&[
        "recover",
        "--config",
        relay.config_path.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "stdout {stdout}\nstderr {stderr}");
    assert!(
        stderr.contains("binlog_truncated_event.000001") && stderr.contains("offset 4"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

/// `inspect` over binlog files: no progress bytes when stderr is not a terminal (captured
/// here), a progress line (bytes read of the total, events) when it is one (a pseudo
/// terminal from util-linux's `script`).
#[test]
fn inspect_shows_progress_on_a_terminal_only() {
    let fixtures =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/binlogs");
    let files = [
        fixtures.join("mariadb-bin.000001"),
        fixtures.join("mysql_type_bit.000001"),
    ];
    let files: Vec<&str> = files.iter().map(|f| f.to_str().unwrap()).collect();
    let mut args = vec!["inspect"];
    args.extend(&files);
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.lines().count() > 1, "{stdout}");
    assert!(
        !stderr.contains('\r') && !stderr.contains("reading:") && !stderr.contains("\x1b["),
        "progress bytes on a captured stderr: {stderr:?}"
    );

    // The same under a terminal: `script` runs the command on a pseudo terminal and copies
    // what it shows (stdout and stderr) to its own stdout.
    let command_line = std::iter::once(RELAY_BIN)
        .chain(args.iter().copied())
        .map(|word| format!("'{word}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let output = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &command_line, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("util-linux `script` runs");
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{shown}");
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert!(
        shown.contains("\r\x1b[2Kreading: ") && shown.contains(" events"),
        "no progress line on a terminal: {shown:?}"
    );
    assert!(
        shown.contains(&format!(" of {:.1} KiB", total as f64 / 1024.0)),
        "the total ({total} bytes) is not shown: {shown:?}"
    );
}

/// `check --config-only` validates without connecting: a valid config whose servers do not
/// exist passes (exit 0), an invalid one fails naming the key, as `check` would.
#[test]
fn check_config_only_validates_without_connecting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("relay.toml");
    let valid = "[source]\nurl = \"mysql://relay@127.0.0.1:1\"\nserver_id = 4242\n\n\
                 [[outbox]]\ntable = \"shop.outbox\"\n\n[kafka]\nbrokers = \"127.0.0.1:1\"\n\n\
                 [checkpoint]\npath = \"/nonexistent/checkpoint.json\"\n";
    std::fs::write(&path, valid).expect("write the config");
    let config = path.to_str().expect("utf-8 path");
    let (code, stdout, stderr) = run(&["check", "--config-only", "--config", config]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("ok   config:") && stdout.contains("nothing was connected to"),
        "{stdout}"
    );

    std::fs::write(&path, valid.replace("server_id = 4242", "server_id = 0"))
        .expect("write the config");
    let (code, stdout, stderr) = run(&["check", "--config-only", "--config", config]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stderr.contains("source.server_id"), "{stderr}");
}

/// Issue 26: `config from-debezium --probe` reads the outbox table from the connector's
/// server and writes what the binlog will not describe as Debezium's DDL does: a TINYINT(4)
/// envelope field's `column_type`; with `binlog_row_metadata` below FULL (no character sets
/// or signedness in the binlog) every additional column's type and the `connect_schema`
/// (MariaDB's JSON payload is LONGTEXT: a string); column defaults. It names what the
/// relay cannot reproduce (a spatial column, an expression default), the TINYINT(1) ambiguity, and a
/// column the table lacks; without `--probe` the file says it was not checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_from_debezium_probe_writes_the_servers_column_types() {
    let db = ScratchMariadb::start()
        .await
        .expect("scratch MariaDB starts");
    db.exec(&[
        "CREATE DATABASE shop",
        "CREATE TABLE shop.outbox (id VARCHAR(64) NOT NULL PRIMARY KEY, \
         aggregatetype VARCHAR(64) NOT NULL, aggregateid VARBINARY(16) NOT NULL, \
         type VARCHAR(64) NOT NULL, payload JSON NULL, tenant VARBINARY(8) NULL, \
         flag TINYINT(4) NOT NULL DEFAULT 0, ok TINYINT(1) NULL, ratio FLOAT NULL, \
         amount DECIMAL(10,2) NULL, created DATETIME(6) NULL DEFAULT CURRENT_TIMESTAMP(6), \
         channel VARCHAR(8) NULL DEFAULT 'web', spot POINT NULL) ENGINE=InnoDB",
    ])
    .await
    .expect("the outbox table");
    let dir = tempfile::tempdir().expect("temp dir");
    let connector = dir.path().join("connector.json");
    std::fs::write(
        &connector,
        format!(
            r#"{{"name":"orders","config":{{
              "connector.class":"io.debezium.connector.mysql.MySqlConnector",
              "database.hostname":"127.0.0.1","database.port":"{port}","database.user":"root",
              "database.server.id":"5","topic.prefix":"shop","table.include.list":"shop.outbox",
              "transforms":"outbox","transforms.outbox.type":"io.debezium.transforms.outbox.EventRouter",
              "transforms.outbox.table.fields.additional.placement":"tenant:header,ratio:header,created:header,channel:header,spot:header,flag:envelope,ok:envelope,amount:envelope,gone:header",
              "key.converter":"org.apache.kafka.connect.json.JsonConverter",
              "value.converter":"org.apache.kafka.connect.json.JsonConverter"}}}}"#,
            port = db.port()
        ),
    )
    .expect("write the connector");
    let connector = connector.to_str().expect("utf-8 path");
    let convert = |probe: bool| {
        let mut args = vec!["config", "from-debezium", connector];
        if probe {
            args.push("--probe");
        }
        let (code, stdout, stderr) = run(&args);
        assert_eq!(code, 0, "from-debezium:\n{stdout}\n{stderr}");
        stdout
    };
    let contains_all = |toml: &str, needles: &[&str]| {
        for needle in needles {
            assert!(toml.contains(needle), "{needle} missing from\n{toml}");
        }
    };

    let unprobed = convert(false);
    contains_all(
        &unprobed,
        &[
            "# Not checked against the source server",
            "{ column = \"flag\" }",
        ],
    );

    // binlog_row_metadata = FULL: only the TINYINT needs its type.
    let probed = convert(true);
    contains_all(
        &probed,
        &[
            "# Probed the source 127.0.0.1:",
            // Defaults, which the binlog does not carry: Debezium sends them for NULLs.
            "additional_headers = [{ column = \"tenant\" }, { column = \"ratio\" }, { column = \"created\" }, { column = \"channel\", column_default = \"web\" }, { column = \"spot\" }, { column = \"gone\" }]",
            "# `created` (shop.outbox): DEFAULT current_timestamp(6) is an expression",
            "envelope_fields = [{ column = \"flag\", column_type = \"tinyint(4)\", column_default = 0 }, { column = \"ok\", column_type = \"tinyint(1)\" }, { column = \"amount\" }]",
            "# `ok` (shop.outbox) is TINYINT(1): written as int16",
            "then set its column_type = \"boolean\"",
            "# `spot` (shop.outbox): `point` is not a column type the relay renders as Debezium does",
            "as a header it carries the value's plain text",
            "# outbox table `shop.outbox` has no column `gone` (additional_headers)",
        ],
    );
    assert!(!probed.contains("connect_schema = {"), "{probed}");

    // Below FULL the binlog tells neither text from binary nor the JSON payload's schema.
    db.exec(&["SET GLOBAL binlog_row_metadata = 'NO_LOG'"])
        .await
        .expect("binlog_row_metadata");
    let probed = convert(true);
    contains_all(
        &probed,
        &[
            "# Source setting: binlog_row_metadata: expected FULL, actual NO_LOG (warning)",
            "{ column = \"tenant\", column_type = \"varbinary(8)\" }",
            "{ column = \"created\", column_type = \"datetime(6)\" }",
            "{ column = \"amount\", column_type = \"decimal(10,2)\" }",
            "connect_schema = { key_type = \"bytes\", key_optional = false, payload_type = \"string\", payload_optional = true }",
        ],
    );
    // What it wrote agrees with the server by `check`'s rule (no clash): the config loads
    // and its column types are the server's.
    let config = dir.path().join("relay.toml");
    std::fs::write(
        &config,
        probed.replace("create_topics = true", "create_topics = false"),
    )
    .expect("write the config");
    let (code, stdout, stderr) = run(&[
        "check",
        "--config-only",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "the probed config loads:\n{stdout}\n{stderr}");
}
