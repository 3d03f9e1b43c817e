//! Big transactions and big rows through the real binary, with the relay's resident memory
//! measured (`VmHWM`, the peak resident set, from `/proc/PID/status`): a 1 000 000-row
//! transaction, and 64 MiB payloads. Memory must stay bounded by the in-flight limits
//! (`pipeline.max_in_flight` records, `pipeline.max_in_flight_bytes` bytes), not grow with
//! the transaction or with the number of big rows. The numbers are printed (run with
//! `--nocapture`) and recorded in crates/relay/README.md.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const MIB: u64 = 1024 * 1024;

/// A consumer for checks that do not read whole topics.
fn consumer(bootstrap: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "memory-bounds-check")
        .set("enable.auto.commit", "false")
        .set("fetch.message.max.bytes", "100000000")
        .set("receive.message.max.bytes", "200000000")
        .create()
        .expect("consumer")
}

/// Reads partition 0 of `topic` from the start until `expected` records arrived, then for
/// two more seconds (to catch extras); each record as (header `id`, value length, value
/// FNV-1a 64).
fn read_records(
    consumer: &BaseConsumer,
    topic: &str,
    expected: usize,
    limit: Duration,
) -> Vec<(String, usize, u64)> {
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .expect("assignment");
    consumer.assign(&assignment).expect("assign");
    let started = Instant::now();
    let mut records = Vec::with_capacity(expected);
    let mut complete_at: Option<Instant> = None;
    loop {
        if complete_at.is_some_and(|at| at.elapsed() > Duration::from_secs(2)) {
            return records;
        }
        assert!(
            started.elapsed() < limit,
            "only {} of {expected} records within {limit:?}",
            records.len()
        );
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.expect("consume");
        let id = message
            .headers()
            .and_then(|headers| {
                headers
                    .iter()
                    .find(|header| header.key == "id")
                    .and_then(|header| header.value)
                    .map(|value| String::from_utf8_lossy(value).into_owned())
            })
            .unwrap_or_default();
        let value = message.payload().unwrap_or_default();
        records.push((id, value.len(), fnv1a64(value)));
        if records.len() >= expected && complete_at.is_none() {
            complete_at = Some(Instant::now());
        }
    }
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Samples the relay's peak resident set until the checkpoint reaches `end`.
async fn run_until_checkpoint(relay: &mut Relay, end: &BinlogPoint, limit: Duration) -> u64 {
    let pid = relay.pid().expect("relay running");
    let started = Instant::now();
    loop {
        relay.assert_running("while relaying");
        let peak = peak_rss(pid);
        let view = relay.checkpoint();
        if view
            .position
            .as_ref()
            .is_some_and(|position| position >= end)
        {
            return peak;
        }
        assert!(
            started.elapsed() < limit,
            "checkpoint {} did not reach {end} within {limit:?}; log:\n{}",
            view.raw,
            relay.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One transaction of 1 000 000 outbox rows: every event arrives (the topic holds exactly
/// 1 000 000 records, first and last in commit order), the checkpoint passes the
/// transaction, and the relay's peak RSS stays far below the transaction's size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_row_transaction_flows_with_bounded_memory() {
    const ROWS: u32 = 1_000_000;
    let (db, broker) = start_shop_database_and_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    relay.limit_in_flight_bytes(67108864);
    let mut conn = db.conn().await.expect("connect");
    let written = Instant::now();
    conn.query_drop("START TRANSACTION").await.unwrap();
    conn.query_drop(format!(
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
         SELECT CONCAT('m-', LPAD(seq, 7, '0')), 'order', CONCAT('order-', seq % 16), \
         'BulkImported', CONCAT('{{\"n\":', seq, ',\"pad\":\"', REPEAT('x', 64), '\"}}') \
         FROM shop.seq_1_to_{ROWS}"
    ))
    .await
    .unwrap();
    conn.query_drop("COMMIT").await.unwrap();
    let end = master_position(&mut conn).await;
    conn.disconnect().await.unwrap();
    let write_time = written.elapsed();

    let relayed = Instant::now();
    relay.start();
    let peak = run_until_checkpoint(&mut relay, &end, Duration::from_secs(600)).await;
    let relay_time = relayed.elapsed();
    relay
        .stop_gracefully("stop after the big transaction")
        .await;

    let consumer = consumer(&broker.bootstrap());
    let records = read_records(
        &consumer,
        &topic_for(&db, "order"),
        ROWS as usize,
        Duration::from_secs(300),
    );
    eprintln!(
        "1M-row transaction: written in {write_time:?}, relayed in {relay_time:?}; \
         {} records; relay peak RSS {} MiB (binlog transaction ~{} MiB)",
        records.len(),
        peak / MIB,
        u64::from(ROWS) * 150 / MIB
    );
    assert_eq!(
        records.len(),
        ROWS as usize,
        "every event exactly once (no failure happened)"
    );
    // One partition: offset order is commit order, so the ids count up without a gap.
    let out_of_place = (1..=ROWS)
        .zip(&records)
        .find(|(n, (id, _, _))| *id != format!("m-{n:07}"));
    assert_eq!(out_of_place, None, "first event out of place");
    // The transaction's events alone are ~150 MiB, its records with headers more: a relay
    // that buffered the transaction would exceed this.
    assert!(
        peak < 160 * MIB,
        "relay peak RSS {} MiB: memory is not bounded by the in-flight limits",
        peak / MIB
    );
}

/// Peak RSS of `pid` once it stopped growing for `quiet` (at most `limit`).
async fn settled_peak_rss(pid: u32, quiet: Duration, limit: Duration) -> u64 {
    let started = Instant::now();
    let mut peak = peak_rss(pid);
    let mut since = Instant::now();
    while since.elapsed() < quiet && started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = peak_rss(pid);
        if now > peak {
            peak = now;
            since = Instant::now();
        }
    }
    peak
}

/// Six rows with 64 MiB payloads (one per transaction) arrive while the broker is frozen, so
/// nothing is acknowledged: the relay reads on only as far as its 128 MiB in-flight byte
/// budget allows, and its peak RSS stays near what that budget allows (the Kafka client's
/// copy of the record in flight, and the next row's event, which reserves its raw size
/// before it is decoded and so waits as raw bytes only: about 170 MiB measured, 233 MiB
/// when the row was decoded before it waited), well below the ~800 MiB that reading all six
/// takes (measured with a 4 GiB budget: see crates/relay/README.md). After the thaw each
/// payload arrives byte-exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_mib_payloads_wait_for_the_in_flight_byte_budget() {
    const EVENTS: usize = 6;
    const PAYLOAD_BYTES: usize = 64 * 1024 * 1024;
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    db.exec(&["SET GLOBAL max_allowed_packet = 1073741824"])
        .await
        .expect("raise max_allowed_packet");
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.allow_big_records();
    let mut relay = Relay::prepare(&setup);
    relay.limit_in_flight_bytes(134217728);
    // A first small event: the topic exists and the producer is connected.
    let mut writer = ShopWriter::connect(&db, "small").await;
    writer
        .transaction("order", "order-small", 1, true, false)
        .await;
    let first = writer.master_position().await;
    writer.close().await;
    relay.start();
    wait_for_checkpoint(&relay, &first, Duration::from_secs(30)).await;
    let pid = relay.pid().expect("relay running");
    let baseline = peak_rss(pid);

    broker.freeze().expect("freeze the broker");
    // A new connection sees the raised max_allowed_packet.
    let mut conn = db.conn().await.expect("connect");
    let mut expected = Vec::new();
    for n in 0..EVENTS {
        let filler = char::from(b'a' + n as u8).to_string();
        let payload = format!(
            "{{\"n\":{n},\"blob\":\"{}\"}}",
            filler.repeat(PAYLOAD_BYTES - 20)
        );
        let id = format!("huge-{n}");
        conn.exec_drop(
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (?, 'order', 'order-huge', 'Huge', ?)",
            (&id, &payload),
        )
        .await
        .expect("insert a 64 MiB payload");
        expected.push((id, payload.len(), fnv1a64(payload.as_bytes())));
    }
    let end = master_position(&mut conn).await;
    conn.disconnect().await.unwrap();
    // Everything the relay reads now stays in memory: wait until it stops reading.
    let frozen_peak = settled_peak_rss(pid, Duration::from_secs(4), Duration::from_secs(60)).await;
    relay.assert_running("while the broker is frozen");
    let held = relay.checkpoint();
    assert!(
        held.position
            .as_ref()
            .is_some_and(|position| *position < end),
        "checkpoint passed unacknowledged events: {}",
        held.raw
    );
    broker.thaw().expect("thaw the broker");
    let peak = run_until_checkpoint(&mut relay, &end, Duration::from_secs(300)).await;
    relay.stop_gracefully("stop after the big rows").await;

    let consumer = consumer(&broker.bootstrap());
    let seen = read_records(
        &consumer,
        &topic_for(&db, "order"),
        EVENTS + 1,
        Duration::from_secs(120),
    );
    eprintln!(
        "{EVENTS} x 64 MiB payloads behind a frozen broker, 128 MiB in-flight byte budget: \
         relay RSS {} MiB before, peak {} MiB while frozen, {} MiB overall; {} records",
        baseline / MIB,
        frozen_peak / MIB,
        peak / MIB,
        seen.len()
    );
    assert_eq!(
        &seen[1..],
        &expected[..],
        "each big payload arrives once, byte-exact"
    );
    assert!(
        frozen_peak < 560 * MIB,
        "relay peak RSS {} MiB while the broker was frozen: big rows are not bounded by \
         max_in_flight_bytes",
        frozen_peak / MIB
    );
}
