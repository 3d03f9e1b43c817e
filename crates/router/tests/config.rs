//! Configuration parsing from TOML (as the relay embeds it) and validation messages.

use std::collections::BTreeMap;

use outbox_router::{
    validate_router_config, AdditionalHeader, BinaryEncoding, ColumnPreset, ConfigProblem,
    InvalidOperationBehavior, OutboxTableConfig, PayloadMode, RouteConfig, Router, TimestampSource,
};
use serde::Deserialize;

/// The shape the relay's config file gives these sections.
#[derive(Debug, Deserialize)]
struct RelayLikeConfig {
    outbox: Vec<OutboxTableConfig>,
    #[serde(default)]
    route: RouteConfig,
}

fn parse(text: &str) -> Result<RelayLikeConfig, String> {
    toml::from_str(text).map_err(|error| error.to_string())
}

#[test]
fn full_config_parses() {
    let config = parse(
        r#"
        [[outbox]]
        table = "shop.outbox"

        [[outbox]]
        table = "inventory.outboxevent"
        preset = "debezium"
        topic = "inventory.${aggregate_type}"
        timestamp_source = "event_time"
        columns = { aggregate_id = "aggregate_key", partition = "kafka_partition" }

        [route]
        topic = "outbox.${database}.${aggregate_type}"
        topic_overrides = { order = "orders", "Customer Data" = "customers" }
        key_encoding = "hex"
        event_id_encoding = "uuid"
        payload = "require_json"
        tombstone_on_empty_payload = true
        tracing_span_context_column = "tracingspancontext"
        invalid_operation = "warn"
        headers = { id = "id", event_type = "eventType", aggregate_type = "", aggregate_id = "aggregateId" }

        [[route.additional_headers]]
        column = "tenant"

        [[route.additional_headers]]
        column = "schema_version"
        header = "version"
        encoding = "utf8"
        "#,
    )
    .unwrap();
    assert_eq!(config.outbox.len(), 2);
    let seeds = &config.outbox[0];
    assert_eq!(seeds.table.to_string(), "shop.outbox");
    assert_eq!(seeds.preset, ColumnPreset::Seeds);
    assert_eq!(seeds.timestamp_source, TimestampSource::ColumnOrEventTime);
    assert_eq!(seeds.column_mapping(), ColumnPreset::Seeds.mapping());
    let debezium = &config.outbox[1];
    assert_eq!(debezium.preset, ColumnPreset::Debezium);
    assert_eq!(debezium.timestamp_source, TimestampSource::EventTime);
    let mapping = debezium.column_mapping();
    assert_eq!(mapping.event_id, "id");
    assert_eq!(mapping.aggregate_type, "aggregatetype");
    assert_eq!(mapping.aggregate_id, "aggregate_key");
    assert_eq!(mapping.event_type, "type");
    assert_eq!(mapping.payload, "payload");
    assert_eq!(mapping.timestamp, "timestamp");
    assert_eq!(mapping.partition.as_deref(), Some("kafka_partition"));

    let route = &config.route;
    assert_eq!(route.topic, "outbox.${database}.${aggregate_type}");
    assert_eq!(
        route.topic_overrides,
        BTreeMap::from([
            ("order".to_string(), "orders".to_string()),
            ("Customer Data".to_string(), "customers".to_string())
        ])
    );
    assert_eq!(route.key_encoding, BinaryEncoding::Hex);
    assert_eq!(route.event_id_encoding, BinaryEncoding::Uuid);
    assert_eq!(route.payload, PayloadMode::RequireJson);
    assert!(route.tombstone_on_empty_payload);
    assert_eq!(route.invalid_operation, InvalidOperationBehavior::Warn);
    assert_eq!(route.headers.event_type, "eventType");
    assert_eq!(route.headers.aggregate_type, "");
    assert_eq!(
        route.additional_headers,
        vec![
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
                encoding: BinaryEncoding::Utf8,
                column_type: None,
                column_default: None,
            },
        ]
    );
    Router::new(&config.outbox, &config.route).unwrap();
}

#[test]
fn empty_route_section_is_the_default() {
    let config = parse("[[outbox]]\ntable = \"shop.outbox\"\n[route]\n").unwrap();
    assert_eq!(config.route, RouteConfig::default());
    let default = RouteConfig::default();
    assert_eq!(default.topic, "outbox.event.${aggregate_type}");
    assert!(default.topic_overrides.is_empty());
    assert_eq!(default.key_encoding, BinaryEncoding::Utf8);
    assert_eq!(default.event_id_encoding, BinaryEncoding::Utf8);
    assert_eq!(default.payload, PayloadMode::AsIs);
    assert!(!default.tombstone_on_empty_payload);
    assert_eq!(default.invalid_operation, InvalidOperationBehavior::Ignore);
    assert_eq!(default.headers.id, "id");
    default.validate().unwrap();
    // An absent [route] section too.
    assert_eq!(
        parse("[[outbox]]\ntable = \"shop.outbox\"\n")
            .unwrap()
            .route,
        RouteConfig::default()
    );
}

#[test]
fn unknown_keys_are_rejected_by_name() {
    let cases = [
        ("[[outbox]]\ntable = \"a.b\"\ntopik = \"x\"\n", "topik"),
        (
            "[[outbox]]\ntable = \"a.b\"\ncolumns = { event_idd = \"x\" }\n",
            "event_idd",
        ),
        (
            "[[outbox]]\ntable = \"a.b\"\n[route]\ntopic_override = {}\n",
            "topic_override",
        ),
        (
            "[[outbox]]\ntable = \"a.b\"\n[route]\nheaders = { eventid = \"x\" }\n",
            "eventid",
        ),
        (
            "[[outbox]]\ntable = \"a.b\"\n[[route.additional_headers]]\ncolumn = \"t\"\nname = \"x\"\n",
            "name",
        ),
    ];
    for (text, key) in cases {
        let message = parse(text).unwrap_err();
        assert!(
            message.contains(&format!("unknown field `{key}`")),
            "{key}: {message}"
        );
    }
}

#[test]
fn bad_values_are_rejected_with_the_choices() {
    let message = parse("[[outbox]]\ntable = \"outbox\"\n").unwrap_err();
    assert!(message.contains("database.table"), "{message}");
    let message = parse("[[outbox]]\ntable = \"a.b\"\npreset = \"maxwell\"\n").unwrap_err();
    assert!(
        message.contains("maxwell") && message.contains("seeds") && message.contains("debezium"),
        "{message}"
    );
    let message =
        parse("[[outbox]]\ntable = \"a.b\"\n[route]\nkey_encoding = \"base32\"\n").unwrap_err();
    assert!(message.contains("hex"), "{message}");
    let message = parse("[route]\n").unwrap_err();
    assert!(message.contains("outbox"), "{message}");
    let message = parse("[[outbox]]\npreset = \"seeds\"\n").unwrap_err();
    assert!(message.contains("missing field `table`"), "{message}");
}

fn table(name: &str) -> OutboxTableConfig {
    OutboxTableConfig::new(name.parse().unwrap(), ColumnPreset::Seeds)
}

#[test]
fn validate_reports_every_clash_with_a_fix() {
    let mut bad_table = table("shop.outbox");
    bad_table.columns.payload = Some(String::new());
    bad_table.topic = Some("x.${aggregatetype}".into());
    let route = RouteConfig {
        topic: "outbox event".into(),
        topic_overrides: BTreeMap::from([
            (String::new(), "x".into()),
            ("order".into(), "${table".into()),
        ]),
        event_id_encoding: BinaryEncoding::Raw,
        additional_headers: vec![
            AdditionalHeader {
                column: "id".into(),
                header: None,
                encoding: BinaryEncoding::Raw,
                column_type: None,
                column_default: None,
            },
            AdditionalHeader {
                column: String::new(),
                header: Some(String::new()),
                encoding: BinaryEncoding::Raw,
                column_type: None,
                column_default: None,
            },
        ],
        tracing_span_context_column: Some("tracingspancontext".into()),
        ..RouteConfig::default()
    };
    let mut route = route;
    route.additional_headers.push(AdditionalHeader {
        column: "trace".into(),
        header: Some("traceparent".into()),
        encoding: BinaryEncoding::Raw,
        column_type: None,
        column_default: None,
    });
    let tables = [bad_table, table("shop.outbox"), table("shop.outbox")];
    let error = validate_router_config(&tables, &route).unwrap_err();
    let message = error.to_string();
    // (problem matcher, a phrase of the hint)
    type ProblemMatcher = fn(&ConfigProblem) -> bool;
    let expected: Vec<(ProblemMatcher, &str)> = vec![
        (
            |p| matches!(p, ConfigProblem::DuplicateTable { .. }),
            "merge them into one",
        ),
        (
            |p| matches!(p, ConfigProblem::EmptyColumnName { key: "payload", .. }),
            "columns.payload is empty",
        ),
        (
            |p| matches!(p, ConfigProblem::TopicTemplate { setting, .. } if setting.contains("[[outbox]]")),
            "unknown placeholder `${aggregatetype}`",
        ),
        (
            |p| matches!(p, ConfigProblem::TopicTemplate { setting, .. } if setting == "[route] topic"),
            "only allow a-z",
        ),
        (
            |p| matches!(p, ConfigProblem::EmptyTopicOverrideKey),
            "empty aggregate type",
        ),
        (
            |p| matches!(p, ConfigProblem::TopicTemplate { setting, .. } if setting == "[route] topic_overrides.order"),
            "never closed",
        ),
        (
            |p| matches!(p, ConfigProblem::RawEventIdEncoding),
            "use \"utf8\", \"hex\" or \"uuid\"",
        ),
        (
            |p| matches!(p, ConfigProblem::EmptyAdditionalHeaderColumn { index: 1, .. }),
            "[route] additional_headers[1] has an empty `column`",
        ),
        (
            |p| matches!(p, ConfigProblem::EmptyAdditionalHeaderName { .. }),
            "remove `header`",
        ),
        (
            |p| matches!(p, ConfigProblem::DuplicateHeaderName { header, .. } if header == "id"),
            "header `id` would be written by both headers.id and additional_headers (column `id`)",
        ),
        (
            |p| matches!(p, ConfigProblem::DuplicateHeaderName { header, .. } if header == "traceparent"),
            "header `traceparent` would be written by both additional_headers (column `trace`) and tracing_span_context_column",
        ),
    ];
    for (matcher, phrase) in &expected {
        assert!(
            error.problems.iter().any(matcher),
            "missing problem for {phrase:?}: {message}"
        );
        assert!(message.contains(phrase), "missing {phrase:?} in {message}");
    }
    assert_eq!(error.problems.len(), expected.len(), "{message}");
    assert!(message.starts_with(&format!(
        "invalid router configuration ({} problems):",
        expected.len()
    )));
    // Router::new refuses the same configuration.
    assert_eq!(Router::new(&tables, &route).unwrap_err(), error);
}

#[test]
fn validate_single_problems() {
    let error = validate_router_config(&[], &RouteConfig::default()).unwrap_err();
    assert_eq!(error.problems, vec![ConfigProblem::NoTables]);
    assert_eq!(
        error.to_string(),
        "invalid router configuration: no outbox table is configured; add at least one [[outbox]] section with `table = \"database.table\"`"
    );
    let route = RouteConfig {
        headers: outbox_router::HeaderNames {
            id: String::new(),
            event_type: "type".into(),
            aggregate_type: "type".into(),
            aggregate_id: String::new(),
        },
        ..RouteConfig::default()
    };
    let error = route.validate().unwrap_err();
    assert_eq!(error.problems.len(), 2, "{error}");
    assert!(error.problems.contains(&ConfigProblem::EmptyIdHeaderName));
    assert!(error.to_string().contains(
        "header `type` would be written by both headers.event_type and headers.aggregate_type"
    ));
    // Turning off several standard headers is no clash.
    let route = RouteConfig {
        headers: outbox_router::HeaderNames {
            id: "id".into(),
            event_type: String::new(),
            aggregate_type: String::new(),
            aggregate_id: String::new(),
        },
        ..RouteConfig::default()
    };
    route.validate().unwrap();
    let mut bad = table("a.b");
    bad.columns.event_id = Some(String::new());
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("columns.event_id is empty"));
    table("a.b").validate().unwrap();
}

#[test]
fn config_round_trips_through_toml() {
    let mut table = table("shop.outbox");
    table.columns.partition = Some("p".into());
    let text = toml::to_string(&table).unwrap();
    assert!(text.contains("table = \"shop.outbox\""), "{text}");
    let back: OutboxTableConfig = toml::from_str(&text).unwrap();
    assert_eq!(back, table);
    let route = RouteConfig::default();
    let back: RouteConfig = toml::from_str(&toml::to_string(&route).unwrap()).unwrap();
    assert_eq!(back, route);
}

#[test]
fn table_additional_headers_clash_with_route_headers() {
    let config = parse(
        r#"
        [[outbox]]
        table = "shop.outbox"
        additional_headers = [{ column = "tenant" }, { column = "kind", header = "event_type" }]

        [[outbox]]
        table = "billing.outbox"
        additional_headers = [{ column = "region" }, { column = "" }]

        [route]
        additional_headers = [{ column = "region" }]
        "#,
    )
    .unwrap();
    let error = validate_router_config(&config.outbox, &config.route).unwrap_err();
    let message = error.to_string();
    assert_eq!(error.problems.len(), 3, "{message}");
    assert!(message.contains(
        "header `event_type` would be written by both headers.event_type and [[outbox]] table = \"shop.outbox\": additional_headers (column `kind`)"
    ), "{message}");
    assert!(message.contains(
        "header `region` would be written by both additional_headers (column `region`) and [[outbox]] table = \"billing.outbox\": additional_headers (column `region`)"
    ), "{message}");
    assert!(
        message.contains(
            "[[outbox]] table = \"billing.outbox\": additional_headers[1] has an empty `column`"
        ),
        "{message}"
    );
}

#[test]
fn a_column_default_its_column_type_cannot_hold_is_refused_at_load() {
    let config = parse(
        r#"
        [[outbox]]
        table = "shop.outbox"

        [route]
        additional_headers = [{ column = "created", column_type = "datetime(6)", column_default = "2024-01-01" }]
        envelope_fields = [
            { column = "flag", column_type = "tinyint(4)", column_default = "yes" },
            { column = "rank", column_type = "int", column_default = 3 },
            { column = "channel", column_default = "web" },
        ]
        "#,
    )
    .expect("parses");
    let error = validate_router_config(&config.outbox, &config.route).unwrap_err();
    let messages: Vec<String> = error.problems.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert!(
        messages[0].starts_with("[route] additional_headers: column `created` has column_type = \"datetime(6)\" and column_default = \"2024-01-01\", which does not fit it"),
        "{messages:#?}"
    );
    assert!(
        messages[1].starts_with("[route] envelope_fields: column `flag` has column_type = \"tinyint(4)\" and column_default = \"yes\""),
        "{messages:#?}"
    );
}
