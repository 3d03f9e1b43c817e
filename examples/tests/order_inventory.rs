//! The order and inventory services end to end: order service → `shop.outbox` → relay →
//! Kafka → inventory consumer → `inventory.stock` / `inventory.reservations`. Every test
//! checks the **business state** (stock reserved exactly once per order, `processed_event`
//! rows, duplicates counted) after one of the seeds' failures.
//!
//! Run: `cargo test -p outbox-examples --test order_inventory -- --nocapture`.

mod harness;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use harness::*;
use outbox_consumer::{dead_letter_headers, CrashPoint};
use outbox_examples::order_service::OrderCreated;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;

/// Produces `key`/`value`/`headers` to `topic` (a redelivery as Kafka would make it).
async fn produce(
    bootstrap: &str,
    topic: &str,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(String, Option<Vec<u8>>)],
) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    let mut owned = OwnedHeaders::new();
    for (name, value) in headers {
        owned = owned.insert(Header {
            key: name,
            value: value.as_deref(),
        });
    }
    let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(owned);
    if let Some(key) = key {
        record = record.key(key);
    }
    if let Some(value) = value {
        record = record.payload(value);
    }
    producer
        .send(record, Timeout::After(Duration::from_secs(10)))
        .await
        .expect("produced");
}

/// The walk-through: three orders, each reserved once; a rolled-back order writes nothing,
/// and the relay publishes nothing for it.
#[tokio::test]
async fn order_places_and_stock_is_reserved_once() {
    let world = World::start().await;
    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    relay.start();
    let consumer = world.start_consumer(world.consumer_config(), reserve_stock());

    let mut ids = Vec::new();
    for (order_id, quantity) in [(1, 2), (2, 3), (3, 5)] {
        ids.push(world.place_order(order_id, "apple", quantity).await);
    }
    let rolled_back = world
        .orders
        .place_order_then_roll_back(&OrderCreated {
            order_id: 4,
            sku: "apple".into(),
            quantity: 7,
        })
        .await
        .expect("rolled back")
        .to_string();
    // A committed order after the rolled-back one: once it is reserved, the relay has
    // passed the rollback's place in the binlog.
    ids.push(world.place_order(5, "apple", 1).await);

    world.wait_for_reservations(4, Some(&relay)).await;
    consumer.wait_for("applied", 4, applied).await;
    assert_eq!(world.stock("apple").await, (100 - 11, 11));
    assert_eq!(world.reservations().await, [(1, 2), (2, 3), (3, 5), (5, 1)]);
    let mut expected_ids = ids.clone();
    expected_ids.sort();
    assert_eq!(world.processed_events().await, expected_ids);
    assert_eq!(consumer.metrics.duplicates_skipped.get(), 0);

    // The contract: the rolled-back order and its event do not exist, and never reached Kafka.
    let mut shop = world.db.conn().await.expect("connect");
    use mysql_async::prelude::Queryable;
    let orders: Vec<i64> = shop
        .query("SELECT id FROM shop.orders ORDER BY id")
        .await
        .expect("orders");
    assert_eq!(orders, [1, 2, 3, 5]);
    let outbox_rows: u64 = shop
        .exec_first(
            "SELECT COUNT(*) FROM shop.outbox WHERE event_id = ?",
            (&rolled_back,),
        )
        .await
        .expect("count")
        .expect("row");
    assert_eq!(outbox_rows, 0);
    let records = world.records(&world.order_topic(), 4).await;
    assert_eq!(records.len(), 4, "one record per committed order");
    assert!(with_id(&records, &rolled_back).is_empty());
    for id in &ids {
        assert_eq!(with_id(&records, id).len(), 1, "event {id}");
    }
    consumer.stop().await;
}

/// The same record delivered twice (as after a redelivery): applied once, one duplicate.
#[tokio::test]
async fn a_record_delivered_twice_is_applied_once() {
    let world = World::start().await;
    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    relay.start();
    let consumer = world.start_consumer(world.consumer_config(), reserve_stock());
    let id = world.place_order(10, "apple", 4).await;
    world.wait_for_reservations(1, Some(&relay)).await;

    let records = world.records(&world.order_topic(), 1).await;
    let original = with_id(&records, &id)[0].clone();
    produce(
        &world.broker.bootstrap(),
        &world.order_topic(),
        original.key.as_deref(),
        original.value.as_deref(),
        &original.headers,
    )
    .await;
    consumer.wait_for("duplicates", 1, duplicates).await;
    assert_eq!(world.records(&world.order_topic(), 2).await.len(), 2);
    assert_eq!(world.stock("apple").await, (96, 4), "reserved once");
    assert_eq!(world.reservations().await, [(10, 4)]);
    assert_eq!(world.processed_events().await, [id]);
    assert_eq!(consumer.metrics.events_applied.get(), 1);
    consumer.stop().await;
}

/// The relay crashes after Kafka acked the event, before its checkpoint: after the restart
/// the event is published again (same id) and applied once. Then a crash before publish:
/// the event is published after the restart and applied once.
#[tokio::test]
async fn relay_crashes_before_checkpoint_and_before_publish_then_each_order_is_reserved_once() {
    let world = World::start().await;
    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    let consumer = world.start_consumer(world.consumer_config(), reserve_stock());

    let first = world.place_order(20, "apple", 6).await;
    relay.start_with_env(&[("OUTBOX_RELAY_CRASH_AT", "before-checkpoint-commit")]);
    let status = relay.wait_for_exit().await;
    assert_eq!(
        status.signal(),
        Some(6),
        "abort at the crash point; {}",
        relay.log_tail(20)
    );
    relay.start();
    consumer.wait_for("duplicates", 1, duplicates).await;
    let records = world.records(&world.order_topic(), 2).await;
    assert_eq!(
        with_id(&records, &first).len(),
        2,
        "published twice with the same id"
    );
    assert_eq!(world.stock("apple").await, (94, 6), "reserved once");
    assert_eq!(consumer.metrics.events_applied.get(), 1);

    // Crash before publish: the event was never acked, so the restart publishes it.
    drop(relay);
    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    // A fresh relay directory starts from the earliest binlog again: the first order is
    // published a third time, the second one for the first time.
    let second = world.place_order(21, "apple", 1).await;
    relay.start_with_env(&[("OUTBOX_RELAY_CRASH_AT", "before-publish")]);
    let status = relay.wait_for_exit().await;
    assert_eq!(
        status.signal(),
        Some(6),
        "abort at the crash point; {}",
        relay.log_tail(20)
    );
    relay.start();
    world.wait_for_reservations(2, Some(&relay)).await;
    consumer.wait_for("duplicates", 2, duplicates).await;
    assert_eq!(world.stock("apple").await, (93, 7));
    assert_eq!(world.reservations().await, [(20, 6), (21, 1)]);
    let mut expected = vec![first, second];
    expected.sort();
    assert_eq!(world.processed_events().await, expected);
    assert_eq!(consumer.metrics.events_applied.get(), 2);
    consumer.stop().await;
}

/// Three timeouts, then success: applied once, three handler failures, no dead letter.
#[tokio::test]
async fn three_timeouts_then_success_reserves_once() {
    let world = World::start().await;
    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    relay.start();
    let consumer = world.start_consumer(world.consumer_config(), handler_with_timeouts(3));
    let id = world.place_order(30, "apple", 2).await;
    world.wait_for_reservations(1, Some(&relay)).await;
    consumer.wait_for("applied", 1, applied).await;
    assert_eq!(consumer.metrics.handler_failures.get(), 3);
    assert_eq!(consumer.metrics.dead_letters.get(), 0);
    assert_eq!(world.stock("apple").await, (98, 2));
    assert_eq!(world.processed_events().await, [id]);
    consumer.stop().await;
}

/// A permanent error (unknown sku): dead-lettered with the same id and the relay's header
/// names, the partition moves on, nothing is recorded as processed. After the fix (the sku
/// is stocked) `outbox-relay dlq replay --id` republishes it and it is applied once.
#[tokio::test]
async fn a_permanent_error_is_dead_lettered_with_its_id_and_replays_once() {
    let world = World::start().await;
    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    relay.start();
    let consumer = world.start_consumer(world.consumer_config(), reserve_stock());
    let poison = world.place_order(40, "pear", 1).await;
    let healthy = world.place_order(41, "apple", 1).await;
    world.wait_for_reservations(1, Some(&relay)).await;
    consumer.wait_for("dead letters", 1, dead_letters).await;
    assert_eq!(
        world.reservations().await,
        [(41, 1)],
        "the partition moved on"
    );
    assert_eq!(
        world.processed_events().await,
        std::slice::from_ref(&healthy)
    );
    assert_eq!(
        consumer.metrics.handler_failures.get(),
        1,
        "permanent: no retries"
    );

    let letters = world.records(&world.dead_letter_topic(), 1).await;
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(letter.header_str("id").as_deref(), Some(poison.as_str()));
    assert_eq!(
        letter
            .header_str(dead_letter_headers::ERROR_CLASS)
            .as_deref(),
        Some("handler_permanent")
    );
    assert_eq!(
        letter
            .header_str(dead_letter_headers::ORIGINAL_TOPIC)
            .as_deref(),
        Some(world.order_topic().as_str())
    );
    assert_eq!(
        letter.header_str(dead_letter_headers::ATTEMPTS).as_deref(),
        Some("1")
    );
    assert_eq!(letter.key_str().as_deref(), Some("40"));

    // Fix the cause, then replay with the relay's own tool, pointed at the consumer's DLQ.
    let mut conn = world.db.conn().await.expect("connect");
    use mysql_async::prelude::Queryable;
    conn.query_drop("INSERT INTO inventory.stock (sku, available) VALUES ('pear', 5)")
        .await
        .expect("stock pears");
    let replay_config = Relay::prepare(&world, &world.dead_letter_topic());
    let (code, stdout, stderr) = replay_config.command(&["dlq", "replay", "--id", &poison]);
    assert_eq!(code, 0, "dlq replay: {stdout}\n{stderr}");
    world.wait_for_reservations(2, Some(&relay)).await;
    assert_eq!(world.reservations().await, [(40, 1), (41, 1)]);
    assert_eq!(world.stock("pear").await, (4, 1));
    let mut expected = vec![poison.clone(), healthy];
    expected.sort();
    assert_eq!(world.processed_events().await, expected);

    // Replaying again is a duplicate, not a second reservation.
    let (code, stdout, stderr) = replay_config.command(&["dlq", "replay", "--id", &poison]);
    assert_eq!(code, 0, "dlq replay: {stdout}\n{stderr}");
    consumer.wait_for("duplicates", 1, duplicates).await;
    assert_eq!(world.stock("pear").await, (4, 1));
    consumer.stop().await;
}

/// The consumer crashes after its database commit, before the offset commit: a new
/// instance in the same group gets the record again and skips it as a duplicate.
#[tokio::test]
async fn consumer_crash_between_database_commit_and_offset_commit_is_a_no_op_redelivery() {
    let world = World::start().await;
    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    relay.start();
    let mut config = world.consumer_config();
    config.crash_point = Some(CrashPoint::AfterDatabaseCommit);
    let crashing = world.start_consumer(config, reserve_stock());
    let id = world.place_order(50, "apple", 3).await;
    crashing
        .wait_for_crash(CrashPoint::AfterDatabaseCommit)
        .await;
    assert_eq!(
        world.stock("apple").await,
        (97, 3),
        "the database commit happened"
    );

    let restarted = world.start_consumer(world.consumer_config(), reserve_stock());
    restarted.wait_for("duplicates", 1, duplicates).await;
    assert_eq!(restarted.metrics.events_applied.get(), 0);
    assert_eq!(world.stock("apple").await, (97, 3), "reserved once");
    assert_eq!(world.reservations().await, [(50, 3)]);
    assert_eq!(world.processed_events().await, [id]);
    restarted.stop().await;
}

/// The consumer crashes after the handler, before the database commit: nothing is applied,
/// a new instance applies it once.
#[tokio::test]
async fn consumer_crash_before_database_commit_applies_on_redelivery_once() {
    let world = World::start().await;
    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    relay.start();
    let mut config = world.consumer_config();
    config.crash_point = Some(CrashPoint::BeforeDatabaseCommit);
    let crashing = world.start_consumer(config, reserve_stock());
    let id = world.place_order(60, "apple", 8).await;
    crashing
        .wait_for_crash(CrashPoint::BeforeDatabaseCommit)
        .await;
    // The rollback of the dropped transaction happens when its connection goes back to the
    // pool; the restarted consumer's claim waits for that row lock if it has not yet.
    assert!(
        world.processed_events().await.is_empty(),
        "nothing committed"
    );

    let restarted = world.start_consumer(world.consumer_config(), reserve_stock());
    restarted.wait_for("applied", 1, applied).await;
    assert_eq!(restarted.metrics.duplicates_skipped.get(), 0);
    assert_eq!(world.stock("apple").await, (92, 8));
    assert_eq!(world.reservations().await, [(60, 8)]);
    assert_eq!(world.processed_events().await, [id]);
    restarted.stop().await;
}

/// A transient failure that never clears: dead-lettered after `max_attempts` attempts as
/// `handler_retries_exhausted`, nothing applied.
#[tokio::test]
async fn retries_exhausted_go_to_the_dead_letter_topic_after_max_attempts() {
    let world = World::start().await;
    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    relay.start();
    let mut config = world.consumer_config();
    config.max_attempts = 3;
    let consumer = world.start_consumer(config, handler_with_timeouts(1000));
    let id = world.place_order(90, "apple", 1).await;
    consumer.wait_for("dead letters", 1, dead_letters).await;
    assert_eq!(consumer.metrics.handler_failures.get(), 3);
    assert_eq!(consumer.metrics.events_applied.get(), 0);
    let letters = world.records(&world.dead_letter_topic(), 1).await;
    assert_eq!(letters[0].header_str("id").as_deref(), Some(id.as_str()));
    assert_eq!(
        letters[0]
            .header_str(dead_letter_headers::ERROR_CLASS)
            .as_deref(),
        Some("handler_retries_exhausted")
    );
    assert_eq!(
        letters[0]
            .header_str(dead_letter_headers::ATTEMPTS)
            .as_deref(),
        Some("3")
    );
    assert_eq!(world.stock("apple").await, (100, 0));
    assert!(world.processed_events().await.is_empty());
    consumer.stop().await;
}

/// Values as Debezium's JsonConverter writes a string payload (a JSON string literal, and
/// the schema envelope) are unwrapped; a record without header `id` is dead-lettered as
/// `missing_event_id` instead of being applied without deduplication.
#[tokio::test]
async fn debezium_json_string_values_are_applied_and_a_record_without_id_is_dead_lettered() {
    let world = World::start().await;
    let mut config = world.consumer_config();
    config.payload_format = outbox_consumer::PayloadFormat::DebeziumJsonString;
    let consumer = world.start_consumer(config, reserve_stock());
    let order = |order_id: i64| {
        serde_json::to_string(&OrderCreated {
            order_id,
            sku: "apple".into(),
            quantity: 2,
        })
        .unwrap()
    };
    let wrapped = serde_json::to_string(&order(100)).unwrap();
    let envelope = format!(
        r#"{{"schema":{{"type":"string","optional":false}},"payload":{}}}"#,
        serde_json::to_string(&order(101)).unwrap()
    );
    let headers = |id: &str| {
        vec![
            ("id".to_owned(), Some(id.as_bytes().to_vec())),
            ("event_type".to_owned(), Some(b"OrderCreated".to_vec())),
        ]
    };
    let bootstrap = world.broker.bootstrap();
    let topic = world.order_topic();
    produce(
        &bootstrap,
        &topic,
        Some(b"100"),
        Some(wrapped.as_bytes()),
        &headers("e-100"),
    )
    .await;
    produce(
        &bootstrap,
        &topic,
        Some(b"101"),
        Some(envelope.as_bytes()),
        &headers("e-101"),
    )
    .await;
    let no_id = vec![("event_type".to_owned(), Some(b"OrderCreated".to_vec()))];
    produce(
        &bootstrap,
        &topic,
        Some(b"102"),
        Some(wrapped.as_bytes()),
        &no_id,
    )
    .await;
    world.wait_for_reservations(2, None).await;
    consumer.wait_for("dead letters", 1, dead_letters).await;
    assert_eq!(world.reservations().await, [(100, 2), (101, 2)]);
    assert_eq!(world.processed_events().await, ["e-100", "e-101"]);
    let letters = world.records(&world.dead_letter_topic(), 1).await;
    assert_eq!(
        letters[0]
            .header_str(dead_letter_headers::ERROR_CLASS)
            .as_deref(),
        Some("missing_event_id")
    );
    assert_eq!(letters[0].key_str().as_deref(), Some("102"));
    assert_eq!(
        letters[0].value.as_deref(),
        Some(wrapped.as_bytes()),
        "the original value"
    );
    consumer.stop().await;
}

/// The writer's cleanup job against the relay's own checkpoint file: a published row older
/// than the stored checkpoint goes, a row written while the relay is down (after the
/// checkpoint) stays and is still published and applied after the restart; the relay
/// ignores the DELETE rows.
#[tokio::test]
async fn cleanup_deletes_only_what_the_relays_stored_checkpoint_covers() {
    use mysql_async::prelude::Queryable;
    use outbox_checkpoint::{CheckpointStore, FileCheckpointStore};
    use outbox_writer::{delete_published_events, CleanupPolicy};

    let world = World::start().await;
    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    relay.start();
    let consumer = world.start_consumer(world.consumer_config(), reserve_stock());
    let old = world.place_order(110, "apple", 1).await;
    world.wait_for_reservations(1, Some(&relay)).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let published = world.place_order(111, "apple", 1).await;
    world.wait_for_reservations(2, Some(&relay)).await;

    let mut shop = world.db.conn().await.expect("connect");
    let second_of_111: u32 = shop
        .exec_first(
            "SELECT FLOOR(UNIX_TIMESTAMP(created_at)) FROM shop.outbox WHERE event_id = ?",
            (&published,),
        )
        .await
        .expect("select")
        .expect("row");
    let store = FileCheckpointStore::new(&relay.checkpoint_path);
    let started = std::time::Instant::now();
    loop {
        let checkpoint = store.load().await.expect("checkpoint readable");
        if checkpoint.is_some_and(|c| c.position.timestamp >= second_of_111) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the relay's checkpoint did not reach order 111; {}",
            relay.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    relay.kill9(); // a crash: the checkpoint stays where it is
    let unpublished = world.place_order(112, "apple", 1).await;

    let policy = CleanupPolicy {
        safety_margin: Duration::ZERO,
        batch_size: 1,
        max_batches: 10,
    };
    let outbox = outbox_examples::schema::shop_outbox_table().expect("table");
    let report = delete_published_events(&mut shop, &outbox, &store, &policy)
        .await
        .expect("cleanup");
    let left: Vec<String> = shop
        .query("SELECT event_id FROM shop.outbox ORDER BY created_at")
        .await
        .expect("rows");
    assert!(
        !left.contains(&old),
        "published before the checkpoint: deleted; {report:?}"
    );
    assert!(
        left.contains(&unpublished),
        "after the checkpoint: kept; {report:?}"
    );
    assert!(report.deleted_rows >= 1, "{report:?}");

    let mut relay = Relay::prepare(&world, &format!("{}.outbox.dlq", world.db.tag()));
    relay.start();
    world.wait_for_reservations(3, Some(&relay)).await;
    assert_eq!(
        world.stock("apple").await,
        (97, 3),
        "each order reserved once"
    );
    consumer.stop().await;
}

/// Records each applied step and how many handlers ran at once.
#[derive(Clone, Default)]
struct RecordSteps {
    /// Handlers running right now.
    running: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// The most that ever ran at once.
    most_at_once: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl outbox_consumer::EventHandler for RecordSteps {
    async fn handle(
        &self,
        event: &outbox_consumer::ConsumedEvent,
        transaction: &mut mysql_async::Transaction<'static>,
    ) -> Result<(), outbox_consumer::HandlerError> {
        use mysql_async::prelude::Queryable;
        use std::sync::atomic::Ordering;
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(30)).await;
        let step: i64 = event.payload_json()?;
        let key = event.key_str().unwrap_or_default().to_owned();
        let result = transaction
            .exec_drop(
                "INSERT INTO inventory.steps (aggregate, step) VALUES (?, ?)",
                (key, step),
            )
            .await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        result.map_err(Into::into)
    }
}

/// One partition's records apply in offset order (each aggregate's steps in order), and
/// partitions apply in parallel.
#[tokio::test]
async fn partitions_apply_in_order_and_in_parallel() {
    use mysql_async::prelude::Queryable;
    let world = World::start().await;
    world
        .db
        .exec(&[
            "CREATE TABLE inventory.steps (seq BIGINT AUTO_INCREMENT PRIMARY KEY, \
             aggregate VARCHAR(16) NOT NULL, step INT NOT NULL)",
        ])
        .await
        .expect("steps table");
    let topic = format!("{}.steps", world.db.tag());
    world.broker.create_topic(&topic, 3).await.expect("topic");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", world.broker.bootstrap())
        .set("linger.ms", "0")
        .create()
        .expect("producer");
    for step in 1..=8 {
        for partition in 0..3 {
            let key = format!("agg-{partition}");
            let id = format!("{key}-{step}");
            let payload = step.to_string();
            let headers = OwnedHeaders::new().insert(Header {
                key: "id",
                value: Some(id.as_bytes()),
            });
            producer
                .send(
                    FutureRecord::to(&topic)
                        .partition(partition)
                        .key(&key)
                        .payload(&payload)
                        .headers(headers),
                    Timeout::After(Duration::from_secs(10)),
                )
                .await
                .expect("produced");
        }
    }
    let mut config = world.consumer_config();
    config.topics = vec![topic];
    let handler = RecordSteps::default();
    let most_at_once = handler.most_at_once.clone();
    let metrics = outbox_consumer::ConsumerMetrics::new("inventory").unwrap();
    let consumer = outbox_consumer::OutboxConsumer::new(
        config,
        world.inventory_pool.clone(),
        handler,
        metrics.clone(),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(consumer.run(async move {
        let _ = stopped.await;
    }));
    let started = std::time::Instant::now();
    while metrics.events_applied.get() < 24 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "applied {}",
            metrics.events_applied.get()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(());
    task.await.expect("task").expect("run");
    let mut conn = world.inventory_pool.get_conn().await.expect("connect");
    for partition in 0..3 {
        let steps: Vec<i64> = conn
            .exec(
                "SELECT step FROM inventory.steps WHERE aggregate = ? ORDER BY seq",
                (format!("agg-{partition}"),),
            )
            .await
            .expect("steps");
        assert_eq!(
            steps,
            (1..=8).collect::<Vec<i64>>(),
            "agg-{partition} in order"
        );
    }
    assert!(
        most_at_once.load(std::sync::atomic::Ordering::SeqCst) > 1,
        "partitions ran in parallel"
    );
}

/// An event id longer than `processed_event.event_id` is dead-lettered (that record only:
/// the next one is applied); a `processed_event` table that cannot be written stops the
/// consumer with a definite error naming the fix, instead of retrying forever.
#[tokio::test]
async fn a_too_long_id_is_dead_lettered_and_a_missing_processed_event_table_stops_the_consumer() {
    let world = World::start().await;
    let consumer = world.start_consumer(world.consumer_config(), reserve_stock());
    let payload = |order_id: i64| {
        serde_json::to_string(&OrderCreated {
            order_id,
            sku: "apple".into(),
            quantity: 1,
        })
        .unwrap()
    };
    let headers = |id: &str| {
        vec![
            ("id".to_owned(), Some(id.as_bytes().to_vec())),
            ("event_type".to_owned(), Some(b"OrderCreated".to_vec())),
        ]
    };
    let bootstrap = world.broker.bootstrap();
    let topic = world.order_topic();
    let long_id = "x".repeat(300);
    produce(
        &bootstrap,
        &topic,
        Some(b"120"),
        Some(payload(120).as_bytes()),
        &headers(&long_id),
    )
    .await;
    produce(
        &bootstrap,
        &topic,
        Some(b"121"),
        Some(payload(121).as_bytes()),
        &headers("e-121"),
    )
    .await;
    world.wait_for_reservations(1, None).await;
    consumer.wait_for("dead letters", 1, dead_letters).await;
    assert_eq!(world.reservations().await, [(121, 1)]);
    let letters = world.records(&world.dead_letter_topic(), 1).await;
    assert_eq!(
        letters[0]
            .header_str(dead_letter_headers::ERROR_CLASS)
            .as_deref(),
        Some("event_id_too_long")
    );

    world
        .db
        .exec(&["DROP TABLE inventory.processed_event"])
        .await
        .expect("drop");
    produce(
        &bootstrap,
        &topic,
        Some(b"122"),
        Some(payload(122).as_bytes()),
        &headers("e-122"),
    )
    .await;
    let error = consumer.wait_for_error().await;
    assert!(
        matches!(
            error,
            outbox_consumer::ConsumerError::ProcessedEventTable { .. }
        ),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("create_processed_event_table_sql"),
        "{error}"
    );
    assert_eq!(
        world.reservations().await,
        [(121, 1)],
        "nothing applied without dedup"
    );
}

/// Poll mode (issue 27, contract test 7): the relay polls `shop.outbox`. It crashes after
/// Kafka acked a claim and before marking it (the rows are published again after the lease,
/// same ids), then is killed (-9) and restarted while orders keep coming: the inventory
/// service reserves each order exactly once, and counts the redeliveries as duplicates.
#[tokio::test]
async fn poll_mode_through_crashes_reserves_each_order_once() {
    let world = World::start().await;
    world.add_poll_columns().await;
    let mut relay = Relay::prepare_poll(&world, &format!("{}.outbox.dlq", world.db.tag()));
    let consumer = world.start_consumer(world.consumer_config(), reserve_stock());

    let mut ids = Vec::new();
    for order_id in 30..33 {
        ids.push(world.place_order(order_id, "apple", 1).await);
    }
    relay.start_with_env(&[("OUTBOX_RELAY_CRASH_AT", "before-poll-mark")]);
    let status = relay.wait_for_exit().await;
    assert_eq!(
        status.signal(),
        Some(6),
        "abort at the crash point; {}",
        relay.log_tail(20)
    );
    relay.start();
    consumer.wait_for("duplicates", 1, duplicates).await;
    for order_id in 33..45 {
        ids.push(world.place_order(order_id, "apple", 2).await);
        if order_id % 4 == 0 {
            relay.kill9();
            relay.start();
        }
    }
    world.wait_for_reservations(15, Some(&relay)).await;
    consumer.wait_for("applied", 15, applied).await;
    assert_eq!(
        world.stock("apple").await,
        (100 - 3 - 24, 27),
        "reserved once each"
    );
    let reservations = world.reservations().await;
    assert_eq!(reservations.len(), 15);
    assert!(reservations
        .iter()
        .all(|(order, quantity)| *quantity == if *order < 33 { 1 } else { 2 }));
    ids.sort();
    assert_eq!(world.processed_events().await, ids);
    assert_eq!(consumer.metrics.events_applied.get(), 15);
    assert!(
        consumer.metrics.duplicates_skipped.get() >= 1,
        "the crash's redelivery was skipped"
    );
    consumer.stop().await;
}
