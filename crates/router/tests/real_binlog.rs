//! Routes the rows of a real MariaDB binlog (`shared/fixtures/binlogs/mariadb-bin.000001`,
//! an outbox table `toddy_test.outbox` written by MariaDB 10.5) as decoded by
//! `outbox_binlog::BinlogFileReader`, configured from TOML as the relay would be.

use std::path::PathBuf;

use outbox_binlog::{BinlogFileReader, StreamItem};
use outbox_router::{OutboxTableConfig, RouteConfig, RouteOutcome, Router};
use serde::Deserialize;

#[derive(Deserialize)]
struct Config {
    outbox: Vec<OutboxTableConfig>,
    route: RouteConfig,
}

fn fixture(name: &str) -> PathBuf {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/binlogs"
    ))
    .join(name);
    assert!(
        path.is_file(),
        "binlog fixture not found at {}: the repository must be checked out next to a copy \
         of `shared/` (shared/fixtures/binlogs)",
        path.display()
    );
    path
}

#[test]
fn routes_the_outbox_rows_of_a_real_mariadb_binlog() {
    // The table: id BIGINT, topic VARCHAR, event_type VARCHAR, event BLOB (JSON), created
    // TIMESTAMP. It has no aggregate id, so the event id doubles as the key.
    let config: Config = toml::from_str(
        r#"
        [[outbox]]
        table = "toddy_test.outbox"
        timestamp_source = "column"
        columns = { event_id = "id", aggregate_type = "topic", aggregate_id = "id", event_type = "event_type", payload = "event", timestamp = "created" }

        [route]
        topic = "${database}.${aggregate_type}"
        payload = "require_json"
        "#,
    )
    .unwrap();
    let router = Router::new(&config.outbox, &config.route).unwrap();
    let mut reader =
        BinlogFileReader::open(vec![fixture("mariadb-bin.000001")], router.table_filter()).unwrap();
    let mut records = Vec::new();
    let mut commits = 0;
    while let Some(item) = reader.next_item().unwrap() {
        match item {
            StreamItem::Row(change) => match router.route(&change) {
                Ok(RouteOutcome::Record(record)) => records.push(record),
                other => panic!("row did not route: {other:?}"),
            },
            StreamItem::Commit(_) => commits += 1,
            StreamItem::Heartbeat(_) => {}
        }
    }
    assert_eq!(commits, 2);
    assert_eq!(records.len(), 2);
    let expected = [("62", 1_650_493_084_000), ("63", 1_650_493_195_000)];
    for (record, (id, millis)) in records.iter().zip(expected) {
        assert_eq!(record.topic, "toddy_test.foo");
        assert_eq!(record.event_id, id);
        assert_eq!(record.key.as_deref(), Some(id.as_bytes()));
        assert_eq!(record.value.as_deref(), Some(&br#"{"foo":1}"#[..]));
        assert_eq!(record.header("id"), Some(id.as_bytes()));
        assert_eq!(record.header("event_type"), Some(&b"JSON"[..]));
        assert_eq!(record.header("aggregate_type"), Some(&b"foo"[..]));
        assert_eq!(record.timestamp_millis, Some(millis));
        assert_eq!(record.partition, None);
    }
}
