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
    #[error(
        "cannot decode the {event_name} event (type {event_type:#04x}) at {position}: {reason}"
    )]
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

    /// The replication stream was cut mid-stream (connection reset, server shut down or
    /// restarted, stream ended). Transient: reconnect and resume from
    /// `BinlogReader::resume_point`.
    #[error("replication stream from {server} lost after {position}: {message}")]
    StreamLost {
        /// `host:port` of the server.
        server: String,
        /// The last transaction boundary handed out (where to resume).
        position: String,
        /// What the client library or server said.
        message: String,
    },
    /// Neither an event nor a heartbeat arrived for `waited` (`idle_timeout`). Transient: the
    /// connection is probably dead without the OS noticing.
    #[error("no event and no heartbeat from {server} for {waited:?} after {position}; the connection is presumed dead")]
    IdleTimeout {
        /// `host:port` of the server.
        server: String,
        /// The last transaction boundary handed out (where to resume).
        position: String,
        /// How long the reader waited (the configured idle timeout).
        waited: std::time::Duration,
    },
    /// Connecting (or the setup queries before streaming) took longer than `connect_timeout`.
    /// Transient.
    #[error("connecting to {server} to stream from {position} timed out after {waited:?}")]
    ConnectTimeout {
        /// `host:port` of the server.
        server: String,
        /// The start position that was requested.
        position: String,
        /// How long the reader waited (the configured connect timeout).
        waited: std::time::Duration,
    },
    /// The requested start position or GTID is no longer (or never was) in the server's
    /// binlog, usually because the files were purged. Definite: resuming there would skip
    /// transactions; an operator must decide (re-snapshot, or start from `oldest_available`).
    #[error("{server} cannot stream from {position}: {message}; the oldest still available is {oldest_available}")]
    PositionPurged {
        /// `host:port` of the server.
        server: String,
        /// The start position or GTID set that was requested.
        position: String,
        /// The oldest binlog file (and, on MariaDB, the GTID state) the server still has,
        /// queried on a side connection so the operator knows the gap.
        oldest_available: String,
        /// What the server said (error 1236 text).
        message: String,
    },
    /// The requested start is not in the server's binlog, and not because of a purge: past
    /// its end, in a file it never had, another server's file naming, or a GTID set with
    /// transactions it never had. Usually a checkpoint of another server, or of this one
    /// before its binlog was reset or restored. Definite.
    #[error("{server} cannot stream from {position}: it is not in the server's binlog, and not because of a purge: {why} (the server said: {message})")]
    PositionNotOnServer {
        /// `host:port` of the server.
        server: String,
        /// The start position or GTID set that was requested.
        position: String,
        /// What is wrong with it, against what the server has.
        why: String,
        /// What the server said (error 1236 text).
        message: String,
    },
    /// Another replica with the same `server_id` is connected (or took over our stream).
    /// Definite: two readers with one `server_id` would keep kicking each other off.
    #[error("{server}: another replica uses server_id {server_id} (stream at {position}): {message}; give every reader a unique server_id")]
    DuplicateServerId {
        /// `host:port` of the server.
        server: String,
        /// Our replica `server_id` that collides.
        server_id: u32,
        /// The position the stream was at or started from.
        position: String,
        /// What the server said, or how the collision was detected.
        message: String,
    },
    /// Login refused or a privilege is missing (e.g. `REPLICATION SLAVE`). Definite.
    #[error("{server} refused access (stream at {position}): {message}")]
    AccessDenied {
        /// `host:port` of the server.
        server: String,
        /// The position the stream was at or started from.
        position: String,
        /// What the server said, or which grant is missing.
        message: String,
    },
    /// The server's settings or grants make a correct stream impossible (startup check).
    /// Definite: the operator must change the server.
    #[error("{server} is not set up for outbox-relay (start {position}): {problems}")]
    ServerMisconfigured {
        /// `host:port` of the server.
        server: String,
        /// The start position that was requested.
        position: String,
        /// Every Error-severity problem as `setting: expected X, actual Y`, joined by `; `.
        problems: String,
    },
    /// The server answered with an error not covered by a more specific variant. Transient
    /// only for codes that are temporary by nature (shutdown in progress, too many
    /// connections, connection killed, lock wait timeout).
    #[error("{server} returned error {code} (stream at {position}): {message}")]
    Server {
        /// `host:port` of the server.
        server: String,
        /// The position the stream was at or started from.
        position: String,
        /// MySQL/MariaDB error code.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// The reader configuration cannot work (bad URL, GTID set of the other flavor, ...).
    /// Definite.
    /// TLS to the server failed for a reason a retry does not change: the server offers no
    /// TLS under a mode that needs it, its certificate is not trusted or does not name the
    /// host, or the TLS version is below the minimum. Definite.
    #[error("TLS to {server} (tls.mode = {mode}) failed: {message}")]
    Tls {
        /// `host:port` of the server.
        server: String,
        /// The configured mode (`required`, `verify_ca`, `verify_identity`, ...).
        mode: String,
        /// The cause and the fix.
        message: String,
    },
    #[error("invalid reader configuration for {server}: {field}: {message}")]
    InvalidReaderConfig {
        /// `host:port` of the server (or the URL text when it does not parse).
        server: String,
        /// The configuration field that is wrong.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A watched table does not exist under the name the binlog gives it (startup check:
    /// its rows would be skipped silently). Definite: the config must name it as the server
    /// does (`message` names the closest existing table and `lower_case_table_names`).
    #[error("watched tables on {server} do not resolve: {message}")]
    WatchedTableMissing {
        /// `host:port` of the server.
        server: String,
        /// The configured names that do not exist.
        tables: Vec<TableName>,
        /// One sentence per table: what is wrong and the fix.
        message: String,
    },
    /// The replication stream carried bytes the client library could not parse as a
    /// packet or event (bad event header, checksum mismatch detected by the library, packet
    /// larger than 1 GiB). Definite: reconnecting would read the same bytes again.
    #[error("unreadable replication stream from {server} after {position}: {message}")]
    Protocol {
        /// `host:port` of the server.
        server: String,
        /// The last transaction boundary handed out before the bad data.
        position: String,
        /// What the client library said.
        message: String,
    },
    /// The live stream delivered an event the decoder rejected; the inner error names the
    /// event and its binlog position, this variant adds the server. As transient as the
    /// inner error (decoding errors are definite).
    #[error("from {server}: {source}")]
    FromServer {
        /// `host:port` of the server.
        server: String,
        /// The decoding error.
        #[source]
        source: Box<BinlogError>,
    },
}

impl BinlogError {
    /// True when reconnecting and resuming from the last boundary may succeed
    /// (connection lost, timeouts); false for definite errors that need an operator.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            BinlogError::Connection { .. }
                | BinlogError::StreamLost { .. }
                | BinlogError::IdleTimeout { .. }
                | BinlogError::ConnectTimeout { .. }
        ) || matches!(self, BinlogError::Server { code, .. } if is_transient_server_error_code(*code))
            || matches!(self, BinlogError::FromServer { source, .. } if source.is_transient())
    }
}

/// Server error codes that go away by themselves: 1040 too many connections, 1053 server
/// shutdown in progress, 1077 normal shutdown, 1152/1153/1158-1161 aborted connection or
/// network read/write problems, 1205 lock wait timeout, 1213 deadlock, 1317 query
/// interrupted, 1927 connection killed (MariaDB), 3169 session was killed (MySQL).
fn is_transient_server_error_code(code: u16) -> bool {
    const TRANSIENT_SERVER_ERROR_CODES: [u16; 14] = [
        1040, 1053, 1077, 1152, 1153, 1158, 1159, 1160, 1161, 1205, 1213, 1317, 1927, 3169,
    ];
    TRANSIENT_SERVER_ERROR_CODES.contains(&code)
}
