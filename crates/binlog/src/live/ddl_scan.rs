//! The forward scan that makes information_schema column names safe to use for an older
//! event (binlog_row_metadata=MINIMAL; ARCHITECTURE.md, invariant 4b).
//!
//! Names looked up now describe the table as it is now. They are the names of an event at
//! position E exactly when no DDL on the table lies in the binlog after E: a transaction's
//! rows are written with the definition the table has until the next DDL on it in binlog
//! order (the transaction holds a metadata lock the DDL must wait for), and a DDL that
//! information_schema already shows has already been written to the binlog (MySQL writes
//! a DDL to the binlog before it commits its data dictionary change; MariaDB writes it
//! while the statement still holds the exclusive metadata lock that an information_schema
//! lookup of the table waits for). So the reader looks the names up first, then scans with
//! `SHOW BINLOG EVENTS` from E to the binlog's end as it is after the lookup; any QUERY
//! event there that is DDL naming the table means the names may not be E's.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::decoder::is_ddl_naming_table;
use crate::{BinlogPosition, TableName};

/// Events read per `SHOW BINLOG EVENTS` page: each page continues at the previous page's
/// last end position, so the scan is linear in the binlog it covers.
const EVENTS_PER_PAGE: u64 = 5000;

/// A DDL statement on the watched table found after the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DdlAhead {
    /// Where the DDL event starts.
    pub(crate) position: BinlogPosition,
    /// Its statement (cut to 200 characters), for the operator.
    pub(crate) statement: String,
}

/// Why a scan did not finish.
#[derive(Debug)]
pub(crate) enum ScanFailure {
    /// A query failed.
    Query(mysql_async::Error),
    /// One page took longer than the limit (the scan as a whole may take longer: a reader
    /// far behind scans much binlog, and must not time out forever on it).
    PageTimedOut,
}

/// Scans from `from` (an event start: the end of the event that needs names) to the end of
/// the binlog for a DDL statement naming `table`. `files` is `SHOW BINARY LOGS` taken after
/// the lookup; when `from.file` is not among them every listed file is scanned. Each page
/// must arrive within `page_timeout`.
pub(crate) async fn find_ddl_ahead(
    conn: &mut Conn,
    files: &[String],
    from: &BinlogPosition,
    table: &TableName,
    page_timeout: Duration,
) -> Result<Option<DdlAhead>, ScanFailure> {
    let first = files
        .iter()
        .position(|file| *file == from.file)
        .unwrap_or(0);
    for file in &files[first..] {
        let mut position = if *file == from.file { from.position } else { 4 };
        loop {
            let query = conn.query::<(String, u64, String, u64, u64, Option<Vec<u8>>), _>(format!(
                "SHOW BINLOG EVENTS IN {} FROM {position} LIMIT {EVENTS_PER_PAGE}",
                quoted(file)
            ));
            let page = tokio::time::timeout(page_timeout, query)
                .await
                .map_err(|_| ScanFailure::PageTimedOut)?
                .map_err(ScanFailure::Query)?;
            let full_page = page.len() as u64 == EVENTS_PER_PAGE;
            let mut next = position;
            for (_log_name, start, event_type, _server_id, end, info) in page {
                next = end;
                if !event_type.starts_with("Query") {
                    continue;
                }
                let statement = statement_of(info.as_deref().unwrap_or_default());
                if is_ddl_naming_table(statement, &table.table) {
                    let text = String::from_utf8_lossy(statement);
                    return Ok(Some(DdlAhead {
                        position: BinlogPosition::new(file.clone(), start),
                        statement: text.chars().take(200).collect(),
                    }));
                }
            }
            if !full_page || next <= position {
                break;
            }
            position = next;
        }
    }
    Ok(None)
}

/// The statement of a QUERY event's `Info` column: without the `use `db`; ` prefix both
/// servers print when the statement ran with a default database.
fn statement_of(info: &[u8]) -> &[u8] {
    if info.starts_with(b"use `") {
        if let Some(end) = info.windows(3).position(|w| w == b"`; ") {
            return &info[end + 3..];
        }
    }
    info
}

/// A binlog file name as an SQL string literal.
fn quoted(name: &str) -> String {
    format!("'{}'", name.replace('\\', "\\\\").replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_use_prefix_is_removed_and_names_are_quoted() {
        assert_eq!(
            statement_of(b"use `app`; ALTER TABLE outbox ADD x INT"),
            b"ALTER TABLE outbox ADD x INT"
        );
        assert_eq!(statement_of(b"BEGIN"), b"BEGIN");
        assert_eq!(quoted("mariadb-bin.000001"), "'mariadb-bin.000001'");
        assert_eq!(quoted("a'b\\c"), "'a''b\\\\c'");
    }
}
