//! What can go wrong while polling.

/// A polling failure, naming the table and the operation.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// A statement failed.
    #[error("{table}: {operation} failed: {source}")]
    Mysql {
        /// `database.table`.
        table: String,
        /// What was being done (`claiming`, `marking sent`, ...).
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: mysql_async::Error,
    },
    /// The server cannot run the claim query.
    #[error("the source server is {version}: poll mode needs FOR UPDATE SKIP LOCKED, in MySQL 8.0 and MariaDB 10.6 or newer; upgrade the server or use [source] mode = \"binlog\"")]
    UnsupportedServer {
        /// `SELECT VERSION()`.
        version: String,
    },
    /// The table lacks an index the claim forces (see `PollIndexes`).
    #[error("{table}: poll mode needs the index `{index}` on ({columns}){}; add it as poll_mode_ddl does (`outbox-relay poll ddl` prints the statement)", match found { Some(actual) => format!(", and the table's index of that name is on ({actual})"), None => String::new() })]
    IndexMissing {
        /// `database.table`.
        table: String,
        /// The index's name.
        index: String,
        /// The columns it must start with.
        columns: String,
        /// The columns of the table's index of that name, if it has one.
        found: Option<String>,
    },
    /// A row the claim returned is not what the poll-mode columns promise.
    #[error("{table}: {message}")]
    BadRow {
        /// `database.table`.
        table: String,
        /// What is wrong with which row.
        message: String,
    },
}

impl PollError {
    /// Whether the statement lost a lock conflict (a deadlock InnoDB broke by rolling this
    /// transaction back, or a lock wait timeout): normal between relays and between a
    /// relay's claims and marks; retry at once, on the same connection.
    pub fn is_lock_conflict(&self) -> bool {
        matches!(
            self,
            PollError::Mysql {
                source: mysql_async::Error::Server(server),
                ..
            } if matches!(server.code, 1205 | 1213)
        )
    }

    /// Whether retrying can help: lost connections, lock waits and deadlocks can; a refused
    /// statement (a missing column, a missing grant) or an old server cannot.
    pub fn is_transient(&self) -> bool {
        match self {
            PollError::Mysql { source, .. } => match source {
                mysql_async::Error::Server(server) => {
                    // ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK, ER_SERVER_SHUTDOWN,
                    // ER_QUERY_INTERRUPTED.
                    matches!(server.code, 1205 | 1213 | 1053 | 1317)
                }
                mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => true,
                _ => false,
            },
            PollError::UnsupportedServer { .. }
            | PollError::IndexMissing { .. }
            | PollError::BadRow { .. } => false,
        }
    }
}
