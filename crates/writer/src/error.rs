//! What appending an event can fail with.

/// Why an outbox event could not be built or appended. Nothing is written when one of these
/// is returned (the statement either ran whole or not at all; the caller's transaction is
/// still open and is the caller's to roll back).
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// The payload value could not be serialized to JSON.
    #[error("the payload of event {event_type} for {aggregate_type} {aggregate_id} is not serializable as JSON: {source}")]
    PayloadNotJson {
        /// The event's aggregate type, to find the call site.
        aggregate_type: String,
        /// The event's aggregate id.
        aggregate_id: String,
        /// The event's type.
        event_type: String,
        /// serde_json's error.
        source: serde_json::Error,
    },
    /// A table, database or column name cannot be used as a MySQL identifier.
    #[error("{what} {name:?} is not a usable MySQL identifier: {reason}")]
    BadIdentifier {
        /// Which name (`table`, `database`, `header column`, ...).
        what: &'static str,
        /// The offending name.
        name: String,
        /// Why (empty, too long, contains a backtick or NUL).
        reason: &'static str,
    },
    /// The traceparent text is not a W3C trace context (`00-<32 hex>-<16 hex>-<2 hex>`).
    #[error("traceparent {value:?} is not a W3C trace context (`version-traceid-parentid-flags`, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01): {reason}")]
    BadTraceparent {
        /// The offending text.
        value: String,
        /// What part is wrong.
        reason: &'static str,
    },
    /// The event carries a header the table has no column for (it would be lost).
    #[error("event {event_id} has header {header:?}, but outbox table {table} has no such header column; add it with OutboxTable::with_header_column (and to the relay's additional_headers)")]
    UnknownHeaderColumn {
        /// The event's id.
        event_id: String,
        /// The header name.
        header: String,
        /// The table.
        table: String,
    },
    /// The event carries a trace context but the table has no trace context column (it would
    /// be lost).
    #[error("event {event_id} has a traceparent, but outbox table {table} has no trace context column; add one with OutboxTable::with_trace_context_column")]
    NoTraceContextColumn {
        /// The event's id.
        event_id: String,
        /// The table.
        table: String,
    },
    /// The database refused the INSERT (or the connection failed). Whether to retry depends
    /// on the error (see [`WriterError::is_transient`]); the caller's transaction must be
    /// rolled back either way.
    #[error("appending {events} event(s) to outbox table {table}: {source}")]
    Database {
        /// The table.
        table: String,
        /// How many events the statement carried.
        events: usize,
        /// The driver's error.
        source: mysql_async::Error,
    },
    /// The database refused the INSERT through sqlx (feature `sqlx`); see
    /// [`WriterError::is_transient`].
    #[cfg(feature = "sqlx")]
    #[error("appending {events} event(s) to outbox table {table}: {source}")]
    Sqlx {
        /// The table.
        table: String,
        /// How many events the statement carried.
        events: usize,
        /// sqlx's error.
        source: sqlx::Error,
    },
}

impl WriterError {
    /// Whether retrying the whole transaction may succeed: a connection problem, a deadlock
    /// (1213) or a lock wait timeout (1205). Everything else (a bad schema, a duplicate event
    /// id, bad input) fails the same way again.
    pub fn is_transient(&self) -> bool {
        match self {
            WriterError::Database { source, .. } => is_transient_mysql_error(source),
            #[cfg(feature = "sqlx")]
            WriterError::Sqlx { source, .. } => crate::append_sqlx::is_transient_sqlx_error(source),
            _ => false,
        }
    }
}

/// Deadlocks, lock wait timeouts and lost connections are worth retrying.
pub(crate) fn is_transient_mysql_error(error: &mysql_async::Error) -> bool {
    match error {
        mysql_async::Error::Server(server) => matches!(server.code, 1205 | 1213),
        mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => true,
        _ => false,
    }
}
