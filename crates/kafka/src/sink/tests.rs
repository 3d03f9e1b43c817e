//! Sink tests against librdkafka's mock cluster.

use super::*;
use outbox_testkit::consume::{read_all, ReadStop};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use std::sync::Arc;
use std::sync::Mutex;
use tokio::sync::{mpsc, watch};

/// A fresh set of sink collectors (in a registry of its own) as the sink's observer.
fn new_metrics() -> Arc<SinkMetrics> {
    Arc::new(SinkMetrics::new(&prometheus::Registry::new()).unwrap())
}

/// A test's shutdown signal: `subscribe()` hands the sink its receiver, `send_replace(true)`
/// requests shutdown.
fn shutdown_controller() -> watch::Sender<bool> {
    watch::channel(false).0
}

/// The `[kafka]` keys every sink test adds to `brokers`: short backoffs and timeouts so
/// faults resolve in seconds.
const TEST_KAFKA_KEYS: &str = "linger_ms = 1\nstall_timeout_ms = 1000\nretry_initial_backoff_ms = 50\nretry_max_backoff_ms = 200\nadmin_timeout_ms = 5000";

/// Sink settings for `brokers` built the way production builds them
/// ([`KafkaSinkSettings::from_config`], so with every protected producer property), plus
/// `extra_kafka` lines in `[kafka]`; dead letters off.
fn settings_with(brokers: &str, extra_kafka: &str) -> KafkaSinkSettings {
    let kafka: KafkaConfig = toml::from_str(&format!(
        "brokers = \"{brokers}\"\n{TEST_KAFKA_KEYS}\n{extra_kafka}"
    ))
    .unwrap();
    KafkaSinkSettings {
        startup_attempts: 0,
        dead_letter: DeadLetterConfig {
            enabled: false,
            ..DeadLetterConfig::default()
        },
        ..KafkaSinkSettings::from_config(&kafka, 16, Duration::from_millis(5000))
    }
}

fn settings(brokers: &str) -> KafkaSinkSettings {
    settings_with(brokers, "")
}

/// The sink tests run with the producer properties production uses.
#[test]
fn sink_tests_use_the_production_producer_properties() {
    let properties: BTreeMap<String, String> =
        settings("b:1").client_properties.into_iter().collect();
    for (key, value) in crate::config::PROTECTED_KAFKA_PROPERTIES {
        assert_eq!(
            properties.get(*key).map(String::as_str),
            Some(*value),
            "{key}"
        );
    }
}

fn record(topic: &str, n: u32) -> OutboundRecord {
    OutboundRecord {
        topic: topic.into(),
        key: Some(format!("key-{}", n % 3).into_bytes()),
        payload: Some(format!("payload-{n}").into_bytes()),
        headers: vec![("id".into(), format!("event-{n}").into_bytes())],
        null_headers: Vec::new(),
        timestamp_ms: None,
        partition: None,
    }
}

/// Records per input batch in [`run_with`]: not a divisor of the tests' counts, so the last
/// batch is a short one.
const RUN_WITH_BATCH: u32 = 7;

/// Runs the sink over `count` records, fed in batches of [`RUN_WITH_BATCH`]; returns the
/// delivered tickets (in ack order).
async fn run_with(
    settings: KafkaSinkSettings,
    topic: &str,
    count: u32,
    during: impl std::future::Future<Output = ()>,
    metrics: Arc<SinkMetrics>,
) -> (Result<SinkSummary, SinkError>, Vec<u32>) {
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel(4);
    let controller = shutdown_controller();
    let sink_delivered = delivered.clone();
    let sink = tokio::spawn(run_kafka_sink(
        settings,
        rx,
        move |ticket: u32| sink_delivered.lock().unwrap().push(ticket),
        metrics,
        controller.subscribe(),
    ));
    let topic = topic.to_owned();
    let feeder = tokio::spawn(async move {
        for first in (0..count).step_by(RUN_WITH_BATCH as usize) {
            let batch = (first..count.min(first + RUN_WITH_BATCH))
                .map(|n| SinkItem {
                    record: record(&topic, n),
                    ticket: n,
                    origin: RecordOrigin::default(),
                })
                .collect();
            if tx.send(batch).await.is_err() {
                break;
            }
        }
    });
    during.await;
    feeder.await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(60), sink)
        .await
        .expect("sink finishes")
        .unwrap();
    let tickets = delivered.lock().unwrap().clone();
    (result, tickets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_every_record_and_reports_each_ticket_once() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("sink.ok", 3, 1).unwrap();
    let metrics = new_metrics();
    let (result, mut tickets) = run_with(
        settings(&cluster.bootstrap_servers()),
        "sink.ok",
        200,
        async {},
        metrics.clone(),
    )
    .await;
    let summary = result.unwrap();
    assert_eq!(summary.delivered, 200);
    assert_eq!(summary.abandoned, 0);
    tickets.sort_unstable();
    assert_eq!(tickets, (0..200).collect::<Vec<_>>());
    assert_eq!(metrics.records_delivered.get(), 200);
    assert_eq!(metrics.in_flight.get(), 0);
}

/// With a slow broker, many records are in flight at once (sends never wait for the
/// previous ack) but never more than `max_in_flight`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_many_records_in_flight_up_to_the_limit() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("sink.slow", 4, 1).unwrap();
    cluster
        .broker_round_trip_time(1, Duration::from_millis(100))
        .unwrap();
    let metrics = new_metrics();
    let mut limited = settings(&cluster.bootstrap_servers());
    limited.max_in_flight = 8;
    let sampled_max = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let metrics = metrics.clone();
        let sampled_max = sampled_max.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                sampled_max.fetch_max(
                    metrics.in_flight.get(),
                    std::sync::atomic::Ordering::Relaxed,
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let (result, tickets) = run_with(limited, "sink.slow", 64, async {}, metrics.clone()).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.await.unwrap();
    assert_eq!(result.unwrap().delivered, 64);
    assert_eq!(tickets.len(), 64);
    let max = sampled_max.load(std::sync::atomic::Ordering::Relaxed);
    assert!(max <= 8, "in flight reached {max} with a limit of 8");
    assert!(max >= 4, "only {max} in flight: sends are not pipelined");
}

/// A batch larger than what may be in flight is split: the sink takes what fits, keeps the
/// rest for later passes, never holds more than `max_in_flight` unacked records, and sends
/// the whole batch in its order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_the_in_flight_limit_is_split_and_keeps_its_order() {
    let cluster = MockCluster::new(1).unwrap();
    // One partition: its acks, and what a reader finds, come in sending order.
    cluster.create_topic("sink.split", 1, 1).unwrap();
    let metrics = new_metrics();
    let mut limited = settings(&cluster.bootstrap_servers());
    limited.max_in_flight = 4;
    let (tx, rx) = mpsc::channel(1);
    let controller = shutdown_controller();
    // Each ticket with the in-flight gauge as the ack finds it: the gauge is set after every
    // record taken and every ack, so its largest value is the most records ever unacked.
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let delivered = delivered.clone();
        let gauge = metrics.clone();
        tokio::spawn(run_kafka_sink(
            limited,
            rx,
            move |ticket: u32| {
                delivered
                    .lock()
                    .unwrap()
                    .push((ticket, gauge.in_flight.get()))
            },
            metrics.clone(),
            controller.subscribe(),
        ))
    };
    let batch = (0..40)
        .map(|n| SinkItem {
            record: record("sink.split", n),
            ticket: n,
            origin: RecordOrigin::default(),
        })
        .collect();
    tx.send(batch).await.unwrap();
    drop(tx);
    let summary = tokio::time::timeout(Duration::from_secs(60), sink)
        .await
        .expect("sink finishes")
        .unwrap()
        .unwrap();
    assert_eq!(summary.delivered, 40);
    let delivered = delivered.lock().unwrap().clone();
    let tickets: Vec<u32> = delivered.iter().map(|(ticket, _)| *ticket).collect();
    assert_eq!(tickets, (0..40).collect::<Vec<_>>());
    let most = delivered.iter().map(|(_, in_flight)| *in_flight).max();
    assert!(
        most.is_some_and(|most| (1..=4).contains(&most)),
        "in flight reached {most:?} with a limit of 4"
    );
    assert_eq!(metrics.in_flight.get(), 0);
    let ids: Vec<String> = read_topic(&cluster.bootstrap_servers(), "sink.split", 40)
        .await
        .iter()
        .map(|record| record.header("id").unwrap_or_default().to_owned())
        .collect();
    let expected: Vec<String> = (0..40).map(|n| format!("event-{n}")).collect();
    assert_eq!(ids, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_topic_without_creation_is_an_error_naming_it() {
    let cluster = MockCluster::new(1).unwrap();
    let (result, tickets) = run_with(
        settings(&cluster.bootstrap_servers()),
        "sink.absent",
        1,
        async {},
        new_metrics(),
    )
    .await;
    let error = result.unwrap_err();
    assert!(matches!(error, SinkError::TopicMissing { ref topic } if topic == "sink.absent"));
    assert!(error.to_string().contains("sink.absent"), "{error}");
    assert!(tickets.is_empty());
}

/// Produce requests fail with retriable errors for longer than `stall_timeout`: librdkafka
/// retries without a time limit, the stall watchdog purges and rebuilds the producer;
/// nothing is reported while the errors last, and everything once they clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retriable_errors_hold_tickets_back_until_they_clear() {
    let run = run_through_outage(
        "sink.flaky",
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        20,
        false,
    )
    .await;
    let metrics = run.metrics;
    assert_eq!(run.delivered_during_outage, Some(0));
    assert_eq!(run.result.unwrap().delivered, 20);
    assert_eq!(run.tickets, (0..20).collect::<Vec<_>>());
    assert!(
        metrics.producer_stalls.get() > 0,
        "the stall watchdog fired"
    );
    assert!(
        metrics.producer_recreations.get() > 0,
        "a stall rebuilds the producer"
    );
    assert_eq!(
        metrics
            .delivery_errors
            .with_label_values(&["transient"])
            .get(),
        0,
        "librdkafka never gives up on a retriable error by itself"
    );
}

/// An idempotence sequence error the producer cannot recover from raises a fatal
/// error: the sink rebuilds the producer and resends, losing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_producer_error_rebuilds_the_producer_and_resends() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("sink.fatal", 1, 1).unwrap();
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER; 3],
    );
    let metrics = new_metrics();
    let (result, mut tickets) = run_with(
        settings(&cluster.bootstrap_servers()),
        "sink.fatal",
        10,
        async {},
        metrics.clone(),
    )
    .await;
    assert_eq!(result.unwrap().delivered, 10);
    tickets.sort_unstable();
    assert_eq!(tickets, (0..10).collect::<Vec<_>>());
    assert!(metrics.producer_recreations.get() > 0);
    assert!(metrics.delivery_errors.with_label_values(&["fatal"]).get() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_kafka_rejects_for_good_stops_the_sink() {
    let run = run_with_errors(
        "sink.reject",
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
        5,
        false,
    )
    .await;
    let error = run.result.unwrap_err();
    assert!(
        matches!(error, SinkError::Permanent { ref topic, .. } if topic == "sink.reject"),
        "{error:?}"
    );
    assert!(run.tickets.is_empty());
}

fn dead_letter_settings(brokers: &str) -> KafkaSinkSettings {
    KafkaSinkSettings {
        startup_attempts: 0,
        dead_letter: DeadLetterConfig::default(),
        ..settings(brokers)
    }
}

/// A record read back from a topic, as lossy UTF-8 text.
#[derive(Debug)]
struct TextRecord {
    /// The key.
    key: Option<String>,
    /// The value.
    value: Option<String>,
    /// The headers in order (a null value as empty text).
    headers: Vec<(String, String)>,
}

impl TextRecord {
    /// The value of the first header called `name`.
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Reads `topic` from its start with a consumer that shares no code with the sink, until
/// `count` records arrived or 10 s passed; what arrived by then.
async fn read_topic(brokers: &str, topic: &str, count: usize) -> Vec<TextRecord> {
    read_topic_until(brokers, topic, ReadStop::Count(count)).await
}

/// Reads `topic` from its start until `stop` or 10 s passed; what arrived by then.
async fn read_topic_until(brokers: &str, topic: &str, stop: ReadStop) -> Vec<TextRecord> {
    let text = |bytes: Option<Vec<u8>>| bytes.map(|b| String::from_utf8_lossy(&b).into_owned());
    read_all(brokers, &[topic], stop, Duration::from_secs(10))
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|record| TextRecord {
            key: text(record.key),
            value: text(record.value),
            headers: record
                .headers
                .into_iter()
                .map(|(name, value)| (name, text(value).unwrap_or_default()))
                .collect(),
        })
        .collect()
}

/// A sink run of one record to `topic` with dead letters on, against a mock cluster
/// (with `topic` and `outbox.dlq`) whose next `rejections` produce requests fail with
/// MSG_SIZE_TOO_LARGE.
struct RejectionRun {
    /// Kept alive for reading the topics back.
    _cluster: MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    /// The cluster's bootstrap servers.
    brokers: String,
    /// What the sink returned.
    result: Result<SinkSummary, SinkError>,
    /// Tickets reported, in order.
    tickets: Vec<u32>,
    /// The run's counters.
    metrics: Arc<SinkMetrics>,
    /// Records delivered while the errors lasted (with an outage that clears).
    delivered_during_outage: Option<u64>,
}

async fn run_with_rejections(topic: &str, rejections: usize) -> RejectionRun {
    run_with_errors(
        topic,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
        rejections,
        true,
    )
    .await
}

/// `records` records to `topic` while every produce request fails with `error` for
/// 2.5 s (then the errors are cleared); counts what was delivered meanwhile.
async fn run_through_outage(
    topic: &str,
    error: RDKafkaRespErr,
    records: u32,
    dead_letters: bool,
) -> RejectionRun {
    run_with_error_setup(topic, error, 100_000, dead_letters, records, true).await
}

/// [`run_with_rejections`] with any produce error, with dead letters on or off.
async fn run_with_errors(
    topic: &str,
    error: RDKafkaRespErr,
    count: usize,
    dead_letters: bool,
) -> RejectionRun {
    run_with_error_setup(topic, error, count, dead_letters, 1, false).await
}

/// The common body: a mock cluster with `topic` and `outbox.dlq` whose next `count`
/// produce requests fail with `error` (cleared after 2.5 s when `clear` is set), and
/// `records` records sent through the sink.
async fn run_with_error_setup(
    topic: &str,
    error: RDKafkaRespErr,
    count: usize,
    dead_letters: bool,
    records: u32,
    clear: bool,
) -> RejectionRun {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(topic, 1, 1).unwrap();
    cluster.create_topic("outbox.dlq", 1, 1).unwrap();
    cluster.request_errors(RDKafkaApiKey::Produce, &vec![error; count]);
    let metrics = new_metrics();
    let brokers = cluster.bootstrap_servers();
    let settings = if dead_letters {
        dead_letter_settings(&brokers)
    } else {
        settings(&brokers)
    };
    let seen = Arc::new(Mutex::new(None));
    let during = {
        let (observer, seen, cluster) = (metrics.clone(), seen.clone(), &cluster);
        async move {
            if clear {
                tokio::time::sleep(Duration::from_millis(2500)).await;
                *seen.lock().unwrap() = Some(observer.records_delivered.get());
                cluster.clear_request_errors(RDKafkaApiKey::Produce);
            }
        }
    };
    let (result, mut tickets) = run_with(settings, topic, records, during, metrics.clone()).await;
    tickets.sort_unstable();
    let delivered_during_outage = *seen.lock().unwrap();
    RejectionRun {
        _cluster: cluster,
        brokers,
        result,
        tickets,
        metrics,
        delivered_during_outage,
    }
}

/// Permanent rejections for fewer sends than the budget: resent and delivered to the
/// original topic, no dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_rejections_within_the_budget_are_resent_not_dead_lettered() {
    let run = run_with_rejections("sink.budget", 2).await;
    assert_eq!(run.result.unwrap().delivered, 1);
    assert_eq!(run.tickets, vec![0]);
    assert_eq!(
        run.metrics
            .dead_lettered
            .with_label_values(&["message_too_large"])
            .get(),
        0
    );
    let delivered = read_topic(&run.brokers, "sink.budget", 1).await;
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].value.as_deref(), Some("payload-0"));
}

/// Failure test 3 with dead letters on: retriable errors for far more than
/// `max_attempts` sends never count against the budget: nothing is reported while they
/// last, everything is delivered to its own topic once they clear, no dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retriable_errors_are_never_dead_lettered() {
    let run = run_through_outage(
        "sink.retry",
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        5,
        true,
    )
    .await;
    let (metrics, brokers) = (run.metrics, run.brokers);
    assert_eq!(
        run.delivered_during_outage,
        Some(0),
        "held back during the errors"
    );
    assert_eq!(run.result.unwrap().delivered, 5);
    assert_eq!(run.tickets, vec![0, 1, 2, 3, 4]);
    assert!(metrics.producer_stalls.get() >= 1, "stalls, not failures");
    assert_eq!(
        metrics
            .delivery_errors
            .with_label_values(&["permanent"])
            .get(),
        0
    );
    assert_eq!(read_topic(&brokers, "sink.retry", 5).await.len(), 5);
    assert!(
        read_topic(&brokers, "outbox.dlq", 1).await.is_empty(),
        "no dead letter"
    );
}

/// Rejected on every one of `max_attempts` sends: the record goes to the dead-letter
/// topic with its key, a bounded payload prefix and the failure headers, and its ticket
/// is reported only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_rejected_for_the_whole_budget_is_dead_lettered_then_acked() {
    let run = run_with_rejections("sink.dead", 3).await;
    let brokers = run.brokers;
    assert_eq!(run.result.unwrap().delivered, 1);
    assert_eq!(run.tickets, vec![0]);
    assert_eq!(
        run.metrics
            .dead_lettered
            .with_label_values(&["message_too_large"])
            .get(),
        1
    );
    let letters = read_topic(&brokers, "outbox.dlq", 1).await;
    assert_eq!(letters.len(), 1, "one dead letter");
    let header = |name: &str| letters[0].header(name).map(str::to_owned);
    assert_eq!(letters[0].key.as_deref(), Some("key-0"));
    assert_eq!(header("id").as_deref(), Some("event-0"));
    assert_eq!(header("dlq.original_topic").as_deref(), Some("sink.dead"));
    assert_eq!(header("dlq.attempts").as_deref(), Some("3"));
    assert_eq!(
        header("dlq.error_class").as_deref(),
        Some("message_too_large")
    );
    assert_eq!(header("dlq.payload_size").as_deref(), Some("9"));
    assert!(read_topic(&brokers, "sink.dead", 1).await.is_empty());
}

/// `dlq replay` on the original topic: a dead letter whose payload was kept whole
/// (it fits the prefix) goes back with the same key, payload and `id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_replayed_to_its_original_topic_with_the_same_id() {
    let run = run_with_rejections("sink.auth", 3).await;
    let brokers = run.brokers;
    assert_eq!(run.result.unwrap().delivered, 1);
    let kafka: KafkaConfig = toml::from_str(&format!("brokers = \"{brokers}\"")).unwrap();
    let letters =
        crate::dead_letter::read_dead_letters(&kafka, "outbox.dlq", Duration::from_secs(20))
            .await
            .unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].original_topic.as_deref(), Some("sink.auth"));
    assert_eq!(letters[0].error_class, "message_too_large");
    assert!(!letters[0].payload_truncated);
    let selection = crate::dead_letter::ReplaySelection::Id("event-0".into());
    let report = crate::dead_letter::replay_dead_letters(&letters, &selection, None, &kafka)
        .await
        .unwrap();
    assert!(
        matches!(report.as_slice(), [(_, crate::dead_letter::ReplayOutcome::Published { topic, .. })] if topic == "sink.auth"),
        "{report:?}"
    );
    let replayed = read_topic(&brokers, "sink.auth", 1).await;
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].key.as_deref(), Some("key-0"));
    assert_eq!(replayed[0].value.as_deref(), Some("payload-0"));
    assert_eq!(
        replayed[0].headers,
        vec![("id".to_string(), "event-0".to_string())]
    );
}

/// The dead letter itself rejected: the sink stops naming the dead-letter topic and
/// reports nothing (never a drop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_dead_letter_stops_the_sink() {
    let run = run_with_errors(
        "sink.dead2",
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        10,
        true,
    )
    .await;
    let error = run.result.unwrap_err();
    assert!(
        matches!(error, SinkError::Permanent { ref topic, .. } if topic == "outbox.dlq"),
        "{error:?}"
    );
    assert!(run.tickets.is_empty());
}

/// A record above the producer's `message.max.bytes` is refused before it is sent; it
/// is dead-lettered with a bounded prefix like a broker rejection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_above_message_max_bytes_is_dead_lettered_with_a_prefix() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("sink.big", 1, 1).unwrap();
    cluster.create_topic("outbox.dlq", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let mut settings = dead_letter_settings(&brokers);
    settings
        .client_properties
        .push(("message.max.bytes".into(), "10000".into()));
    settings.dead_letter.payload_prefix_bytes = 100;
    let metrics = new_metrics();
    let (tx, rx) = mpsc::channel(4);
    let controller = shutdown_controller();
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let sink_delivered = delivered.clone();
    let sink = tokio::spawn(run_kafka_sink(
        settings,
        rx,
        move |ticket: u32| sink_delivered.lock().unwrap().push(ticket),
        metrics.clone(),
        controller.subscribe(),
    ));
    let mut big = record("sink.big", 0);
    big.payload = Some(vec![b'z'; 50_000]);
    tx.send(vec![SinkItem {
        record: big,
        ticket: 0,
        origin: RecordOrigin::default(),
    }])
    .await
    .unwrap();
    tx.send(vec![SinkItem {
        record: record("sink.big", 1),
        ticket: 1,
        origin: RecordOrigin::default(),
    }])
    .await
    .unwrap();
    drop(tx);
    let summary = tokio::time::timeout(Duration::from_secs(30), sink)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(summary.delivered, 2);
    let mut tickets = delivered.lock().unwrap().clone();
    tickets.sort_unstable();
    assert_eq!(
        tickets,
        vec![0, 1],
        "acks to different topics may come in any order"
    );
    let letters = read_topic(&brokers, "outbox.dlq", 1).await;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].value.as_ref().map(String::len), Some(100));
    assert!(letters[0]
        .headers
        .contains(&("dlq.payload_size".into(), "50000".into())));
    assert!(letters[0]
        .headers
        .contains(&("dlq.payload_truncated".into(), "true".into())));
    let later = read_topic(&brokers, "sink.big", 1).await;
    assert_eq!(later[0].value.as_deref(), Some("payload-1"));
}

#[test]
fn protected_properties_win_over_pass_through() {
    let mut kafka: KafkaConfig = toml::from_str(
        "brokers = \"b:1\"\n[properties]\n\"linger.ms\" = \"50\"\n\"client.id\" = \"x\"",
    )
    .unwrap();
    kafka.properties.insert("acks".into(), "1".into());
    let properties: BTreeMap<String, String> = producer_properties(&kafka).into_iter().collect();
    assert_eq!(properties["bootstrap.servers"], "b:1");
    assert_eq!(properties["linger.ms"], "50");
    assert_eq!(properties["client.id"], "x");
    assert_eq!(properties["acks"], "all");
    assert_eq!(properties["enable.idempotence"], "true");
    assert_eq!(properties["message.timeout.ms"], "0", "no delivery timeout");
}

#[test]
fn error_classes() {
    use RDKafkaErrorCode as C;
    for (code, expected) in [
        (C::MessageTimedOut, FailureKind::Transient),
        (C::NotLeaderForPartition, FailureKind::Transient),
        (C::Fatal, FailureKind::Fatal),
        (C::MessageSizeTooLarge, FailureKind::Permanent),
        (C::TopicAuthorizationFailed, FailureKind::Permanent),
        (C::UnknownPartition, FailureKind::Permanent),
    ] {
        assert_eq!(
            classify_delivery_error(&KafkaError::MessageProduction(code)),
            expected,
            "{code:?}"
        );
    }
}

/// Issue 11 item 12: every compression `kafka.compression` documents is compiled in: a
/// producer with it is created (zstd was offered but missing from this build once).
#[test]
fn every_documented_compression_creates_a_producer() {
    for codec in crate::config::KAFKA_COMPRESSIONS {
        let kafka: KafkaConfig = toml::from_str(&format!(
            "brokers = \"127.0.0.1:1\"\ncompression = \"{codec}\""
        ))
        .unwrap();
        let created: Result<rdkafka::producer::FutureProducer, KafkaClientError> =
            create_kafka_client(
                &producer_properties(&kafka),
                rdkafka::client::DefaultClientContext,
            );
        if let Err(error) = created {
            panic!("compression `{codec}`: {error}");
        }
    }
}

/// Issue 11 item 12: a client librdkafka refuses names librdkafka's reason, for a single
/// property and for a combination refused only when the client is created.
#[test]
fn a_refused_kafka_client_names_librdkafkas_reason() {
    let base = producer_properties(&toml::from_str("brokers = \"127.0.0.1:1\"").unwrap());
    for (key, value, reason) in [
        (
            "compression.type",
            "brotli",
            "Invalid value \"brotli\" for configuration property \"compression.codec\"",
        ),
        (
            "max.in.flight",
            "10",
            "`max.in.flight` must be set <= 5 when `enable.idempotence` is true",
        ),
    ] {
        let mut properties = base.clone();
        properties.push((key.into(), value.into()));
        let created: Result<rdkafka::producer::FutureProducer, KafkaClientError> =
            create_kafka_client(&properties, rdkafka::client::DefaultClientContext);
        let error = SinkError::Client(created.err().expect(key)).to_string();
        assert!(error.contains(reason), "`{error}` does not say `{reason}`");
    }
}

/// Runs the sink over `records` (tickets 0, 1, ...), all sent at once; returns what it
/// returned (within `limit`) and the reported tickets, sorted.
async fn run_records(
    settings: KafkaSinkSettings,
    records: Vec<OutboundRecord>,
    metrics: Arc<SinkMetrics>,
    limit: Duration,
) -> (Result<SinkSummary, SinkError>, Vec<u32>) {
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel(records.len().max(1));
    let controller = shutdown_controller();
    let sink_delivered = delivered.clone();
    let sink = tokio::spawn(run_kafka_sink(
        settings,
        rx,
        move |ticket: u32| sink_delivered.lock().unwrap().push(ticket),
        metrics,
        controller.subscribe(),
    ));
    for (ticket, record) in (0u32..).zip(records) {
        tx.send(vec![SinkItem {
            record,
            ticket,
            origin: RecordOrigin::default(),
        }])
        .await
        .unwrap();
    }
    drop(tx);
    let result = match tokio::time::timeout(limit, sink).await {
        Ok(joined) => joined.unwrap(),
        Err(_) => panic!("the sink did not finish within {limit:?}"),
    };
    let mut tickets = delivered.lock().unwrap().clone();
    tickets.sort_unstable();
    (result, tickets)
}

/// Issue 11 item 3: a partition beyond the topic's partition count is permanent: one dead
/// letter, and the records after it flow (it used to be retried forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_beyond_the_topic_is_dead_lettered_and_later_records_flow() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("sink.parts", 2, 1).unwrap();
    cluster.create_topic("outbox.dlq", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let metrics = new_metrics();
    let mut beyond = record("sink.parts", 0);
    beyond.partition = Some(7);
    let records = vec![beyond, record("sink.parts", 1), record("sink.parts", 2)];
    let (result, tickets) = run_records(
        dead_letter_settings(&brokers),
        records,
        metrics.clone(),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(result.unwrap().delivered, 3);
    assert_eq!(tickets, vec![0, 1, 2]);
    let letters = read_topic(&brokers, "outbox.dlq", 1).await;
    assert_eq!(letters.len(), 1, "one dead letter");
    assert_eq!(letters[0].header("id"), Some("event-0"));
    assert_eq!(
        metrics
            .dead_lettered
            .with_label_values(&["invalid_topic"])
            .get(),
        1
    );
    let delivered = read_topic(&brokers, "sink.parts", 2).await;
    assert_eq!(delivered.len(), 2, "the later records flow");
}

/// A sink with dead letters on over `topic` (and `outbox.dlq`) whose next `count` produce
/// requests fail with `error`: record 0 is sent alone (until its ticket is reported), then
/// records 1..=3.
async fn first_record_rejected(error: RDKafkaRespErr, count: usize) -> RejectionRun {
    let topic = "sink.rejected";
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(topic, 1, 1).unwrap();
    cluster.create_topic("outbox.dlq", 1, 1).unwrap();
    cluster.request_errors(RDKafkaApiKey::Produce, &vec![error; count]);
    let brokers = cluster.bootstrap_servers();
    let metrics = new_metrics();
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel(4);
    let controller = shutdown_controller();
    let sink_delivered = delivered.clone();
    let sink = tokio::spawn(run_kafka_sink(
        dead_letter_settings(&brokers),
        rx,
        move |ticket: u32| sink_delivered.lock().unwrap().push(ticket),
        metrics.clone(),
        controller.subscribe(),
    ));
    let send = |n: u32| SinkItem {
        record: record(topic, n),
        ticket: n,
        origin: RecordOrigin::default(),
    };
    tx.send(vec![send(0)]).await.unwrap();
    let waited = std::time::Instant::now();
    while delivered.lock().unwrap().is_empty() && waited.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for n in 1..=3 {
        tx.send(vec![send(n)]).await.unwrap();
    }
    drop(tx);
    let result = match tokio::time::timeout(Duration::from_secs(30), sink).await {
        Ok(joined) => joined.unwrap(),
        Err(_) => panic!("the sink did not finish"),
    };
    let mut tickets = delivered.lock().unwrap().clone();
    tickets.sort_unstable();
    RejectionRun {
        _cluster: cluster,
        brokers,
        result,
        tickets,
        metrics,
        delivered_during_outage: None,
    }
}

/// Asserts one dead letter of event 0 with `class`, and events 1..=3 on the topic.
async fn assert_one_dead_letter_then_flow(run: RejectionRun, class: &str) {
    assert_eq!(run.result.unwrap().delivered, 4);
    assert_eq!(run.tickets, vec![0, 1, 2, 3]);
    assert_eq!(
        run.metrics.dead_lettered.with_label_values(&[class]).get(),
        1
    );
    let letters = read_topic(&run.brokers, "outbox.dlq", 1).await;
    assert_eq!(letters.len(), 1, "one dead letter");
    assert_eq!(letters[0].header("id"), Some("event-0"));
    assert_eq!(letters[0].header("dlq.error_class"), Some(class));
    let later = read_topic(&run.brokers, "sink.rejected", 3).await;
    let ids: Vec<_> = later.iter().filter_map(|r| r.header("id")).collect();
    assert_eq!(
        ids,
        vec!["event-1", "event-2", "event-3"],
        "later events flow"
    );
}

/// Issue 11 item 2: a broker's TOPIC_AUTHORIZATION_FAILED with the production producer
/// (enable.gapless.guarantee makes it fatal) is dead-lettered, not resent forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_authorization_rejection_is_dead_lettered_and_later_events_flow() {
    let run = first_record_rejected(
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        3,
    )
    .await;
    assert!(
        run.metrics.producer_recreations.get() > 0,
        "gapless: rebuilt"
    );
    assert_one_dead_letter_then_flow(run, "authorization").await;
}

/// Issue 11 item 2: a broker's MSG_SIZE_TOO_LARGE (a topic `max.message.bytes` below the
/// client's limit) is dead-lettered, not resent forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_size_rejection_is_dead_lettered_and_later_events_flow() {
    let run = first_record_rejected(RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, 3).await;
    assert_one_dead_letter_then_flow(run, "message_too_large").await;
}

/// Issue 11 item 1: A then B on one key while every produce request fails for longer than
/// the stall timeout (what used to be A's delivery timeout, with B still inside its own):
/// A must land below B. Before, A expired, librdkafka sent B, and the sink resent A later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_record_lands_before_a_younger_record_of_its_key() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("sink.order", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let mut settings = settings(&brokers);
    settings.stall_timeout = Duration::from_millis(2000);
    // librdkafka retries often; the sink waits long before it resends (the window in which
    // the old producer could still send B).
    settings.client_properties.extend([
        ("retry.backoff.ms".into(), "100".into()),
        ("retry.backoff.max.ms".into(), "100".into()),
        // The mock checks sequences only for transactional producers: one request in
        // flight keeps it as strict as a real broker (see mock_cluster_faults.rs).
        ("max.in.flight".into(), "1".into()),
    ]);
    settings.retry_initial_backoff = Duration::from_millis(1500);
    settings.retry_max_backoff = Duration::from_millis(1500);
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 100_000],
    );
    let metrics = new_metrics();
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel(4);
    let controller = shutdown_controller();
    let sink_delivered = delivered.clone();
    let sink = tokio::spawn(run_kafka_sink(
        settings,
        rx,
        move |ticket: u32| sink_delivered.lock().unwrap().push(ticket),
        metrics.clone(),
        controller.subscribe(),
    ));
    let on_key = |n: u32| SinkItem {
        record: OutboundRecord {
            key: Some(b"order-1".to_vec()),
            ..record("sink.order", n)
        },
        ticket: n,
        origin: RecordOrigin::default(),
    };
    tx.send(vec![on_key(0)]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    tx.send(vec![on_key(1)]).await.unwrap();
    // The errors clear as soon as the sink reacts to A's missing ack (a timeout report
    // before, the stall watchdog now), while B is still young.
    let waited = std::time::Instant::now();
    while metrics
        .delivery_errors
        .with_label_values(&["transient"])
        .get()
        == 0
        && metrics.producer_stalls.get() == 0
        && waited.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cluster.clear_request_errors(RDKafkaApiKey::Produce);
    drop(tx);
    let summary = tokio::time::timeout(Duration::from_secs(30), sink)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(summary.delivered, 2);
    let records = read_topic(&brokers, "sink.order", 2).await;
    let ids: Vec<&str> = records.iter().filter_map(|r| r.header("id")).collect();
    let first = |id: &str| ids.iter().position(|i| *i == id);
    let (a, b) = (first("event-0"), first("event-1"));
    assert!(a.is_some() && b.is_some(), "both delivered: {ids:?}");
    assert!(a < b, "A (event-0) must land below B (event-1): {ids:?}");
    assert!(metrics.producer_stalls.get() >= 1);
}

/// Issue 11 item 5: creating the dead-letter topic inside the sink loop, with the cluster
/// gone, must not hold the sink past shutdown: it stops within the drain timeout, the
/// record unreported (so outside the checkpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_to_create_the_dead_letter_topic_honours_shutdown() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("sink.unreachable", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let mut settings = dead_letter_settings(&brokers);
    settings.create_topics = true;
    settings.admin_timeout = Duration::from_millis(500);
    settings.drain_timeout = Duration::from_secs(2);
    settings.dead_letter.max_attempts = 1;
    settings
        .client_properties
        .push(("message.max.bytes".into(), "10000".into()));
    let metrics = new_metrics();
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel(4);
    let controller = shutdown_controller();
    let sink_delivered = delivered.clone();
    let sink = tokio::spawn(run_kafka_sink(
        settings,
        rx,
        move |ticket: u32| sink_delivered.lock().unwrap().push(ticket),
        metrics.clone(),
        controller.subscribe(),
    ));
    let item = |record: OutboundRecord, ticket: u32| SinkItem {
        record,
        ticket,
        origin: RecordOrigin::default(),
    };
    tx.send(vec![item(record("sink.unreachable", 0), 0)])
        .await
        .unwrap();
    let waited = std::time::Instant::now();
    while delivered.lock().unwrap().is_empty() && waited.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(*delivered.lock().unwrap(), vec![0]);
    // The cluster goes away; a record the producer refuses at once (above
    // message.max.bytes) needs the dead-letter topic, which does not exist yet.
    cluster.broker_down(1).unwrap();
    let mut big = record("sink.unreachable", 1);
    big.payload = Some(vec![b'z'; 50_000]);
    tx.send(vec![item(big, 1)]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let asked = std::time::Instant::now();
    controller.send_replace(true);
    let summary = match tokio::time::timeout(Duration::from_secs(10), sink).await {
        Ok(joined) => joined.unwrap().unwrap(),
        Err(_) => panic!("the sink ignored shutdown while creating the dead-letter topic"),
    };
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(summary.delivered, 1);
    assert_eq!(
        summary.abandoned, 1,
        "the dead-lettered record stays unreported"
    );
    assert_eq!(*delivered.lock().unwrap(), vec![0]);
}

/// A record whose payload is above [`super::task::HAND_OVER_PAYLOAD_BYTES`] (so the sink
/// drops its copy once librdkafka holds one), distinct per `n`.
/// Partitions of the big-record tests' topic.
const BIG_RECORD_PARTITIONS: u32 = 4;

fn big_record(topic: &str, n: u32) -> OutboundRecord {
    let mut payload = format!("big-{n}:").into_bytes();
    payload.resize(
        super::task::HAND_OVER_PAYLOAD_BYTES + 4096,
        b'a' + (n % 26) as u8,
    );
    OutboundRecord {
        payload: Some(payload),
        // A partition each: the mock cluster keeps about 5 MB per partition and deletes
        // the oldest records beyond that, which a rebuild's duplicates of several 1 MiB
        // records in one partition would exceed.
        partition: Some((n % BIG_RECORD_PARTITIONS) as i32),
        ..record(topic, n)
    }
}

/// `count` big records through the sink against a mock cluster with `topic` whose next
/// produce requests fail with `errors`; the sink's result, the tickets (sorted), and the
/// records read back from `topic`.
async fn run_big_records(
    topic: &str,
    count: u32,
    errors: &[RDKafkaRespErr],
    dead_letters: bool,
) -> (
    Result<SinkSummary, SinkError>,
    Vec<u32>,
    Vec<TextRecord>,
    Arc<SinkMetrics>,
) {
    let cluster = MockCluster::new(1).unwrap();
    cluster
        .create_topic(topic, BIG_RECORD_PARTITIONS as i32, 1)
        .unwrap();
    cluster.create_topic("outbox.dlq", 1, 1).unwrap();
    cluster.request_errors(RDKafkaApiKey::Produce, errors);
    let brokers = cluster.bootstrap_servers();
    let mut settings = settings(&brokers);
    settings
        .client_properties
        .push(("message.max.bytes".into(), "8000000".into()));
    if dead_letters {
        settings.dead_letter = DeadLetterConfig::default();
    }
    let metrics = new_metrics();
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel(4);
    let controller = shutdown_controller();
    let sink_delivered = delivered.clone();
    let sink = tokio::spawn(run_kafka_sink(
        settings,
        rx,
        move |ticket: u32| sink_delivered.lock().unwrap().push(ticket),
        metrics.clone(),
        controller.subscribe(),
    ));
    for n in 0..count {
        let item = SinkItem {
            record: big_record(topic, n),
            ticket: n,
            origin: RecordOrigin::default(),
        };
        if tx.send(vec![item]).await.is_err() {
            break;
        }
    }
    drop(tx);
    let result = match tokio::time::timeout(Duration::from_secs(60), sink).await {
        Ok(joined) => joined.unwrap(),
        Err(_) => panic!("the sink did not finish"),
    };
    let mut tickets = delivered.lock().unwrap().clone();
    tickets.sort_unstable();
    // Everything was acked before the sink returned, and a rebuild's resends may have
    // landed twice (in another order): read until every event's id was seen, not the first
    // `count` records (1 MiB records may come in slow fetches; a missing one fails the
    // check after the read's 10 s).
    let all_seen: outbox_testkit::consume::ReadPredicate =
        Arc::new(move |records: &[outbox_testkit::consume::ConsumedRecord]| {
            (0..count).all(|n| {
                let id = format!("event-{n}");
                records.iter().any(|record| {
                    record.headers.iter().any(|(name, value)| {
                        name == "id" && value.as_deref() == Some(id.as_bytes())
                    })
                })
            })
        });
    let read = read_topic_until(&brokers, topic, ReadStop::When(all_seen)).await;
    (result, tickets, read, metrics)
}

/// Asserts `read` holds every big record of `0..count` whole (value and id), each once.
fn assert_big_records_whole(read: &[TextRecord], topic: &str, count: u32) {
    let mut by_id: Vec<(String, String)> = read
        .iter()
        .map(|record| {
            (
                record.header("id").unwrap_or_default().to_owned(),
                record.value.clone().unwrap_or_default(),
            )
        })
        .collect();
    by_id.sort();
    by_id.dedup();
    let mut expected: Vec<(String, String)> = (0..count)
        .map(|n| {
            let record = big_record(topic, n);
            (
                format!("event-{n}"),
                String::from_utf8_lossy(&record.payload.unwrap_or_default()).into_owned(),
            )
        })
        .collect();
    expected.sort();
    assert_eq!(by_id.len(), expected.len(), "one distinct record per event");
    for ((id, value), (expected_id, expected_value)) in by_id.iter().zip(&expected) {
        assert_eq!(id, expected_id);
        assert!(
            value == expected_value,
            "{id}: {} bytes arrived, {} sent (a payload handed over to the producer must come back whole for a resend)",
            value.len(),
            expected_value.len()
        );
    }
}

/// [`run_big_records`], then checks that every record was delivered and reported once and
/// arrived whole; the run's counters.
async fn assert_big_records_delivered_whole(
    topic: &str,
    count: u32,
    errors: &[RDKafkaRespErr],
    dead_letters: bool,
) -> Arc<SinkMetrics> {
    let (result, tickets, read, metrics) =
        run_big_records(topic, count, errors, dead_letters).await;
    assert_eq!(result.unwrap().delivered, u64::from(count));
    assert_eq!(tickets, (0..count).collect::<Vec<_>>());
    assert_big_records_whole(&read, topic, count);
    metrics
}

/// A big payload rejected by the broker (within the resend budget) comes back with the
/// failed delivery report and is resent whole, though the sink dropped its own copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_big_payload_is_resent_whole_from_the_failed_report() {
    let rejections = [RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE; 2];
    let metrics =
        assert_big_records_delivered_whole("sink.big.rejected", 2, &rejections, true).await;
    assert!(
        metrics.records_resent.get() > 0,
        "the rejected record was resent"
    );
}

/// A fatal producer error: the producer is purged (every purged record's report brings its
/// big payload back) and rebuilt, and every record is resent whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_payloads_survive_a_producer_rebuild() {
    let fatal = [RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER; 3];
    let metrics = assert_big_records_delivered_whole("sink.big.fatal", 4, &fatal, false).await;
    assert!(
        metrics.producer_recreations.get() > 0,
        "the producer was rebuilt"
    );
}

/// The restart error of a lost payload is one the pipeline restarts from the checkpoint
/// on, and names the topic.
#[test]
fn a_lost_big_payload_restarts_from_the_checkpoint() {
    let error = SinkError::PayloadLost {
        topic: "orders.events".into(),
        reason: KafkaError::Canceled.to_string(),
    };
    assert!(error.restarts_from_checkpoint());
    assert!(error.to_string().contains("orders.events"), "{error}");
    let permanent = SinkError::TopicMissing { topic: "t".into() };
    assert!(!permanent.restarts_from_checkpoint());
}

/// The sink's producer reports every record through its one channel with the record's
/// sequence and the producer's generation (how the sink tells a replaced producer's late
/// reports from the current one's), and a failed report of a big record hands its payload
/// back while a small one's does not (the sink kept that copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_producer_reports_sequence_generation_and_big_payloads_through_one_channel() {
    let cluster = MockCluster::new(1).unwrap();
    cluster
        .create_topic("sink.reports", BIG_RECORD_PARTITIONS as i32, 1)
        .unwrap();
    let mut settings = settings(&cluster.bootstrap_servers());
    settings
        .client_properties
        .push(("message.max.bytes".into(), "8000000".into()));
    let (sender, mut reports) = mpsc::unbounded_channel();
    let producer =
        super::producer::create_sink_producer(&settings.client_properties, 7, sender).unwrap();
    super::producer::enqueue(&producer, &record("sink.reports", 0), 41).unwrap();
    let (sequence, generation, outcome) =
        tokio::time::timeout(Duration::from_secs(30), reports.recv())
            .await
            .expect("a report within 30 s")
            .expect("the channel is open");
    assert_eq!((sequence, generation), (41, 7));
    assert!(outcome.is_ok(), "{outcome:?}");

    // With the broker down both records stay in the producer until the purge fails them.
    cluster.broker_down(1).unwrap();
    let big = big_record("sink.reports", 1);
    super::producer::enqueue(&producer, &big, 42).unwrap();
    super::producer::enqueue(&producer, &record("sink.reports", 2), 43).unwrap();
    let purging = producer.clone();
    tokio::task::spawn_blocking(move || {
        purging.purge(rdkafka::producer::PurgeConfig::default().queue().inflight())
    })
    .await
    .unwrap();
    let mut failed = BTreeMap::new();
    for _ in 0..2 {
        let (sequence, generation, outcome) =
            tokio::time::timeout(Duration::from_secs(30), reports.recv())
                .await
                .expect("a report within 30 s")
                .expect("the channel is open");
        assert_eq!(generation, 7);
        let failure = outcome.expect_err("a purged record fails");
        failed.insert(sequence, failure.payload);
    }
    assert_eq!(
        failed.get(&42),
        Some(&big.payload),
        "the big payload comes back whole"
    );
    assert_eq!(
        failed.get(&43),
        Some(&None),
        "a small payload stays with the sink"
    );
    tokio::task::spawn_blocking(move || drop(producer))
        .await
        .unwrap();
}

/// A ticket that remembers whether the sink gave up on its record.
struct GiveUpTicket {
    number: u32,
    gave_up: Option<String>,
}

impl SinkTicket for GiveUpTicket {
    fn gave_up(&mut self, reason: &str) {
        self.gave_up = Some(reason.to_owned());
    }
}

/// With `give_up_on_rebuild` (poll mode), records the cluster never acks come back to
/// their source once the stall watchdog replaces the producer, each told why, none
/// counted as delivered; and the sink takes new input afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn give_up_mode_hands_stalled_records_back_instead_of_resending_them() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("sink.giveup", 1, 1).unwrap();
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 100_000],
    );
    let mut settings = settings(&cluster.bootstrap_servers());
    settings.give_up_on_rebuild = true;
    let metrics = new_metrics();
    let handed_back = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel(4);
    let controller = shutdown_controller();
    let sink = {
        let handed_back = handed_back.clone();
        tokio::spawn(run_kafka_sink(
            settings,
            rx,
            move |ticket: GiveUpTicket| handed_back.lock().unwrap().push(ticket),
            metrics.clone(),
            controller.subscribe(),
        ))
    };
    let batch = |range: std::ops::Range<u32>| {
        range
            .map(|n| SinkItem {
                record: record("sink.giveup", n),
                ticket: GiveUpTicket {
                    number: n,
                    gave_up: None,
                },
                origin: RecordOrigin::default(),
            })
            .collect::<Vec<_>>()
    };
    tx.send(batch(0..10)).await.unwrap();
    let started = std::time::Instant::now();
    while handed_back.lock().unwrap().len() < 10 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the stalled records did not come back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    {
        let back = handed_back.lock().unwrap();
        let mut numbers: Vec<u32> = back.iter().map(|ticket| ticket.number).collect();
        numbers.sort_unstable();
        assert_eq!(numbers, (0..10).collect::<Vec<_>>());
        assert!(
            back.iter().all(|ticket| ticket
                .gave_up
                .as_deref()
                .is_some_and(|why| why.contains("no ack"))),
            "each ticket is told why"
        );
    }
    assert!(metrics.producer_stalls.get() >= 1);
    // The cluster recovers; the next records go through the new producer.
    cluster.clear_request_errors(RDKafkaApiKey::Produce);
    tx.send(batch(10..13)).await.unwrap();
    while handed_back.lock().unwrap().len() < 13 {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "records after the give-up were not delivered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(tx);
    let summary = tokio::time::timeout(Duration::from_secs(30), sink)
        .await
        .expect("the sink ends when its input does")
        .unwrap()
        .unwrap();
    assert_eq!(
        summary.delivered, 3,
        "given-up records are not delivered ones"
    );
    let back = handed_back.lock().unwrap();
    assert!(back[10..].iter().all(|ticket| ticket.gave_up.is_none()));
}
