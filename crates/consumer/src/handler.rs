//! The application's part: apply one event inside the library's transaction.

use std::future::Future;

use mysql_async::Transaction;

use crate::event::ConsumedEvent;

/// Why the handler could not apply an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Worth retrying (a timeout, a lock wait, a downstream service briefly away): retried
    /// with backoff, dead-lettered after `max_attempts` attempts.
    #[error("transient: {0}")]
    Transient(String),
    /// Fails the same way every time (bad payload, a business rule that rejects it):
    /// dead-lettered at once.
    #[error("permanent: {0}")]
    Permanent(String),
}

impl From<mysql_async::Error> for HandlerError {
    /// Database errors of the handler's own statements: deadlocks, lock wait timeouts and
    /// connection problems are transient, everything else (a constraint, bad SQL) permanent.
    fn from(error: mysql_async::Error) -> Self {
        let transient = match &error {
            mysql_async::Error::Server(server) => matches!(server.code, 1205 | 1213),
            mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => true,
            _ => false,
        };
        if transient {
            HandlerError::Transient(error.to_string())
        } else {
            HandlerError::Permanent(error.to_string())
        }
    }
}

/// Applies events. Called once per attempt, always with a fresh transaction in which the
/// event's `processed_event` row is already inserted; the library commits it when the handler
/// returns `Ok` and rolls it back otherwise. The handler must make its business change
/// **only** through `transaction` (anything else would not be undone by a rollback, nor
/// deduplicated), and must not commit or roll back itself.
pub trait EventHandler: Send + Sync + 'static {
    /// Applies `event` inside `transaction`.
    fn handle(
        &self,
        event: &ConsumedEvent,
        transaction: &mut Transaction<'static>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;
}
