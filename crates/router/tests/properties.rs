//! Property tests: any row either routes or gives a routing error (never a panic, never a
//! silent drop), and every routed topic is a legal Kafka topic name.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use outbox_binlog::{BinlogPosition, DateTime, Row, RowChange, RowOperation, TableName, Value};
use outbox_router::{
    check_topic_name, AdditionalHeader, BinaryEncoding, ColumnPreset, InvalidOperationBehavior,
    OutboxTableConfig, PayloadMode, RouteConfig, RouteOutcome, Router, RoutingErrorKind,
    TimestampSource,
};
use proptest::prelude::*;

fn datetime_strategy() -> impl Strategy<Value = DateTime> {
    (
        any::<u16>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u32>(),
    )
        .prop_map(common::datetime_from_parts)
}

fn json_strategy() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(serde_json::Value::from),
        ".{0,20}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map("[a-z]{0,5}", inner, 0..4)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Any value, weighted towards the interesting ones.
fn value_strategy() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => Just(Value::Null),
        2 => any::<i64>().prop_map(Value::Int),
        2 => any::<u64>().prop_map(Value::UInt),
        1 => any::<f32>().prop_map(Value::Float),
        1 => any::<f64>().prop_map(Value::Double),
        1 => "-?[0-9]{1,30}\\.[0-9]{0,10}".prop_map(Value::Decimal),
        6 => "[a-zA-Z0-9._-]{0,12}".prop_map(Value::Text),
        4 => ".{0,40}".prop_map(Value::Text),
        1 => (1usize..300_000).prop_map(|n| Value::Text("x".repeat(n))),
        2 => (prop::collection::vec(any::<u8>(), 0..40), "[a-z0-9]{1,10}")
            .prop_map(|(bytes, charset)| Value::UndecodableText { bytes, charset }),
        3 => prop::collection::vec(any::<u8>(), 0..40).prop_map(Value::Bytes),
        1 => prop::collection::vec(any::<u8>(), 16..=16).prop_map(Value::Bytes),
        2 => json_strategy().prop_map(|json| Value::Json(json.into())),
        1 => datetime_strategy().prop_map(Value::DateTime),
        1 => datetime_strategy().prop_map(Value::Date),
        1 => (any::<bool>(), any::<u32>(), any::<u8>(), any::<u8>(), any::<u32>()).prop_map(
            |(negative, hours, minutes, seconds, micros)| Value::Time {
                negative,
                hours,
                minutes,
                seconds,
                micros
            }
        ),
        1 => (any::<i64>(), any::<u32>())
            .prop_map(|(unix_seconds, micros)| Value::Timestamp { unix_seconds, micros }),
    ]
}

/// Column names: mostly the mapped ones of both presets, plus strangers.
fn column_name_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            common::SEEDS_COLUMNS
                .into_iter()
                .chain([
                    "id",
                    "aggregatetype",
                    "aggregateid",
                    "type",
                    "timestamp",
                    "tenant",
                    "tracingspancontext",
                    "kafka_partition",
                ])
                .collect::<Vec<_>>()
        )
        .prop_map(str::to_string),
        "[a-z_]{1,8}",
    ]
}

/// A row image: random columns (duplicates allowed) and values, sometimes of another length.
fn row_strategy() -> impl Strategy<Value = Row> {
    (
        prop::collection::vec((column_name_strategy(), value_strategy()), 0..12),
        -2i32..=2,
    )
        .prop_map(|(pairs, length_skew)| {
            let columns: Vec<String> = pairs.iter().map(|(name, _)| name.clone()).collect();
            let mut values: Vec<Value> = pairs.into_iter().map(|(_, value)| value).collect();
            match length_skew {
                -2 | -1 => values.truncate(
                    values
                        .len()
                        .saturating_sub(length_skew.unsigned_abs() as usize),
                ),
                2 => values.push(Value::Int(0)),
                _ => {}
            }
            Row {
                columns: columns.into(),
                values,
                types: None,
            }
        })
}

/// A plausible value for a column of the given name (ids, types, payloads, times).
fn good_value_strategy(column: &str) -> BoxedStrategy<Value> {
    match column {
        "event_id" | "id" => prop_oneof![
            "[a-f0-9-]{1,36}".prop_map(Value::Text),
            any::<i64>().prop_map(Value::Int),
            prop::collection::vec(any::<u8>(), 16..=16).prop_map(Value::Bytes),
        ]
        .boxed(),
        "aggregate_type" | "aggregatetype" | "event_type" | "type" => prop_oneof![
            4 => "[a-zA-Z0-9._-]{1,20}".prop_map(Value::Text),
            1 => Just(Value::Text("order".into())),
        ]
        .boxed(),
        "aggregate_id" | "aggregateid" => prop_oneof![
            ".{0,20}".prop_map(Value::Text),
            any::<u64>().prop_map(Value::UInt),
        ]
        .boxed(),
        "payload" => prop_oneof![
            json_strategy().prop_map(|json| Value::Json(json.into())),
            json_strategy().prop_map(|json| Value::Text(json.to_string())),
            ".{0,50}".prop_map(Value::Text),
            prop::collection::vec(any::<u8>(), 0..50).prop_map(Value::Bytes),
        ]
        .boxed(),
        "created_at" | "timestamp" => prop_oneof![
            (
                1970u16..2100,
                1u8..=12,
                1u8..=28,
                0u8..24,
                0u8..60,
                0u8..60,
                0u32..1_000_000
            )
                .prop_map(|parts| Value::DateTime(common::datetime_from_parts(parts))),
            (0i64..4_000_000_000, 0u32..1_000_000).prop_map(|(unix_seconds, micros)| {
                Value::Timestamp {
                    unix_seconds,
                    micros,
                }
            }),
            (0i64..4_000_000_000_000).prop_map(Value::Int),
        ]
        .boxed(),
        "kafka_partition" => (0i64..100).prop_map(Value::Int).boxed(),
        "tracingspancontext" => prop_oneof![
            Just(Value::Text(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()
            )),
            ".{0,20}".prop_map(Value::Text),
        ]
        .boxed(),
        _ => value_strategy().boxed(),
    }
}

/// A row of one preset's columns (plus extras) with mostly plausible values, then
/// perturbed: some values random, order shuffled, sometimes a column dropped.
fn near_valid_row_strategy() -> impl Strategy<Value = Row> {
    (
        prop::sample::select(vec![ColumnPreset::Seeds, ColumnPreset::Debezium]),
        prop::sample::subsequence(
            vec!["tenant", "tracingspancontext", "kafka_partition", "note"],
            2..=4,
        ),
    )
        .prop_flat_map(|(preset, extras)| {
            let mapping = preset.mapping();
            let mut names = vec![
                mapping.event_id,
                mapping.aggregate_type,
                mapping.aggregate_id,
                mapping.event_type,
                mapping.payload,
                mapping.timestamp,
            ];
            names.extend(extras.into_iter().map(str::to_string));
            let values: Vec<BoxedStrategy<Value>> = names
                .iter()
                .map(|name| {
                    prop_oneof![9 => good_value_strategy(name), 1 => value_strategy()].boxed()
                })
                .collect();
            (
                Just(names),
                values,
                proptest::option::weighted(0.1, any::<prop::sample::Index>()),
            )
        })
        .prop_map(|(names, values, dropped)| {
            let mut pairs = names.into_iter().zip(values).collect::<Vec<_>>();
            if let Some(dropped) = dropped {
                pairs.remove(dropped.index(pairs.len()));
            }
            pairs
        })
        .prop_shuffle()
        .prop_map(|pairs| {
            let columns: Vec<String> = pairs.iter().map(|(name, _)| name.clone()).collect();
            Row {
                columns: columns.into(),
                values: pairs.into_iter().map(|(_, value)| value).collect(),
                types: None,
            }
        })
}

/// Mostly near-valid rows, some entirely random ones.
fn any_row_strategy() -> impl Strategy<Value = Row> {
    prop_oneof![3 => near_valid_row_strategy(), 1 => row_strategy()]
}

fn change_strategy() -> impl Strategy<Value = RowChange> {
    (
        prop_oneof![
            4 => Just("shop.outbox"),
            4 => Just("inventory.outboxevent"),
            1 => Just("shop.other"),
        ],
        prop::sample::select(vec![
            RowOperation::Insert,
            RowOperation::Insert,
            RowOperation::Update,
            RowOperation::Delete,
        ]),
        proptest::option::weighted(0.95, any_row_strategy()),
        proptest::option::weighted(0.5, any_row_strategy()),
        any::<u32>(),
    )
        .prop_map(
            |(table, operation, after, before, event_timestamp)| RowChange {
                table: Arc::new(table.parse::<TableName>().unwrap()),
                operation,
                before,
                after,
                event_timestamp,
                event_position: BinlogPosition::new("bin.000001", 4),
                transaction_gtid: None,
                in_xa_transaction: false,
            },
        )
}

fn encoding_strategy() -> impl Strategy<Value = BinaryEncoding> {
    prop::sample::select(vec![
        BinaryEncoding::Utf8,
        BinaryEncoding::Hex,
        BinaryEncoding::Uuid,
        BinaryEncoding::Raw,
    ])
}

/// A valid router configuration with random choices.
fn router_strategy() -> impl Strategy<Value = Router> {
    (
        prop::sample::select(vec![
            "outbox.event.${aggregate_type}",
            "${aggregate_type}",
            "${event_type}",
            "${database}.${table}.${aggregate_type}-${event_type}",
            "fixed",
        ]),
        any::<bool>(),
        encoding_strategy(),
        prop::sample::select(vec![
            BinaryEncoding::Utf8,
            BinaryEncoding::Hex,
            BinaryEncoding::Uuid,
        ]),
        prop::sample::select(vec![PayloadMode::AsIs, PayloadMode::RequireJson]),
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(vec![
            InvalidOperationBehavior::Ignore,
            InvalidOperationBehavior::Warn,
            InvalidOperationBehavior::Fail,
        ]),
        prop::sample::select(vec![
            TimestampSource::ColumnOrEventTime,
            TimestampSource::Column,
            TimestampSource::EventTime,
        ]),
        any::<bool>(),
    )
        .prop_map(
            |(
                topic,
                with_override,
                key_encoding,
                event_id_encoding,
                payload,
                tombstone,
                with_extras,
                invalid_operation,
                timestamp_source,
                with_partition,
            )| {
                let mut seeds =
                    OutboxTableConfig::new("shop.outbox".parse().unwrap(), ColumnPreset::Seeds);
                seeds.timestamp_source = timestamp_source;
                if with_partition {
                    seeds.columns.partition = Some("kafka_partition".into());
                }
                let debezium = OutboxTableConfig::new(
                    "inventory.outboxevent".parse().unwrap(),
                    ColumnPreset::Debezium,
                );
                let route = RouteConfig {
                    topic: topic.into(),
                    topic_overrides: if with_override {
                        BTreeMap::from([("order".to_string(), "orders.${event_type}".to_string())])
                    } else {
                        BTreeMap::new()
                    },
                    key_encoding,
                    event_id_encoding,
                    payload,
                    tombstone_on_empty_payload: tombstone,
                    additional_headers: if with_extras {
                        vec![AdditionalHeader {
                            column: "tenant".into(),
                            header: None,
                            encoding: BinaryEncoding::Raw,
                            column_type: None,
                            column_default: None,
                        }]
                    } else {
                        Vec::new()
                    },
                    tracing_span_context_column: with_extras
                        .then(|| "tracingspancontext".to_string()),
                    invalid_operation,
                    ..RouteConfig::default()
                };
                Router::new(&[seeds, debezium], &route).unwrap()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_row_routes_or_errors_and_topics_are_legal(
        router in router_strategy(),
        change in change_strategy(),
    ) {
        match router.route(&change) {
            Ok(RouteOutcome::Record(record)) => {
                prop_assert_eq!(change.operation, RowOperation::Insert);
                prop_assert_eq!(check_topic_name(&record.topic), Ok(()));
                prop_assert!(!record.event_id.is_empty());
                prop_assert_eq!(&record.headers[0].0, "id");
                prop_assert_eq!(&record.headers[0].1, record.event_id.as_bytes());
                prop_assert!(record.key.is_some());
                prop_assert!(record.timestamp_millis.is_some_and(|millis| millis >= 0));
                prop_assert!(record.partition.is_none_or(|partition| partition >= 0));
            }
            Ok(RouteOutcome::Skipped { .. }) => {
                // Only non-inserts may be skipped; inserts are never dropped.
                prop_assert_ne!(change.operation, RowOperation::Insert);
            }
            Err(error) => {
                prop_assert_eq!(&*error.table, &*change.table);
                // Display never panics and names the table.
                let message = error.to_string();
                prop_assert!(message.contains(&change.table.to_string()));
                if error.kind == RoutingErrorKind::UnknownTable {
                    prop_assert_eq!(change.table.to_string(), "shop.other");
                }
            }
        }
    }

    #[test]
    fn well_formed_rows_route_to_the_unmangled_topic(
        event_id in "[a-zA-Z0-9-]{1,36}",
        aggregate_type in prop_oneof!["[a-zA-Z0-9._-]{0,30}", ".{0,30}"],
        aggregate_id in ".{0,30}",
        payload in ".{0,100}",
    ) {
        let router = common::seeds_router(&RouteConfig::default());
        let change = common::change(
            "shop.outbox",
            RowOperation::Insert,
            &common::SEEDS_COLUMNS,
            vec![
                Value::Text(event_id.clone()),
                Value::Text(aggregate_type.clone()),
                Value::Text(aggregate_id.clone()),
                Value::Text("Happened".into()),
                Value::Text(payload.clone()),
                Value::Null,
            ],
        );
        let expected_topic = format!("outbox.event.{aggregate_type}");
        match router.route(&change) {
            Ok(RouteOutcome::Record(record)) => {
                prop_assert_eq!(check_topic_name(&expected_topic), Ok(()));
                prop_assert_eq!(record.topic, expected_topic);
                prop_assert_eq!(record.key, Some(aggregate_id.into_bytes()));
                prop_assert_eq!(record.value, Some(payload.into_bytes()));
                prop_assert_eq!(record.event_id, event_id);
            }
            Ok(other) => prop_assert!(false, "unexpected {:?}", other),
            Err(error) => {
                let problem = check_topic_name(&expected_topic).unwrap_err();
                prop_assert_eq!(
                    error.kind,
                    RoutingErrorKind::InvalidTopic { topic: expected_topic, problem }
                );
            }
        }
    }
}

/// The generators above must reach every outcome, or the properties prove little.
#[test]
fn generators_reach_records_skips_and_errors() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = (router_strategy(), change_strategy());
    let (mut records, mut skips, mut errors) = (0, 0, 0);
    for _ in 0..3000 {
        let (router, change) = strategy.new_tree(&mut runner).unwrap().current();
        match router.route(&change) {
            Ok(RouteOutcome::Record(_)) => records += 1,
            Ok(RouteOutcome::Skipped { .. }) => skips += 1,
            Err(_) => errors += 1,
        }
    }
    assert!(
        records >= 5,
        "records {records}, skips {skips}, errors {errors}"
    );
    assert!(
        skips >= 5,
        "records {records}, skips {skips}, errors {errors}"
    );
    assert!(
        errors >= 5,
        "records {records}, skips {skips}, errors {errors}"
    );
    eprintln!("records {records}, skips {skips}, errors {errors}");
}
