//! Errors of the binlog reader, split into **transient** (the caller may reconnect and
//! resume from the last transaction boundary) and **definite** (stop and tell the operator).
//!
//! Every decoding error names where it happened (binlog file and the position of the event
//! that could not be decoded; for files on disk, the path and byte offset), so an operator can
//! look at the event with `mysqlbinlog --start-position`.

use std::path::PathBuf;

use crate::types::{BinlogPosition, TableName};

/// Everything that can go wrong while reading a binlog.
///
/// [`BinlogError::is_transient`] tells the caller whether reconnecting can help.
#[derive(Debug, thiserror::Error)]
pub enum BinlogError {
    /// The connection to the server failed or was lost. Transient.
    #[error("connection to {server} failed: {message}")]
    Connection {
        /// `host:port` of the server.
        server: String,
        /// What the client library said.
        message: String,
    },

    /// An event's CRC32 does not match its bytes: the event was damaged on disk or on the
    /// wire. Definite: reading past it could hand out corrupt rows.
    #[error("checksum mismatch in the event at {position}: stored CRC32 {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// Start of the damaged event.
        position: BinlogPosition,
        /// The CRC32 stored in the event.
        stored: u32,
        /// The CRC32 computed over the event's bytes.
        computed: u32,
    },

    /// An event type that can change table data but that this reader cannot decode
    /// (compressed or pre-GA row events, statement-based LOAD DATA, incidents, partial JSON
    /// updates of a watched table, encrypted files). Definite: skipping it could lose rows.
    #[error("cannot decode the {event_name} event (type {event_type:#04x}) at {position}: {reason}")]
    UnsupportedEvent {
        /// The raw event type code from the header.
        event_type: u8,
        /// A readable name of the event type.
        event_name: &'static str,
        /// Start of the event.
        position: BinlogPosition,
        /// Why it cannot be decoded and what to change on the server.
        reason: String,
    },

    /// An event type code this reader does not know at all. Definite: it might carry rows.
    #[error("unknown binlog event type {event_type:#04x} at {position}")]
    UnknownEvent {
        /// The raw event type code from the header.
        event_type: u8,
        /// Start of the event.
        position: BinlogPosition,
    },

    /// An event whose bytes do not parse (too short, inconsistent lengths, bad values).
    /// Definite.
    #[error("malformed {event_name} event at {position}: {reason}")]
    MalformedEvent {
        /// A readable name of the event type.
        event_name: &'static str,
        /// Start of the event.
        position: BinlogPosition,
        /// What did not parse.
        reason: String,
    },

    /// A row image does not match what is known about its table (column count, column
    /// types or metadata, column names looked up from the server). Definite: guessing which
    /// value belongs to which column would route wrong data.
    #[error("row image of {table} at {position} does not match the table: {reason}")]
    RowImageMismatch {
        /// The table the row belongs to.
        table: TableName,
        /// Start of the rows (or table map) event.
        position: BinlogPosition,
        /// What does not match.
        reason: String,
    },

    /// The events do not form well-nested transactions (a transaction starts while another
    /// is open, a commit without a transaction, a compressed transaction without its inner
    /// events). Definite: boundaries would be wrong.
    #[error("transaction structure broken at {position}: {reason}")]
    BrokenTransaction {
        /// Start of the event that broke the structure.
        position: BinlogPosition,
        /// What was expected instead.
        reason: String,
    },

    /// A binlog file could not be opened or read. Definite.
    #[error("cannot read binlog file {path}: {source}")]
    FileIo {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// A binlog file is not a binlog, is cut inside an event, or has an impossible event
    /// header. Definite.
    #[error("binlog file {path} is corrupt at byte offset {offset}: {reason}")]
    FileCorrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset in the file where the problem starts (the start of the bad event).
        offset: u64,
        /// What is wrong.
        reason: String,
    },

    /// A binlog file could be read up to an event this reader cannot decode; the inner error
    /// names the event, this variant adds the file on disk. Definite.
    #[error("in binlog file {path}: {source}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// The decoding error.
        #[source]
        source: Box<BinlogError>,
    },
}

impl BinlogError {
    /// True when reconnecting and resuming from the last boundary may succeed
    /// (connection lost, timeouts); false for definite errors that need an operator.
    pub fn is_transient(&self) -> bool {
        matches!(self, BinlogError::Connection { .. })
    }
}
