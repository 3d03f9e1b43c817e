//! The exactly-once sink against the real Apache Kafka broker of the test harness, read
//! back by Kafka's own console consumer with `--isolation-level read_committed`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_binlog::{BinlogPosition, Flavor};
use outbox_checkpoint::{AckToken, AckTracker, Checkpoint, CheckpointPosition, SourceIdentity};
use outbox_testkit::consume::{console_consume_isolated, read_all, ReadStop};
use outbox_testkit::kafka::KafkaBroker;
use rdkafka::producer::Producer;
use tokio::sync::{mpsc, watch, Notify};

use super::*;
use crate::config::{DeadLetterConfig, KafkaConfig};
use crate::dead_letter::RecordOrigin;

struct TestTicket(AckToken);

impl SequencedTicket for TestTicket {
    fn sequence(&self) -> u64 {
        self.0.sequence()
    }
}

fn identity() -> SourceIdentity {
    SourceIdentity {
        flavor: Flavor::Mariadb,
        server_id: 1,
        server_uuid: None,
    }
}

fn position(offset: u64) -> CheckpointPosition {
    CheckpointPosition::at(BinlogPosition::new("binlog.000001", offset))
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn settings(
    brokers: &str,
    transactional_id: &str,
    checkpoint_topic: &str,
) -> TransactionalSinkSettings {
    let kafka: KafkaConfig = toml::from_str(&format!(
        "brokers = \"{brokers}\"\ncreate_topics = true\ntopic_replication_factor = 1\nlinger_ms = 1\nretry_initial_backoff_ms = 50\nretry_max_backoff_ms = 200\nadmin_timeout_ms = 10000"
    ))
    .unwrap();
    TransactionalSinkSettings {
        sink: KafkaSinkSettings {
            startup_attempts: 0,
            dead_letter: DeadLetterConfig {
                enabled: false,
                ..DeadLetterConfig::default()
            },
            ..KafkaSinkSettings::from_config(&kafka, 64, Duration::from_millis(5000))
        },
        transactional_id: transactional_id.to_owned(),
        checkpoint_topic: checkpoint_topic.to_owned(),
        checkpoint_key: b"test".to_vec(),
        max_interval: Duration::from_millis(200),
        max_records: 3,
        max_bytes: 1 << 20,
        idle_interval: Duration::from_secs(60),
        transaction_timeout: Duration::from_secs(30),
    }
}

fn record(topic: &str, n: u64) -> OutboundRecord {
    OutboundRecord {
        topic: topic.into(),
        key: Some(format!("key-{}", n % 2).into_bytes()),
        payload: Some(format!("payload-{n}").into_bytes()),
        headers: vec![("id".into(), format!("event-{n}").into_bytes())],
        null_headers: Vec::new(),
        timestamp_ms: None,
        partition: None,
    }
}

/// The pipeline's boundary rule ([`AckTracker::exactly_once_boundary`]) on a test tracker
/// (no failover here, so the GTID-only position is never used).
fn boundary_of(
    tracker: Arc<Mutex<AckTracker>>,
) -> impl FnMut(Option<u64>) -> Option<BatchBoundary> + Send {
    let gtid_only = outbox_binlog::BinlogPosition::new("", 4);
    move |last_sent| {
        tracker
            .lock()
            .unwrap()
            .exactly_once_boundary(&identity(), last_sent, &gtid_only)
    }
}

/// Registers `count` records of one binlog transaction, ends it at `end` when given, and
/// sends them to the sink in one batch.
async fn feed_transaction(
    tracker: &Arc<Mutex<AckTracker>>,
    input: &mpsc::Sender<Vec<SinkItem<TestTicket>>>,
    topic: &str,
    first: u64,
    count: u64,
    end: Option<u64>,
) {
    let tokens: Vec<AckToken> = {
        let mut tracker = tracker.lock().unwrap();
        let tokens = (0..count).map(|_| tracker.add_record()).collect();
        if let Some(end) = end {
            tracker.end_transaction(position(end));
        }
        tokens
    };
    // The transaction's records as one input batch, as the router hands them on.
    let batch = (first..)
        .zip(tokens)
        .map(|(n, token)| SinkItem {
            record: record(topic, n),
            ticket: TestTicket(token),
            origin: RecordOrigin::default(),
        })
        .collect();
    input.send(batch).await.unwrap();
}

/// Header `id`s of everything `topic` holds for a `read_committed` reader (Kafka's
/// console consumer).
async fn committed_ids(bootstrap: &str, topic: &str, quiet: Duration) -> Vec<String> {
    console_consume_isolated(bootstrap, topic, 100, quiet, "read_committed")
        .await
        .expect("console consumer")
        .iter()
        .filter_map(|r| r.header_str("id"))
        .collect()
}

/// Starts an exactly-once sink on the test tracker; returns its input and its task.
#[allow(clippy::type_complexity)]
fn start_sink(
    settings: TransactionalSinkSettings,
    tracker: &Arc<Mutex<AckTracker>>,
) -> (
    mpsc::Sender<Vec<SinkItem<TestTicket>>>,
    Arc<Notify>,
    tokio::task::JoinHandle<Result<TransactionalSummary, SinkError>>,
    watch::Sender<bool>,
) {
    let progress = Arc::new(Notify::new());
    let (input, input_rx) = mpsc::channel(16);
    let acker = tracker.clone();
    let controller = watch::channel(false).0;
    let sink = tokio::spawn(run_transactional_sink(
        settings,
        input_rx,
        move |ticket: TestTicket| acker.lock().unwrap().ack(ticket.0).unwrap(),
        boundary_of(tracker.clone()),
        progress.clone(),
        RejectedRecords::default(),
        None,
        Arc::new(SinkMetrics::new(&prometheus::Registry::new()).unwrap()),
        controller.subscribe(),
    ));
    (input, progress, sink, controller)
}

/// Waits until the tracker passed `records` records (their batch committed).
async fn wait_until_passed(tracker: &Arc<Mutex<AckTracker>>, records: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while tracker.lock().unwrap().records_passed() < records && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_batches_are_visible_to_read_committed_consumers_and_an_aborted_one_is_not() {
    let broker = KafkaBroker::shared().await.expect("kafka broker");
    let topic = unique("eos-sink");
    let checkpoint_topic = unique("eos-sink-checkpoints");
    let tracker = Arc::new(Mutex::new(AckTracker::new(position(4))));
    let (input, progress, sink, _controller) = start_sink(
        settings(
            &broker.bootstrap(),
            &unique("eos-sink-id"),
            &checkpoint_topic,
        ),
        &tracker,
    );
    // Three whole binlog transactions, then one that never ends (the input closes inside
    // it: its records were sent inside a Kafka transaction that must be aborted).
    for transaction in 0..3u64 {
        feed_transaction(
            &tracker,
            &input,
            &topic,
            transaction * 3,
            3,
            Some(100 * (transaction + 1)),
        )
        .await;
        progress.notify_one();
    }
    // Let the third batch commit before the unfinished transaction's records arrive.
    wait_until_passed(&tracker, 9).await;
    feed_transaction(&tracker, &input, &topic, 9, 2, None).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(input);
    let summary = tokio::time::timeout(Duration::from_secs(60), sink)
        .await
        .expect("the sink ends when its input closes")
        .expect("sink task")
        .expect("sink result");
    assert_eq!(summary.sink.delivered, 9, "{summary:?}");
    let checkpoint = summary.checkpoint.expect("a checkpoint was committed");
    assert_eq!(
        checkpoint.position.binlog,
        BinlogPosition::new("binlog.000001", 300)
    );

    let ids = committed_ids(&broker.bootstrap(), &topic, Duration::from_secs(15)).await;
    let expected: Vec<String> = (0..9).map(|n| format!("event-{n}")).collect();
    let mut sorted = ids.clone();
    sorted.sort_by_key(|id| id.trim_start_matches("event-").parse::<u64>().unwrap_or(0));
    assert_eq!(
        sorted, expected,
        "read_committed sees each committed event once, none of the aborted batch"
    );
    // The aborted records did reach the log: only the isolation level hides them.
    let uncommitted = read_all(
        &broker.bootstrap(),
        &[topic.as_str()],
        ReadStop::Count(11),
        Duration::from_secs(15),
    )
    .await
    .expect("read_uncommitted reader");
    let uncommitted_ids: Vec<String> = uncommitted
        .iter()
        .filter_map(|r| r.header_str("id"))
        .collect();
    assert!(
        uncommitted_ids.contains(&"event-9".to_string()) && uncommitted_ids.contains(&"event-10".to_string()),
        "the aborted transaction's records are in the log, invisible to read_committed: {uncommitted_ids:?}"
    );
    // The checkpoint record committed with the last batch.
    let checkpoints = console_consume_isolated(
        &broker.bootstrap(),
        &checkpoint_topic,
        100,
        Duration::from_secs(15),
        "read_committed",
    )
    .await
    .expect("console consumer on the checkpoint topic");
    let last = checkpoints.last().expect("checkpoint records");
    assert_eq!(last.key.as_deref(), Some(b"test".as_slice()));
    let stored = Checkpoint::from_json(
        last.value
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default()
            .as_ref(),
    )
    .expect("checkpoint JSON");
    assert_eq!(
        stored.position.binlog,
        BinlogPosition::new("binlog.000001", 300)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_producer_with_the_same_transactional_id_fences_the_sink() {
    let broker = KafkaBroker::shared().await.expect("kafka broker");
    let topic = unique("eos-fence");
    let transactional_id = unique("eos-fence-id");
    let settings = settings(
        &broker.bootstrap(),
        &transactional_id,
        &unique("eos-fence-checkpoints"),
    );
    let tracker = Arc::new(Mutex::new(AckTracker::new(position(4))));
    let (input, _progress, sink, _controller) = start_sink(settings.clone(), &tracker);
    feed_transaction(&tracker, &input, &topic, 0, 3, Some(100)).await;
    wait_until_passed(&tracker, 3).await;
    // Another relay with the same connector name starts.
    let properties = transactional_properties(
        &settings.sink.client_properties,
        &transactional_id,
        settings.transaction_timeout,
    );
    let newer: RelayProducerForTests = super::producer::create_kafka_client(
        &properties,
        crate::kafka_context::RelayClientContext::default(),
    )
    .unwrap();
    tokio::task::spawn_blocking({
        let newer = newer.clone();
        move || newer.init_transactions(Duration::from_secs(30))
    })
    .await
    .unwrap()
    .expect("the newer producer initialises");
    feed_transaction(&tracker, &input, &topic, 3, 3, Some(200)).await;
    let outcome = tokio::time::timeout(Duration::from_secs(60), sink)
        .await
        .expect("the fenced sink stops")
        .expect("sink task");
    match outcome {
        Err(SinkError::Fenced {
            transactional_id: id,
            ..
        }) => assert_eq!(id, transactional_id),
        other => panic!("expected SinkError::Fenced, got {other:?}"),
    }
    let ids = committed_ids(&broker.bootstrap(), &topic, Duration::from_secs(10)).await;
    assert_eq!(
        ids,
        ["event-0", "event-1", "event-2"],
        "nothing of the fenced producer is visible"
    );
}

type RelayProducerForTests = super::producer::RelayProducer;
