//! In-process tests of the CLI commands `inspect`, `checkpoint` and `check` (their output
//! goes to a buffer instead of stdout).

use std::path::{Path, PathBuf};
use std::time::Duration;

use outbox_testkit::ScratchMariadb;
use rdkafka::mocking::MockCluster;

use crate::cli::CheckpointAction;
use crate::commands::{check_command, checkpoint_command, inspect_command};
use crate::config::RelayConfig;
use crate::demo::{consume_records, demo_config_text, write_sample_order, DEMO_SCHEMA, DEMO_TOPIC};
use crate::pipeline::{run_relay, RelayHandles};

const FIXTURES: &str = "/work/shared/fixtures/binlogs";

fn fixture_file(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(name)
}

fn inspect(files: &[PathBuf], config: Option<&Path>) -> (i32, Vec<serde_json::Value>, String) {
    let mut out = Vec::new();
    let mut diagnostics = Vec::new();
    let code = inspect_command(files, config, &mut out, &mut diagnostics).unwrap();
    let lines = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (code, lines, String::from_utf8(diagnostics).unwrap())
}

#[test]
fn inspect_prints_one_json_line_per_transaction_of_a_mysql_binlog() {
    let (code, lines, diagnostics) = inspect(&[fixture_file("mysql-enum-string-set.000001")], None);
    assert_eq!(code, 0, "{diagnostics}");
    assert_eq!(lines.len(), 5);
    let operations: Vec<Vec<String>> = lines
        .iter()
        .map(|line| {
            line["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| row["operation"].as_str().unwrap().to_owned())
                .collect()
        })
        .collect();
    assert_eq!(
        operations,
        vec![
            vec![],
            vec![],
            vec!["insert"],
            vec!["update"],
            vec!["delete"]
        ]
    );
    assert_eq!(lines[2]["gtid"], "93e95066-a2f4-11ec-9b69-9657f0ae95e2:3");
    assert_eq!(lines[2]["rows"][0]["table"], "mysql.t");
    assert_eq!(lines[2]["rows"][0]["after"]["f3"]["Text"], "var1");
    assert_eq!(lines[4]["position"], "mysql-enum-string-set.000001:3331");
}

#[test]
fn inspect_of_a_corrupt_file_fails_naming_file_and_offset() {
    let file = fixture_file("binlog_truncated_event.000001");
    let (code, _lines, diagnostics) = inspect(std::slice::from_ref(&file), None);
    assert_ne!(code, 0);
    assert!(
        diagnostics.contains("binlog_truncated_event.000001"),
        "{diagnostics}"
    );
    assert!(diagnostics.contains("offset"), "{diagnostics}");
    let (code, _lines, diagnostics) = inspect(&[PathBuf::from("/nonexistent/binlog.1")], None);
    assert_ne!(code, 0);
    assert!(
        diagnostics.contains("/nonexistent/binlog.1"),
        "{diagnostics}"
    );
}

/// A scratch server with the demo schema and a mock cluster with the demo topic; the
/// config file is written to a temporary directory.
struct CommandFixture {
    server: ScratchMariadb,
    cluster: MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    dir: tempfile::TempDir,
    config_path: PathBuf,
}

async fn command_fixture() -> CommandFixture {
    let server = ScratchMariadb::start().await.unwrap();
    server.exec(DEMO_SCHEMA).await.unwrap();
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(DEMO_TOPIC, 1, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("relay.toml");
    std::fs::write(
        &config_path,
        demo_config_text(
            &server.url(),
            &cluster.bootstrap_servers(),
            &dir.path().join("checkpoint.json").display().to_string(),
        ),
    )
    .unwrap();
    CommandFixture {
        server,
        cluster,
        dir,
        config_path,
    }
}

impl CommandFixture {
    async fn checkpoint(&self, action: CheckpointAction) -> String {
        let mut out = Vec::new();
        let code = checkpoint_command(action, &mut out).await.unwrap();
        assert_eq!(code, 0);
        String::from_utf8(out).unwrap()
    }

    async fn show(&self) -> serde_json::Value {
        let text = self
            .checkpoint(CheckpointAction::Show {
                config: self.config_path.clone(),
            })
            .await;
        serde_json::from_str(text.trim()).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_with_a_config_prints_the_records_rows_route_to() {
    let fixture = command_fixture().await;
    let mut conn = fixture.server.conn().await.unwrap();
    for n in 1..=2 {
        write_sample_order(&mut conn, n).await.unwrap();
    }
    conn.disconnect().await.unwrap();
    let binlog = fixture.server.datadir().join("binlog.000001");
    let (code, lines, diagnostics) = inspect(&[binlog], Some(&fixture.config_path));
    assert_eq!(code, 0, "{diagnostics}");
    let records: Vec<&serde_json::Value> = lines
        .iter()
        .flat_map(|line| line["records"].as_array().unwrap())
        .collect();
    assert_eq!(records.len(), 2, "{lines:?}");
    assert_eq!(records[0]["topic"], DEMO_TOPIC);
    assert_eq!(records[0]["key"], "1");
    assert_eq!(
        records[1]["headers"]["id"],
        "00000000-0000-4000-8000-000000000002"
    );
    assert_eq!(
        records[1]["event_id"],
        "00000000-0000-4000-8000-000000000002"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_show_set_reset_and_a_gtid_checkpoint_resumes_there() {
    let fixture = command_fixture().await;
    assert_eq!(fixture.show().await, serde_json::Value::Null);

    fixture
        .checkpoint(CheckpointAction::Set {
            config: fixture.config_path.clone(),
            position: Some("binlog.000001:4".into()),
            gtid: None,
        })
        .await;
    let shown = fixture.show().await;
    assert_eq!(shown["binlog_file"], "binlog.000001");
    assert_eq!(shown["binlog_position"], 4);
    assert_eq!(shown["source"]["flavor"], "mariadb");

    fixture
        .checkpoint(CheckpointAction::Reset {
            config: fixture.config_path.clone(),
        })
        .await;
    assert_eq!(fixture.show().await, serde_json::Value::Null);

    // Orders 1..3 are transactions 0-1-4..0-1-6; a checkpoint at GTID 0-1-4 resumes with
    // order 2.
    let mut conn = fixture.server.conn().await.unwrap();
    for n in 1..=3 {
        write_sample_order(&mut conn, n).await.unwrap();
    }
    conn.disconnect().await.unwrap();
    fixture
        .checkpoint(CheckpointAction::Set {
            config: fixture.config_path.clone(),
            position: None,
            gtid: Some("0-1-4".into()),
        })
        .await;
    assert_eq!(fixture.show().await["gtid_set"], "0-1-4");

    let config = RelayConfig::load(&fixture.config_path).unwrap();
    let handles = RelayHandles::default();
    let relay = tokio::spawn(run_relay(config, handles.clone()));
    let records = consume_records(
        &fixture.cluster.bootstrap_servers(),
        DEMO_TOPIC,
        2,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let keys: Vec<_> = records.iter().filter_map(|r| r.key.clone()).collect();
    assert_eq!(keys, vec!["2", "3"]);
    let started = std::time::Instant::now();
    while fixture.show().await["gtid_set"] != "0-1-6" {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "checkpoint did not advance"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handles.shutdown.trigger();
    let summary = relay.await.unwrap().unwrap();
    assert_eq!(summary.delivered, 2);
    let shown = fixture.show().await;
    assert_eq!(shown["binlog_file"], "binlog.000001");
    drop(fixture.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_each_item_and_fails_on_an_unreachable_broker() {
    let fixture = command_fixture().await;
    let mut out = Vec::new();
    let code = check_command(&fixture.config_path, &mut out).await.unwrap();
    let report = String::from_utf8(out).unwrap();
    assert!(report.contains("ok   source server"), "{report}");
    assert!(report.contains("ok   outbox table shop.outbox"), "{report}");
    assert!(report.contains("ok   kafka"), "{report}");
    assert!(report.contains("ok   checkpoint"), "{report}");
    assert_eq!(code, 0, "{report}");

    let broken = fixture.dir.path().join("broken.toml");
    let text = std::fs::read_to_string(&fixture.config_path)
        .unwrap()
        .replace(&fixture.cluster.bootstrap_servers(), "127.0.0.1:1")
        .replace("[kafka]\n", "[kafka]\nadmin_timeout_ms = 1000\n")
        .replace("\"shop.outbox\"", "\"shop.missing_outbox\"");
    std::fs::write(&broken, text).unwrap();
    let mut out = Vec::new();
    let code = check_command(&broken, &mut out).await.unwrap();
    let report = String::from_utf8(out).unwrap();
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("FAIL kafka: 127.0.0.1:1"), "{report}");
    assert!(
        report.contains("FAIL outbox table shop.missing_outbox"),
        "{report}"
    );
    assert!(report.contains("check(s) failed"), "{report}");
}
