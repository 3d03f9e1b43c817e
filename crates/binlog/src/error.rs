//! Errors of the binlog reader, split into **transient** (the caller may reconnect and
//! resume from the last transaction boundary) and **definite** (stop and tell the operator).

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
}

impl BinlogError {
    /// True when reconnecting and resuming from the last boundary may succeed
    /// (connection lost, timeouts); false for definite errors that need an operator.
    pub fn is_transient(&self) -> bool {
        matches!(self, BinlogError::Connection { .. })
    }
}
