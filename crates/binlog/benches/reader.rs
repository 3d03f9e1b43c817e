//! Reader throughput: raw binlog pull vs. the decoded pipeline, in one run.
//!
//! Starts a scratch MariaDB, writes 200 000 transactions (each one `shop.orders` row and one
//! `shop.outbox` row with a ~150-byte JSON payload), then measures in each round (3 by
//! default), back to back:
//! * raw pull: `mysql_async` `Conn::get_binlog_stream` from the first binlog file to the end
//!   position, counting events, decoding nothing (the issue's baseline: a standard client
//!   library streaming the log);
//! * raw pull through the reader's own replication connection
//!   (`outbox_binlog::pull_raw_events`: the reader's session, socket reads and packet
//!   framing, nothing decoded), so what decoding itself adds is visible too;
//! * decoded: `BinlogReader` (live source + decoder) from the earliest position, watching
//!   `shop.outbox`, counting commits and outbox rows until the end position; once reading
//!   inline (`read_ahead_events` 0, the default) and once with the read-ahead task (4096).
//!
//! Prints transactions/s of each per round, the ratio of each round (raw time / decoded
//! time, both rounds back to back), the best of each over the rounds (the machine is shared,
//! single rounds are noisy) and their ratio decoded/raw, and the median of the per-round
//! ratios; the issue's target is a ratio of at least 0.8. Both sides read from the first
//! binlog file to the same end position; the raw side counts events (at least 6 per
//! transaction), the decoded side decodes every outbox row and checks the row count, the
//! commit count and the exact sum of the payload lengths. For
//! reference it also reads the same binlog file from disk with `BinlogFileReader` (decoder
//! without network). Run with:
//! `cargo bench -p outbox-binlog --bench reader` (set `READER_BENCH_TRANSACTIONS` to change
//! the number of transactions, `READER_BENCH_ROUNDS` the number of rounds, default 3).
//! `READER_BENCH_ONLY` = `raw`, `own-raw`, `inline`, `task` or `none` runs only that pipeline (no
//! ratios, no file reader): for instruction counts with `valgrind --tool=callgrind`, where
//! the `none` run measures the setup that the other runs share.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::BinlogStreamRequest;
use outbox_binlog::{
    BinlogReader, ReaderConfig, StartPosition, StreamItem, TableFilter, TableName, Value,
};
use outbox_testkit::{ScratchMariadb, ScratchOptions};

/// Transactions written per multi-statement round trip.
const BATCH: usize = 500;

/// Replica `server_id` of the next pass (raw or decoded): every pass gets its own. A dump
/// request with the `server_id` of an earlier pass's connection, which the server may still
/// hold after the client dropped it, makes the server end that dump thread first; with
/// shared ids this added ~0.1 s to every pass but the first of each id (crate README).
static NEXT_SERVER_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(9001);

fn next_server_id() -> u32 {
    NEXT_SERVER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn payload(n: usize) -> String {
    // ~150 bytes of JSON.
    format!(
        r#"{{"orderId":{n},"customerId":"c-{:06}","items":[{{"sku":"sku-{:05}","qty":2,"price":"19.99"}}],"total":"39.98","currency":"EUR","note":"bench"}}"#,
        n % 100_000,
        n % 50_000
    )
}

async fn write_transactions(server: &ScratchMariadb, transactions: usize) {
    let mut conn = server.conn().await.expect("connect");
    conn.query_drop(
        "CREATE DATABASE shop;
         CREATE TABLE shop.orders (id BIGINT PRIMARY KEY, customer VARCHAR(64), total DECIMAL(10,2),
             created_at DATETIME(6)) ENGINE=InnoDB;
         CREATE TABLE shop.outbox (event_id CHAR(36) PRIMARY KEY, aggregate_type VARCHAR(255),
             aggregate_id VARCHAR(255), event_type VARCHAR(255), payload JSON,
             created_at DATETIME(6)) ENGINE=InnoDB",
    )
    .await
    .expect("schema");
    let mut written = 0;
    while written < transactions {
        let end = (written + BATCH).min(transactions);
        let mut sql = String::with_capacity((end - written) * 600);
        for n in written..end {
            sql.push_str(&format!(
                "BEGIN;INSERT INTO shop.orders VALUES ({n}, 'c-{:06}', 39.98, NOW(6));\
                 INSERT INTO shop.outbox VALUES ('00000000-0000-4000-8000-{n:012}', 'order', \
                 '{n}', 'OrderCreated', '{}', NOW(6));COMMIT;",
                n % 100_000,
                payload(n)
            ));
        }
        conn.query_drop(sql).await.expect("batch");
        written = end;
    }
    conn.disconnect().await.expect("disconnect");
}

/// Binlog file and position after the last transaction.
async fn end_of_log(server: &ScratchMariadb) -> (String, u64) {
    let mut conn = server.conn().await.expect("connect");
    let row: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .expect("status")
        .expect("binlog on");
    let file: String = row.get(0).expect("file");
    let position: u64 = row.get(1).expect("position");
    (file, position)
}

async fn first_file(server: &ScratchMariadb) -> String {
    let mut conn = server.conn().await.expect("connect");
    let row: mysql_async::Row = conn
        .query_first("SHOW BINARY LOGS")
        .await
        .expect("logs")
        .expect("a log");
    row.get(0).expect("name")
}

/// Times `pull` (wall clock and this process's CPU) and checks the events it counted: GTID,
/// TABLE_MAP x2, WRITE_ROWS x2, XID (plus annotations) are at least 6 events per
/// transaction, so a pull that stopped early cannot pass as fast.
async fn timed_pull(
    transactions: usize,
    pull: impl std::future::Future<Output = u64>,
) -> (Duration, f64, u64) {
    let started = Instant::now();
    let cpu_started = process_cpu_seconds();
    let events = pull.await;
    let elapsed = started.elapsed();
    let cpu = process_cpu_seconds() - cpu_started;
    assert!(
        events >= 6 * transactions as u64,
        "raw pull read only {events} events for {transactions} transactions"
    );
    (elapsed, cpu, events)
}

/// Raw pull: connect, then events from the first file to the end position, nothing decoded.
/// Counts the events; the decoded side's reader counts its own in its metrics
/// (`outbox_binlog_events_received_total`, printed per round), which must match.
/// Timed from connecting, like the decoded run (whose `connect` also checks the server).
async fn raw_pull(
    server: &ScratchMariadb,
    first: &str,
    end: &(String, u64),
    transactions: usize,
) -> (Duration, f64, u64) {
    timed_pull(transactions, async {
        let mut conn = server.conn().await.expect("connect");
        // The same session as the reader's (`open_stream` in src/live.rs): GTID events arrive
        // as such, so both sides receive the same events (without it MariaDB rewrites the
        // stream for an old replica and sends 8 instead of 6 events per transaction).
        conn.query_drop("SET @mariadb_slave_capability=4")
            .await
            .expect("slave capability");
        let mut stream = conn
            .get_binlog_stream(
                BinlogStreamRequest::new(next_server_id())
                    .with_filename(first.as_bytes())
                    .with_pos(4),
            )
            .await
            .expect("binlog stream");
        let mut events = 0u64;
        let mut file = first.to_owned();
        while let Some(event) = stream.next().await {
            let event = event.expect("event");
            events += 1;
            let header = event.header();
            if header.event_type_raw() == 0x04 {
                // ROTATE: name after the 8-byte position (may carry 4 trailing CRC bytes).
                let name = &event.data()[8..];
                file = String::from_utf8_lossy(name)
                    .chars()
                    .take_while(|c| c.is_ascii_graphic())
                    .collect();
            }
            if file == end.0 && u64::from(header.log_pos()) >= end.1 {
                break;
            }
        }
        events
    })
    .await
}

/// Raw pull through the reader's own replication connection (`outbox_binlog::pull_raw_events`:
/// the same session, socket reads and packet framing as `BinlogReader`, nothing decoded): what
/// decoding adds is the decoded pipeline's time minus this one's.
async fn own_raw_pull(
    server: &ScratchMariadb,
    first: &str,
    end: &(String, u64),
    transactions: usize,
) -> (Duration, f64, u64) {
    timed_pull(transactions, async {
        outbox_binlog::pull_raw_events(&server.url(), next_server_id(), first, &end.0, end.1)
            .await
            .expect("raw pull through the reader's connection")
    })
    .await
}

/// Sum of the payload lengths `write_transactions` wrote, which the decoded side must
/// reproduce exactly.
fn expected_payload_bytes(transactions: usize) -> usize {
    (0..transactions).map(|n| payload(n).len()).sum()
}

/// Decoded pipeline: the live reader watching the outbox until the end position. Every
/// outbox row's values are decoded; the payload lengths are summed and compared with what
/// was written, and the row and commit counts are checked.
async fn decoded(
    registry: &prometheus::Registry,
    server: &ScratchMariadb,
    end: &(String, u64),
    transactions: usize,
    read_ahead_events: usize,
) -> (Duration, f64, f64) {
    let events_before = counter_value(registry, "outbox_binlog_events_received_total");
    let batches_before = counter_value(registry, "outbox_binlog_event_batches_total");
    let started = Instant::now();
    let cpu_started = process_cpu_seconds();
    let config = ReaderConfig {
        url: server.url(),
        server_id: next_server_id(),
        start: StartPosition::Earliest,
        filter: TableFilter::tables([TableName::new("shop", "outbox")]),
        heartbeat_interval: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(30),
        tls: outbox_binlog::TlsOptions::default(),
    };
    let mut reader = BinlogReader::connect_with_read_ahead(config, read_ahead_events)
        .await
        .expect("reader connects");
    let mut rows = 0usize;
    let mut payload_bytes = 0usize;
    let mut commits_with_rows = 0usize;
    loop {
        match reader.next_item().await.expect("item") {
            StreamItem::Row(row) => {
                rows += 1;
                match row.after.as_ref().and_then(|r| r.get("payload")) {
                    Some(Value::Text(text)) => payload_bytes += text.len(),
                    other => panic!("payload is not text: {other:?}"),
                }
            }
            StreamItem::Commit(commit) => {
                if commit.row_count > 0 {
                    assert_eq!(commit.row_count, 1, "one outbox row per transaction");
                    commits_with_rows += 1;
                }
                if commit.position.file == end.0 && commit.position.position >= end.1 {
                    break;
                }
            }
            StreamItem::Heartbeat(_) => {}
        }
    }
    let elapsed = started.elapsed();
    let cpu = process_cpu_seconds() - cpu_started;
    drop(reader);
    let events = counter_value(registry, "outbox_binlog_events_received_total") - events_before;
    let batches = counter_value(registry, "outbox_binlog_event_batches_total") - batches_before;
    println!(
        "    reader metrics: {events} events in {batches} batches, {:.1} events per batch",
        events / batches.max(1.0)
    );
    assert_eq!(rows, transactions, "every outbox row decoded");
    assert_eq!(
        commits_with_rows, transactions,
        "every transaction committed"
    );
    assert_eq!(
        payload_bytes,
        expected_payload_bytes(transactions),
        "every payload decoded as text, byte-exact in length"
    );
    (elapsed, cpu, events)
}

/// The value of the counter `name` in `registry`.
fn counter_value(registry: &prometheus::Registry, name: &str) -> f64 {
    registry
        .gather()
        .iter()
        .find(|family| family.name() == name)
        .map(|family| {
            family
                .get_metric()
                .iter()
                .map(|m| m.get_counter().get_value())
                .sum()
        })
        .unwrap_or(0.0)
}

/// CPU time (user + system, all threads) this process used so far, from `/proc/self/stat`
/// (clock ticks of 10 ms): the client's own cost, which the shared machine's load does not
/// change the way it changes wall time.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which may hold spaces) start at field 3 (`state`);
    // utime and stime are fields 14 and 15.
    let after_name = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks as f64 / 100.0
}

fn per_second(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64()
}

fn main() {
    let transactions: usize = std::env::var("READER_BENCH_TRANSACTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let rounds: usize = std::env::var("READER_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    // One pipeline only (instruction counting, see the module docs); `None` runs all.
    let only: Option<String> = std::env::var("READER_BENCH_ONLY").ok();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let registry = prometheus::Registry::new();
    outbox_binlog::register_metrics(&registry).expect("metrics register");
    runtime.block_on(async {
        let server = ScratchMariadb::start_with(ScratchOptions {
            extra_args: vec![
                "--innodb-flush-log-at-trx-commit=0".into(),
                "--sync-binlog=0".into(),
                "--innodb-buffer-pool-size=256M".into(),
                "--max-binlog-size=1G".into(),
            ],
            ..ScratchOptions::default()
        })
        .await
        .expect("scratch MariaDB");
        let setup = Instant::now();
        write_transactions(&server, transactions).await;
        let end = end_of_log(&server).await;
        let first = first_file(&server).await;
        println!(
            "setup: {transactions} transactions written in {:.1}s, binlog ends at {}:{}",
            setup.elapsed().as_secs_f64(),
            end.0,
            end.1
        );
        // The decoded pipeline in both modes (inline = read_ahead_events 0, the default of
        // `BinlogReader::connect`; task = 4096 events read ahead).
        let variants = [
            ("inline", 0_usize),
            ("read-ahead task", 4096_usize),
        ];
        let mut best_raw = Duration::MAX;
        let mut best_own_raw = Duration::MAX;
        let mut own_round_ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut best_decoded = [Duration::MAX; 2];
        let mut round_ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        if let Some(only) = only.as_deref() {
            match only {
                "raw" => {
                    let (raw, raw_cpu, events) =
                        raw_pull(&server, &first, &end, transactions).await;
                    println!(
                        "raw pull only: {events} events in {:.2}s (client CPU {raw_cpu:.2}s)",
                        raw.as_secs_f64()
                    );
                }
                "own-raw" => {
                    let (raw, raw_cpu, events) =
                        own_raw_pull(&server, &first, &end, transactions).await;
                    println!(
                        "own raw pull only: {events} events in {:.2}s (client CPU {raw_cpu:.2}s)",
                        raw.as_secs_f64()
                    );
                }
                "inline" | "task" => {
                    let read_ahead_events = if only == "inline" { 0 } else { 4096 };
                    let (dec, dec_cpu, events) =
                        decoded(&registry, &server, &end, transactions, read_ahead_events).await;
                    println!(
                        "decoded ({only}) only: {events} events in {:.2}s (client CPU {dec_cpu:.2}s)",
                        dec.as_secs_f64()
                    );
                }
                "none" => println!("setup only"),
                other => panic!(
                    "READER_BENCH_ONLY={other}: expected raw, own-raw, inline, task or none"
                ),
            }
            return;
        }
        for round in 1..=rounds {
            let (raw, raw_cpu, events) = raw_pull(&server, &first, &end, transactions).await;
            println!(
                "round {round}: raw pull     {events} events in {:.2}s = {:.0} transactions/s \
                 (client CPU {raw_cpu:.2}s)",
                raw.as_secs_f64(),
                per_second(transactions, raw)
            );
            best_raw = best_raw.min(raw);
            let (own_raw, own_raw_cpu, own_events) =
                own_raw_pull(&server, &first, &end, transactions).await;
            assert_eq!(own_events, events, "both raw pulls received the same events");
            println!(
                "round {round}: raw pull (reader's connection) {own_events} events in {:.2}s = \
                 {:.0} transactions/s (client CPU {own_raw_cpu:.2}s)",
                own_raw.as_secs_f64(),
                per_second(transactions, own_raw)
            );
            best_own_raw = best_own_raw.min(own_raw);
            for (index, (name, read_ahead_events)) in variants.iter().enumerate() {
                let (dec, dec_cpu, dec_events) =
                    decoded(&registry, &server, &end, transactions, *read_ahead_events).await;
                assert_eq!(
                    dec_events, events as f64,
                    "the reader received the same events as the raw pull"
                );
                let ratio = raw.as_secs_f64() / dec.as_secs_f64();
                let own_ratio = own_raw.as_secs_f64() / dec.as_secs_f64();
                println!(
                    "round {round}: decoded ({name}) {transactions} outbox rows in {:.2}s = \
                     {:.0} transactions/s (client CPU {dec_cpu:.2}s), ratio {ratio:.2} \
                     (to the reader's own raw pull: {own_ratio:.2})",
                    dec.as_secs_f64(),
                    per_second(transactions, dec)
                );
                round_ratios[index].push(ratio);
                own_round_ratios[index].push(own_ratio);
                best_decoded[index] = best_decoded[index].min(dec);
            }
        }
        let files: Vec<std::path::PathBuf> = {
            let mut files: Vec<_> = std::fs::read_dir(server.datadir())
                .expect("datadir")
                .map(|entry| entry.expect("entry").path())
                .filter(|path| {
                    path.file_name()
                        .and_then(|name| name.to_str())
                        .is_some_and(|name| name.starts_with("binlog.") && !name.ends_with(".index"))
                })
                .collect();
            files.sort();
            files
        };
        let started = Instant::now();
        let mut reader = outbox_binlog::BinlogFileReader::open(
            files,
            TableFilter::tables([TableName::new("shop", "outbox")]),
        )
        .expect("file reader");
        let mut file_rows = 0usize;
        while let Some(item) = reader.next_item().expect("file item") {
            if matches!(item, StreamItem::Row(_)) {
                file_rows += 1;
            }
        }
        assert_eq!(file_rows, transactions);
        println!(
            "file reader (decoder, no network): {:.0} transactions/s",
            per_second(transactions, started.elapsed())
        );
        let raw_rate = per_second(transactions, best_raw);
        let own_raw_rate = per_second(transactions, best_own_raw);
        for (index, (name, read_ahead_events)) in variants.iter().enumerate() {
            let decoded_rate = per_second(transactions, best_decoded[index]);
            round_ratios[index].sort_by(f64::total_cmp);
            let median_round_ratio = round_ratios[index][round_ratios[index].len() / 2];
            own_round_ratios[index].sort_by(f64::total_cmp);
            let own_median = own_round_ratios[index][own_round_ratios[index].len() / 2];
            let default = if *read_ahead_events == outbox_binlog::DEFAULT_READ_AHEAD_EVENTS {
                " [default]"
            } else {
                ""
            };
            println!(
                "best: raw {raw_rate:.0} tx/s, decoded ({name}){default} {decoded_rate:.0} tx/s, \
                 ratio {:.2} (target >= 0.80); median of the per-round ratios {median_round_ratio:.2}",
                decoded_rate / raw_rate
            );
            println!(
                "      to the reader's own raw pull ({own_raw_rate:.0} tx/s): ratio {:.2}; \
                 median of the per-round ratios {own_median:.2}",
                decoded_rate / own_raw_rate
            );
        }
    });
}
