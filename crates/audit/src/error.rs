//! What can stop an audit.

/// An audit that could not finish, naming the table or the Kafka step.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A statement on the outbox table failed.
    #[error("{table}: {operation} failed: {source}")]
    Mysql {
        /// `database.table`.
        table: String,
        /// What was being done (`reading the window's rows`, ...).
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: mysql_async::Error,
    },
    /// The table lacks a column the audit pages by.
    #[error("{table}: the audit pages by the column `{column}` ([[outbox]] columns.{config_key}), which the table does not have; set columns.{config_key} to the table's column")]
    ColumnMissing {
        /// `database.table`.
        table: String,
        /// The column the config names.
        column: String,
        /// Its key in `[[outbox]] columns`.
        config_key: &'static str,
    },
    /// The table has no index that starts with its timestamp column.
    #[error("{table}: no index starts with the timestamp column, so each page of rows would scan and sort the whole table; add one (the writer's DDL has it): {ddl}")]
    TimestampIndexMissing {
        /// `database.table`.
        table: String,
        /// The statement that adds it.
        ddl: String,
    },
    /// A row's value the router's row image cannot hold.
    #[error("{table}: a row of the window cannot be read: {problem}")]
    RowImage {
        /// `database.table`.
        table: String,
        /// The column and why.
        problem: String,
    },
    /// A Kafka request failed.
    #[error("Kafka: {action}: {source}")]
    Kafka {
        /// What was being done.
        action: &'static str,
        /// The client's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// No record came for longer than the stall timeout before the topics' ends.
    #[error("Kafka: no record arrived for {seconds} s while {partitions} partitions were not read to their end; is the broker reachable?")]
    KafkaStalled {
        /// The stall timeout.
        seconds: u64,
        /// Partitions not read to the end.
        partitions: usize,
    },
    /// The thread reading the topics ended without saying why.
    #[error("the topic reader stopped: {0}")]
    ReaderStopped(String),
}
