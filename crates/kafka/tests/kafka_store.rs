//! The Kafka checkpoint store against a real Apache Kafka broker (the testkit's shared
//! one): the shared store contract, fencing, open transactions, missing topics, an
//! unreachable cluster and a corrupt record.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_checkpoint::contract::{checkpoint_at, run_contract, StoreLocations};
use outbox_checkpoint::{CheckpointStore, CheckpointStoreError, SharedCheckpointStore};
use outbox_kafka::{
    checkpoint_record_key, checkpoint_record_value, KafkaCheckpointStore, KafkaStoreSettings,
};
use outbox_testkit::kafka::KafkaBroker;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

/// A name no other test (or earlier run against the same broker) used.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

async fn broker() -> &'static KafkaBroker {
    KafkaBroker::shared().await.expect("Kafka broker")
}

fn settings(bootstrap: &str, topic: &str, connector: &str) -> KafkaStoreSettings {
    KafkaStoreSettings {
        client_properties: vec![("bootstrap.servers".to_owned(), bootstrap.to_owned())],
        topic: topic.to_owned(),
        connector: connector.to_owned(),
        create_topic: true,
        replication_factor: 1,
        operation_timeout: Duration::from_secs(10),
    }
}

fn store(bootstrap: &str, topic: &str, connector: &str) -> KafkaCheckpointStore {
    KafkaCheckpointStore::new(settings(bootstrap, topic, connector))
}

/// One topic, one connector key per location name.
struct KafkaLocations {
    /// The broker's bootstrap address.
    bootstrap: String,
    /// The test's checkpoint topic (created by the first store).
    topic: String,
}

impl StoreLocations for KafkaLocations {
    fn open<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = SharedCheckpointStore> + Send + 'a>> {
        Box::pin(async move {
            Arc::new(store(&self.bootstrap, &self.topic, name)) as SharedCheckpointStore
        })
    }
}

fn producer(bootstrap: &str, transactional_id: Option<&str>) -> BaseProducer {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    if let Some(id) = transactional_id {
        config.set("transactional.id", id);
    }
    config.create().expect("producer")
}

/// The contract every store passes (`outbox_checkpoint::contract`), the same suite as the
/// file and MySQL stores; the topic is created by the store with `cleanup.policy=compact`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_store_passes_the_store_contract() {
    let broker = broker().await;
    let locations = KafkaLocations {
        bootstrap: broker.bootstrap(),
        topic: unique("contract-checkpoints"),
    };
    run_contract(&locations, "kafka").await;

    // The store created the topic: one partition, compacted.
    let topics = broker.topics().await.unwrap();
    assert_eq!(topics.get(&locations.topic), Some(&1), "{topics:?}");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .unwrap();
    let configs = admin
        .describe_configs(
            [&ResourceSpecifier::Topic(&locations.topic)],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    let resource = configs.into_iter().next().unwrap().unwrap();
    let policy = resource
        .get("cleanup.policy")
        .and_then(|entry| entry.value.clone());
    assert_eq!(policy.as_deref(), Some("compact"));
}

/// A second store instance with the same connector (a second relay process) fences the
/// first: the first's commits fail with `ProducerFenced`, for good, and store nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_with_the_same_connector_fences_the_first() {
    let broker = broker().await;
    let topic = unique("fencing-checkpoints");
    // Connector names of their own: the transactional id is the connector's, and the other
    // tests of this binary commit on the same broker at the same time.
    let (orders, billing) = (unique("orders"), unique("billing"));
    let first = store(&broker.bootstrap(), &topic, &orders);
    first
        .commit(&checkpoint_at(1, "binlog.000001", 100, 1))
        .await
        .unwrap();
    let second = store(&broker.bootstrap(), &topic, &orders);
    let taken_over = checkpoint_at(1, "binlog.000001", 200, 2);
    second.commit(&taken_over).await.unwrap();
    for attempt in 0..2 {
        let error = first
            .commit(&checkpoint_at(1, "binlog.000001", 300 + attempt, 3))
            .await
            .expect_err("the fenced instance must not write");
        assert!(
            matches!(error, CheckpointStoreError::ProducerFenced { .. }),
            "attempt {attempt}: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(&orders) && message.contains(&topic),
            "{message}"
        );
    }
    assert_eq!(
        store(&broker.bootstrap(), &topic, &orders)
            .load()
            .await
            .unwrap(),
        Some(taken_over.clone())
    );
    // Another connector on the same topic is not affected.
    store(&broker.bootstrap(), &topic, &billing)
        .commit(&checkpoint_at(2, "binlog.000009", 4, 9))
        .await
        .unwrap();
    second
        .commit(&checkpoint_at(1, "binlog.000001", 400, 4))
        .await
        .unwrap();
}

/// A record of an OPEN transaction (another producer, e.g. the exactly-once sink, began
/// and did not finish) is not read, and does not hang `load`; once that producer commits,
/// `load` reads the record, written with the crate's public key/value functions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_is_neither_read_nor_waited_for_forever() {
    let broker = broker().await;
    let bootstrap = broker.bootstrap();
    let topic = unique("open-txn-checkpoints");
    // A connector name of its own: the transactional id is the connector's.
    let orders = unique("orders");
    let committed = checkpoint_at(1, "binlog.000003", 500, 5);
    store(&bootstrap, &topic, &orders)
        .commit(&committed)
        .await
        .unwrap();

    let other = producer(&bootstrap, Some(&unique("other-writer")));
    let pending = checkpoint_at(1, "binlog.000003", 900, 6);
    let (key, value) = (
        checkpoint_record_key(&orders),
        checkpoint_record_value(&pending),
    );
    let other = tokio::task::spawn_blocking(move || {
        other.init_transactions(Duration::from_secs(10)).unwrap();
        other.begin_transaction().unwrap();
        other
            .send(
                BaseRecord::to(&topic)
                    .key(key.as_slice())
                    .payload(value.as_slice())
                    .partition(0),
            )
            .map_err(|(error, _)| error)
            .unwrap();
        other.flush(Duration::from_secs(10)).unwrap();
        (other, topic)
    })
    .await
    .unwrap();
    let (other, topic) = other;

    let started = Instant::now();
    let loaded = store(&bootstrap, &topic, &orders).load().await.unwrap();
    let waited = started.elapsed();
    assert_eq!(
        loaded,
        Some(committed),
        "the open transaction's record was read"
    );
    assert!(
        waited < Duration::from_secs(8),
        "load waited {waited:?} for an open transaction"
    );

    let other = tokio::task::spawn_blocking(move || {
        other.commit_transaction(Duration::from_secs(10)).unwrap();
        other
    })
    .await
    .unwrap();
    assert_eq!(
        store(&bootstrap, &topic, &orders).load().await.unwrap(),
        Some(pending),
        "a record committed by another transactional producer is the checkpoint"
    );
    drop(other);
}

/// Without `create_topics` a missing topic is an error naming the topic and the fix,
/// for load and commit; nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_without_create_topics_is_a_clear_error() {
    let broker = broker().await;
    let topic = unique("missing-checkpoints");
    let mut no_create = settings(&broker.bootstrap(), &topic, "orders");
    no_create.create_topic = false;
    let store = KafkaCheckpointStore::new(no_create);
    for error in [
        store.load().await.unwrap_err(),
        store
            .commit(&checkpoint_at(1, "binlog.000001", 4, 1))
            .await
            .unwrap_err(),
    ] {
        assert!(
            matches!(error, CheckpointStoreError::KafkaTopicMissing { .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(&topic) && message.contains("kafka.create_topics"),
            "{message}"
        );
    }
    assert!(!broker.topics().await.unwrap().contains_key(&topic));
}

/// A cluster that does not answer is a transient error naming the brokers within the
/// operation timeout, never `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_is_an_error_naming_the_brokers_not_none() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener); // nothing listens there now
    let mut unreachable = settings(&address, "outbox-relay-checkpoints", "orders");
    unreachable.operation_timeout = Duration::from_secs(2);
    let store = KafkaCheckpointStore::new(unreachable);
    let started = Instant::now();
    let error = store.load().await.expect_err("must not be None");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(error, CheckpointStoreError::Kafka { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains(&address), "{error}");
}

/// A record under the connector's key that is not a checkpoint is `Corrupt`, naming the
/// topic and connector, never `None`; a commit does not paper over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_is_an_error_naming_the_topic() {
    let broker = broker().await;
    let bootstrap = broker.bootstrap();
    let topic = unique("corrupt-checkpoints");
    broker.create_topic(&topic, 1).await.unwrap();
    let plain = producer(&bootstrap, None);
    let topic_for_send = topic.clone();
    tokio::task::spawn_blocking(move || {
        plain
            .send(
                BaseRecord::to(&topic_for_send)
                    .key("orders".as_bytes())
                    .payload("{\"format\": 1, \"binlog".as_bytes())
                    .partition(0),
            )
            .map_err(|(error, _)| error)
            .unwrap();
        plain.flush(Duration::from_secs(10)).unwrap();
    })
    .await
    .unwrap();
    let store = store(&bootstrap, &topic, "orders");
    let error = store.load().await.unwrap_err();
    assert!(
        matches!(error, CheckpointStoreError::Corrupt { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains(&topic) && error.to_string().contains("orders"),
        "{error}"
    );
    assert!(matches!(
        store.commit(&checkpoint_at(1, "binlog.000001", 4, 1)).await,
        Err(CheckpointStoreError::Corrupt { .. })
    ));
}

/// `claim_writer` (what `outbox-relay run` does at start) aborts a transaction that a
/// crashed writer with the same connector left open, so the following `load` reads the
/// committed checkpoint without waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claiming_the_writer_aborts_a_crashed_writers_open_transaction() {
    let broker = broker().await;
    let bootstrap = broker.bootstrap();
    let topic = unique("claim-checkpoints");
    let committed = checkpoint_at(1, "binlog.000004", 500, 5);
    store(&bootstrap, &topic, "orders")
        .commit(&committed)
        .await
        .unwrap();
    // A "crashed" writer: same transactional id, a transaction begun and never finished.
    let crashed = producer(
        &bootstrap,
        Some(&outbox_kafka::checkpoint_transactional_id("orders")),
    );
    let (key, value) = (
        checkpoint_record_key("orders"),
        checkpoint_record_value(&checkpoint_at(1, "binlog.000004", 900, 6)),
    );
    let topic_for_send = topic.clone();
    let crashed = tokio::task::spawn_blocking(move || {
        crashed.init_transactions(Duration::from_secs(10)).unwrap();
        crashed.begin_transaction().unwrap();
        crashed
            .send(
                BaseRecord::to(&topic_for_send)
                    .key(key.as_slice())
                    .payload(value.as_slice())
                    .partition(0),
            )
            .map_err(|(error, _)| error)
            .unwrap();
        crashed.flush(Duration::from_secs(10)).unwrap();
        crashed
    })
    .await
    .unwrap();

    let restarted = store(&bootstrap, &topic, "orders");
    restarted.claim_writer().await.unwrap();
    let started = Instant::now();
    assert_eq!(restarted.load().await.unwrap(), Some(committed));
    assert!(
        started.elapsed() < outbox_kafka::OPEN_TRANSACTION_WAIT,
        "load waited {:?} although the open transaction was aborted",
        started.elapsed()
    );
    // The crashed writer is fenced.
    let fenced = tokio::task::spawn_blocking(move || {
        crashed.commit_transaction(Duration::from_secs(10)).is_err()
    })
    .await
    .unwrap();
    assert!(fenced, "the old writer could still commit");
}
