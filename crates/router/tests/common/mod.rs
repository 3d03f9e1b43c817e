//! Builders for row changes and routers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use outbox_binlog::{BinlogPosition, DateTime, Row, RowChange, RowOperation, TableName, Value};
use outbox_router::{
    ColumnPreset, KafkaRecord, OutboxTableConfig, RouteConfig, RouteOutcome, Router,
    RoutingErrorKind,
};

/// Binlog event time used by every test row: 2024-05-06T12:53:20Z.
pub const EVENT_TIME_SECONDS: u32 = 1_715_000_000;

/// A row change of `table` with the given columns and values.
pub fn change(
    table: &str,
    operation: RowOperation,
    columns: &[&str],
    values: Vec<Value>,
) -> RowChange {
    let row = Row {
        columns: columns
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .into(),
        values,
        types: None,
    };
    let (before, after) = match operation {
        RowOperation::Insert => (None, Some(row)),
        RowOperation::Update => (Some(row.clone()), Some(row)),
        RowOperation::Delete => (Some(row), None),
    };
    RowChange {
        table: Arc::new(table.parse::<TableName>().unwrap()),
        operation,
        before,
        after,
        event_timestamp: EVENT_TIME_SECONDS,
        event_position: BinlogPosition::new("mysql-bin.000001", 4),
        transaction_gtid: None,
        in_xa_transaction: false,
    }
}

/// A DATETIME value.
pub fn datetime(year: u16, month: u8, day: u8, hour: u8, minute: u8, second: u8) -> Value {
    Value::DateTime(datetime_from_parts((
        year, month, day, hour, minute, second, 0,
    )))
}

/// A civil date-time from `(year, month, day, hour, minute, second, micros)` (unchecked, as
/// the binlog decoder hands it over).
pub fn datetime_from_parts(
    (year, month, day, hour, minute, second, micros): (u16, u8, u8, u8, u8, u8, u32),
) -> DateTime {
    DateTime {
        year,
        month,
        day,
        hour,
        minute,
        second,
        micros,
    }
}

/// The seeds schema's columns.
pub const SEEDS_COLUMNS: [&str; 6] = [
    "event_id",
    "aggregate_type",
    "aggregate_id",
    "event_type",
    "payload",
    "created_at",
];

/// A typical seeds-schema insert into `shop.outbox`.
pub fn seeds_insert() -> RowChange {
    change(
        "shop.outbox",
        RowOperation::Insert,
        &SEEDS_COLUMNS,
        vec![
            Value::Text("6f1c2a3e-0000-4000-8000-000000000001".into()),
            Value::Text("order".into()),
            Value::Text("order-17".into()),
            Value::Text("OrderCreated".into()),
            Value::Json(serde_json::json!({"id": 17, "total": "12.50"}).into()),
            datetime(2024, 5, 6, 7, 8, 9),
        ],
    )
}

/// A router for `shop.outbox` with the seeds preset and the given route section.
pub fn seeds_router(route: &RouteConfig) -> Router {
    Router::new(
        &[OutboxTableConfig::new(
            "shop.outbox".parse().unwrap(),
            ColumnPreset::Seeds,
        )],
        route,
    )
    .unwrap()
}

/// Accepts the routing error kinds a table-driven case expects.
pub type KindCheck = fn(&RoutingErrorKind) -> bool;

/// Routes `row` as table-driven case number `case`: with `Ok(value)` expected, the record and
/// `value` go to `check_record`; with `Err(check)`, routing must fail with a kind `check`
/// accepts, blaming `column`. Any other outcome panics.
pub fn route_case<T>(
    router: &Router,
    row: &RowChange,
    case: usize,
    column: &str,
    expected: Result<T, KindCheck>,
    check_record: impl FnOnce(KafkaRecord, T),
) {
    match (router.route(row), expected) {
        (Ok(RouteOutcome::Record(record)), Ok(value)) => check_record(record, value),
        (Err(error), Err(check)) => {
            assert!(check(&error.kind), "case {case}: {error}");
            assert_eq!(error.column.as_deref(), Some(column));
        }
        (actual, _) => panic!("case {case}: unexpected {actual:?}"),
    }
}

/// Routes and expects a record.
pub fn record(router: &Router, change: &RowChange) -> KafkaRecord {
    match router.route(change) {
        Ok(RouteOutcome::Record(record)) => record,
        other => panic!("expected a record, got {other:?}"),
    }
}

/// Replaces the value of `column` in the after image.
pub fn with_value(mut change: RowChange, column: &str, value: Value) -> RowChange {
    let row = change.after.as_mut().unwrap();
    let index = row.columns.iter().position(|c| c == column).unwrap();
    row.values[index] = value;
    change
}

/// Removes `column` from the after image (a table without that column).
pub fn without_column(mut change: RowChange, column: &str) -> RowChange {
    let row = change.after.as_mut().unwrap();
    let index = row.columns.iter().position(|c| c == column).unwrap();
    let mut columns = row.columns.to_vec();
    columns.remove(index);
    row.columns = columns.into();
    row.values.remove(index);
    change
}

/// Adds a column to the after image.
pub fn with_column(mut change: RowChange, column: &str, value: Value) -> RowChange {
    let row = change.after.as_mut().unwrap();
    let mut columns = row.columns.to_vec();
    columns.push(column.to_string());
    row.columns = columns.into();
    row.values.push(value);
    change
}
