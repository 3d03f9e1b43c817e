//! The Kafka harness itself, against the real Apache Kafka broker process: topics, a round
//! trip read back by both readers (rdkafka and Kafka's console consumer), freeze/thaw, a
//! crash and restart that keeps the data, and a restart that wipes it.

use std::collections::BTreeSet;
use std::time::Duration;

use outbox_testkit::consume::{console_consume, read_all, ReadStop};
use outbox_testkit::kafka::KafkaBroker;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

/// An idempotent producer (its producer id comes from the broker it first talks to).
fn idempotent_producer(bootstrap: String, message_timeout_ms: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", message_timeout_ms)
        .create()
        .unwrap()
}

async fn send(
    producer: &FutureProducer,
    topic: &str,
    key: &str,
    payload: &str,
    id: &str,
) -> Result<(i32, i64), rdkafka::error::KafkaError> {
    let headers = OwnedHeaders::new().insert(Header {
        key: "id",
        value: Some(id),
    });
    producer
        .send(
            FutureRecord::to(topic)
                .key(key)
                .payload(payload)
                .headers(headers),
            Duration::from_secs(10),
        )
        .await
        .map(|delivery| (delivery.partition, delivery.offset))
        .map_err(|(error, _message)| error)
}

#[tokio::test]
async fn shared_broker_round_trip_read_by_both_readers() {
    let broker = KafkaBroker::shared().await.unwrap();
    let topic = "harness.roundtrip";
    broker.create_topic(topic, 2).await.unwrap();
    // Idempotent.
    broker.create_topic(topic, 2).await.unwrap();
    assert_eq!(broker.topics().await.unwrap().get(topic), Some(&2));

    let producer = idempotent_producer(broker.bootstrap(), "30000");
    for index in 0..10 {
        send(
            &producer,
            topic,
            &format!("k{}", index % 3),
            &format!("{{\"n\": {index}}}"),
            &format!("id-{index}"),
        )
        .await
        .unwrap();
    }
    let records = read_all(
        &broker.bootstrap(),
        &[topic, "harness.absent"],
        ReadStop::Count(10),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert_eq!(records.len(), 10, "{records:?}");
    let ids: BTreeSet<String> = records
        .iter()
        .map(|record| record.header_str("id").unwrap())
        .collect();
    assert_eq!(ids.len(), 10);

    // Kafka's own console consumer sees the same records, byte for byte.
    let console = console_consume(&broker.bootstrap(), topic, 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(console.len(), 10, "{console:?}");
    for record in &records {
        let twin = console
            .iter()
            .find(|other| other.partition == record.partition && other.offset == record.offset)
            .unwrap_or_else(|| panic!("console consumer missed {record:?}"));
        assert_eq!(twin.key, record.key);
        assert_eq!(twin.value, record.value);
        assert_eq!(twin.headers, record.headers);
        assert_eq!(twin.timestamp, record.timestamp);
    }
}

#[tokio::test]
async fn the_shared_broker_cannot_be_stopped_by_a_test() {
    let broker = KafkaBroker::shared().await.unwrap();
    // Only `&` access is handed out; the mutating calls exist on private brokers only, and
    // a `&mut` to the shared one cannot be had. What a test can do is read it.
    assert!(!broker.bootstrap().is_empty());
    assert!(!broker.is_frozen());
}

#[tokio::test]
async fn private_broker_freeze_crash_restart_and_wipe() {
    let mut broker = KafkaBroker::start().await.unwrap();
    let topic = "harness.durable";
    broker.create_topic(topic, 1).await.unwrap();
    let producer = idempotent_producer(broker.bootstrap(), "60000");
    let first = send(&producer, topic, "k", "before", "a").await.unwrap();
    assert_eq!(first, (0, 0));

    // A frozen broker does not answer; a thawed one does again.
    broker.freeze().unwrap();
    assert!(broker.is_frozen());
    let frozen = read_all(
        &broker.bootstrap(),
        &[topic],
        ReadStop::Count(1),
        Duration::from_millis(1500),
    )
    .await
    .unwrap();
    assert!(frozen.is_empty(), "a frozen broker answered: {frozen:?}");
    broker.thaw().unwrap();

    // Killed (-9) and restarted on the same ports: the acknowledged record is still there,
    // and the producer created before the crash keeps writing (its producer id survived).
    let port = broker.port();
    broker.kill();
    assert!(broker.pid().is_none());
    broker.restart().await.unwrap();
    assert_eq!(broker.port(), port);
    let second = send(&producer, topic, "k", "after", "b").await.unwrap();
    assert_eq!(second, (0, 1));
    let kept = read_all(
        &broker.bootstrap(),
        &[topic],
        ReadStop::Count(2),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    let values: Vec<&[u8]> = kept.iter().filter_map(|r| r.value.as_deref()).collect();
    assert_eq!(values, vec![&b"before"[..], &b"after"[..]], "{kept:?}");

    // A clean stop and start keeps it too.
    broker.stop().unwrap();
    broker.restart().await.unwrap();
    assert!(broker.topics().await.unwrap().contains_key(topic));

    // Restarted empty: the topic is gone.
    broker.restart_empty().await.unwrap();
    assert!(!broker.topics().await.unwrap().contains_key(topic));
}
