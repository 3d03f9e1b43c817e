//! Routing throughput on one core: rows per second for typical outbox rows.
//!
//! Run: `cargo bench -p outbox-router --bench route_throughput`
//! (optionally `-- <rows>`; default 500000 rows per scenario).

// The integration tests' row and router builders (one schema, one event time for both).
#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use outbox_binlog::{BinlogPosition, ColumnNames, Row, RowChange, RowOperation, TableName, Value};
use outbox_router::{
    AdditionalHeader, BinaryEncoding, ColumnPreset, OutboxTableConfig, PayloadMode, RouteConfig,
    RouteOutcome, Router,
};

/// One scenario: how rows are built and how the router is configured.
struct Scenario {
    /// Printed name.
    name: &'static str,
    /// The `[route]` section.
    route: RouteConfig,
    /// The payload of every row.
    payload: Value,
    /// Rows per column-name `Arc` (a TABLE_MAP per transaction re-creates the list).
    rows_per_column_list: usize,
    /// Add a tenant and a tracing column.
    extra_columns: bool,
}

const PAYLOAD_TEXT: &str = r#"{"orderId":"0b7f0e4c-6d3e-4b8a-9b7e-2f4c1d9a8e11","customerId":"c-42","lines":[{"sku":"A-1","qty":2,"price":"12.50"},{"sku":"B-7","qty":1,"price":"99.00"}],"total":"124.00","currency":"EUR"}"#;

fn columns(extra: bool) -> ColumnNames {
    let mut names: Vec<String> = common::SEEDS_COLUMNS.map(String::from).to_vec();
    if extra {
        names.push("tenant".into());
        names.push("tracingspancontext".into());
    }
    names.into()
}

fn rows(scenario: &Scenario, count: usize) -> Vec<RowChange> {
    let table = Arc::new(TableName::new("shop", "outbox"));
    let mut column_list = columns(scenario.extra_columns);
    (0..count)
        .map(|index| {
            if index % scenario.rows_per_column_list == 0 {
                column_list = columns(scenario.extra_columns);
            }
            let mut values = vec![
                Value::Text(format!("6f1c2a3e-0000-4000-8000-{index:012}")),
                Value::Text(if index % 3 == 0 { "order" } else { "customer" }.into()),
                Value::Text(format!("agg-{}", index % 1000)),
                Value::Text("OrderCreated".into()),
                scenario.payload.clone(),
                Value::DateTime(common::datetime_from_parts((2024, 5, 6, 7, 8, 9, 123_456))),
            ];
            if scenario.extra_columns {
                values.push(Value::Text("acme".into()));
                values.push(Value::Text(
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
                ));
            }
            RowChange {
                table: Arc::clone(&table),
                operation: RowOperation::Insert,
                before: None,
                after: Some(Row {
                    columns: Arc::clone(&column_list),
                    values,
                    types: None,
                }),
                event_timestamp: common::EVENT_TIME_SECONDS,
                event_position: BinlogPosition::new("mysql-bin.000001", 4),
                transaction_gtid: None,
                in_xa_transaction: false,
            }
        })
        .collect()
}

fn main() {
    let count: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(500_000);
    let tables = [OutboxTableConfig::new(
        "shop.outbox".parse().expect("literal table name"),
        ColumnPreset::Seeds,
    )];
    let json_payload: serde_json::Value =
        serde_json::from_str(PAYLOAD_TEXT).expect("literal JSON payload");
    let scenarios = [
        Scenario {
            name: "text payload (190 B), defaults",
            route: RouteConfig::default(),
            payload: Value::Text(PAYLOAD_TEXT.into()),
            rows_per_column_list: usize::MAX,
            extra_columns: false,
        },
        Scenario {
            name: "text payload, new column list every 5 rows",
            route: RouteConfig::default(),
            payload: Value::Text(PAYLOAD_TEXT.into()),
            rows_per_column_list: 5,
            extra_columns: false,
        },
        Scenario {
            name: "text payload, require_json",
            route: RouteConfig {
                payload: PayloadMode::RequireJson,
                ..RouteConfig::default()
            },
            payload: Value::Text(PAYLOAD_TEXT.into()),
            rows_per_column_list: usize::MAX,
            extra_columns: false,
        },
        Scenario {
            name: "JSON column payload (serialized per row)",
            route: RouteConfig::default(),
            payload: Value::Json(json_payload.into()),
            rows_per_column_list: usize::MAX,
            extra_columns: false,
        },
        Scenario {
            name: "text payload, tenant header + traceparent",
            route: RouteConfig {
                additional_headers: vec![AdditionalHeader {
                    column: "tenant".into(),
                    header: None,
                    encoding: BinaryEncoding::Raw,
                    column_type: None,
                    column_default: None,
                }],
                tracing_span_context_column: Some("tracingspancontext".into()),
                ..RouteConfig::default()
            },
            payload: Value::Text(PAYLOAD_TEXT.into()),
            rows_per_column_list: usize::MAX,
            extra_columns: true,
        },
    ];
    println!("routing {count} rows per scenario, one thread");
    for scenario in &scenarios {
        let router = Router::new(&tables, &scenario.route).expect("valid bench config");
        let changes = rows(scenario, count);
        // Warm up caches and the allocator.
        for change in changes.iter().take(10_000) {
            black_box(router.route(change).expect("bench rows route"));
        }
        let started = Instant::now();
        let mut bytes = 0usize;
        for change in &changes {
            match router.route(black_box(change)) {
                Ok(RouteOutcome::Record(record)) => {
                    bytes += record.value.as_ref().map_or(0, Vec::len);
                    black_box(record);
                }
                other => panic!("bench row did not route: {other:?}"),
            }
        }
        let elapsed = started.elapsed();
        let rate = count as f64 / elapsed.as_secs_f64();
        println!(
            "{:<48} {:>10.0} rows/s  {:>6.0} ns/row  ({} payload bytes)",
            scenario.name,
            rate,
            elapsed.as_nanos() as f64 / count as f64,
            bytes
        );
    }
}
