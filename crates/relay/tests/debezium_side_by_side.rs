//! The reference beside us: Debezium 3.6.1's MySQL connector + Outbox Event Router (in a
//! Kafka Connect worker) and outbox-relay read the same committed outbox rows from the same
//! MariaDB binlog into the same Apache Kafka broker. With the converters a Debezium user
//! picks for text payloads (StringConverter for key and value), a consumer must see the same
//! key, value and `id` header from both. The test prints both records side by side.
//!
//! This is the harness test the Debezium drop-in work builds its differential tests on;
//! [`debezium_json_converter_records_are_read_back`] shows the harness's other converter
//! choice working (what outbox-relay must produce for it is that work's subject).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;
use outbox_testkit::connect::{Converter, DebeziumConnect, DebeziumOptions};
use outbox_testkit::consume::{console_consume, read_all, ConsumedRecord, ReadStop};
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::ScratchMariadb;

/// Commits `count` outbox rows (aggregate types `order`/`customer`, one aggregate each), one
/// transaction each with an order row, plus one rolled-back transaction; returns the
/// committed rows as (id, aggregate type, aggregate id, payload).
async fn write_outbox_rows(
    db: &ScratchMariadb,
    count: u32,
) -> Vec<(String, String, String, String)> {
    let mut conn = db.conn().await.expect("connect");
    let mut committed = Vec::new();
    for index in 0..count {
        let aggregate_type = ["order", "customer"][(index % 2) as usize];
        let aggregate_id = format!("{aggregate_type}-{index}");
        let id = format!("dbz-side-{index:04}");
        let payload = tricky_payload(u64::from(index), u64::from(index));
        conn.query_drop("START TRANSACTION").await.unwrap();
        conn.exec_drop(
            "INSERT INTO shop.orders (id, customer, total) VALUES (?, 'c', 1.00)",
            (u64::from(index) + 1,),
        )
        .await
        .unwrap();
        conn.exec_drop(
            "INSERT INTO shop.outbox_debezium (id, aggregatetype, aggregateid, type, payload) \
             VALUES (?, ?, ?, 'OrderCreated', ?)",
            (&id, aggregate_type, &aggregate_id, &payload),
        )
        .await
        .unwrap();
        conn.query_drop("COMMIT").await.unwrap();
        committed.push((id, aggregate_type.to_string(), aggregate_id, payload));
    }
    conn.query_drop("START TRANSACTION").await.unwrap();
    conn.exec_drop(
        "INSERT INTO shop.outbox_debezium (id, aggregatetype, aggregateid, type, payload) \
         VALUES ('dbz-side-doomed', 'order', 'order-0', 'OrderDoomed', '{}')",
        (),
    )
    .await
    .unwrap();
    conn.query_drop("ROLLBACK").await.unwrap();
    conn.disconnect().await.unwrap();
    committed
}

/// One line per record: partition@offset, key, the `id` header, all header names, the value.
fn describe(record: &ConsumedRecord) -> String {
    let header_names: Vec<&str> = record
        .headers
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    format!(
        "{}@{} key={:?} id={:?} headers={header_names:?} value={}",
        record.partition,
        record.offset,
        record.key_str(),
        record.header_str("id"),
        String::from_utf8_lossy(record.value.as_deref().unwrap_or(b"<null>"))
    )
}

/// Records by their `id` header.
fn by_id(records: &[ConsumedRecord]) -> BTreeMap<String, &ConsumedRecord> {
    records
        .iter()
        .filter_map(|record| record.header_str("id").map(|id| (id, record)))
        .collect()
}

/// Starts outbox-relay on the same database and broker from the binlog's start, routing
/// `shop.outbox_debezium` (Debezium preset) to `TAG.outbox.event.TYPE`, topics created with
/// [`PARTITIONS`] partitions.
fn start_relay(db: &ScratchMariadb, broker: &KafkaBroker) -> Relay {
    let mut setup = RelaySetup::new(db, &broker.bootstrap());
    setup.topic_partitions = PARTITIONS;
    setup.extra_outbox_tables = vec![("shop.outbox_debezium".to_string(), "debezium".to_string())];
    let mut relay = Relay::prepare(&setup);
    relay.start();
    relay
}

/// Partitions of both sides' topics: an aggregate's events must land on the same partition
/// number from both (the Java producer's murmur2 partitioner), or per-aggregate order breaks
/// across a cutover.
const PARTITIONS: i32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_and_outbox_relay_deliver_the_same_records() {
    const ROWS: u32 = 12;
    let (db, broker) = tokio::join!(start_database_for_debezium(), KafkaBroker::shared());
    let broker = broker.expect("the shared Kafka broker starts");
    let tag = db.tag().to_string();
    // Debezium routes to its own copy of the topics, so both outputs can be compared.
    let mut options = DebeziumOptions::outbox(&format!("{tag}-dbz"), "shop.outbox_debezium");
    options.extra.push((
        "transforms.outbox.route.topic.replacement".into(),
        format!("{tag}.dbz.outbox.event.${{routedByValue}}"),
    ));
    options.extra.push((
        "topic.creation.default.partitions".into(),
        PARTITIONS.to_string(),
    ));
    let debezium = DebeziumConnect::start(&db, broker, options)
        .await
        .expect("Debezium streams");
    let mut relay = start_relay(&db, broker);

    let committed = write_outbox_rows(&db, ROWS).await;

    let mut failures = Vec::new();
    for aggregate_type in ["order", "customer"] {
        let ours_topic = topic_for(&db, aggregate_type);
        let theirs_topic = format!("{tag}.dbz.outbox.event.{aggregate_type}");
        let expected: Vec<_> = committed
            .iter()
            .filter(|(_, kind, _, _)| kind == aggregate_type)
            .collect();
        let ours = read_all(
            &broker.bootstrap(),
            &[ours_topic.as_str()],
            ReadStop::Count(expected.len()),
            Duration::from_secs(60),
        )
        .await
        .expect("read outbox-relay's records");
        // Debezium's side is read by Kafka's own console consumer (a client no one here wrote).
        let theirs = console_consume(
            &broker.bootstrap(),
            &theirs_topic,
            expected.len(),
            Duration::from_secs(60),
        )
        .await
        .expect("read Debezium's records");

        println!("== {aggregate_type}: outbox-relay ({ours_topic}) | Debezium ({theirs_topic})");
        let (ours_by_id, theirs_by_id) = (by_id(&ours), by_id(&theirs));
        for (id, kind, aggregate_id, payload) in &expected {
            let mine = ours_by_id.get(id.as_str());
            let reference = theirs_by_id.get(id.as_str());
            println!(
                "  {id}\n    relay:    {}\n    debezium: {}",
                mine.map_or("MISSING".to_string(), |r| describe(r)),
                reference.map_or("MISSING".to_string(), |r| describe(r)),
            );
            let (Some(mine), Some(reference)) = (mine, reference) else {
                failures.push(format!(
                    "{id} ({kind}): relay {mine:?}, debezium {reference:?}"
                ));
                continue;
            };
            if mine.key_str().as_deref() != Some(aggregate_id.as_str()) {
                failures.push(format!("{id}: relay key {:?}", mine.key_str()));
            }
            if mine.key != reference.key {
                failures.push(format!(
                    "{id}: keys differ: {:?} vs {:?}",
                    mine.key_str(),
                    reference.key_str()
                ));
            }
            if mine.value.as_deref() != Some(payload.as_bytes()) {
                failures.push(format!(
                    "{id}: relay value is not the payload byte for byte"
                ));
            }
            if mine.value != reference.value {
                failures.push(format!("{id}: values differ"));
            }
            if mine.partition != reference.partition {
                failures.push(format!(
                    "{id} (key {aggregate_id}): partition {} from the relay, {} from Debezium",
                    mine.partition, reference.partition
                ));
            }
        }
        if ours.len() != expected.len() || theirs.len() != expected.len() {
            failures.push(format!(
                "{aggregate_type}: {} committed, relay delivered {}, Debezium {}",
                expected.len(),
                ours.len(),
                theirs.len()
            ));
        }
        for record in ours.iter().chain(&theirs) {
            if record.header_str("id").as_deref() == Some("dbz-side-doomed") {
                failures.push(format!("a rolled-back row arrived: {}", describe(record)));
            }
        }
    }
    relay.stop_gracefully("after the comparison").await;
    assert!(
        failures.is_empty(),
        "outbox-relay and Debezium disagree:\n{}\nDebezium log: {}\nrelay log:\n{}",
        failures.join("\n"),
        debezium.log_path().display(),
        relay.log_tail(30)
    );
}

/// JsonConverter without schemas: Debezium's value is the payload as a JSON string literal
/// and its key a JSON string; the harness reads both back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_json_converter_records_are_read_back() {
    let (db, broker) = tokio::join!(start_database_for_debezium(), KafkaBroker::shared());
    let broker = broker.expect("the shared Kafka broker starts");
    let tag = db.tag().to_string();
    let mut options = DebeziumOptions::outbox(&format!("{tag}-dbzjson"), "shop.outbox_debezium");
    options.key_converter = Converter::Json { schemas: false };
    options.value_converter = Converter::Json { schemas: false };
    options.server_id = 54_322;
    options.extra.push((
        "transforms.outbox.route.topic.replacement".into(),
        format!("{tag}.dbz.outbox.event.${{routedByValue}}"),
    ));
    let _debezium = DebeziumConnect::start(&db, broker, options)
        .await
        .expect("Debezium streams");
    let committed = write_outbox_rows(&db, 2).await;
    let topic = format!("{tag}.dbz.outbox.event.order");
    let records = console_consume(&broker.bootstrap(), &topic, 1, Duration::from_secs(60))
        .await
        .expect("read Debezium's records");
    assert_eq!(records.len(), 1, "{records:?}");
    let (id, _, aggregate_id, payload) = &committed[0];
    println!(
        "Debezium with JsonConverter (schemas.enable=false): {}",
        describe(&records[0])
    );
    assert_eq!(records[0].header_str("id").as_deref(), Some(id.as_str()));
    let key: serde_json::Value =
        serde_json::from_slice(records[0].key.as_deref().unwrap_or_default()).expect("JSON key");
    assert_eq!(key, serde_json::Value::String(aggregate_id.clone()));
    let value: serde_json::Value =
        serde_json::from_slice(records[0].value.as_deref().unwrap_or_default())
            .expect("JSON value");
    assert_eq!(value, serde_json::Value::String(payload.clone()));
}

/// The outbox table of the differential test: Debezium's documented columns, with a nullable
/// key and payload (for the NULL rows), and additional columns for every placement: headers
/// (`tenant`; `region` and `blob_ref`, NULL in some rows; the temporal `created`,
/// `stamped`; the DECIMAL `amount`), envelope fields (`seq`, `due`, `amount`) and a
/// partition column (`part`).
const DIFFERENTIAL_TABLE: &str = "CREATE TABLE shop.outbox_diff (\
     id VARCHAR(64) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(64) NOT NULL, \
     aggregateid VARCHAR(64) NULL, type VARCHAR(64) NOT NULL, payload JSON NULL, \
     tenant VARCHAR(32) NOT NULL DEFAULT 'acme', \
     region VARCHAR(16) NULL, blob_ref VARBINARY(16) NULL, \
     created DATETIME(6) NOT NULL, stamped TIMESTAMP(3) NULL, \
     seq INT NOT NULL, due DATE NULL, part INT NULL, amount DECIMAL(20,10) NULL DEFAULT 1.5, \
     flag TINYINT(4) NULL DEFAULT -3, channel VARCHAR(16) NULL DEFAULT 'web', ok TINYINT(1) NULL DEFAULT 1, \
     ratio FLOAT NULL DEFAULT 0.1, big DOUBLE NULL, bits BIT(10) NULL DEFAULT b'101', bit1 BIT(1) NULL, \
     timestamp DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB";

/// The same outbox with a VARBINARY(16) event id and aggregate id (`binary.handling.mode =
/// bytes`, Debezium's default: the `id` header is the id's Base64, the key the bytes under
/// ByteArrayConverter, Base64 under JsonConverter).
const BINARY_TABLE: &str = "CREATE TABLE shop.outbox_bin (\
     id VARBINARY(16) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(64) NOT NULL, \
     aggregateid VARBINARY(16) NULL, type VARCHAR(64) NOT NULL, payload JSON NULL, \
     tenant VARCHAR(32) NOT NULL DEFAULT 'acme', \
     region VARCHAR(16) NULL, blob_ref VARBINARY(16) NULL, \
     created DATETIME(6) NOT NULL, stamped TIMESTAMP(3) NULL, \
     seq INT NOT NULL, due DATE NULL, part INT NULL, amount DECIMAL(20,10) NULL DEFAULT 1.5, \
     flag TINYINT(4) NULL DEFAULT -3, channel VARCHAR(16) NULL DEFAULT 'web', ok TINYINT(1) NULL DEFAULT 1, \
     ratio FLOAT NULL DEFAULT 0.1, big DOUBLE NULL, bits BIT(10) NULL DEFAULT b'101', bit1 BIT(1) NULL, \
     timestamp DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB";

/// Rows of [`BINARY_TABLE`]: (id hex, id Base64, aggregate type, key hex, key Base64, payload).
const BINARY_ROWS: &[(&str, &str, &str, &str, &str, &str)] = &[
    (
        "018f00000000700080000000000000a1",
        "AY8AAAAAcACAAAAAAAAAoQ==",
        "order",
        "00ff10ee",
        "AP8Q7g==",
        "{\"binary\": true}",
    ),
    (
        "018f00000000700080000000000000b2",
        "AY8AAAAAcACAAAAAAAAAsg==",
        "customer",
        "00ff20dd",
        "AP8g3Q==",
        "{\"binary\": 2}",
    ),
];

/// Debezium's `table.fields.additional.placement` in the differential test.
const ADDITIONAL_PLACEMENT: &str = "tenant:header:tenantId,region:header,blob_ref:header,\
     created:header,stamped:header,amount:header:amountText,ratio:header,big:header,bits:header,\
     bit1:header,seq:envelope,due:envelope:dueOn,blob_ref:envelope:blob,amount:envelope,\
     flag:envelope,channel:envelope,ok:envelope,agreed:envelope,ratio:envelope,big:envelope,\
     bit1:envelope,part:partition";

/// The relay's `[route]` lines for [`ADDITIONAL_PLACEMENT`] (the column types are the DDL's).
const RELAY_ADDITIONAL_FIELDS: &[&str] = &[
    "additional_headers = [{ column = \"tenant\", header = \"tenantId\" }, \
     { column = \"region\", column_type = \"varchar(16)\" }, \
     { column = \"blob_ref\", column_type = \"varbinary(16)\" }, \
     { column = \"created\", column_type = \"datetime(6)\" }, \
     { column = \"stamped\", column_type = \"timestamp(3)\" }, \
     { column = \"amount\", header = \"amountText\", column_type = \"decimal(20,10)\", \
       column_default = \"1.5000000000\" }, \
     { column = \"ratio\", column_type = \"float\", column_default = \"0.1\" }, \
     { column = \"big\", column_type = \"double\" }, \
     { column = \"bits\", column_type = \"bit(10)\", column_default = 5 }, \
     { column = \"bit1\", column_type = \"bit(1)\" }]",
    "envelope_fields = [{ column = \"seq\", column_type = \"int\", nullable = false }, \
     { column = \"due\", field = \"dueOn\", column_type = \"date\" }, \
     { column = \"blob_ref\", field = \"blob\", column_type = \"varbinary(16)\" }, \
     { column = \"amount\", column_type = \"decimal(20,10)\", column_default = \"1.5000000000\" }, \
     { column = \"flag\", column_type = \"tinyint(4)\", column_default = -3 }, \
     { column = \"channel\", column_type = \"varchar(16)\", column_default = \"web\" }, \
     { column = \"ok\", column_type = \"tinyint(1)\", column_default = 1 }, \
     { column = \"agreed\", column_type = \"boolean\" }, \
     { column = \"ratio\", column_type = \"float\", column_default = \"0.1\" }, \
     { column = \"big\", column_type = \"double\" }, { column = \"bit1\", column_type = \"bit(1)\" }]",
];

/// [`RELAY_ADDITIONAL_FIELDS`] without a `column_type` but the TINYINT's (the binlog does
/// not tell TINYINT(4) from TINYINT(1)) and with the defaults (the binlog has none):
/// `config from-debezium --probe` writes both. Each
/// column's type is the one the binlog's TABLE_MAP describes (`debezium_column_types`,
/// envelope fields by default), which must give Debezium's bytes as the DDL's types do.
const RELAY_ADDITIONAL_FIELDS_DESCRIBED: &[&str] = &[
    "debezium_column_types = true",
    "additional_headers = [{ column = \"tenant\", header = \"tenantId\" }, \
     { column = \"region\" }, { column = \"blob_ref\" }, { column = \"created\" }, \
     { column = \"stamped\" }, \
     { column = \"amount\", header = \"amountText\", column_default = \"1.5000000000\" }, \
     { column = \"ratio\", column_default = \"0.1\" }, { column = \"big\" }, \
     { column = \"bits\", column_default = 5 }, { column = \"bit1\" }]",
    "envelope_fields = [{ column = \"seq\" }, { column = \"due\", field = \"dueOn\" }, \
     { column = \"blob_ref\", field = \"blob\" }, \
     { column = \"amount\", column_default = \"1.5000000000\" }, \
     { column = \"flag\", column_type = \"tinyint(4)\", column_default = -3 }, \
     { column = \"channel\", column_default = \"web\" }, \
     { column = \"ok\", column_type = \"tinyint(1)\", column_default = 1 }, \
     { column = \"agreed\", column_type = \"boolean\" }, \
     { column = \"ratio\", column_default = \"0.1\" }, { column = \"big\" }, { column = \"bit1\" }]",
];

/// The key and payload schemas of the differential tables, stated (MariaDB's JSON is
/// LONGTEXT: a plain string to Debezium); the described modes leave them to the binlog.
const CONNECT_SCHEMA: &str = "connect_schema = { key_optional = true, payload_type = \"string\" }";

/// One converter setup: Debezium's converters and EventRouter options, and the relay's
/// `[route]` lines that must give the same bytes.
struct Mode {
    /// Short name, also part of both sides' topic names.
    name: &'static str,
    /// Debezium's `key.converter`.
    key: Converter,
    /// Debezium's `value.converter`.
    value: Converter,
    /// `transforms.outbox.table.expand.json.payload`.
    expand: bool,
    /// The relay's `[route]` lines for the same output.
    route: &'static [&'static str],
    /// The relay sends Debezium's `__debezium.context.*` headers too
    /// (`debezium_context_headers`); otherwise they are a deliberate difference.
    context_headers: bool,
    /// The relay's additional fields take their types from the binlog
    /// ([`RELAY_ADDITIONAL_FIELDS_DESCRIBED`]) instead of stated `column_type`s.
    described_types: bool,
    /// The relay's config is `outbox-relay config from-debezium --probe` of this mode's
    /// Debezium connector, with only deployment settings changed ([`probed_config`]):
    /// `route` and `described_types` are not used.
    probed: bool,
}

/// The modes the differential test runs, each with its own Debezium worker and relay.
const MODES: &[Mode] = &[
    Mode {
        name: "string",
        key: Converter::String,
        value: Converter::String,
        expand: false,
        route: &[],
        context_headers: false,
        described_types: true,
        probed: false,
    },
    Mode {
        name: "json",
        key: Converter::Json { schemas: false },
        value: Converter::Json { schemas: false },
        expand: false,
        route: &["key_format = \"json\"", "value_format = \"json\""],
        context_headers: true,
        described_types: false,
        probed: false,
    },
    Mode {
        name: "jsonschema",
        key: Converter::Json { schemas: true },
        value: Converter::Json { schemas: true },
        expand: false,
        route: &[
            "key_format = \"json_with_schema\"",
            "value_format = \"json_with_schema\"",
        ],
        context_headers: false,
        described_types: true,
        probed: false,
    },
    Mode {
        name: "jsonexpanded",
        key: Converter::Json { schemas: false },
        value: Converter::Json { schemas: false },
        expand: true,
        route: &[
            "key_format = \"json\"",
            "value_format = \"json\"",
            "expand_json_payload = true",
        ],
        context_headers: false,
        described_types: false,
        probed: false,
    },
    Mode {
        name: "schemaexpanded",
        key: Converter::Json { schemas: true },
        value: Converter::Json { schemas: true },
        expand: true,
        route: &[
            "key_format = \"json_with_schema\"",
            "value_format = \"json_with_schema\"",
            "expand_json_payload = true",
        ],
        context_headers: false,
        described_types: false,
        probed: false,
    },
    Mode {
        name: "probed",
        key: Converter::Json { schemas: true },
        value: Converter::Json { schemas: true },
        expand: false,
        route: &[],
        context_headers: true,
        described_types: true,
        probed: true,
    },
];

/// One row of the differential test: (id, aggregate type, aggregate id, payload, tenant);
/// the other additional columns follow from its index ([`row_extras`]).
type DiffRow = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    &'static str,
);

/// Rows covering what differs between converters: text and JSON payloads, unicode and
/// escapes, nested objects with nulls and decimals, empty arrays, a mixed array (kept as a
/// string by an expansion), a NULL key, a NULL payload, the extra header column.
const DIFF_ROWS: &[DiffRow] = &[
    ("diff-text", "order", Some("o-1"), Some("\"plain text (a JSON string: MariaDB checks JSON columns): caf\u{e9}\""), "acme"),
    ("diff-tricky", "order", Some("o-2"), Some("{\"orderId\": 2,  \"note\": \"caf\u{e9} \u{2603} \\\"q\\\" \\n tab\\t \\u0001\\u001f\", \"amount\": 12.50, \"tags\": [ \"a\",\"b\" ]}"), "acme"),
    ("diff-nested", "order", Some("o-3"), Some("{\"z\": 1, \"order\": {\"id\": 7, \"note\": null, \"total\": 12.50, \"tiny\": 0.00001, \"huge\": 12345678.9, \"lines\": [{\"sku\": \"a\", \"qty\": 1, \"price\": 0.10}, {\"sku\": \"b\", \"qty\": 2, \"price\": 3.0}]}, \"big\": 3000000000, \"ok\": true, \"a\": \"last\"}"), "acme"),
    ("diff-empty", "customer", Some("c-1"), Some("{\"items\": [], \"meta\": {}, \"name\": \"\u{1F600} emoji\"}"), "globex"),
    ("diff-mixed", "customer", Some("c-2"), Some("{\"mixed\": [1, \"a\"], \"n\": null}"), "globex"),
    ("diff-nullkey", "customer", None, Some("{\"k\": \"no key\"}"), "globex"),
    ("diff-nullpayload", "order", Some("o-4"), None, "acme"),
];

/// The additional columns of a row: (region, blob_ref, due, part, amount).
type RowExtras = (
    Option<&'static str>,
    Option<Vec<u8>>,
    Option<&'static str>,
    Option<i32>,
    Option<&'static str>,
);

/// The DECIMAL(20,10) `amount` of each row, and its header as Debezium sends it (Java's
/// `BigDecimal.toString()`): signs, a value of all 20 digits, scientific notation
/// (`1.00E-8`), zero (`0E-10`), NULL (sent as the column's DEFAULT 1.5: Kafka Connect's
/// `Struct.get` returns a field's default for a null).
const AMOUNTS: &[(Option<&str>, Option<&str>)] = &[
    (Some("12.5"), Some("12.5000000000")),
    (Some("-0.05"), Some("-0.0500000000")),
    (Some("1234567890.0123456789"), Some("1234567890.0123456789")),
    (Some("0.00000001"), Some("1.00E-8")),
    (None, Some("1.5000000000")),
    (Some("0"), Some("0E-10")),
    (Some("-98765.4321"), Some("-98765.4321000000")),
];

/// The additional columns of row `index`: (region, blob_ref, due, part, amount). Odd rows have NULL
/// `region` and `due`; `diff-mixed` a NULL `blob_ref`; `diff-nested` and `diff-nullkey` an
/// explicit partition.
fn row_extras(index: usize) -> RowExtras {
    let (id, ..) = DIFF_ROWS[index];
    let even = index.is_multiple_of(2);
    (
        even.then_some("eu"),
        (id != "diff-mixed").then(|| vec![0x00, 0x01, 0xfe, 0xff]),
        even.then_some("2024-05-06"),
        matches!(id, "diff-nested" | "diff-nullkey").then_some(2),
        AMOUNTS[index % AMOUNTS.len()].0,
    )
}

/// The FLOAT, DOUBLE, BIT(10) and BIT(1) values of row `index`: NULL in every third row.
fn floats_and_bits(index: usize) -> (Option<f32>, Option<f64>, Option<u64>, Option<u64>) {
    if index.is_multiple_of(3) {
        (None, None, None, None)
    } else {
        (Some(0.1), Some(12_345_678.9), Some(0b10_0000_0011), Some(1))
    }
}

/// The FLOAT, DOUBLE, BIT(10) and BIT(1) headers Debezium sends for row `index`
/// ([`floats_and_bits`]): Java's `Float.toString` and `Double.toString`, the bits
/// little-endian in Base64, a boolean; a NULL as the column's default where it has one.
fn floats_and_bits_headers(index: usize) -> [(&'static str, Option<&'static str>); 4] {
    if index.is_multiple_of(3) {
        [
            ("ratio", Some("0.1")),
            ("big", None),
            ("bits", Some("BQA=")),
            ("bit1", None),
        ]
    } else {
        [
            ("ratio", Some("0.1")),
            ("big", Some("1.23456789E7")),
            ("bits", Some("AwI=")),
            ("bit1", Some("true")),
        ]
    }
}

/// The DATETIME(6) and TIMESTAMP(3) values every row carries, and how Debezium renders them
/// in a header (`io.debezium.time.MicroTimestamp`, `io.debezium.time.ZonedTimestamp`).
const CREATED: &str = "2024-05-06 07:08:09.123456";
const CREATED_HEADER: &str = "1714979289123456";
const STAMPED: &str = "2024-05-06 07:08:09.120";
const STAMPED_HEADER: &str = "2024-05-06T07:08:09.120Z";

/// Debezium's `route.topic.regex` in the differential test (every aggregate type matches).
const ROUTE_TOPIC_REGEX: &str = "(?<routedByValue>order|customer)";

/// Headers Debezium adds to every record of its own (`extended.headers.enabled`), which the
/// relay deliberately does not send: they name the Debezium connector and task.
const DEBEZIUM_CONTEXT_HEADER_PREFIX: &str = "__debezium.context.";

type Headers = Vec<(String, Option<Vec<u8>>)>;

/// Splits Debezium's `__debezium.context.*` headers off both sides' headers and checks
/// them: with `mode.context_headers` the relay sends the same four first (the same values
/// but the run id, a UUID each side makes per start), else none (a deliberate difference,
/// README "Migrating from Debezium"). Returns the other headers, relay's and Debezium's.
fn split_context_headers(
    mode: &Mode,
    id: &str,
    mine: &Headers,
    theirs: &Headers,
    failures: &mut Vec<String>,
) -> (Headers, Headers) {
    let is_context =
        |(name, _): &&(String, Option<Vec<u8>>)| name.starts_with(DEBEZIUM_CONTEXT_HEADER_PREFIX);
    let mine_context: Headers = mine.iter().filter(is_context).cloned().collect();
    let theirs_context: Headers = theirs.iter().filter(is_context).cloned().collect();
    let names = |headers: &Headers| -> Vec<String> {
        headers.iter().map(|(name, _)| name.clone()).collect()
    };
    if theirs_context.is_empty() {
        failures.push(format!(
            "[{}] {id}: Debezium sent no {DEBEZIUM_CONTEXT_HEADER_PREFIX}* header any more; update the README",
            mode.name
        ));
    }
    if !theirs.starts_with(&theirs_context) {
        failures.push(format!(
            "[{}] {id}: Debezium's context headers are not its first: {theirs:?}",
            mode.name
        ));
    }
    if !mode.context_headers {
        if !mine_context.is_empty() {
            failures.push(format!(
                "[{}] {id}: the relay sent a Debezium context header",
                mode.name
            ));
        }
    } else if names(&mine_context) != names(&theirs_context) || !mine.starts_with(&mine_context) {
        failures.push(format!(
            "[{}] {id}: context headers differ: relay {mine_context:?} / Debezium {theirs_context:?}",
            mode.name
        ));
    } else {
        for ((name, ours), (_, reference)) in mine_context.iter().zip(&theirs_context) {
            let text = |value: &Option<Vec<u8>>| {
                value
                    .as_deref()
                    .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
                    .unwrap_or_default()
            };
            let (ours, reference) = (text(ours), text(reference));
            let uuid_shaped = |text: &str| text.len() == 36 && text.matches('-').count() == 4;
            let agree = if name.ends_with(".runId") {
                uuid_shaped(&ours) && uuid_shaped(&reference)
            } else {
                ours == reference
            };
            if !agree {
                failures.push(format!(
                    "[{}] {id}: {name}: relay {ours:?} / Debezium {reference:?}",
                    mode.name
                ));
            }
        }
    }
    let rest = |headers: &Headers| -> Headers {
        headers
            .iter()
            .filter(|header| !is_context(header))
            .cloned()
            .collect()
    };
    (rest(mine), rest(theirs))
}

fn hex_or_text(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "<null>".to_string(),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => text.to_string(),
            Err(_) => format!(
                "0x{}",
                bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
        },
    }
}

/// Starts one mode's Debezium worker and prepares its relay (the caller starts it) on `db`;
/// their topics are
/// `TAG-MODE.dbz.outbox.event.TYPE` and `TAG-MODE.outbox.event.TYPE`.
async fn start_mode(
    db: &ScratchMariadb,
    broker: &'static KafkaBroker,
    mode: &Mode,
    index: usize,
) -> (DebeziumConnect, Relay) {
    let tag = format!("{}-{}", db.tag(), mode.name);
    let mut options =
        DebeziumOptions::outbox(&format!("{tag}-dbz"), "shop.outbox_diff,shop.outbox_bin");
    options.key_converter = mode.key;
    options.value_converter = mode.value;
    options.server_id = 54_400 + index as u32;
    options.extra.extend([
        (
            "transforms.outbox.route.topic.replacement".to_string(),
            format!("{tag}.dbz.outbox.event.${{routedByValue}}"),
        ),
        (
            "topic.creation.default.partitions".to_string(),
            PARTITIONS.to_string(),
        ),
        (
            "transforms.outbox.table.fields.additional.placement".to_string(),
            ADDITIONAL_PLACEMENT.to_string(),
        ),
        (
            "transforms.outbox.table.expand.json.payload".to_string(),
            mode.expand.to_string(),
        ),
        (
            "transforms.outbox.route.topic.regex".to_string(),
            ROUTE_TOPIC_REGEX.to_string(),
        ),
        // No global read lock for the schema snapshot: five connectors start on one server.
        ("snapshot.locking.mode".to_string(), "none".to_string()),
        // A NULL aggregate id and a NULL payload are the rows' own (the relay: as_debezium).
    ]);
    let debezium = DebeziumConnect::start(db, broker, options)
        .await
        .unwrap_or_else(|error| panic!("Debezium ({}) streams: {error}", mode.name));
    let mut setup = RelaySetup::new(db, &broker.bootstrap());
    setup.topic_tag = tag.clone();
    setup.topic_partitions = PARTITIONS;
    // The route's additional columns must exist in every watched table (`run` checks it):
    // the two differential tables replace the harness's `shop.outbox` (below).
    setup.extra_outbox_tables = vec![("shop.outbox_bin".to_string(), "debezium".to_string())];
    setup.route_extra = [
        // Binary ids (only binary values are affected): Base64 as Debezium writes them.
        "key_encoding = \"base64\"",
        "event_id_encoding = \"base64\"",
        "headers = { event_type = \"\", aggregate_type = \"\", aggregate_id = \"\" }",
        // MariaDB's JSON is LONGTEXT: Debezium gives it a plain string schema.
        CONNECT_SCHEMA,
        "null_values = \"as_debezium\"",
    ]
    .iter()
    // Described: the key and payload schemas come from the binlog too.
    .filter(|line| !(mode.described_types && **line == CONNECT_SCHEMA))
    .chain(if mode.described_types {
        RELAY_ADDITIONAL_FIELDS_DESCRIBED
    } else {
        RELAY_ADDITIONAL_FIELDS
    })
    .chain(mode.route)
    .map(|line| line.to_string())
    .collect();
    // The envelope's schema name carries Debezium's topic.prefix (the connector's name).
    setup
        .route_extra
        .push(format!("debezium_topic_prefix = \"{tag}-dbz\""));
    if mode.context_headers {
        // Debezium's MySQL connector plugin (it reads this MariaDB too).
        setup
            .route_extra
            .push("debezium_context_headers = { connector = \"mysql\" }".to_string());
    }
    if mode.name == "string" {
        // This mode routes with Debezium's regex router settings instead of a template.
        setup
            .route_extra
            .push(format!("topic_regex = \"{ROUTE_TOPIC_REGEX}\""));
        setup.route_extra.push(format!(
            "topic_replacement = \"{}.outbox.event.${{routedByValue}}\"",
            setup.topic_tag
        ));
    }
    let relay = Relay::prepare(&setup);
    relay.edit_config(&[
        ("server_id = 4242", &format!("server_id = {}", 4300 + index)),
        // Debezium's `part:partition`; the binary table's key column is bytes to Debezium.
        (
            "table = \"shop.outbox\"\npreset = \"seeds\"",
            "table = \"shop.outbox_diff\"\npreset = \"debezium\"\ncolumns = { partition = \"part\" }",
        ),
        (
            "table = \"shop.outbox_bin\"\npreset = \"debezium\"",
            if mode.described_types {
                "table = \"shop.outbox_bin\"\npreset = \"debezium\"\ncolumns = { partition = \"part\" }"
            } else {
                "table = \"shop.outbox_bin\"\npreset = \"debezium\"\ncolumns = { partition = \"part\" }\n\
                 connect_schema = { key_type = \"bytes\", key_optional = true, payload_type = \"string\" }"
            },
        ),
    ]);
    if mode.probed {
        std::fs::write(
            &relay.config_path,
            probed_config(&debezium, &relay, &tag, index),
        )
        .expect("write the probed config");
    }
    // Started by the caller, once every column the route reads exists.
    (debezium, relay)
}

/// The relay config `outbox-relay config from-debezium --probe` makes of `debezium`'s
/// connector (its converters included), changed only where a deployment differs: another
/// server id (Debezium's own is still connected), the relay's topics beside Debezium's
/// (their names carry `.dbz`), a start at the binlog's beginning (the rows come while it
/// starts), the test's checkpoint file. One decision the probe leaves to its user and names:
/// `agreed` is BOOLEAN DDL that Debezium reads in the binlog (added after it started, see
/// the test), so its column_type is `boolean`.
fn probed_config(debezium: &DebeziumConnect, relay: &Relay, tag: &str, index: usize) -> String {
    let connector = relay.config_path.with_file_name("connector.properties");
    std::fs::write(
        &connector,
        debezium
            .connector_config_with_converters()
            .expect("the connector config"),
    )
    .expect("write the connector config");
    let (code, converted, stderr) = run_relay_command(&[
        "config",
        "from-debezium",
        "--probe",
        connector.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(code, 0, "from-debezium --probe:\n{converted}\n{stderr}");
    let mut config = converted;
    for (from, to) in [
        (
            format!("server_id = {}", 54_400 + index),
            format!("server_id = {}\nstart = \"earliest\"", 4300 + index),
        ),
        (
            format!("\"{tag}.dbz.outbox.event."),
            format!("\"{tag}.outbox.event."),
        ),
        (
            "/var/lib/outbox-relay/checkpoint.json".to_string(),
            relay.checkpoint_path.display().to_string(),
        ),
        (
            "{ column = \"agreed\" }".to_string(),
            "{ column = \"agreed\", column_type = \"boolean\" }".to_string(),
        ),
    ] {
        assert!(
            config.contains(&from),
            "no `{from}` in the probed config:\n{config}"
        );
        config = config.replacen(&from, &to, 1);
    }
    println!("== probed config\n{config}");
    config
}

/// Writes [`DIFF_ROWS`], one transaction each, then an UPDATE and a DELETE of outbox rows
/// (neither is an event for Debezium or the relay) and a rolled-back insert.
async fn write_diff_rows(db: &ScratchMariadb) {
    let mut conn = db.conn().await.expect("connect");
    for (index, (id, aggregate_type, aggregate_id, payload, tenant)) in DIFF_ROWS.iter().enumerate()
    {
        let (region, blob_ref, due, part, amount) = row_extras(index);
        conn.exec_drop(
            "INSERT INTO shop.outbox_diff (id, aggregatetype, aggregateid, type, payload, tenant, \
             region, blob_ref, created, stamped, seq, due, part, amount, flag, channel, ok, \
             agreed, ratio, big, bits, bit1) \
             VALUES (?, ?, ?, 'Happened', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            mysql_async::Params::Positional(vec![
                id.into(),
                aggregate_type.into(),
                aggregate_id.into(),
                payload.into(),
                tenant.into(),
                region.into(),
                blob_ref.into(),
                CREATED.into(),
                STAMPED.into(),
                (index as i32).into(),
                due.into(),
                part.into(),
                amount.into(),
                // TINYINT(4): -128..127, NULL in the last row.
                (index + 1 < DIFF_ROWS.len())
                    .then(|| [-128i32, -3, 0, 1, 7, 127][index % 6])
                    .into(),
                // VARCHAR DEFAULT 'web': NULL (sent as `web` by Debezium), another value.
                [None, Some("app"), Some("web")][index % 3].into(),
                [None, Some(0), Some(1)][index % 3].into(),
                [Some(1), None, Some(0)][index % 3].into(),
                // FLOAT, DOUBLE, BIT(10), BIT(1): NULL in every third row (then the
                // defaults 0.1 and b'101' where the column has one).
                floats_and_bits(index).0.into(),
                floats_and_bits(index).1.into(),
                floats_and_bits(index).2.into(),
                floats_and_bits(index).3.into(),
            ]),
        )
        .await
        .unwrap_or_else(|error| panic!("insert {id}: {error}"));
    }
    for (id_hex, _, aggregate_type, key_hex, _, payload) in BINARY_ROWS {
        conn.query_drop(format!(
            "INSERT INTO shop.outbox_bin (id, aggregatetype, aggregateid, type, payload, region, \
             created, stamped, seq) VALUES (X'{id_hex}', '{aggregate_type}', X'{key_hex}', \
             'Happened', '{payload}', 'eu', '{CREATED}', '{STAMPED}', 100)"
        ))
        .await
        .unwrap_or_else(|error| panic!("insert binary id {id_hex}: {error}"));
    }
    conn.query_drop("UPDATE shop.outbox_diff SET type = 'Changed' WHERE id = 'diff-text'")
        .await
        .unwrap();
    conn.query_drop("DELETE FROM shop.outbox_diff WHERE id = 'diff-tricky'")
        .await
        .unwrap();
    conn.query_drop("START TRANSACTION").await.unwrap();
    conn.query_drop(
        "INSERT INTO shop.outbox_diff (id, aggregatetype, aggregateid, type, payload, created, seq) \
         VALUES ('diff-doomed', 'order', 'o-1', 'Doomed', '{}', NOW(6), 99)",
    )
    .await
    .unwrap();
    conn.query_drop("ROLLBACK").await.unwrap();
    conn.disconnect().await.unwrap();
}

/// The deliberate envelope schema-name difference: `Some(debezium's aggregate type)` when the
/// two values differ only in the envelope struct's schema name
/// (`PREFIX.shop.outbox_diff.TYPE.Value`), the relay's naming `aggregate_type`.
fn envelope_schema_name_difference(
    prefix: &str,
    table: &str,
    aggregate_type: &str,
    mine: Option<&[u8]>,
    theirs: Option<&[u8]>,
) -> Option<String> {
    let (mine, theirs) = (
        std::str::from_utf8(mine?).ok()?,
        std::str::from_utf8(theirs?).ok()?,
    );
    let name = |table: &str, kind: &str| format!("\"name\":\"{prefix}.shop.{table}.{kind}.Value\"");
    let own = name(table, aggregate_type);
    if mine == theirs || !mine.contains(&own) {
        return None;
    }
    // Debezium's cache is keyed by the payload schema alone: the name may even be another
    // table's.
    ["outbox_diff", "outbox_bin"]
        .into_iter()
        .flat_map(|table| ["order", "customer"].map(|kind| (table, kind)))
        .filter(|candidate| *candidate != (table, aggregate_type))
        .find(|(table, kind)| mine.replacen(&own, &name(table, kind), 1) == theirs)
        .map(|(table, kind)| format!("{table}.{kind}"))
}

/// Compares the binary-id table's records: the `id` header is the id's Base64 from both;
/// key, value, partition and headers as in [`compare_mode`], except under a StringConverter
/// key, where Debezium writes the text of the `ByteBuffer` holding the key bytes
/// (`java.nio.HeapByteBuffer[pos=0 lim=4 cap=4]`, the same for every key of that length), a
/// deliberate difference asserted as such.
fn compare_binary_rows(
    mode: &Mode,
    tag: &str,
    ours_by_id: &BTreeMap<String, &ConsumedRecord>,
    theirs_by_id: &BTreeMap<String, &ConsumedRecord>,
    failures: &mut Vec<String>,
) {
    for (id_base64, aggregate_type, key_base64) in
        BINARY_ROWS.iter().map(|row| (row.1, row.2, row.4))
    {
        let (Some(mine), Some(reference)) =
            (ours_by_id.get(id_base64), theirs_by_id.get(id_base64))
        else {
            failures.push(format!(
                "[{}] binary id {id_base64}: relay {:?}, Debezium {:?}",
                mode.name,
                ours_by_id.get(id_base64).map(|r| describe(r)),
                theirs_by_id.get(id_base64).map(|r| describe(r))
            ));
            continue;
        };
        println!(
            "  binary id {id_base64}\n    relay:    key={} value={}\n    debezium: key={} value={}",
            hex_or_text(mine.key.as_deref()),
            hex_or_text(mine.value.as_deref()),
            hex_or_text(reference.key.as_deref()),
            hex_or_text(reference.value.as_deref()),
        );
        if matches!(mode.key, Converter::String) {
            // Debezium hands the bytes over as a ByteBuffer, whose toString() names only its
            // size: every 4-byte key is the same text (one key, one partition).
            let theirs = reference.key_str().unwrap_or_default();
            if theirs != "java.nio.HeapByteBuffer[pos=0 lim=4 cap=4]" {
                failures.push(format!(
                    "[{}] {id_base64}: Debezium's StringConverter key of a binary id is {theirs:?}, not the ByteBuffer's text any more; update the README",
                    mode.name
                ));
            }
            if mine.key.as_deref() != Some(key_base64.as_bytes()) {
                failures.push(format!(
                    "[{}] {id_base64}: relay key {:?} (key_encoding = base64)",
                    mode.name,
                    mine.key_str()
                ));
            }
        } else {
            if mine.key != reference.key {
                failures.push(format!(
                    "[{}] {id_base64}: keys differ: relay {} / Debezium {}",
                    mode.name,
                    hex_or_text(mine.key.as_deref()),
                    hex_or_text(reference.key.as_deref())
                ));
            }
            if mine.partition != reference.partition {
                failures.push(format!(
                    "[{}] {id_base64}: partition {} from the relay, {} from Debezium",
                    mode.name, mine.partition, reference.partition
                ));
            }
        }
        let name_difference = envelope_schema_name_difference(
            &format!("{tag}-dbz"),
            "outbox_bin",
            aggregate_type,
            mine.value.as_deref(),
            reference.value.as_deref(),
        );
        if let Some(debezium_name) = name_difference {
            println!(
                "    (deliberate) Debezium's envelope schema is named after `{debezium_name}`"
            );
            if !matches!(mode.value, Converter::Json { schemas: true }) {
                failures.push(format!(
                    "[{}] {id_base64}: a schema name differs without schemas",
                    mode.name
                ));
            }
        } else if mine.value != reference.value {
            failures.push(format!(
                "[{}] {id_base64}: values differ:\n      relay    {}\n      Debezium {}",
                mode.name,
                hex_or_text(mine.value.as_deref()),
                hex_or_text(reference.value.as_deref())
            ));
        }
        let (mine_headers, theirs_headers) =
            split_context_headers(mode, id_base64, &mine.headers, &reference.headers, failures);
        if mine_headers != theirs_headers {
            failures.push(format!(
                "[{}] {id_base64}: headers differ: relay {:?} / Debezium {:?}",
                mode.name, mine_headers, theirs_headers
            ));
        }
    }
}

/// Compares one mode's records; returns (records compared, failures).
async fn compare_mode(
    db: &ScratchMariadb,
    broker: &KafkaBroker,
    mode: &Mode,
) -> (usize, Vec<String>) {
    let tag = format!("{}-{}", db.tag(), mode.name);
    let topics = |side: &str| -> Vec<String> {
        ["order", "customer"]
            .iter()
            .map(|kind| format!("{tag}{side}.outbox.event.{kind}"))
            .collect()
    };
    let (ours_topics, theirs_topics) = (topics(""), topics(".dbz"));
    let read = |names: Vec<String>| async move {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        read_all(
            &broker.bootstrap(),
            &names,
            ReadStop::Count(DIFF_ROWS.len() + BINARY_ROWS.len()),
            Duration::from_secs(90),
        )
        .await
        .expect("read records")
    };
    let (ours, theirs) = tokio::join!(read(ours_topics), read(theirs_topics));
    let mut failures = Vec::new();
    let (ours_by_id, theirs_by_id) = (by_id(&ours), by_id(&theirs));
    println!("== mode {}", mode.name);
    for (index, (id, aggregate_type, aggregate_id, _, tenant)) in DIFF_ROWS.iter().enumerate() {
        let (region, blob_ref, _, part, _) = row_extras(index);
        let (Some(mine), Some(reference)) = (ours_by_id.get(*id), theirs_by_id.get(*id)) else {
            failures.push(format!(
                "[{}] {id}: relay {:?}, Debezium {:?}",
                mode.name,
                ours_by_id.get(*id).map(|r| describe(r)),
                theirs_by_id.get(*id).map(|r| describe(r))
            ));
            continue;
        };
        println!(
            "  {id}\n    relay:    key={} value={}\n    debezium: key={} value={}",
            hex_or_text(mine.key.as_deref()),
            hex_or_text(mine.value.as_deref()),
            hex_or_text(reference.key.as_deref()),
            hex_or_text(reference.value.as_deref()),
        );
        let suffix = format!(".outbox.event.{aggregate_type}");
        if !mine.topic.ends_with(&suffix) || !reference.topic.ends_with(&suffix) {
            failures.push(format!(
                "[{}] {id}: topics {} / {}",
                mode.name, mine.topic, reference.topic
            ));
        }
        if mine.key != reference.key {
            failures.push(format!(
                "[{}] {id}: keys differ: relay {} / Debezium {}",
                mode.name,
                hex_or_text(mine.key.as_deref()),
                hex_or_text(reference.key.as_deref())
            ));
        }
        let schema_name_difference = envelope_schema_name_difference(
            &format!("{tag}-dbz"),
            "outbox_diff",
            aggregate_type,
            mine.value.as_deref(),
            reference.value.as_deref(),
        );
        if let Some(debezium_type) = &schema_name_difference {
            // Deliberate (README): Debezium caches the envelope's schema per payload schema,
            // so its name carries the aggregate type of the first event with that payload
            // schema since the task started; the relay names each by its own.
            println!(
                "    (deliberate) Debezium's envelope schema is named after aggregate type `{debezium_type}`, the relay's after `{aggregate_type}`"
            );
            if !matches!(mode.value, Converter::Json { schemas: true }) {
                failures.push(format!(
                    "[{}] {id}: a schema name differs without schemas",
                    mode.name
                ));
            }
        } else if mine.value != reference.value {
            failures.push(format!(
                "[{}] {id}: values differ:\n      relay    {}\n      Debezium {}",
                mode.name,
                hex_or_text(mine.value.as_deref()),
                hex_or_text(reference.value.as_deref())
            ));
        }
        // A null key has no hash: both producers pick a partition at random, so only keyed
        // records (a JSON converter writes a NULL aggregate id as the key `null`) must agree.
        if part.is_some_and(|part| reference.partition != part) {
            failures.push(format!(
                "[{}] {id}: Debezium's `part:partition` gave partition {}",
                mode.name, reference.partition
            ));
        }
        if (mine.key.is_some() || part.is_some()) && mine.partition != reference.partition {
            failures.push(format!(
                "[{}] {id} (aggregate id {aggregate_id:?}): partition {} from the relay, {} from Debezium",
                mode.name, mine.partition, reference.partition
            ));
        }
        let (mine_headers, theirs_headers) =
            split_context_headers(mode, id, &mine.headers, &reference.headers, &mut failures);
        // What Debezium sends, checked on its own: NULL columns as null-valued headers,
        // binary as Base64, DATETIME(6) as epoch microseconds, TIMESTAMP(3) as ISO text.
        let expected_headers = vec![
            ("id".to_string(), Some(id.as_bytes().to_vec())),
            ("tenantId".to_string(), Some(tenant.as_bytes().to_vec())),
            ("region".to_string(), region.map(|r| r.as_bytes().to_vec())),
            (
                "blob_ref".to_string(),
                blob_ref.map(|_| b"AAH+/w==".to_vec()),
            ),
            (
                "created".to_string(),
                Some(CREATED_HEADER.as_bytes().to_vec()),
            ),
            (
                "stamped".to_string(),
                Some(STAMPED_HEADER.as_bytes().to_vec()),
            ),
            (
                "amountText".to_string(),
                AMOUNTS[index % AMOUNTS.len()]
                    .1
                    .map(|text| text.as_bytes().to_vec()),
            ),
        ];
        let mut expected_headers = expected_headers;
        expected_headers.extend(
            floats_and_bits_headers(index)
                .into_iter()
                .map(|(name, text)| (name.to_string(), text.map(|text| text.as_bytes().to_vec()))),
        );
        if theirs_headers != expected_headers {
            failures.push(format!(
                "[{}] {id}: Debezium's headers {:?}, expected {:?}",
                mode.name, theirs_headers, expected_headers
            ));
        }
        // The relay: the same headers, null-valued ones included, in the same order.
        if mine_headers != theirs_headers {
            failures.push(format!(
                "[{}] {id}: headers differ: relay {:?} / Debezium {:?}",
                mode.name, mine_headers, theirs_headers
            ));
        }
    }
    compare_binary_rows(mode, &tag, &ours_by_id, &theirs_by_id, &mut failures);
    if mode.context_headers {
        // One run, one run id, on every record of the relay's.
        let run_ids: BTreeSet<Option<String>> = ours
            .iter()
            .map(|record| record.header_str("__debezium.context.runId"))
            .collect();
        if run_ids.len() != 1 || run_ids.contains(&None) {
            failures.push(format!(
                "[{}] the relay's records carry the run ids {run_ids:?}, not one",
                mode.name
            ));
        }
    }
    for (side, records) in [("relay", &ours), ("Debezium", &theirs)] {
        if records.len() != DIFF_ROWS.len() + BINARY_ROWS.len() {
            failures.push(format!(
                "[{}] {side} delivered {} records for {} rows (an UPDATE, a DELETE and a rolled-back row must give none)",
                mode.name,
                records.len(),
                DIFF_ROWS.len() + BINARY_ROWS.len()
            ));
        }
    }
    (ours.len().min(theirs.len()), failures)
}

/// The differential test: the same outbox rows read by Debezium 3.6.1 (Kafka Connect +
/// EventRouter) and by outbox-relay, for each converter setup (StringConverter, JsonConverter
/// without and with schemas, each JSON one also with `table.expand.json.payload`). Every
/// event must have the same topic, partition, key bytes, value bytes and headers (except
/// Debezium's `__debezium.context.*` headers, a deliberate difference asserted as such).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn debezium_and_outbox_relay_write_identical_bytes_for_every_converter_setup() {
    let (db, broker) = tokio::join!(start_database_for_debezium(), KafkaBroker::shared());
    let broker = broker.expect("the shared Kafka broker starts");
    db.exec(&[DIFFERENTIAL_TABLE, BINARY_TABLE])
        .await
        .expect("outbox tables");
    // One Debezium worker and one relay per mode, all on the same binlog, started two at a
    // time (more JVMs starting at once on a small machine miss the startup limit).
    let mut started = Vec::new();
    for (chunk_index, chunk) in MODES.chunks(2).enumerate() {
        started.extend(
            futures_util::future::join_all(
                chunk
                    .iter()
                    .enumerate()
                    .map(|(index, mode)| start_mode(&db, broker, mode, chunk_index * 2 + index)),
            )
            .await,
        );
    }
    // A BOOLEAN column Debezium learns from the binlog's DDL (a boolean to it), where the
    // snapshot's `tinyint(1)` of `ok` is an int16; the relays start after it (from the
    // binlog's start: they read the same DDL and rows).
    db.exec(&[
        "ALTER TABLE shop.outbox_diff ADD COLUMN agreed BOOLEAN NULL",
        "ALTER TABLE shop.outbox_bin ADD COLUMN agreed BOOLEAN NULL",
    ])
    .await
    .expect("the BOOLEAN column");
    for (_, relay) in &mut started {
        relay.start();
    }
    write_diff_rows(&db).await;
    let results =
        futures_util::future::join_all(MODES.iter().map(|mode| compare_mode(&db, broker, mode)))
            .await;
    println!("\n| mode | key.converter | value.converter | expand | records compared |");
    println!("|---|---|---|---|---|");
    let mut failures = Vec::new();
    for (mode, (count, mode_failures)) in MODES.iter().zip(results) {
        println!(
            "| {} | {:?} | {:?} | {} | {count} |",
            mode.name, mode.key, mode.value, mode.expand
        );
        failures.extend(mode_failures);
    }
    let mut logs = Vec::new();
    for (mode, (debezium, mut relay)) in MODES.iter().zip(started) {
        relay.stop_gracefully("after the comparison").await;
        logs.push(format!(
            "{}: Debezium log {}; relay log tail:\n{}",
            mode.name,
            debezium.log_path().display(),
            relay.log_tail(10)
        ));
    }
    assert!(
        failures.is_empty(),
        "outbox-relay and Debezium disagree:\n{}\n{}",
        failures.join("\n"),
        logs.join("\n")
    );
}

/// The `tenant` header of two rows (0x00FF10, not UTF-8; `AB`, valid UTF-8) in a VARBINARY
/// column, by event id, under `binlog_row_metadata = metadata` and the header setting
/// `header`.
async fn binary_headers_under(metadata: &str, header: &str) -> BTreeMap<String, Option<String>> {
    let (db, broker) = start_shop_database_and_broker().await;
    let set_metadata = format!("SET GLOBAL binlog_row_metadata = '{metadata}'");
    db.exec(&[
        "ALTER TABLE shop.outbox ADD COLUMN tenant VARBINARY(8) NULL",
        set_metadata.as_str(),
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, tenant) \
         VALUES ('bin-1', 'order', 'o-1', 'Created', '{}', X'00FF10'), \
         ('bin-2', 'order', 'o-2', 'Created', '{}', 'AB')",
    ])
    .await
    .expect("the rows");
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.route_extra = vec![header.to_string()];
    let mut relay = Relay::prepare(&setup);
    relay.start();
    let topic = topic_for(&db, "order");
    let records = read_all(
        &broker.bootstrap(),
        &[topic.as_str()],
        ReadStop::Count(2),
        Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|error| panic!("read the records: {error}\n{}", relay.log()));
    relay.stop_gracefully("after the records").await;
    records
        .iter()
        .map(|record| {
            (
                record.header_str("id").unwrap_or_default(),
                record.header_str("tenant"),
            )
        })
        .collect()
}

/// Debezium's Base64 headers for the rows of [`binary_headers_under`].
fn base64_tenants() -> BTreeMap<String, Option<String>> {
    BTreeMap::from([
        ("bin-1".to_string(), Some("AP8Q".to_string())),
        ("bin-2".to_string(), Some("QUI=".to_string())),
    ])
}

/// Issue 26: MariaDB's default `binlog_row_metadata = NO_LOG` does not say a column is
/// binary, so a VARBINARY header needs the `column_type` `config from-debezium --probe`
/// writes; with it the header is Debezium's Base64 text, whatever the bytes decode as.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_header_without_metadata_is_base64_with_its_column_type() {
    let tenants = binary_headers_under(
        "NO_LOG",
        "additional_headers = [{ column = \"tenant\", column_type = \"varbinary(8)\" }]",
    )
    .await;
    assert_eq!(tenants, base64_tenants());
}

/// Issue 26: `binlog_row_metadata = MINIMAL` carries the character sets (column names then
/// come from information_schema): the binlog describes the column as binary, and the header
/// is Debezium's Base64 text with no `column_type`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_header_under_minimal_metadata_needs_no_column_type() {
    let tenants = binary_headers_under(
        "MINIMAL",
        "debezium_column_types = true\nadditional_headers = [{ column = \"tenant\" }]",
    )
    .await;
    assert_eq!(tenants, base64_tenants());
}
