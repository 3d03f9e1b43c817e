//! outbox-binlog: a MySQL/MariaDB binary log as an ordered stream of **committed
//! transactions** with typed row changes of selected tables.
//!
//! Two sources yield the same [`StreamItem`]s:
//! * [`BinlogReader`]: a live replication stream from a server (file+position, GTID,
//!   earliest or latest start), with heartbeats and transient/definite errors;
//! * [`BinlogFileReader`]: binlog files on disk (archived binlogs, recovery, `inspect`).
//!
//! Metrics: [`register_metrics`] adds the crate's Prometheus counters (events, rows,
//! commits, heartbeats, column-name lookups, stream errors, connects) to a registry; see
//! the `internal_events` module.
//!
//! Items come in binlog order: the [`RowChange`]s of one transaction, then its [`Commit`],
//! which carries the position just after the transaction. [`Heartbeat`]s only come between
//! transactions.
//!
//! # Resumption
//! A [`Commit::position`] (or [`Heartbeat::position`]) is a safe place to start a new
//! stream: it is always a transaction boundary, so a reader started there yields exactly the
//! transactions after it, none twice and none skipped. MariaDB GTID positions
//! ([`Commit::gtid`] accumulated in a [`GtidSet`]) are equally safe and survive a failover.
//! Positions inside a transaction are never handed out.

mod checks;
mod decoder;
mod error;
mod file;
mod gtid;
mod internal_events;
mod live;
mod redact;
mod tls;
mod types;
mod watched_tables;

pub use checks::{
    check_server, check_server_within, ServerIdentity, ServerReport, SettingCheck, Severity,
};
pub use error::BinlogError;
pub use file::BinlogFileReader;
pub use gtid::{Gtid, GtidSet, GtidSetParseError, MysqlGtidSource};
pub use internal_events::{
    register_lazy_collectors, register_metrics, BinlogEventsReceived, ColumnNamesLookedUp,
    HeartbeatReceived, InternalEvent, ReaderConnected, RowsDecoded, StreamError,
    TransactionCommitted,
};
#[doc(hidden)]
pub use live::pull_raw_events;
pub use live::{
    describe_client_error, gtid_set_not_on_server, locate_position, locate_position_on_server,
    PositionOnServer,
};
pub use live::{BinlogReader, NextItem, ReaderConfig, StartPosition, DEFAULT_READ_AHEAD_EVENTS};
pub use redact::redact_url;
pub use tls::{connect_to_server, TlsMode, TlsOptions, TlsSession, TlsVersion};
pub use types::{
    BinlogPosition, ColumnNames, ColumnType, ColumnTypes, Commit, DateTime, Flavor, Heartbeat,
    JsonText, Row, RowChange, RowOperation, SqlType, StreamItem, TableFilter, TableName, Value,
    XaBoundary,
};
pub use watched_tables::{
    resolve_watched_tables, ColumnDefault, ColumnDescription, UnresolvedTables, WatchedTableColumns,
};
