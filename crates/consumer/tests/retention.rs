//! `processed_event` retention against a real scratch MariaDB and the shared broker: pruning
//! deletes only the consumer's old entries, in batches; `topic_retention` reads the topic's
//! `retention.ms`.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use outbox_consumer::{create_processed_event_table_sql, prune_processed_events, topic_retention};
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::ScratchMariadb;

#[tokio::test]
async fn prune_deletes_only_this_consumers_entries_older_than_the_limit() {
    let db = ScratchMariadb::start().await.expect("scratch MariaDB");
    db.exec(&["CREATE DATABASE inventory"])
        .await
        .expect("database");
    let mut conn = mysql_async::Conn::from_url(db.url_with_db("inventory"))
        .await
        .expect("connect");
    conn.query_drop(create_processed_event_table_sql())
        .await
        .expect("table");
    for (consumer, id, hours_ago) in [
        ("inventory", "old-1", 30),
        ("inventory", "old-2", 26),
        ("inventory", "old-3", 25),
        ("inventory", "recent", 23),
        ("billing", "old-billing", 30),
    ] {
        conn.exec_drop(
            "INSERT INTO processed_event (consumer_name, event_id, processed_at) \
             VALUES (?, ?, NOW(6) - INTERVAL ? HOUR)",
            (consumer, id, hours_ago),
        )
        .await
        .expect("insert");
    }
    let deleted = prune_processed_events(&mut conn, "inventory", Duration::from_secs(24 * 3600), 2)
        .await
        .expect("prune");
    assert_eq!(deleted, 3);
    let left: Vec<(String, String)> = conn
        .query("SELECT consumer_name, event_id FROM processed_event ORDER BY event_id")
        .await
        .expect("rows");
    assert_eq!(
        left,
        [
            ("billing".to_owned(), "old-billing".to_owned()),
            ("inventory".to_owned(), "recent".to_owned())
        ]
    );
}

#[tokio::test]
async fn topic_retention_reads_retention_ms() {
    let broker = KafkaBroker::shared().await.expect("broker");
    let topic = format!("retention-{}", std::process::id());
    broker
        .create_topic_with_config(&topic, 1, &[("retention.ms", "7200000")])
        .await
        .expect("topic");
    let retention = topic_retention(&broker.bootstrap(), &topic, Duration::from_secs(10))
        .await
        .expect("retention");
    assert_eq!(retention, Some(Duration::from_secs(7200)));
}
