//! Routing errors: a row that cannot become a record.
//!
//! # Contract
//! Every [`RoutingError`] is **permanent**: routing is a pure function of the row and the
//! configuration, so retrying the same row gives the same error. The relay dead-letters
//! (or stops on) such rows; the router itself never drops one and never panics.

use std::fmt;
use std::sync::Arc;

use outbox_binlog::{RowOperation, TableName};

use crate::topic::TopicNameProblem;

/// A row of an outbox table that cannot be routed, with enough context to find it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct RoutingError {
    /// The row's event id as text, when it could be read; for logs and dead letters.
    pub event_id: Option<String>,
    /// The outbox table the row belongs to (shared with the row change, cheap to clone).
    pub table: Arc<TableName>,
    /// The column at fault, when one column is.
    pub column: Option<String>,
    /// What is wrong.
    pub kind: RoutingErrorKind,
}

impl RoutingError {
    /// Always true: the same row fails the same way every time (see the module docs).
    /// Exists so callers can write their retry policy against it explicitly.
    pub fn is_permanent(&self) -> bool {
        true
    }
}

impl fmt::Display for RoutingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot route ")?;
        match &self.event_id {
            Some(id) => write!(f, "event `{id}`")?,
            None => write!(f, "a row (event id unreadable)")?,
        }
        write!(f, " of table `{}`", self.table)?;
        if let Some(column) = &self.column {
            write!(f, ", column `{column}`")?;
        }
        write!(f, ": {}", self.kind)
    }
}

/// What is wrong with a row.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RoutingErrorKind {
    /// The row's table is not one of the configured outbox tables.
    #[error("the table is not a configured outbox table")]
    UnknownTable,
    /// An insert without an after image (or an update/delete without any image).
    #[error("the {operation:?} row carries no row image")]
    MissingRowImage {
        /// The row's operation.
        operation: RowOperation,
    },
    /// An UPDATE or DELETE on an outbox table with `invalid_operation = "fail"`.
    #[error("{operation:?} on an outbox table (only inserts are events; set [route] invalid_operation = \"ignore\" or \"warn\" to skip these)")]
    InvalidOperation {
        /// The row's operation.
        operation: RowOperation,
    },
    /// The table has no column of the configured name (check the mapping).
    #[error("the table has no such column (check the [[outbox]] preset and columns)")]
    MissingColumn,
    /// A required column is NULL.
    #[error("the value is NULL, but the column is required")]
    NullColumn,
    /// The payload is NULL and tombstones are off.
    #[error(
        "the payload is NULL (set [route] tombstone_on_empty_payload = true to send a tombstone)"
    )]
    NullPayload,
    /// The event id renders as empty text; consumers dedupe on it, so it must not be empty.
    #[error("the event id is empty")]
    EmptyEventId,
    /// Text whose bytes are invalid in the column's charset.
    #[error("the text is not valid in its charset `{charset}` ({length} bytes)")]
    UndecodableText {
        /// The charset the column declared.
        charset: String,
        /// Number of raw bytes, for the log.
        length: usize,
    },
    /// A binary value that should be UTF-8 text is not.
    #[error("the binary value is not valid UTF-8 (set the encoding to \"hex\", \"uuid\" or \"raw\" where allowed)")]
    NotUtf8,
    /// A binary value that should be a UUID is not 16 bytes long.
    #[error("the binary value is {length} bytes long, a UUID needs 16")]
    NotUuid {
        /// Actual length.
        length: usize,
    },
    /// A value type this column cannot use.
    #[error("a {value_type} value cannot be used as {usage}")]
    UnsupportedType {
        /// The value's type, e.g. `INT`.
        value_type: &'static str,
        /// What it was going to be, e.g. `the payload`.
        usage: &'static str,
    },
    /// A typed field without a configured `column_type` whose type, as the server
    /// describes it, has no Debezium form the relay renders.
    #[error("the server describes the column as {described}, which the relay does not render as Debezium does; set its column_type")]
    ColumnTypeNotRenderable {
        /// The type as the server described it (or `no type`).
        described: String,
    },
    /// `payload = "require_json"` and the payload is not JSON.
    #[error("the payload is not valid JSON: {reason}")]
    PayloadNotJson {
        /// The parser's message (position and cause).
        reason: String,
    },
    /// `expand_json_payload` met a payload Debezium's task would fail on.
    #[error("the payload cannot be expanded like Debezium's table.expand.json.payload: {reason}")]
    PayloadNotExpandable {
        /// What does not fit.
        reason: String,
    },
    /// A key or payload value that does not fit the configured `[route.connect_schema]`.
    #[error("a {value_type} value does not fit connect_schema {setting} = \"{schema}\"; set the type Debezium gives this column")]
    SchemaMismatch {
        /// The value's type.
        value_type: &'static str,
        /// `key_type` or `payload_type`.
        setting: &'static str,
        /// The configured type.
        schema: &'static str,
    },
    /// The rendered topic is not a legal Kafka topic name.
    #[error("topic `{topic}` is not a legal Kafka topic name: {problem}")]
    InvalidTopic {
        /// The rendered (rejected) name, unchanged.
        topic: String,
        /// Which rule it breaks.
        problem: TopicNameProblem,
    },
    /// The timestamp column's value is not a usable point in time.
    #[error("the timestamp is unusable: {reason}")]
    InvalidTimestamp {
        /// Why, e.g. a zero date or a time before 1970.
        reason: String,
    },
    /// The partition column's value is not a partition number.
    #[error("the partition is unusable: {reason}")]
    InvalidPartition {
        /// Why, e.g. negative.
        reason: String,
    },
}

impl RoutingErrorKind {
    /// A short, fixed label for metrics and dead-letter headers (e.g. `"null_column"`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            RoutingErrorKind::UnknownTable => "unknown_table",
            RoutingErrorKind::MissingRowImage { .. } => "missing_row_image",
            RoutingErrorKind::InvalidOperation { .. } => "invalid_operation",
            RoutingErrorKind::MissingColumn => "missing_column",
            RoutingErrorKind::NullColumn => "null_column",
            RoutingErrorKind::NullPayload => "null_payload",
            RoutingErrorKind::EmptyEventId => "empty_event_id",
            RoutingErrorKind::UndecodableText { .. } => "undecodable_text",
            RoutingErrorKind::NotUtf8 => "not_utf8",
            RoutingErrorKind::NotUuid { .. } => "not_uuid",
            RoutingErrorKind::UnsupportedType { .. } => "unsupported_type",
            RoutingErrorKind::ColumnTypeNotRenderable { .. } => "column_type_not_renderable",
            RoutingErrorKind::PayloadNotJson { .. } => "payload_not_json",
            RoutingErrorKind::PayloadNotExpandable { .. } => "payload_not_expandable",
            RoutingErrorKind::SchemaMismatch { .. } => "schema_mismatch",
            RoutingErrorKind::InvalidTopic { .. } => "invalid_topic",
            RoutingErrorKind::InvalidTimestamp { .. } => "invalid_timestamp",
            RoutingErrorKind::InvalidPartition { .. } => "invalid_partition",
        }
    }
}
