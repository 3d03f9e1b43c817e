//! Table-driven routing tests: presets, topics, payload bytes, headers, timestamps,
//! operations, bad rows.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use outbox_binlog::{JsonText, RowOperation, Value};
use outbox_router::{
    AdditionalHeader, BinaryEncoding, ColumnPreset, InvalidOperationBehavior, OutboxTableConfig,
    PayloadMode, RouteConfig, RouteOutcome, Router, RoutingErrorKind, SkipReason, TimestampSource,
    TopicNameProblem,
};

const CREATED_AT_MILLIS: i64 = 1_714_979_289_000; // 2024-05-06T07:08:09Z

#[test]
fn seeds_preset_routes_a_typical_row() {
    let router = seeds_router(&RouteConfig::default());
    let record = record(&router, &seeds_insert());
    assert_eq!(record.topic, "outbox.event.order");
    assert_eq!(record.key.as_deref(), Some(&b"order-17"[..]));
    assert_eq!(
        record.value.as_deref(),
        Some(&br#"{"id":17,"total":"12.50"}"#[..])
    );
    assert_eq!(record.event_id, "6f1c2a3e-0000-4000-8000-000000000001");
    assert_eq!(
        record.headers,
        vec![
            (
                "id".to_string(),
                b"6f1c2a3e-0000-4000-8000-000000000001".to_vec()
            ),
            ("event_type".to_string(), b"OrderCreated".to_vec()),
            ("aggregate_type".to_string(), b"order".to_vec()),
            ("aggregate_id".to_string(), b"order-17".to_vec()),
        ]
    );
    assert_eq!(record.timestamp_millis, Some(CREATED_AT_MILLIS));
    assert_eq!(record.partition, None);
}

#[test]
fn debezium_preset_routes_a_typical_row() {
    let router = Router::new(
        &[OutboxTableConfig::new(
            "inventory.outboxevent".parse().unwrap(),
            ColumnPreset::Debezium,
        )],
        &RouteConfig::default(),
    )
    .unwrap();
    let change = change(
        "inventory.outboxevent",
        RowOperation::Insert,
        &["id", "aggregatetype", "aggregateid", "type", "payload"],
        vec![
            Value::Text("406c07f3-26f0-4eea-a50c-109940064b8f".into()),
            Value::Text("Order".into()),
            Value::Int(1),
            Value::Text("OrderCreated".into()),
            Value::Text(r#"{"id": 1, "lineItems": []}"#.into()),
        ],
    );
    let record = record(&router, &change);
    assert_eq!(record.topic, "outbox.event.Order");
    assert_eq!(record.key.as_deref(), Some(&b"1"[..]));
    assert_eq!(
        record.value.as_deref(),
        Some(&br#"{"id": 1, "lineItems": []}"#[..])
    );
    assert_eq!(
        record.header("id"),
        Some(&b"406c07f3-26f0-4eea-a50c-109940064b8f"[..])
    );
    // No `timestamp` column in this table: the binlog event time is used.
    assert_eq!(
        record.timestamp_millis,
        Some(i64::from(EVENT_TIME_SECONDS) * 1000)
    );
    // The seeds-schema row does not fit the Debezium mapping.
    let wrong_schema = {
        let mut seeds = seeds_insert();
        seeds.table = Arc::new("inventory.outboxevent".parse().unwrap());
        seeds
    };
    let error = router.route(&wrong_schema).unwrap_err();
    assert_eq!(error.kind, RoutingErrorKind::MissingColumn);
    assert_eq!(error.column.as_deref(), Some("id"));
}

#[test]
fn several_tables_each_with_its_mapping() {
    let mut custom = OutboxTableConfig::new("billing.events".parse().unwrap(), ColumnPreset::Seeds);
    custom.columns.event_id = Some("uuid".into());
    custom.columns.payload = Some("body".into());
    custom.topic = Some("billing.${aggregate_type}".into());
    let router = Router::new(
        &[
            OutboxTableConfig::new("shop.outbox".parse().unwrap(), ColumnPreset::Seeds),
            custom,
        ],
        &RouteConfig::default(),
    )
    .unwrap();
    assert_eq!(
        router.watched_tables(),
        vec![
            "shop.outbox".parse().unwrap(),
            "billing.events".parse().unwrap()
        ]
    );
    assert!(router.table_filter().matches("billing", "events"));
    assert!(!router.table_filter().matches("billing", "other"));
    let billing = change(
        "billing.events",
        RowOperation::Insert,
        &[
            "uuid",
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "body",
        ],
        vec![
            Value::Text("e-1".into()),
            Value::Text("invoice".into()),
            Value::Text("inv-9".into()),
            Value::Text("InvoicePaid".into()),
            Value::Text("{}".into()),
        ],
    );
    let record = record(&router, &billing);
    assert_eq!(record.topic, "billing.invoice");
    assert_eq!(record.event_id, "e-1");
    assert_eq!(
        common::record(&router, &seeds_insert()).topic,
        "outbox.event.order"
    );
    let unknown = change(
        "shop.other",
        RowOperation::Insert,
        &SEEDS_COLUMNS,
        seeds_insert().after.unwrap().values,
    );
    assert_eq!(
        router.route(&unknown).unwrap_err().kind,
        RoutingErrorKind::UnknownTable
    );
}

#[test]
fn topic_templates_and_overrides() {
    let long_aggregate = "a".repeat(248);
    let longest_topic = format!("t{long_aggregate}");
    // (template, overrides, aggregate type, event type, expected topic or problem)
    type Case<'a> = (
        &'a str,
        &'a [(&'a str, &'a str)],
        &'a str,
        &'a str,
        Result<&'a str, TopicNameProblem>,
    );
    let cases: Vec<Case> = vec![
        (
            "outbox.event.${aggregate_type}",
            &[],
            "order",
            "Created",
            Ok("outbox.event.order"),
        ),
        (
            "${database}.${table}.${event_type}",
            &[],
            "order",
            "Created",
            Ok("shop.outbox.Created"),
        ),
        ("events", &[], "order", "Created", Ok("events")),
        (
            "outbox.event.${aggregate_type}",
            &[("order", "orders")],
            "order",
            "Created",
            Ok("orders"),
        ),
        (
            "outbox.event.${aggregate_type}",
            &[("order", "orders")],
            "customer",
            "Created",
            Ok("outbox.event.customer"),
        ),
        (
            "outbox.event.${aggregate_type}",
            &[("Order", "x")],
            "order",
            "Created",
            Ok("outbox.event.order"),
        ),
        (
            "outbox.event.${aggregate_type}",
            &[("order", "o.${event_type}")],
            "order",
            "Shipped",
            Ok("o.Shipped"),
        ),
        // Illegal names are errors, never mangled.
        (
            "outbox.event.${aggregate_type}",
            &[],
            "order/eu",
            "Created",
            Err(TopicNameProblem::IllegalCharacter { character: '/' }),
        ),
        (
            "outbox.event.${aggregate_type}",
            &[],
            "Bestellung ä",
            "Created",
            Err(TopicNameProblem::IllegalCharacter { character: ' ' }),
        ),
        (
            "${aggregate_type}",
            &[],
            ".",
            "Created",
            Err(TopicNameProblem::DotOrDotDot),
        ),
        (
            "${aggregate_type}",
            &[],
            "..",
            "Created",
            Err(TopicNameProblem::DotOrDotDot),
        ),
        (
            "${aggregate_type}",
            &[],
            "",
            "Created",
            Err(TopicNameProblem::Empty),
        ),
        (
            "t.${aggregate_type}",
            &[],
            &long_aggregate,
            "Created",
            Err(TopicNameProblem::TooLong { length: 250 }),
        ),
        (
            "t${aggregate_type}",
            &[],
            &long_aggregate,
            "Created",
            Ok(&longest_topic),
        ),
    ];
    for (template, overrides, aggregate_type, event_type, expected) in cases {
        let route = RouteConfig {
            topic: template.into(),
            topic_overrides: overrides
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            ..RouteConfig::default()
        };
        let router = seeds_router(&route);
        let row = with_value(
            with_value(
                seeds_insert(),
                "aggregate_type",
                Value::Text(aggregate_type.into()),
            ),
            "event_type",
            Value::Text(event_type.into()),
        );
        match (router.route(&row), expected) {
            (Ok(RouteOutcome::Record(record)), Ok(topic)) => assert_eq!(record.topic, topic),
            (Err(error), Err(problem)) => {
                assert_eq!(error.column.as_deref(), Some("aggregate_type"));
                match error.kind {
                    RoutingErrorKind::InvalidTopic {
                        problem: actual, ..
                    } => {
                        assert_eq!(actual, problem, "{template} {aggregate_type}")
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            (actual, expected) => panic!("{template} {aggregate_type}: {actual:?} vs {expected:?}"),
        }
    }
}

#[test]
fn invalid_topic_error_keeps_the_unmangled_name() {
    let router = seeds_router(&RouteConfig::default());
    let row = with_value(seeds_insert(), "aggregate_type", Value::Text("a b".into()));
    let error = router.route(&row).unwrap_err();
    assert_eq!(
        error.kind,
        RoutingErrorKind::InvalidTopic {
            topic: "outbox.event.a b".into(),
            problem: TopicNameProblem::IllegalCharacter { character: ' ' }
        }
    );
    assert_eq!(
        error.event_id.as_deref(),
        Some("6f1c2a3e-0000-4000-8000-000000000001")
    );
}

#[test]
fn payload_bytes_are_exact() {
    let non_utf8 = vec![0x00, 0xff, 0xfe, 0x80, b'{'];
    let spaced_json = "{ \"a\" :\t[1 , 2.50] }\n".to_string();
    // (payload value, payload mode, tombstone, expected value or error kind)
    type Expected = Result<Option<Vec<u8>>, KindCheck>;
    let cases: Vec<(Value, PayloadMode, bool, Expected)> = vec![
        (
            // A JSON column's text goes out as the decoder wrote it: MySQL's key order kept.
            Value::Json(JsonText::new(r#"{"b":1,"a":"x\"y"}"#)),
            PayloadMode::AsIs,
            false,
            Ok(Some(br#"{"b":1,"a":"x\"y"}"#.to_vec())),
        ),
        // A JSON string document is its JSON text, not double-encoded.
        (
            Value::Json(serde_json::json!("hi").into()),
            PayloadMode::RequireJson,
            false,
            Ok(Some(br#""hi""#.to_vec())),
        ),
        // Big numbers keep their digits (arbitrary precision).
        (
            Value::Json(JsonText::new("{\"n\":123456789012345678901234567890.5}")),
            PayloadMode::AsIs,
            false,
            Ok(Some(b"{\"n\":123456789012345678901234567890.5}".to_vec())),
        ),
        (
            Value::Text(spaced_json.clone()),
            PayloadMode::AsIs,
            false,
            Ok(Some(spaced_json.clone().into_bytes())),
        ),
        (
            Value::Text(spaced_json.clone()),
            PayloadMode::RequireJson,
            false,
            Ok(Some(spaced_json.into_bytes())),
        ),
        (
            Value::Text("not json, ünïcode".into()),
            PayloadMode::AsIs,
            false,
            Ok(Some("not json, ünïcode".as_bytes().to_vec())),
        ),
        (
            Value::Text("not json".into()),
            PayloadMode::RequireJson,
            false,
            Err(|kind| matches!(kind, RoutingErrorKind::PayloadNotJson { .. })),
        ),
        (
            Value::Bytes(non_utf8.clone()),
            PayloadMode::AsIs,
            false,
            Ok(Some(non_utf8.clone())),
        ),
        (
            Value::Bytes(non_utf8),
            PayloadMode::RequireJson,
            false,
            Err(|kind| matches!(kind, RoutingErrorKind::PayloadNotJson { .. })),
        ),
        (
            Value::Bytes(b"[1,2]".to_vec()),
            PayloadMode::RequireJson,
            false,
            Ok(Some(b"[1,2]".to_vec())),
        ),
        // Issue 31 item 10: JSON in shape, invalid UTF-8 inside a string (a LONGBLOB with
        // Latin-1 text, say): not JSON (RFC 8259 text is UTF-8), so not published.
        (
            Value::Bytes(b"{\"name\":\"caf\xe9\"}".to_vec()),
            PayloadMode::RequireJson,
            false,
            Err(|kind| matches!(kind, RoutingErrorKind::PayloadNotJson { .. })),
        ),
        (Value::Null, PayloadMode::AsIs, true, Ok(None)),
        (
            Value::Null,
            PayloadMode::AsIs,
            false,
            Err(|kind| *kind == RoutingErrorKind::NullPayload),
        ),
        (
            Value::Text(String::new()),
            PayloadMode::AsIs,
            true,
            Ok(None),
        ),
        (
            Value::Bytes(Vec::new()),
            PayloadMode::RequireJson,
            true,
            Ok(None),
        ),
        (
            Value::Text(String::new()),
            PayloadMode::AsIs,
            false,
            Ok(Some(Vec::new())),
        ),
        (
            Value::Text(String::new()),
            PayloadMode::RequireJson,
            false,
            Err(|kind| matches!(kind, RoutingErrorKind::PayloadNotJson { .. })),
        ),
        (
            Value::UndecodableText {
                bytes: vec![0xc3],
                charset: "utf8mb4".into(),
            },
            PayloadMode::AsIs,
            true,
            Err(
                |kind| matches!(kind, RoutingErrorKind::UndecodableText { charset, length: 1 } if charset == "utf8mb4"),
            ),
        ),
        (
            Value::Int(5),
            PayloadMode::AsIs,
            false,
            Err(|kind| matches!(kind, RoutingErrorKind::UnsupportedType { .. })),
        ),
    ];
    for (index, (payload, mode, tombstone, expected)) in cases.into_iter().enumerate() {
        let router = seeds_router(&RouteConfig {
            payload: mode,
            tombstone_on_empty_payload: tombstone,
            ..RouteConfig::default()
        });
        let row = with_value(seeds_insert(), "payload", payload);
        route_case(
            &router,
            &row,
            index,
            "payload",
            expected,
            |record, value| {
                assert_eq!(record.value, value, "case {index}");
                // A tombstone still carries key and id.
                assert_eq!(record.key.as_deref(), Some(&b"order-17"[..]));
            },
        );
    }
}

#[test]
fn event_id_types() {
    let uuid_bytes: Vec<u8> = vec![
        0x6f, 0x1c, 0x2a, 0x3e, 0x00, 0x00, 0x40, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01,
    ];
    // (value, encoding, expected id or error)
    let cases: Vec<(Value, BinaryEncoding, Result<&str, RoutingErrorKind>)> = vec![
        (
            Value::Text("6f1c2a3e-0000-4000-8000-000000000001".into()),
            BinaryEncoding::Utf8,
            Ok("6f1c2a3e-0000-4000-8000-000000000001"),
        ),
        (
            Value::Bytes(uuid_bytes.clone()),
            BinaryEncoding::Uuid,
            Ok("6f1c2a3e-0000-4000-8000-000000000001"),
        ),
        (
            Value::Bytes(uuid_bytes.clone()),
            BinaryEncoding::Hex,
            Ok("6f1c2a3e000040008000000000000001"),
        ),
        (
            Value::Bytes(uuid_bytes),
            BinaryEncoding::Utf8,
            Err(RoutingErrorKind::NotUtf8),
        ),
        (
            Value::Bytes(vec![1, 2, 3]),
            BinaryEncoding::Uuid,
            Err(RoutingErrorKind::NotUuid { length: 3 }),
        ),
        (Value::Int(-7), BinaryEncoding::Uuid, Ok("-7")),
        (
            Value::UInt(18_446_744_073_709_551_615),
            BinaryEncoding::Utf8,
            Ok("18446744073709551615"),
        ),
        (
            Value::Decimal("100.000".into()),
            BinaryEncoding::Utf8,
            Ok("100.000"),
        ),
        (
            Value::Text(String::new()),
            BinaryEncoding::Utf8,
            Err(RoutingErrorKind::EmptyEventId),
        ),
        (
            Value::Null,
            BinaryEncoding::Utf8,
            Err(RoutingErrorKind::NullColumn),
        ),
    ];
    for (value, encoding, expected) in cases {
        let router = seeds_router(&RouteConfig {
            event_id_encoding: encoding,
            ..RouteConfig::default()
        });
        let result = router.route(&with_value(seeds_insert(), "event_id", value.clone()));
        match (result, expected) {
            (Ok(RouteOutcome::Record(record)), Ok(id)) => {
                assert_eq!(record.event_id, id);
                assert_eq!(record.header("id"), Some(id.as_bytes()));
            }
            (Err(error), Err(kind)) => {
                assert_eq!(error.kind, kind, "{value:?}");
                assert_eq!(error.event_id, None);
                assert_eq!(error.column.as_deref(), Some("event_id"));
            }
            (actual, expected) => panic!("{value:?}: {actual:?} vs {expected:?}"),
        }
    }
}

#[test]
fn key_encodings() {
    let bytes = vec![0xde, 0xad, 0xbe, 0xef];
    let cases: Vec<(Value, BinaryEncoding, Result<Vec<u8>, RoutingErrorKind>)> = vec![
        (
            Value::Text("agg-1".into()),
            BinaryEncoding::Raw,
            Ok(b"agg-1".to_vec()),
        ),
        (
            Value::Bytes(bytes.clone()),
            BinaryEncoding::Raw,
            Ok(bytes.clone()),
        ),
        (
            Value::Bytes(bytes.clone()),
            BinaryEncoding::Hex,
            Ok(b"deadbeef".to_vec()),
        ),
        (
            Value::Bytes(bytes.clone()),
            BinaryEncoding::Utf8,
            Err(RoutingErrorKind::NotUtf8),
        ),
        (
            Value::Bytes(b"agg-2".to_vec()),
            BinaryEncoding::Utf8,
            Ok(b"agg-2".to_vec()),
        ),
        (
            Value::Bytes(bytes),
            BinaryEncoding::Uuid,
            Err(RoutingErrorKind::NotUuid { length: 4 }),
        ),
        (Value::Int(42), BinaryEncoding::Utf8, Ok(b"42".to_vec())),
        (
            datetime(2024, 1, 2, 3, 4, 5),
            BinaryEncoding::Utf8,
            Ok(b"2024-01-02T03:04:05".to_vec()),
        ),
    ];
    for (value, encoding, expected) in cases {
        let router = seeds_router(&RouteConfig {
            key_encoding: encoding,
            ..RouteConfig::default()
        });
        let result = router.route(&with_value(seeds_insert(), "aggregate_id", value.clone()));
        match (result, expected) {
            (Ok(RouteOutcome::Record(record)), Ok(key)) => {
                assert_eq!(record.key.as_deref(), Some(key.as_slice()));
                assert_eq!(record.header("aggregate_id"), Some(key.as_slice()));
            }
            (Err(error), Err(kind)) => {
                assert_eq!(error.kind, kind);
                assert_eq!(error.column.as_deref(), Some("aggregate_id"));
                assert_eq!(
                    error.event_id.as_deref(),
                    Some("6f1c2a3e-0000-4000-8000-000000000001")
                );
            }
            (actual, expected) => panic!("{value:?}: {actual:?} vs {expected:?}"),
        }
    }
}

#[test]
fn headers_extra_columns_and_names() {
    let route = RouteConfig {
        headers: outbox_router::HeaderNames {
            id: "eventId".into(),
            event_type: "eventType".into(),
            aggregate_type: String::new(),
            aggregate_id: String::new(),
        },
        additional_headers: vec![
            AdditionalHeader {
                column: "tenant".into(),
                header: None,
                encoding: BinaryEncoding::Raw,
                column_type: None,
                column_default: None,
            },
            AdditionalHeader {
                column: "schema_version".into(),
                header: Some("version".into()),
                encoding: BinaryEncoding::Raw,
                column_type: None,
                column_default: None,
            },
            AdditionalHeader {
                column: "blob".into(),
                header: None,
                encoding: BinaryEncoding::Hex,
                column_type: None,
                column_default: None,
            },
            AdditionalHeader {
                column: "raw".into(),
                header: None,
                encoding: BinaryEncoding::Raw,
                column_type: None,
                column_default: None,
            },
            AdditionalHeader {
                column: "maybe".into(),
                header: None,
                encoding: BinaryEncoding::Raw,
                column_type: None,
                column_default: None,
            },
        ],
        ..RouteConfig::default()
    };
    let router = seeds_router(&route);
    let mut row = seeds_insert();
    for (column, value) in [
        ("tenant", Value::Text("acme".into())),
        ("schema_version", Value::Int(3)),
        ("blob", Value::Bytes(vec![0x01, 0xab])),
        ("raw", Value::Bytes(vec![0xff, 0x00])),
        ("maybe", Value::Null),
    ] {
        row = with_column(row, column, value);
    }
    let record = record(&router, &row);
    assert_eq!(
        record.headers,
        vec![
            (
                "eventId".to_string(),
                b"6f1c2a3e-0000-4000-8000-000000000001".to_vec()
            ),
            ("eventType".to_string(), b"OrderCreated".to_vec()),
            ("tenant".to_string(), b"acme".to_vec()),
            ("version".to_string(), b"3".to_vec()),
            ("blob".to_string(), b"01ab".to_vec()),
            ("raw".to_string(), vec![0xff, 0x00]),
        ]
    );
    // A configured extra column the table lacks is a bad row, not a silent omission.
    let error = router
        .route(&without_column(row.clone(), "tenant"))
        .unwrap_err();
    assert_eq!(error.kind, RoutingErrorKind::MissingColumn);
    assert_eq!(error.column.as_deref(), Some("tenant"));
    let error = router
        .route(&with_value(
            row,
            "tenant",
            Value::UndecodableText {
                bytes: vec![0xe9],
                charset: "utf8mb4".into(),
            },
        ))
        .unwrap_err();
    assert!(matches!(
        error.kind,
        RoutingErrorKind::UndecodableText { .. }
    ));
    assert_eq!(error.column.as_deref(), Some("tenant"));
}

#[test]
fn tracing_span_context_header() {
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let router = seeds_router(&RouteConfig {
        tracing_span_context_column: Some("tracingspancontext".into()),
        ..RouteConfig::default()
    });
    // (column value, expected header)
    type Case = (Value, Option<(&'static str, Vec<u8>)>);
    let cases: Vec<Case> = vec![
        (
            Value::Text(traceparent.into()),
            Some(("traceparent", traceparent.as_bytes().to_vec())),
        ),
        (
            Value::Bytes(traceparent.as_bytes().to_vec()),
            Some(("traceparent", traceparent.as_bytes().to_vec())),
        ),
        (
            Value::Text(format!(
                "#Thu Jan 01 00:00:00 UTC 2024\ntraceparent={traceparent}\n"
            )),
            Some(("traceparent", traceparent.as_bytes().to_vec())),
        ),
        (
            Value::Text("uber-trace-id=abc:def:0:1".into()),
            Some(("tracingspancontext", b"uber-trace-id=abc:def:0:1".to_vec())),
        ),
        (
            Value::Text("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01".into()),
            Some((
                "tracingspancontext",
                b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01".to_vec(),
            )),
        ),
        (Value::Null, None),
    ];
    for (value, expected) in cases {
        let row = with_column(seeds_insert(), "tracingspancontext", value.clone());
        let record = record(&router, &row);
        let tracing_headers: Vec<_> = record
            .headers
            .iter()
            .filter(|(name, _)| name == "traceparent" || name == "tracingspancontext")
            .cloned()
            .collect();
        let expected: Vec<_> = expected
            .into_iter()
            .map(|(name, bytes)| (name.to_string(), bytes))
            .collect();
        assert_eq!(tracing_headers, expected, "{value:?}");
        // The tracing header comes last.
        if !expected.is_empty() {
            assert_eq!(record.headers.last(), expected.last());
        }
    }
    let bad = with_column(
        seeds_insert(),
        "tracingspancontext",
        Value::UndecodableText {
            bytes: vec![0x9f],
            charset: "utf8mb4".into(),
        },
    );
    let error = router.route(&bad).unwrap_err();
    assert!(matches!(
        error.kind,
        RoutingErrorKind::UndecodableText { .. }
    ));
    assert_eq!(error.column.as_deref(), Some("tracingspancontext"));
    // A table without the span context column has no traces to carry: no header.
    let record = common::record(&router, &seeds_insert());
    assert_eq!(record.headers.len(), 4);
    assert_eq!(record.header("traceparent"), None);
}

#[test]
fn timestamp_sources() {
    let event_time = i64::from(EVENT_TIME_SECONDS) * 1000;
    // (source, created_at value or None for "no such column", expected millis or error)
    let cases: Vec<(TimestampSource, Option<Value>, Result<i64, KindCheck>)> = vec![
        (
            TimestampSource::ColumnOrEventTime,
            Some(datetime(2024, 5, 6, 7, 8, 9)),
            Ok(CREATED_AT_MILLIS),
        ),
        (
            TimestampSource::ColumnOrEventTime,
            Some(Value::DateTime(datetime_from_parts((
                2024, 5, 6, 7, 8, 9, 456_789,
            )))),
            Ok(CREATED_AT_MILLIS + 456),
        ),
        (
            TimestampSource::ColumnOrEventTime,
            Some(Value::Timestamp {
                unix_seconds: 1_714_979_289,
                micros: 1_000,
            }),
            Ok(CREATED_AT_MILLIS + 1),
        ),
        (
            TimestampSource::ColumnOrEventTime,
            Some(Value::Int(CREATED_AT_MILLIS)),
            Ok(CREATED_AT_MILLIS),
        ),
        (
            TimestampSource::ColumnOrEventTime,
            Some(Value::UInt(5)),
            Ok(5),
        ),
        (
            TimestampSource::ColumnOrEventTime,
            Some(Value::Null),
            Ok(event_time),
        ),
        (TimestampSource::ColumnOrEventTime, None, Ok(event_time)),
        (
            TimestampSource::EventTime,
            Some(datetime(2024, 5, 6, 7, 8, 9)),
            Ok(event_time),
        ),
        (
            TimestampSource::EventTime,
            Some(Value::Text("garbage".into())),
            Ok(event_time),
        ),
        (
            TimestampSource::Column,
            Some(datetime(2024, 5, 6, 7, 8, 9)),
            Ok(CREATED_AT_MILLIS),
        ),
        (
            TimestampSource::Column,
            Some(Value::Null),
            Err(|k| *k == RoutingErrorKind::NullColumn),
        ),
        (
            TimestampSource::Column,
            None,
            Err(|k| *k == RoutingErrorKind::MissingColumn),
        ),
        (
            TimestampSource::ColumnOrEventTime,
            Some(datetime(0, 0, 0, 0, 0, 0)),
            Err(|k| matches!(k, RoutingErrorKind::InvalidTimestamp { .. })),
        ),
        (
            TimestampSource::ColumnOrEventTime,
            Some(Value::Int(-1)),
            Err(|k| matches!(k, RoutingErrorKind::InvalidTimestamp { .. })),
        ),
        (
            TimestampSource::ColumnOrEventTime,
            Some(Value::UInt(u64::MAX)),
            Err(|k| matches!(k, RoutingErrorKind::InvalidTimestamp { .. })),
        ),
        (
            TimestampSource::ColumnOrEventTime,
            Some(Value::Text("2024-05-06".into())),
            Err(|k| matches!(k, RoutingErrorKind::UnsupportedType { .. })),
        ),
    ];
    for (index, (source, created_at, expected)) in cases.into_iter().enumerate() {
        let mut table = OutboxTableConfig::new("shop.outbox".parse().unwrap(), ColumnPreset::Seeds);
        table.timestamp_source = source;
        let router = Router::new(&[table], &RouteConfig::default()).unwrap();
        let row = match created_at {
            Some(value) => with_value(seeds_insert(), "created_at", value),
            None => without_column(seeds_insert(), "created_at"),
        };
        route_case(
            &router,
            &row,
            index,
            "created_at",
            expected,
            |record, millis| assert_eq!(record.timestamp_millis, Some(millis), "case {index}"),
        );
    }
}

#[test]
fn update_and_delete_behaviors() {
    for behavior in [
        InvalidOperationBehavior::Ignore,
        InvalidOperationBehavior::Warn,
        InvalidOperationBehavior::Fail,
    ] {
        let router = seeds_router(&RouteConfig {
            invalid_operation: behavior,
            ..RouteConfig::default()
        });
        for operation in [RowOperation::Update, RowOperation::Delete] {
            let row = change(
                "shop.outbox",
                operation,
                &SEEDS_COLUMNS,
                seeds_insert().after.unwrap().values,
            );
            let result = router.route(&row);
            let expected_id = Some("6f1c2a3e-0000-4000-8000-000000000001".to_string());
            match behavior {
                InvalidOperationBehavior::Ignore | InvalidOperationBehavior::Warn => {
                    if let Ok(RouteOutcome::Skipped { reason }) = &result {
                        let label = if operation == RowOperation::Update {
                            "update"
                        } else {
                            "delete"
                        };
                        assert_eq!(reason.metric_label(), label);
                        assert!(reason
                            .to_string()
                            .contains("6f1c2a3e-0000-4000-8000-000000000001"));
                    }
                    assert_eq!(
                        result,
                        Ok(RouteOutcome::Skipped {
                            reason: SkipReason::InvalidOperation {
                                operation,
                                event_id: expected_id
                            }
                        })
                    )
                }
                InvalidOperationBehavior::Fail => {
                    let error = result.unwrap_err();
                    assert_eq!(error.kind, RoutingErrorKind::InvalidOperation { operation });
                    assert_eq!(error.kind.metric_label(), "invalid_operation");
                    assert_eq!(error.event_id, expected_id);
                    assert!(error.to_string().contains("invalid_operation"));
                }
            }
        }
    }
}

/// Debezium's `table.op.invalid.behavior` covers UPDATEs only and DELETEs are always
/// dropped: `invalid_update` / `invalid_delete` override `invalid_operation` per operation.
#[test]
fn update_and_delete_behaviors_can_differ() {
    let router = seeds_router(&RouteConfig {
        invalid_operation: InvalidOperationBehavior::Warn,
        invalid_update: Some(InvalidOperationBehavior::Fail),
        invalid_delete: Some(InvalidOperationBehavior::Ignore),
        ..RouteConfig::default()
    });
    let row = |operation| {
        change(
            "shop.outbox",
            operation,
            &SEEDS_COLUMNS,
            seeds_insert().after.unwrap().values,
        )
    };
    let update = router.route(&row(RowOperation::Update)).unwrap_err();
    assert_eq!(
        update.kind,
        RoutingErrorKind::InvalidOperation {
            operation: RowOperation::Update
        }
    );
    assert!(matches!(
        router.route(&row(RowOperation::Delete)),
        Ok(RouteOutcome::Skipped { .. })
    ));
    // Only one override: the other operation follows `invalid_operation`.
    let router = seeds_router(&RouteConfig {
        invalid_operation: InvalidOperationBehavior::Fail,
        invalid_delete: Some(InvalidOperationBehavior::Ignore),
        ..RouteConfig::default()
    });
    assert!(router.route(&row(RowOperation::Update)).is_err());
    assert!(matches!(
        router.route(&row(RowOperation::Delete)),
        Ok(RouteOutcome::Skipped { .. })
    ));
}

#[test]
fn bad_rows_give_precise_errors() {
    let undecodable = || Value::UndecodableText {
        bytes: vec![0xff, 0xfe],
        charset: "latin7".into(),
    };
    let id = Some("6f1c2a3e-0000-4000-8000-000000000001");
    // (row, expected column, expected event id, expected kind check)
    // A seeds insert with `column` removed (`None`) or set to the given value.
    let case = |column: &'static str,
                replacement: Option<Value>,
                event_id: Option<&'static str>,
                check: KindCheck| {
        let row = match replacement {
            None => without_column(seeds_insert(), column),
            Some(value) => with_value(seeds_insert(), column, value),
        };
        (row, column, event_id, check)
    };
    let cases: Vec<(outbox_binlog::RowChange, &str, Option<&str>, KindCheck)> = vec![
        case("event_id", None, None, |k| {
            *k == RoutingErrorKind::MissingColumn
        }),
        case("event_id", Some(Value::Null), None, |k| {
            *k == RoutingErrorKind::NullColumn
        }),
        case(
            "event_id",
            Some(undecodable()),
            None,
            |k| matches!(k, RoutingErrorKind::UndecodableText { charset, length: 2 } if charset == "latin7"),
        ),
        case("aggregate_type", None, id, |k| {
            *k == RoutingErrorKind::MissingColumn
        }),
        case("aggregate_type", Some(Value::Null), id, |k| {
            *k == RoutingErrorKind::NullColumn
        }),
        case("aggregate_type", Some(undecodable()), id, |k| {
            matches!(k, RoutingErrorKind::UndecodableText { .. })
        }),
        case("aggregate_type", Some(Value::Bytes(vec![0xc0])), id, |k| {
            *k == RoutingErrorKind::NotUtf8
        }),
        case("aggregate_id", None, id, |k| {
            *k == RoutingErrorKind::MissingColumn
        }),
        case("aggregate_id", Some(Value::Null), id, |k| {
            *k == RoutingErrorKind::NullColumn
        }),
        case("aggregate_id", Some(undecodable()), id, |k| {
            matches!(k, RoutingErrorKind::UndecodableText { .. })
        }),
        case("event_type", None, id, |k| {
            *k == RoutingErrorKind::MissingColumn
        }),
        case("event_type", Some(Value::Null), id, |k| {
            *k == RoutingErrorKind::NullColumn
        }),
        case("event_type", Some(undecodable()), id, |k| {
            matches!(k, RoutingErrorKind::UndecodableText { .. })
        }),
        case("payload", None, id, |k| {
            *k == RoutingErrorKind::MissingColumn
        }),
        case("payload", Some(Value::Null), id, |k| {
            *k == RoutingErrorKind::NullPayload
        }),
        case("payload", Some(undecodable()), id, |k| {
            matches!(k, RoutingErrorKind::UndecodableText { .. })
        }),
        case("created_at", Some(undecodable()), id, |k| {
            matches!(k, RoutingErrorKind::UndecodableText { .. })
        }),
        case(
            "created_at",
            Some(datetime(2024, 13, 1, 0, 0, 0)),
            id,
            |k| matches!(k, RoutingErrorKind::InvalidTimestamp { .. }),
        ),
    ];
    let router = seeds_router(&RouteConfig::default());
    for (index, (row, column, event_id, check)) in cases.into_iter().enumerate() {
        let error = router.route(&row).unwrap_err();
        assert!(check(&error.kind), "case {index}: {error}");
        assert_eq!(error.column.as_deref(), Some(column), "case {index}");
        assert_eq!(error.event_id.as_deref(), event_id, "case {index}");
        assert_eq!(error.table.to_string(), "shop.outbox");
        assert!(error.is_permanent());
        let message = error.to_string();
        assert!(message.contains("shop.outbox"), "{message}");
        assert!(message.contains(&format!("column `{column}`")), "{message}");
        if let Some(id) = event_id {
            assert!(message.contains(id), "{message}");
        }
    }
}

#[test]
fn short_value_list_is_a_missing_column_not_a_panic() {
    let router = seeds_router(&RouteConfig::default());
    let mut row = seeds_insert();
    row.after.as_mut().unwrap().values.truncate(2);
    let error = router.route(&row).unwrap_err();
    assert_eq!(error.kind, RoutingErrorKind::MissingColumn);
    assert_eq!(error.column.as_deref(), Some("aggregate_id"));
    let mut insert_without_image = seeds_insert();
    insert_without_image.after = None;
    assert_eq!(
        router.route(&insert_without_image).unwrap_err().kind,
        RoutingErrorKind::MissingRowImage {
            operation: RowOperation::Insert
        }
    );
}

#[test]
fn event_type_is_only_required_when_used() {
    let route = RouteConfig {
        headers: outbox_router::HeaderNames {
            event_type: String::new(),
            ..Default::default()
        },
        ..RouteConfig::default()
    };
    let router = seeds_router(&route);
    let record = record(&router, &without_column(seeds_insert(), "event_type"));
    assert_eq!(record.header("event_type"), None);
    let route = RouteConfig {
        topic: "${event_type}".into(),
        ..route
    };
    let router = seeds_router(&route);
    assert_eq!(
        router
            .route(&without_column(seeds_insert(), "event_type"))
            .unwrap_err()
            .kind,
        RoutingErrorKind::MissingColumn
    );
}

#[test]
fn partition_column() {
    let mut table = OutboxTableConfig::new("shop.outbox".parse().unwrap(), ColumnPreset::Seeds);
    table.columns.partition = Some("kafka_partition".into());
    let router = Router::new(&[table], &RouteConfig::default()).unwrap();
    let cases: Vec<(Value, Result<Option<i32>, ()>)> = vec![
        (Value::Int(3), Ok(Some(3))),
        (Value::UInt(0), Ok(Some(0))),
        (Value::Null, Ok(None)),
        (Value::Int(-1), Err(())),
        (Value::UInt(u64::from(u32::MAX)), Err(())),
        (Value::Text("3".into()), Err(())),
        (
            Value::UndecodableText {
                bytes: vec![0x80],
                charset: "latin1".into(),
            },
            Err(()),
        ),
    ];
    for (value, expected) in cases {
        let row = with_column(seeds_insert(), "kafka_partition", value.clone());
        match (router.route(&row), expected) {
            (Ok(RouteOutcome::Record(record)), Ok(partition)) => {
                assert_eq!(record.partition, partition)
            }
            (Err(error), Err(())) => {
                assert_eq!(error.column.as_deref(), Some("kafka_partition"))
            }
            (actual, expected) => panic!("{value:?}: {actual:?} vs {expected:?}"),
        }
    }
    assert_eq!(
        router.route(&seeds_insert()).unwrap_err().kind,
        RoutingErrorKind::MissingColumn
    );
}

#[test]
fn column_positions_follow_a_changed_column_list() {
    let router = seeds_router(&RouteConfig::default());
    assert_eq!(
        record(&router, &seeds_insert()).key.as_deref(),
        Some(&b"order-17"[..])
    );
    // Same table after an ALTER TABLE: new column order, new Arc.
    let reordered = change(
        "shop.outbox",
        RowOperation::Insert,
        &[
            "seq",
            "payload",
            "aggregate_id",
            "event_id",
            "event_type",
            "aggregate_type",
            "created_at",
        ],
        vec![
            Value::Int(1),
            Value::Text("{}".into()),
            Value::Text("cust-3".into()),
            Value::Text("e-2".into()),
            Value::Text("CustomerMoved".into()),
            Value::Text("customer".into()),
            Value::Null,
        ],
    );
    let moved = record(&router, &reordered);
    assert_eq!(moved.topic, "outbox.event.customer");
    assert_eq!(moved.key.as_deref(), Some(&b"cust-3"[..]));
    assert_eq!(moved.event_id, "e-2");
    // And back again, with an equal list in a fresh Arc.
    assert_eq!(
        record(&router, &seeds_insert()).key.as_deref(),
        Some(&b"order-17"[..])
    );
    assert_eq!(record(&router, &reordered).event_id, "e-2");
}

#[test]
fn router_is_shareable_and_errors_read_well() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Router>();
    let router = seeds_router(&RouteConfig::default());
    let error = router
        .route(&with_value(seeds_insert(), "payload", Value::Null))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "cannot route event `6f1c2a3e-0000-4000-8000-000000000001` of table `shop.outbox`, \
         column `payload`: the payload is NULL (set [route] tombstone_on_empty_payload = true \
         to send a tombstone)"
    );
    let error = router
        .route(&with_value(seeds_insert(), "event_id", Value::Null))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "cannot route a row (event id unreadable) of table `shop.outbox`, column `event_id`: \
         the value is NULL, but the column is required"
    );
}

#[test]
fn table_additional_headers_follow_the_route_ones() {
    let mut shop = OutboxTableConfig::new("shop.outbox".parse().unwrap(), ColumnPreset::Seeds);
    shop.additional_headers = vec![AdditionalHeader {
        column: "region".into(),
        header: Some("x-region".into()),
        encoding: BinaryEncoding::Raw,
        column_type: None,
        column_default: None,
    }];
    let mut billing =
        OutboxTableConfig::new("billing.outbox".parse().unwrap(), ColumnPreset::Seeds);
    billing.topic = Some("billing".into());
    let route = RouteConfig {
        additional_headers: vec![AdditionalHeader {
            column: "tenant".into(),
            header: None,
            encoding: BinaryEncoding::Raw,
            column_type: None,
            column_default: None,
        }],
        ..RouteConfig::default()
    };
    let router = Router::new(&[shop, billing], &route).unwrap();
    let shop_row = with_column(
        with_column(seeds_insert(), "tenant", Value::Text("acme".into())),
        "region",
        Value::Text("eu".into()),
    );
    let record = record(&router, &shop_row);
    assert_eq!(
        record.headers[4..],
        [
            ("tenant".to_string(), b"acme".to_vec()),
            ("x-region".to_string(), b"eu".to_vec())
        ]
    );
    // The billing table has no `region` column and needs none.
    let mut billing_row = with_column(seeds_insert(), "tenant", Value::Text("acme".into()));
    billing_row.table = Arc::new("billing.outbox".parse().unwrap());
    let record = common::record(&router, &billing_row);
    assert_eq!(record.topic, "billing");
    assert_eq!(record.headers.len(), 5);
    assert_eq!(record.header("tenant"), Some(&b"acme"[..]));
}

#[test]
fn invalid_topic_blames_the_right_column() {
    let route = RouteConfig {
        topic: "${aggregate_type}.${event_type}".into(),
        ..RouteConfig::default()
    };
    let router = seeds_router(&route);
    // (aggregate type, event type, blamed column)
    let cases = [
        ("order", "Order Created", Some("event_type")),
        ("or/der", "OrderCreated", Some("aggregate_type")),
        ("or/der", "Order/Created", Some("aggregate_type")),
        (
            "a".repeat(200).leak() as &str,
            "b".repeat(60).leak() as &str,
            Some("aggregate_type"),
        ),
    ];
    for (aggregate_type, event_type, column) in cases {
        let row = with_value(
            with_value(
                seeds_insert(),
                "aggregate_type",
                Value::Text(aggregate_type.into()),
            ),
            "event_type",
            Value::Text(event_type.into()),
        );
        let error = router.route(&row).unwrap_err();
        assert!(
            matches!(error.kind, RoutingErrorKind::InvalidTopic { .. }),
            "{error}"
        );
        assert_eq!(error.column.as_deref(), column, "{error}");
    }
    // Only the table name can explain this one.
    let router = Router::new(
        &[OutboxTableConfig::new(
            "shop.out$box".parse().unwrap(),
            ColumnPreset::Seeds,
        )],
        &RouteConfig {
            topic: "${database}.${table}.${aggregate_type}".into(),
            ..RouteConfig::default()
        },
    )
    .unwrap();
    let mut row = seeds_insert();
    row.table = Arc::new("shop.out$box".parse().unwrap());
    let error = router.route(&row).unwrap_err();
    assert_eq!(
        error.kind,
        RoutingErrorKind::InvalidTopic {
            topic: "shop.out$box.order".into(),
            problem: TopicNameProblem::IllegalCharacter { character: '$' }
        }
    );
    assert_eq!(error.column, None);
}

/// `key_format` / `value_format` write the bytes Kafka Connect's JsonConverter writes for
/// Debezium's records (schemas off and on), and `expand_json_payload` the expanded value.
#[test]
fn json_formats_write_what_the_json_converter_writes() {
    let payload = Value::Text("{\"b\": 1, \"a\": [\"x\"], \"n\": null, \"e\": []}".into());
    let insert = with_value(seeds_insert(), "payload", payload);
    let json: RouteConfig =
        toml::from_str("key_format = \"json\"\nvalue_format = \"json\"").unwrap();
    let first = record(&seeds_router(&json), &insert);
    let record = first;
    assert_eq!(record.key.as_deref(), Some(&b"\"order-17\""[..]));
    assert_eq!(
        record.value.as_deref(),
        Some(&br#""{\"b\": 1, \"a\": [\"x\"], \"n\": null, \"e\": []}""#[..])
    );
    // The aggregate id header keeps the plain id: headers go through Connect's header converter.
    assert_eq!(record.header("aggregate_id"), Some(&b"order-17"[..]));

    let with_schema: RouteConfig = toml::from_str(
        "key_format = \"json_with_schema\"\nvalue_format = \"json_with_schema\"\n\
         connect_schema = { payload_optional = false }",
    )
    .unwrap();
    let record = common::record(&seeds_router(&with_schema), &insert);
    assert_eq!(
        record.key.as_deref(),
        Some(&br#"{"schema":{"type":"string","optional":false},"payload":"order-17"}"#[..])
    );
    assert_eq!(
        String::from_utf8(record.value.unwrap()).unwrap(),
        r#"{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Json","version":1},"payload":"{\"b\": 1, \"a\": [\"x\"], \"n\": null, \"e\": []}"}"#
    );

    let expanded: RouteConfig =
        toml::from_str("value_format = \"json\"\nexpand_json_payload = true").unwrap();
    let record = common::record(&seeds_router(&expanded), &insert);
    assert_eq!(record.key.as_deref(), Some(&b"order-17"[..]));
    assert_eq!(record.value.as_deref(), Some(&br#"{"b":1,"a":["x"]}"#[..]));
}

#[test]
fn expanding_a_raw_value_is_refused() {
    let route: RouteConfig = toml::from_str("expand_json_payload = true").unwrap();
    let error = route.validate().unwrap_err().to_string();
    assert!(error.contains("expand_json_payload"), "{error}");
}

/// `null_values = "as_debezium"`: a NULL aggregate id is a null key (JSON `null` under a JSON
/// key format) and a NULL payload a null value, as Debezium's router writes them; the
/// default stays a routing error.
#[test]
fn null_key_and_payload_as_debezium_writes_them() {
    let null_key = with_value(seeds_insert(), "aggregate_id", Value::Null);
    let null_payload = with_value(seeds_insert(), "payload", Value::Null);
    let default_router = seeds_router(&RouteConfig::default());
    assert!(default_router.route(&null_key).is_err());
    assert!(default_router.route(&null_payload).is_err());

    let raw: RouteConfig = toml::from_str("null_values = \"as_debezium\"").unwrap();
    let router = seeds_router(&raw);
    let record = common::record(&router, &null_key);
    assert_eq!(record.key, None);
    assert_eq!(record.header("aggregate_id"), None);
    assert_eq!(common::record(&router, &null_payload).value, None);

    let json: RouteConfig = toml::from_str(
        "null_values = \"as_debezium\"\nkey_format = \"json\"\nvalue_format = \"json_with_schema\"",
    )
    .unwrap();
    let router = seeds_router(&json);
    assert_eq!(
        common::record(&router, &null_key).key.as_deref(),
        Some(&b"null"[..])
    );
    assert_eq!(
        common::record(&router, &null_payload).value.as_deref(),
        Some(&br#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":null}"#[..])
    );
}

/// `route.tombstone.on.empty.payload` trims like Java's `String.trim()`.
#[test]
fn a_blank_payload_is_a_tombstone() {
    let route: RouteConfig = toml::from_str("tombstone_on_empty_payload = true").unwrap();
    let blank = with_value(seeds_insert(), "payload", Value::Text(" \t\n ".into()));
    assert_eq!(common::record(&seeds_router(&route), &blank).value, None);
}

/// `timestamp_source = "producer_time"`: no timestamp from the row, so the producer stamps
/// the send time, as Debezium's default record timestamp is its processing time.
#[test]
fn producer_time_leaves_the_timestamp_to_the_producer() {
    let mut table = OutboxTableConfig::new("shop.outbox".parse().unwrap(), ColumnPreset::Seeds);
    table.timestamp_source =
        toml::from_str::<BTreeMap<String, TimestampSource>>("source = \"producer_time\"").unwrap()
            ["source"];
    let router = Router::new(&[table], &RouteConfig::default()).unwrap();
    assert_eq!(
        common::record(&router, &seeds_insert()).timestamp_millis,
        None
    );
}

/// `topic_regex` + `topic_replacement`: Debezium's `route.topic.regex` /
/// `route.topic.replacement` (full match; no match routes to the aggregate type itself).
#[test]
fn topic_regex_routes_like_debezium() {
    let route: RouteConfig = toml::from_str(
        "topic_regex = \"(?<routedByValue>ord.*)\"\ntopic_replacement = \"shop.${routedByValue}.events\"",
    )
    .unwrap();
    let router = seeds_router(&route);
    assert_eq!(
        common::record(&router, &seeds_insert()).topic,
        "shop.order.events"
    );
    let customer = with_value(
        seeds_insert(),
        "aggregate_type",
        Value::Text("customer".into()),
    );
    assert_eq!(common::record(&router, &customer).topic, "customer");
    let half: RouteConfig = toml::from_str("topic_regex = \"(.*)\"").unwrap();
    assert!(half.validate().is_err());
}

/// The topic check has no memory: after any number of legal topics from the same route, an
/// illegal one is a routing error again, every time; a literal topic (checked when the
/// config was parsed) routes as written; a regex route's topic is checked per row too.
#[test]
fn every_illegal_topic_is_a_routing_error_however_often_the_route_was_legal() {
    let route: RouteConfig = toml::from_str(
        "[topic_overrides]\nfixed = \"orders.fixed\"\nplaceholder = \"orders.${event_type}\"",
    )
    .unwrap();
    let regex_route: RouteConfig = toml::from_str(
        "topic_regex = \"(?<routedByValue>ord.*)\"\ntopic_replacement = \"shop.${routedByValue}\"",
    )
    .unwrap();
    let row = |aggregate_type: &str, event_type: &str| {
        with_value(
            with_value(
                seeds_insert(),
                "aggregate_type",
                Value::Text(aggregate_type.into()),
            ),
            "event_type",
            Value::Text(event_type.into()),
        )
    };
    let invalid_topic = |router: &Router, row: &outbox_binlog::RowChange| match router.route(row) {
        Err(error) => match error.kind {
            RoutingErrorKind::InvalidTopic { topic, problem } => Some((topic, problem)),
            other => panic!("unexpected {other:?}"),
        },
        Ok(_) => None,
    };
    let router = seeds_router(&route);
    let regex_router = seeds_router(&regex_route);
    for round in 0..3 {
        assert_eq!(
            common::record(&router, &row("order", "Created")).topic,
            "outbox.event.order"
        );
        assert_eq!(
            invalid_topic(&router, &row("or der", "Created")),
            Some((
                "outbox.event.or der".to_owned(),
                TopicNameProblem::IllegalCharacter { character: ' ' }
            )),
            "round {round}"
        );
        assert_eq!(
            common::record(&router, &row("fixed", "a b")).topic,
            "orders.fixed"
        );
        assert_eq!(
            common::record(&router, &row("placeholder", "Created")).topic,
            "orders.Created"
        );
        assert_eq!(
            invalid_topic(&router, &row("placeholder", "Créé")),
            Some((
                "orders.Créé".to_owned(),
                TopicNameProblem::IllegalCharacter { character: 'é' }
            )),
            "round {round}"
        );
        assert_eq!(
            common::record(&regex_router, &row("order", "Created")).topic,
            "shop.order"
        );
        assert_eq!(
            invalid_topic(&regex_router, &row("ord/er", "Created")),
            Some((
                "shop.ord/er".to_owned(),
                TopicNameProblem::IllegalCharacter { character: '/' }
            )),
            "round {round}"
        );
    }
}
