//! Appending events inside the caller's transaction.
//!
//! A batch becomes **one** multi-row `INSERT ... VALUES (...), (...)` (one round trip, one
//! statement in the binlog's rows event), split only when it would exceed the protocol's
//! placeholder limit ([`MAX_PLACEHOLDERS_PER_STATEMENT`]). The timestamp column is not
//! written: the table's `DEFAULT CURRENT_TIMESTAMP(6)` fills it with the server's clock,
//! the same clock the relay's checkpoint timestamp and the cleanup job use.

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Transaction, Value};

use crate::error::WriterError;
use crate::event::OutboxEvent;
use crate::table::{quote, OutboxTable};

/// The prepared-statement protocol carries at most 65,535 parameters per statement.
pub const MAX_PLACEHOLDERS_PER_STATEMENT: usize = 65_535;

/// Appends one event (see [`append_events`]).
pub async fn append_event(
    transaction: &mut Transaction<'_>,
    table: &OutboxTable,
    event: &OutboxEvent,
) -> Result<(), WriterError> {
    append_events(transaction, table, std::slice::from_ref(event)).await
}

/// Appends `events`, in order, inside `transaction` (the caller commits or rolls back: the
/// events are published if and only if the caller's transaction commits).
///
/// Every event is checked before anything is sent: a header the table has no column for, or a
/// trace context without a trace column, is an error and nothing is written. An empty batch
/// sends nothing.
pub async fn append_events(
    transaction: &mut Transaction<'_>,
    table: &OutboxTable,
    events: &[OutboxEvent],
) -> Result<(), WriterError> {
    for event in events {
        check_event_fits_table(table, event)?;
    }
    let column_list = insert_columns(table);
    let rows_per_statement = (MAX_PLACEHOLDERS_PER_STATEMENT / column_list.len()).max(1);
    for chunk in events.chunks(rows_per_statement) {
        let statement = insert_statement(table, &column_list, chunk.len());
        let mut values = Vec::with_capacity(chunk.len() * column_list.len());
        for event in chunk {
            push_row_values(table, event, &mut values);
        }
        transaction
            .exec_drop(statement, Params::Positional(values))
            .await
            .map_err(|source| WriterError::Database {
                table: table.display_name(),
                events: chunk.len(),
                source,
            })?;
    }
    Ok(())
}

/// Refuses events whose headers or trace context the table cannot hold.
pub(crate) fn check_event_fits_table(
    table: &OutboxTable,
    event: &OutboxEvent,
) -> Result<(), WriterError> {
    if let Some(header) = event.headers().keys().find(|header| {
        !table
            .header_columns()
            .iter()
            .any(|column| column == *header)
    }) {
        return Err(WriterError::UnknownHeaderColumn {
            event_id: event.event_id().to_string(),
            header: header.clone(),
            table: table.display_name(),
        });
    }
    if event.traceparent().is_some() && table.trace_context_column().is_none() {
        return Err(WriterError::NoTraceContextColumn {
            event_id: event.event_id().to_string(),
            table: table.display_name(),
        });
    }
    Ok(())
}

/// The columns an INSERT writes, in value order.
pub(crate) fn insert_columns(table: &OutboxTable) -> Vec<String> {
    let mapping = table.columns();
    let mut columns = vec![
        mapping.event_id.clone(),
        mapping.aggregate_type.clone(),
        mapping.aggregate_id.clone(),
        mapping.event_type.clone(),
        mapping.payload.clone(),
    ];
    columns.extend(table.header_columns().iter().cloned());
    columns.extend(table.trace_context_column().map(str::to_owned));
    columns
}

/// `INSERT INTO t (c1, ...) VALUES (?, ...), (?, ...)` for `rows` rows.
pub(crate) fn insert_statement(table: &OutboxTable, columns: &[String], rows: usize) -> String {
    let quoted: Vec<String> = columns.iter().map(|column| quote(column)).collect();
    let row = format!("({})", vec!["?"; columns.len()].join(", "));
    format!(
        "INSERT INTO {} ({}) VALUES {}",
        table.quoted_name(),
        quoted.join(", "),
        vec![row; rows].join(", ")
    )
}

/// One row's values, in [`insert_columns`] order (absent headers are NULL).
fn push_row_values(table: &OutboxTable, event: &OutboxEvent, values: &mut Vec<Value>) {
    for value in row_values(table, event) {
        values.push(match value {
            Some(text) => Value::from(text),
            None => Value::NULL,
        });
    }
}

/// One row's values as text or NULL, in [`insert_columns`] order, for either driver.
pub(crate) fn row_values(table: &OutboxTable, event: &OutboxEvent) -> Vec<Option<String>> {
    let mut values = vec![
        Some(event.event_id().to_string()),
        Some(event.aggregate_type().to_owned()),
        Some(event.aggregate_id().to_owned()),
        Some(event.event_type().to_owned()),
        Some(event.payload_json().to_owned()),
    ];
    for column in table.header_columns() {
        values.push(event.headers().get(column).cloned());
    }
    if table.trace_context_column().is_some() {
        values.push(event.traceparent().map(str::to_owned));
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_router::ColumnPreset;

    #[test]
    fn a_batch_is_one_multi_row_statement() {
        let table = OutboxTable::new("outbox", ColumnPreset::Debezium)
            .unwrap()
            .in_database("shop")
            .unwrap()
            .with_header_column("tenant")
            .unwrap()
            .with_trace_context_column("tracingspancontext")
            .unwrap();
        let columns = insert_columns(&table);
        assert_eq!(
            insert_statement(&table, &columns, 2),
            "INSERT INTO `shop`.`outbox` (`id`, `aggregatetype`, `aggregateid`, `type`, \
             `payload`, `tenant`, `tracingspancontext`) VALUES (?, ?, ?, ?, ?, ?, ?), \
             (?, ?, ?, ?, ?, ?, ?)"
        );
    }

    #[test]
    fn headers_without_a_column_are_refused() {
        let table = OutboxTable::new("outbox", ColumnPreset::Seeds).unwrap();
        let event = OutboxEvent::new("order", "1", "OrderCreated", &1)
            .unwrap()
            .with_header("tenant", "acme");
        assert!(matches!(
            check_event_fits_table(&table, &event),
            Err(WriterError::UnknownHeaderColumn { .. })
        ));
        let traced = OutboxEvent::new("order", "1", "OrderCreated", &1)
            .unwrap()
            .with_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .unwrap();
        assert!(matches!(
            check_event_fits_table(&table, &traced),
            Err(WriterError::NoTraceContextColumn { .. })
        ));
    }
}
