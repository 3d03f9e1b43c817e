//! Debezium's `table.fields.additional.placement` (header with column types and NULLs,
//! envelope, partition), binary ids, and routing a row by value without copying its payload.

mod common;

use common::*;
use outbox_binlog::{RowOperation, Value};
use outbox_router::{
    BinaryEncoding, ColumnPreset, ConfigProblem, NullValues, OutboxTableConfig, RecordFormat,
    RouteConfig, RouteOutcome, Router,
};

const COLUMNS: &[&str] = &[
    "id",
    "aggregatetype",
    "aggregateid",
    "type",
    "payload",
    "tenant",
    "region",
    "seq",
    "created",
    "blob_ref",
];

fn row(region: Option<&str>, payload: Option<&str>) -> outbox_binlog::RowChange {
    let text = |t: &str| Value::Text(t.to_string());
    change(
        "shop.outbox",
        RowOperation::Insert,
        COLUMNS,
        vec![
            text("ev-1"),
            text("order"),
            text("o-1"),
            text("Created"),
            payload.map_or(Value::Null, text),
            text("acme"),
            region.map_or(Value::Null, text),
            Value::Int(7),
            Value::DateTime(datetime_from_parts((2024, 5, 6, 7, 8, 9, 123_456))),
            Value::Bytes(vec![0, 1, 0xfe, 0xff]),
        ],
    )
}

fn router(route_toml: &str) -> Router {
    let route: RouteConfig = toml::from_str(route_toml).expect("route parses");
    let tables = [OutboxTableConfig::new(
        "shop.outbox".parse().unwrap(),
        ColumnPreset::Debezium,
    )];
    Router::new(&tables, &route).expect("router builds")
}

const DEBEZIUM_HEADERS: &str = r#"
headers = { event_type = "", aggregate_type = "", aggregate_id = "" }
null_values = "as_debezium"
"#;

fn routed(router: &Router, change: &outbox_binlog::RowChange) -> outbox_router::KafkaRecord {
    match router.route(change) {
        Ok(RouteOutcome::Record(record)) => record,
        other => panic!("{other:?}"),
    }
}

#[test]
fn typed_header_columns_are_rendered_as_simple_header_converter_writes_them() {
    let router = router(&format!(
        "{DEBEZIUM_HEADERS}additional_headers = [\
         {{ column = \"region\", column_type = \"varchar(16)\" }}, \
         {{ column = \"created\", header = \"createdAt\", column_type = \"datetime(6)\" }}, \
         {{ column = \"created\", header = \"createdMs\", column_type = \"DATETIME(3)\" }}, \
         {{ column = \"blob_ref\", column_type = \"varbinary(16)\" }}, \
         {{ column = \"seq\", column_type = \"int\" }}]"
    ));
    let record = routed(&router, &row(None, Some("{}")));
    assert_eq!(
        record.all_headers(),
        vec![
            ("id", Some(&b"ev-1"[..])),
            ("region", None),
            ("createdAt", Some(&b"1714979289123456"[..])),
            ("createdMs", Some(&b"1714979289123"[..])),
            ("blob_ref", Some(&b"AAH+/w=="[..])),
            ("seq", Some(&b"7"[..])),
        ]
    );
    // The byte headers alone, for sinks that only send byte values.
    assert_eq!(record.headers.len(), 5);
    assert_eq!(record.null_headers.len(), 1);
    let with_region = routed(&router, &row(Some("eu"), Some("{}")));
    assert_eq!(with_region.header("region"), Some(&b"eu"[..]));
    assert!(with_region.null_headers.is_empty());
}

#[test]
fn a_null_header_column_sends_no_header_unless_as_debezium() {
    let router = router(r#"additional_headers = [{ column = "region" }]"#);
    let record = routed(&router, &row(None, Some("{}")));
    assert!(record
        .all_headers()
        .iter()
        .all(|(name, _)| *name != "region"));
}

const ENVELOPE: &str = r#"
envelope_fields = [
  { column = "tenant", column_type = "varchar(32)", nullable = false },
  { column = "region", field = "area", column_type = "varchar(16)" },
  { column = "created", column_type = "datetime(6)", nullable = false },
]
"#;

#[test]
fn envelope_fields_make_the_value_a_struct_for_every_converter() {
    let change = row(None, Some("{\"a\": 1}"));
    let value = |extra: &str| {
        let record = routed(
            &router(&format!("{DEBEZIUM_HEADERS}{ENVELOPE}{extra}")),
            &change,
        );
        String::from_utf8(record.value.expect("a value")).unwrap()
    };
    // StringConverter: Java's Struct.toString(), null fields left out.
    assert_eq!(
        value(""),
        "Struct{payload={\"a\": 1},tenant=acme,created=1714979289123456}"
    );
    assert_eq!(
        value("value_format = \"json\"\n"),
        r#"{"payload":"{\"a\": 1}","tenant":"acme","area":null,"created":1714979289123456}"#
    );
    assert_eq!(
        value("value_format = \"json\"\nexpand_json_payload = true\n"),
        r#"{"payload":{"a":1},"tenant":"acme","area":null,"created":1714979289123456}"#
    );
    assert_eq!(
        value("value_format = \"json_with_schema\"\ndebezium_topic_prefix = \"dbserver1\"\nconnect_schema = { payload_type = \"string\" }\n"),
        concat!(
            r#"{"schema":{"type":"struct","fields":["#,
            r#"{"type":"string","optional":true,"field":"payload"},"#,
            r#"{"type":"string","optional":false,"field":"tenant"},"#,
            r#"{"type":"string","optional":true,"field":"area"},"#,
            r#"{"type":"int64","optional":false,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"created"}],"#,
            r#""optional":false,"name":"dbserver1.shop.outbox.order.Value"},"#,
            r#""payload":{"payload":"{\"a\": 1}","tenant":"acme","area":null,"created":1714979289123456}}"#
        )
    );
}

#[test]
fn an_envelope_keeps_a_null_payload_in_the_struct_and_tombstones_stay_null() {
    let change = row(Some("eu"), None);
    let record = routed(
        &router(&format!(
            "{DEBEZIUM_HEADERS}{ENVELOPE}value_format = \"json\"\n"
        )),
        &change,
    );
    assert_eq!(
        record.value.as_deref(),
        Some(&br#"{"payload":null,"tenant":"acme","area":"eu","created":1714979289123456}"#[..])
    );
    let binary = routed(
        &router(&format!(
            "{DEBEZIUM_HEADERS}envelope_fields = [{{ column = \"blob_ref\", column_type = \"blob\" }}]\n"
        )),
        &change,
    );
    assert_eq!(
        binary.value.as_deref(),
        Some(&b"Struct{blob_ref=java.nio.HeapByteBuffer[pos=0 lim=4 cap=4]}"[..])
    );
    let record = routed(
        &router(&format!(
            "{DEBEZIUM_HEADERS}{ENVELOPE}tombstone_on_empty_payload = true\n"
        )),
        &row(None, Some("  ")),
    );
    assert_eq!(record.value, None);
}

#[test]
fn envelope_configs_debezium_cannot_reproduce_are_refused() {
    let parse = |text: &str| -> Vec<ConfigProblem> {
        let route: RouteConfig = toml::from_str(text).unwrap();
        let tables = [OutboxTableConfig::new(
            "shop.outbox".parse().unwrap(),
            ColumnPreset::Debezium,
        )];
        Router::new(&tables, &route)
            .err()
            .map(|error| error.problems)
            .unwrap_or_default()
    };
    // A binary field under a StringConverter is Java's ByteBuffer text, which names only
    // its size: reproducible, so allowed.
    assert!(parse(
        "envelope_fields = [{ column = \"blob_ref\", column_type = \"varbinary(16)\" }]"
    )
    .is_empty());
    let unnamed = parse(&format!("{ENVELOPE}value_format = \"json_with_schema\"\n"));
    assert!(
        unnamed
            .iter()
            .any(|p| p.to_string().contains("debezium_topic_prefix")),
        "{unnamed:?}"
    );
    let clash = parse(
        "envelope_fields = [{ column = \"tenant\", field = \"payload\", column_type = \"text\" }]",
    );
    assert_eq!(clash.len(), 1, "{clash:?}");
    let mode = parse("time_precision_mode = \"connect\"");
    assert!(
        mode.iter()
            .any(|p| p.to_string().contains("adaptive_time_microseconds")),
        "{mode:?}"
    );
    assert!(toml::from_str::<RouteConfig>(
        "envelope_fields = [{ column = \"x\", column_type = \"datetime(9)\" }]"
    )
    .is_err());
}

#[test]
fn binary_ids_are_base64_as_debezium_writes_them() {
    let route = RouteConfig {
        event_id_encoding: BinaryEncoding::Base64,
        key_encoding: BinaryEncoding::Raw,
        null_values: NullValues::AsDebezium,
        ..RouteConfig::default()
    };
    let tables = [OutboxTableConfig::new(
        "shop.outbox".parse().unwrap(),
        ColumnPreset::Debezium,
    )];
    let id = vec![0x01, 0x8f, 0xff, 0x00, 0x10];
    let key = vec![0xde, 0xad, 0xbe, 0xef];
    let change = change(
        "shop.outbox",
        RowOperation::Insert,
        &["id", "aggregatetype", "aggregateid", "type", "payload"],
        vec![
            Value::Bytes(id),
            Value::Text("order".into()),
            Value::Bytes(key.clone()),
            Value::Text("Created".into()),
            Value::Text("{}".into()),
        ],
    );
    // ByteArrayConverter key: the bytes; the `id` header: SimpleHeaderConverter's Base64.
    let record = routed(&Router::new(&tables, &route).unwrap(), &change);
    assert_eq!(record.header("id"), Some(&b"AY//ABA="[..]));
    assert_eq!(record.event_id, "AY//ABA=");
    assert_eq!(record.key.as_deref(), Some(&key[..]));
    // JsonConverter with a bytes key schema: a Base64 JSON string.
    let json = RouteConfig {
        key_format: RecordFormat::Json,
        connect_schema: outbox_router::ConnectSchemaConfig {
            key_type: Some(outbox_router::ConnectSchemaType::Bytes),
            ..Default::default()
        },
        ..route
    };
    let record = routed(&Router::new(&tables, &json).unwrap(), &change);
    assert_eq!(record.key.as_deref(), Some(&b"\"3q2+7w==\""[..]));
}

#[test]
fn routing_by_value_moves_the_payload_bytes_and_matches_routing_by_reference() {
    let router = router(DEBEZIUM_HEADERS);
    let payload = "x".repeat(1 << 20);
    let change = row(Some("eu"), Some(&payload));
    let by_reference = routed(&router, &change);
    let heap_address = match &change.after.as_ref().unwrap().values[4] {
        Value::Text(text) => text.as_ptr(),
        other => panic!("{other:?}"),
    };
    let by_value = match router.route_owned(change) {
        Ok(RouteOutcome::Record(record)) => record,
        other => panic!("{other:?}"),
    };
    assert_eq!(by_value, by_reference);
    // The very allocation the decoder made now backs the record's value: no copy.
    assert_eq!(
        by_value.value.as_ref().map(|v| v.as_ptr()),
        Some(heap_address)
    );
}

#[test]
fn routing_by_value_still_reads_a_payload_column_another_setting_uses() {
    // The payload column also feeds a header: it must not be taken from the row first.
    let router = router(&format!(
        "{DEBEZIUM_HEADERS}additional_headers = [{{ column = \"payload\", header = \"copy\" }}]"
    ));
    let change = row(None, Some("{\"k\":1}"));
    let by_reference = routed(&router, &change);
    let by_value = match router.route_owned(change) {
        Ok(RouteOutcome::Record(record)) => record,
        other => panic!("{other:?}"),
    };
    assert_eq!(by_value, by_reference);
    assert_eq!(by_value.header("copy"), Some(&b"{\"k\":1}"[..]));
}

#[test]
fn a_table_with_a_binary_aggregate_id_states_its_own_key_schema() {
    let route: RouteConfig = toml::from_str(
        "key_format = \"json_with_schema\"\nkey_encoding = \"base64\"\nevent_id_encoding = \"base64\"",
    )
    .unwrap();
    let mut binary =
        OutboxTableConfig::new("shop.outbox_bin".parse().unwrap(), ColumnPreset::Debezium);
    binary.connect_schema = Some(outbox_router::ConnectSchemaConfig {
        key_type: Some(outbox_router::ConnectSchemaType::Bytes),
        ..Default::default()
    });
    let text = OutboxTableConfig::new("shop.outbox".parse().unwrap(), ColumnPreset::Debezium);
    let router = Router::new(&[text, binary], &route).unwrap();
    let row = |table: &str, id: Value, key: Value| {
        change(
            table,
            RowOperation::Insert,
            &["id", "aggregatetype", "aggregateid", "type", "payload"],
            vec![
                id,
                Value::Text("order".into()),
                key,
                Value::Text("Created".into()),
                Value::Text("{}".into()),
            ],
        )
    };
    let binary_record = routed(
        &router,
        &row(
            "shop.outbox_bin",
            Value::Bytes(vec![1, 2, 3]),
            Value::Bytes(vec![0xff, 0]),
        ),
    );
    assert_eq!(
        binary_record.key.as_deref(),
        Some(&br#"{"schema":{"type":"bytes","optional":false},"payload":"/wA="}"#[..])
    );
    assert_eq!(binary_record.header("id"), Some(&b"AQID"[..]));
    let text_record = routed(
        &router,
        &row(
            "shop.outbox",
            Value::Text("ev".into()),
            Value::Text("o-1".into()),
        ),
    );
    assert_eq!(
        text_record.key.as_deref(),
        Some(&br#"{"schema":{"type":"string","optional":false},"payload":"o-1"}"#[..])
    );
    assert_eq!(text_record.header("id"), Some(&b"ev"[..]));
}

#[test]
fn routing_in_place_moves_the_payload_only_into_a_record() {
    // Partition 7 of an `int` column is fine; -1 is a routing error, found after the payload.
    let route: RouteConfig = toml::from_str(DEBEZIUM_HEADERS).unwrap();
    let mut table = OutboxTableConfig::new("shop.outbox".parse().unwrap(), ColumnPreset::Debezium);
    table.columns.partition = Some("seq".into());
    let router = Router::new(&[table], &route).unwrap();

    let mut good = row(None, Some("{\"ok\":1}"));
    let record = match router.route_taking_payload(&mut good) {
        Ok(RouteOutcome::Record(record)) => record,
        other => panic!("{other:?}"),
    };
    assert_eq!(record.value.as_deref(), Some(&b"{\"ok\":1}"[..]));
    assert_eq!(record.partition, Some(7));
    // The row stays for the caller (position, table), its payload moved out.
    assert_eq!(good.after.as_ref().unwrap().values[4], Value::Null);

    let mut bad = row(None, Some("{\"ok\":2}"));
    bad.after.as_mut().unwrap().values[7] = Value::Int(-1);
    let original = bad.clone();
    let error = router.route_taking_payload(&mut bad).unwrap_err();
    assert_eq!(error.column.as_deref(), Some("seq"));
    // A dead letter of it still has the payload: the row is untouched.
    assert_eq!(bad, original);
    assert_eq!(router.route(&original).unwrap_err(), error);
}

#[test]
fn debezium_context_headers_come_first_as_its_connectors_add_them() {
    let context = format!(
        "{DEBEZIUM_HEADERS}debezium_topic_prefix = \"shopdb\"\n\
         additional_headers = [{{ column = \"region\" }}]\n\
         [debezium_context_headers]\nconnector = \"mariadb\"\n"
    );
    let router = router(&context);
    let first = routed(&router, &row(None, Some("{}")));
    let names: Vec<&str> = first.all_headers().iter().map(|(name, _)| *name).collect();
    assert_eq!(
        names,
        [
            "__debezium.context.connectorLogicalName",
            "__debezium.context.taskId",
            "__debezium.context.connectorName",
            "__debezium.context.runId",
            "id",
            "region",
        ]
    );
    assert_eq!(
        first.header("__debezium.context.connectorLogicalName"),
        Some(&b"shopdb"[..])
    );
    assert_eq!(first.header("__debezium.context.taskId"), Some(&b"0"[..]));
    assert_eq!(
        first.header("__debezium.context.connectorName"),
        Some(&b"mariadb"[..])
    );
    // One run id for the router's run, a UUID; a new router (a new run) has another.
    let run_id = first
        .header("__debezium.context.runId")
        .map(|id| String::from_utf8(id.to_vec()).unwrap())
        .unwrap();
    assert_eq!(run_id.len(), 36, "{run_id}");
    assert_eq!(run_id.matches('-').count(), 4, "{run_id}");
    let second = routed(&router, &row(Some("eu"), Some("{}")));
    assert_eq!(
        second.header("__debezium.context.runId"),
        Some(run_id.as_bytes())
    );
    let restarted = self::router(&context);
    assert_ne!(
        routed(&restarted, &row(None, Some("{}"))).header("__debezium.context.runId"),
        Some(run_id.as_bytes())
    );
    // Off by default.
    let plain = self::router(DEBEZIUM_HEADERS);
    assert!(routed(&plain, &row(None, Some("{}")))
        .all_headers()
        .iter()
        .all(|(name, _)| !name.starts_with("__debezium.context.")));
}

#[test]
fn debezium_context_headers_need_the_topic_prefix_and_their_names() {
    let route: RouteConfig = toml::from_str("[debezium_context_headers]\n").expect("route parses");
    let error = route.validate().unwrap_err().to_string();
    assert!(error.contains("debezium_topic_prefix"), "{error}");
    let clash: RouteConfig = toml::from_str(
        "debezium_topic_prefix = \"shopdb\"\n\
         additional_headers = [{ column = \"region\", header = \"__debezium.context.taskId\" }]\n\
         [debezium_context_headers]\n",
    )
    .expect("route parses");
    let error = clash.validate().unwrap_err().to_string();
    assert!(
        error.contains("__debezium.context.taskId") && error.contains("debezium_context_headers"),
        "{error}"
    );
}

/// [`row`] with its columns' types as the binlog's TABLE_MAP describes them.
fn typed_row(region: Option<&str>) -> outbox_binlog::RowChange {
    use outbox_binlog::{ColumnType, SqlType};
    let mut change = row(region, Some("{\"a\": 1}"));
    let column = |sql_type, nullable| ColumnType { sql_type, nullable };
    let types = vec![
        column(SqlType::Text, false),
        column(SqlType::Text, false),
        column(SqlType::Text, false),
        column(SqlType::Text, false),
        column(SqlType::Text, true),
        column(SqlType::Text, false),
        column(SqlType::Text, true),
        column(
            SqlType::Integer {
                bytes: 4,
                unsigned: false,
            },
            false,
        ),
        column(SqlType::DateTime { fsp: 6 }, false),
        column(SqlType::Binary, true),
    ];
    change.after.as_mut().expect("an insert").types = Some(types.into());
    change
}

#[test]
fn envelope_fields_without_column_type_take_the_servers_description() {
    let described = "envelope_fields = [\
        { column = \"tenant\" }, { column = \"region\", field = \"area\" }, { column = \"created\" }]\n";
    let value = |envelope: &str, change: &outbox_binlog::RowChange| {
        let record = routed(
            &router(&format!(
                "{DEBEZIUM_HEADERS}{envelope}value_format = \"json_with_schema\"\n\
                 debezium_topic_prefix = \"dbserver1\"\nconnect_schema = {{ payload_type = \"string\" }}\n"
            )),
            change,
        );
        String::from_utf8(record.value.expect("a value")).unwrap()
    };
    // The same bytes as with the column types stated by hand (the test above).
    assert_eq!(
        value(described, &typed_row(None)),
        value(ENVELOPE, &typed_row(None))
    );
    // A type the relay does not render as Debezium does is named, never guessed.
    let mut tinyint = typed_row(None);
    tinyint.after.as_mut().unwrap().types =
        tinyint.after.as_ref().unwrap().types.as_ref().map(|types| {
            let mut types = types.to_vec();
            types[7].sql_type = outbox_binlog::SqlType::Integer {
                bytes: 1,
                unsigned: false,
            };
            types.into()
        });
    let error = router(&format!(
        "{DEBEZIUM_HEADERS}envelope_fields = [{{ column = \"seq\" }}]\n"
    ))
    .route(&tinyint)
    .unwrap_err();
    assert!(
        error.to_string().contains("set its column_type") && error.to_string().contains("seq"),
        "{error}"
    );
    // A row without a description (built by hand) cannot be typed either.
    let error = router(&format!(
        "{DEBEZIUM_HEADERS}envelope_fields = [{{ column = \"seq\" }}]\n"
    ))
    .route(&row(None, Some("{}")))
    .unwrap_err();
    assert!(error.to_string().contains("no type"), "{error}");
}

#[test]
fn headers_take_the_servers_column_types_with_debezium_column_types() {
    let headers = "additional_headers = [{ column = \"created\" }, { column = \"blob_ref\" }, \
                   { column = \"seq\" }, { column = \"region\" }]\n";
    let described = router(&format!(
        "{DEBEZIUM_HEADERS}debezium_column_types = true\n{headers}"
    ));
    let record = routed(&described, &typed_row(Some("eu")));
    assert_eq!(
        record.all_headers(),
        vec![
            ("id", Some(&b"ev-1"[..])),
            ("created", Some(&b"1714979289123456"[..])),
            ("blob_ref", Some(&b"AAH+/w=="[..])),
            ("seq", Some(&b"7"[..])),
            ("region", Some(&b"eu"[..])),
        ]
    );
    // Without the setting, the plain forms (as before): the DATETIME's text, raw bytes.
    let plain = routed(
        &router(&format!("{DEBEZIUM_HEADERS}{headers}")),
        &typed_row(Some("eu")),
    );
    assert_eq!(plain.header("blob_ref"), Some(&[0, 1, 0xfe, 0xff][..]));
    assert_ne!(plain.header("created"), Some(&b"1714979289123456"[..]));
}

#[test]
fn json_with_schema_takes_key_and_payload_schemas_from_the_servers_description() {
    let formats = "key_format = \"json_with_schema\"\nvalue_format = \"json_with_schema\"\n";
    let route = |extra: &str| router(&format!("{DEBEZIUM_HEADERS}{formats}{extra}"));
    // Described: aggregateid text NOT NULL, payload text (MariaDB's JSON) nullable.
    let record = routed(&route(""), &typed_row(None));
    assert_eq!(
        record.key.as_deref(),
        Some(&br#"{"schema":{"type":"string","optional":false},"payload":"o-1"}"#[..])
    );
    let value = String::from_utf8(record.value.unwrap()).unwrap();
    assert!(
        value.starts_with(r#"{"schema":{"type":"string","optional":true},"#),
        "{value}"
    );
    // A configured setting wins over the description, one setting at a time.
    let record = routed(
        &route("connect_schema = { key_optional = true }\n"),
        &typed_row(None),
    );
    assert_eq!(
        record.key.as_deref(),
        Some(&br#"{"schema":{"type":"string","optional":true},"payload":"o-1"}"#[..])
    );
    // MySQL's JSON type: Debezium's named Json schema.
    let mut mysql_json = typed_row(None);
    let after = mysql_json.after.as_mut().unwrap();
    let mut types = after.types.as_ref().unwrap().to_vec();
    types[4].sql_type = outbox_binlog::SqlType::Json;
    after.types = Some(types.into());
    let value = String::from_utf8(routed(&route(""), &mysql_json).value.unwrap()).unwrap();
    assert!(
        value.starts_with(
            r#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"#
        ),
        "{value}"
    );
    // A row without a description: Debezium's documented table (payload JSON).
    let value =
        String::from_utf8(routed(&route(""), &row(None, Some("{}"))).value.unwrap()).unwrap();
    assert!(value.contains("io.debezium.data.Json"), "{value}");
}
