//! The outbox table: its name and column layout.

use outbox_router::{ColumnMapping, ColumnPreset};

use crate::error::WriterError;

/// Debezium's default name for the trace context column (`tracingspancontext`), which the
/// relay reads when `[route] tracing_span_context_column` names it.
pub const DEBEZIUM_TRACING_SPAN_CONTEXT_COLUMN: &str = "tracingspancontext";

/// MySQL's identifier length limit.
const MAX_IDENTIFIER_LENGTH: usize = 64;

/// Where events are appended and which columns they go to.
///
/// The column names come from the relay's own presets ([`ColumnPreset::mapping`]), so a table
/// written by this crate is read by a relay configured with the same preset and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTable {
    /// The database, when the table is not in the connection's default database; part of
    /// the qualified name in every statement.
    database: Option<String>,
    /// The table's own name.
    table: String,
    /// Which preset the columns follow; kept for the DDL and for messages.
    preset: ColumnPreset,
    /// The preset's column names (event id, aggregate type/id, event type, payload,
    /// timestamp).
    columns: ColumnMapping,
    /// Extra nullable columns, one per header (the relay's `additional_headers`): an event
    /// that sets a header writes it there; an event that does not writes NULL (no header).
    header_columns: Vec<String>,
    /// Column for the W3C `traceparent` (the relay's `tracing_span_context_column`), when the
    /// application propagates traces through the outbox.
    trace_context_column: Option<String>,
}

impl OutboxTable {
    /// A table in the connection's default database, with the preset's columns.
    pub fn new(table: &str, preset: ColumnPreset) -> Result<Self, WriterError> {
        check_identifier("table", table)?;
        Ok(Self {
            database: None,
            table: table.to_owned(),
            preset,
            columns: preset.mapping(),
            header_columns: Vec::new(),
            trace_context_column: None,
        })
    }

    /// The same table, qualified with `database`.
    pub fn in_database(mut self, database: &str) -> Result<Self, WriterError> {
        check_identifier("database", database)?;
        self.database = Some(database.to_owned());
        Ok(self)
    }

    /// Adds a nullable header column; configure the relay with the same column in
    /// `additional_headers` so it becomes a Kafka header of the same name.
    pub fn with_header_column(mut self, column: &str) -> Result<Self, WriterError> {
        check_identifier("header column", column)?;
        if self.column_exists(column) {
            return Err(WriterError::BadIdentifier {
                what: "header column",
                name: column.to_owned(),
                reason: "the table already has a column of that name",
            });
        }
        self.header_columns.push(column.to_owned());
        Ok(self)
    }

    /// Adds the trace context column (for the Debezium layout usually
    /// [`DEBEZIUM_TRACING_SPAN_CONTEXT_COLUMN`]); configure the relay's
    /// `tracing_span_context_column` with the same name so it sends header `traceparent`.
    pub fn with_trace_context_column(mut self, column: &str) -> Result<Self, WriterError> {
        check_identifier("trace context column", column)?;
        if self.column_exists(column) {
            return Err(WriterError::BadIdentifier {
                what: "trace context column",
                name: column.to_owned(),
                reason: "the table already has a column of that name",
            });
        }
        self.trace_context_column = Some(column.to_owned());
        Ok(self)
    }

    /// Whether `column` is one of the table's columns already.
    fn column_exists(&self, column: &str) -> bool {
        let mapping = &self.columns;
        [
            &mapping.event_id,
            &mapping.aggregate_type,
            &mapping.aggregate_id,
            &mapping.event_type,
            &mapping.payload,
            &mapping.timestamp,
        ]
        .iter()
        .any(|name| name.eq_ignore_ascii_case(column))
            || self
                .header_columns
                .iter()
                .any(|name| name.eq_ignore_ascii_case(column))
            || self
                .trace_context_column
                .as_deref()
                .is_some_and(|name| name.eq_ignore_ascii_case(column))
    }

    /// The preset the columns follow.
    pub fn preset(&self) -> ColumnPreset {
        self.preset
    }

    /// The column names of the preset.
    pub fn columns(&self) -> &ColumnMapping {
        &self.columns
    }

    /// The header columns, in the order they were added.
    pub fn header_columns(&self) -> &[String] {
        &self.header_columns
    }

    /// The trace context column, if any.
    pub fn trace_context_column(&self) -> Option<&str> {
        self.trace_context_column.as_deref()
    }

    /// The database, if the name is qualified.
    pub fn database(&self) -> Option<&str> {
        self.database.as_deref()
    }

    /// The table's own name, without the database.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// `` `database`.`table` `` (or `` `table` ``), for statements.
    pub fn quoted_name(&self) -> String {
        match &self.database {
            Some(database) => format!("{}.{}", quote(database), quote(&self.table)),
            None => quote(&self.table),
        }
    }

    /// `database.table` (or `table`), for messages.
    pub fn display_name(&self) -> String {
        match &self.database {
            Some(database) => format!("{database}.{}", self.table),
            None => self.table.clone(),
        }
    }
}

/// Backtick-quotes an identifier already checked by [`check_identifier`].
pub(crate) fn quote(identifier: &str) -> String {
    format!("`{identifier}`")
}

/// Accepts names MySQL takes inside backticks without escaping.
pub(crate) fn check_identifier(what: &'static str, name: &str) -> Result<(), WriterError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.chars().count() > MAX_IDENTIFIER_LENGTH {
        Some("it is longer than 64 characters")
    } else if name.contains('`') || name.contains('\0') {
        Some("it contains a backtick or NUL")
    } else if name.ends_with(' ') {
        Some("it ends with a space")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(WriterError::BadIdentifier {
            what,
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_names_follow_the_relays_presets() {
        let seeds = OutboxTable::new("outbox", ColumnPreset::Seeds).unwrap();
        assert_eq!(seeds.columns().event_id, "event_id");
        assert_eq!(seeds.columns().timestamp, "created_at");
        let debezium = OutboxTable::new("outbox", ColumnPreset::Debezium).unwrap();
        assert_eq!(debezium.columns().event_id, "id");
        assert_eq!(debezium.columns().aggregate_type, "aggregatetype");
        assert_eq!(debezium.columns().event_type, "type");
    }

    #[test]
    fn bad_identifiers_and_clashing_columns_are_refused() {
        assert!(OutboxTable::new("", ColumnPreset::Seeds).is_err());
        assert!(OutboxTable::new("out`box", ColumnPreset::Seeds).is_err());
        assert!(OutboxTable::new(&"x".repeat(65), ColumnPreset::Seeds).is_err());
        let table = OutboxTable::new("outbox", ColumnPreset::Seeds).unwrap();
        assert!(table.clone().with_header_column("payload").is_err());
        let table = table.with_header_column("tenant").unwrap();
        assert!(table.clone().with_trace_context_column("TENANT").is_err());
        assert_eq!(
            table.in_database("shop").unwrap().quoted_name(),
            "`shop`.`outbox`"
        );
    }
}
