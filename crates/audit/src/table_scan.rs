//! The window's rows of one outbox table, page by page in (timestamp, event id) order: a
//! keyset walk, so each page is one bounded statement that starts where the last ended.

use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row as SqlRow, Value as SqlValue};
use outbox_binlog::{RowChange, TableName};
use outbox_router::ColumnMapping;

use crate::error::AuditError;
use crate::time::UtcTime;

/// An outbox table as the audit reads it.
#[derive(Debug, Clone)]
pub struct AuditTable {
    /// `database.table`, shared by every row change read from it.
    pub name: Arc<TableName>,
    /// Its router columns: the event id and the timestamp column page the walk.
    pub mapping: ColumnMapping,
}

/// The rows of a window: created at or after `since` (from the first row when `None`) and
/// before `until` (to the last row when `None`), by the table's timestamp column.
#[derive(Debug, Clone, Copy)]
pub struct AuditWindow {
    /// The window's start (inclusive); `None`: from the first row.
    pub since: Option<UtcTime>,
    /// The window's end (exclusive); `None`: to the last row.
    pub until: Option<UtcTime>,
}

/// One row of the window.
#[derive(Debug)]
pub struct WindowRow {
    /// The row as an INSERT of it, for the router.
    pub change: RowChange,
    /// Its timestamp column as the session reads it (UTC), for reports.
    pub timestamp: String,
}

/// The window's rows of one table, page by page (the audit's walks, and the relay's gap
/// fill).
pub struct WindowRows {
    /// The table's display name, for errors.
    table_name: String,
    /// The table, for the row changes.
    table: Arc<TableName>,
    /// The first page's statement.
    select_first: String,
    /// Every later page's statement: after the last (timestamp, id) read.
    select_next: String,
    /// The window's bounds as parameters.
    bounds: Vec<SqlValue>,
    /// The last row's (timestamp, id), where the next page starts.
    after: Option<(SqlValue, SqlValue)>,
    /// Rows per page.
    page_rows: u32,
    /// The last page was short: nothing is left.
    finished: bool,
    /// The timestamp and id columns' names, to find them in the result.
    timestamp_column: String,
    event_id_column: String,
}

fn quote(identifier: &str) -> String {
    format!("`{}`", identifier.replace('`', "``"))
}

impl WindowRows {
    /// The walk of `table`'s rows in `window`, `page_rows` per statement.
    pub fn new(table: &AuditTable, window: &AuditWindow, page_rows: u32) -> Self {
        let name = format!(
            "{}.{}",
            quote(&table.name.database),
            quote(&table.name.table)
        );
        let ts = quote(&table.mapping.timestamp);
        let id = quote(&table.mapping.event_id);
        let mut bounds = Vec::new();
        let mut conditions = Vec::new();
        if let Some(since) = window.since {
            conditions.push(format!("{ts} >= ?"));
            bounds.push(SqlValue::from(since.to_string()));
        }
        if let Some(until) = window.until {
            conditions.push(format!("{ts} < ?"));
            bounds.push(SqlValue::from(until.to_string()));
        }
        if conditions.is_empty() {
            conditions.push(format!("{ts} IS NOT NULL"));
        }
        let conditions = conditions.join(" AND ");
        let order = format!("ORDER BY {ts}, {id} LIMIT {page_rows}");
        Self {
            table_name: table.name.to_string(),
            table: table.name.clone(),
            select_first: format!("SELECT * FROM {name} WHERE {conditions} {order}"),
            // `ts >= ?` gives the range optimizer the start; the OR drops what was read.
            select_next: format!(
                "SELECT * FROM {name} WHERE {conditions} AND {ts} >= ? AND ({ts} > ? OR {id} > ?) {order}"
            ),
            bounds,
            after: None,
            page_rows,
            finished: false,
            timestamp_column: table.mapping.timestamp.clone(),
            event_id_column: table.mapping.event_id.clone(),
        }
    }

    /// The next page of rows; `None` once the window is read.
    pub async fn next_page(
        &mut self,
        conn: &mut mysql_async::Conn,
    ) -> Result<Option<Vec<WindowRow>>, AuditError> {
        if self.finished {
            return Ok(None);
        }
        let (statement, mut params) = match &self.after {
            None => (&self.select_first, self.bounds.clone()),
            Some((timestamp, id)) => {
                let mut params = self.bounds.clone();
                params.extend([timestamp.clone(), timestamp.clone(), id.clone()]);
                (&self.select_next, params)
            }
        };
        let rows: Vec<SqlRow> = conn
            .exec(
                statement.as_str(),
                Params::Positional(std::mem::take(&mut params)),
            )
            .await
            .map_err(|source| AuditError::Mysql {
                table: self.table_name.clone(),
                operation: "reading the window's rows",
                source,
            })?;
        if rows.len() < self.page_rows as usize {
            self.finished = true;
        }
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let columns = first.columns();
        let position = |wanted: &str| {
            columns
                .iter()
                .position(|column| column.name_str().eq_ignore_ascii_case(wanted))
        };
        let (Some(timestamp_at), Some(id_at)) = (
            position(&self.timestamp_column),
            position(&self.event_id_column),
        ) else {
            return Err(AuditError::RowImage {
                table: self.table_name.clone(),
                problem: "the result lacks the timestamp or event id column".to_owned(),
            });
        };
        let names = outbox_poll::sql_column_names(&columns);
        let types = outbox_poll::sql_column_types(&columns);
        let now = u32::try_from(outbox_kafka::unix_millis_now() / 1000).unwrap_or(u32::MAX);
        let mut page = Vec::with_capacity(rows.len());
        for row in rows {
            let timestamp: SqlValue = row.get(timestamp_at).unwrap_or(SqlValue::NULL);
            let id: SqlValue = row.get(id_at).unwrap_or(SqlValue::NULL);
            let image = outbox_poll::sql_row_image(row, &names, &types).map_err(|problem| {
                AuditError::RowImage {
                    table: self.table_name.clone(),
                    problem,
                }
            })?;
            page.push(WindowRow {
                change: outbox_poll::sql_row_change(self.table.clone(), image, now),
                timestamp: sql_time_text(&timestamp),
            });
            self.after = Some((timestamp, id));
        }
        Ok(Some(page))
    }
}

/// A DATETIME/TIMESTAMP value as `YYYY-MM-DD HH:MM:SS.ffffff`.
fn sql_time_text(value: &SqlValue) -> String {
    match value {
        SqlValue::Date(year, month, day, hour, minute, second, micros) => {
            format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}.{micros:06}")
        }
        SqlValue::NULL => "NULL".to_owned(),
        other => other.as_sql(true),
    }
}

/// Checks that `table` has the columns the walk pages by (the event id and the timestamp
/// column), naming the config key to fix, and an index that starts with the timestamp
/// column: without one every page is a scan and a sort of the whole table.
pub async fn check_table(
    conn: &mut mysql_async::Conn,
    table: &AuditTable,
) -> Result<(), AuditError> {
    let failed = |operation| {
        let table = table.name.to_string();
        move |source| AuditError::Mysql {
            table,
            operation,
            source,
        }
    };
    let present: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (table.name.database.as_str(), table.name.table.as_str()),
        )
        .await
        .map_err(failed("reading the table's columns"))?;
    for (column, config_key) in [
        (&table.mapping.event_id, "event_id"),
        (&table.mapping.timestamp, "timestamp"),
    ] {
        if !present.iter().any(|name| name.eq_ignore_ascii_case(column)) {
            return Err(AuditError::ColumnMissing {
                table: table.name.to_string(),
                column: column.clone(),
                config_key,
            });
        }
    }
    let leading: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND SEQ_IN_INDEX = 1",
            (table.name.database.as_str(), table.name.table.as_str()),
        )
        .await
        .map_err(failed("reading the table's indexes"))?;
    let timestamp = &table.mapping.timestamp;
    if !leading
        .iter()
        .any(|name| name.eq_ignore_ascii_case(timestamp))
    {
        return Err(AuditError::TimestampIndexMissing {
            table: table.name.to_string(),
            ddl: format!(
                "ALTER TABLE {}.{} ADD KEY {} ({})",
                quote(&table.name.database),
                quote(&table.name.table),
                quote(&format!("{}_{}_idx", table.name.table, timestamp)),
                quote(timestamp)
            ),
        });
    }
    Ok(())
}

/// Which of `ids` (event ids as the id header has them, already decoded to the column's
/// bytes) have a row in the table, in any window.
pub(crate) async fn existing_ids(
    conn: &mut mysql_async::Conn,
    table: &AuditTable,
    ids: &[Vec<u8>],
) -> Result<Vec<Vec<u8>>, AuditError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let id = quote(&table.mapping.event_id);
    let placeholders = vec!["?"; ids.len()].join(", ");
    let statement = format!(
        "SELECT {id} FROM {}.{} WHERE {id} IN ({placeholders})",
        quote(&table.name.database),
        quote(&table.name.table)
    );
    let params: Vec<SqlValue> = ids.iter().map(|id| SqlValue::Bytes(id.clone())).collect();
    conn.exec(statement, Params::Positional(params))
        .await
        .map_err(|source| AuditError::Mysql {
            table: table.name.to_string(),
            operation: "looking up the ids of records outside the window",
            source,
        })
}

/// Whether `table` still holds a row older than `time` (by its timestamp column): the
/// evidence that nothing at or after `time` was deleted by a cleanup that deletes the
/// oldest rows first.
pub async fn has_row_before(
    conn: &mut mysql_async::Conn,
    table: &AuditTable,
    time: UtcTime,
) -> Result<bool, AuditError> {
    let found: Option<u8> = conn
        .exec_first(
            format!(
                "SELECT 1 FROM {}.{} WHERE {} < ? LIMIT 1",
                quote(&table.name.database),
                quote(&table.name.table),
                quote(&table.mapping.timestamp)
            ),
            (time.to_string(),),
        )
        .await
        .map_err(|source| AuditError::Mysql {
            table: table.name.to_string(),
            operation: "looking for a row older than the window",
            source,
        })?;
    Ok(found.is_some())
}
