//! Internal events of the writer (in the style of the relay's `internal_events`): each thing
//! worth telling an operator is a struct whose [`InternalEvent::emit`] logs it in one place.
//! The writer has no metrics of its own: it runs inside the application, whose transaction
//! metrics already cover appends; cleanup runs return a [`crate::CleanupReport`].

/// Something that happened, logged by [`InternalEvent::emit`].
pub trait InternalEvent {
    /// Logs the event.
    fn emit(self);
}

/// A cleanup run found nothing eligible (no checkpoint, or the checkpoint is too recent for
/// the margin).
#[derive(Debug)]
pub struct CleanupSkipped<'a> {
    /// The outbox table.
    pub table: &'a str,
    /// The checkpoint's timestamp, when a checkpoint exists.
    pub checkpoint_timestamp: Option<u32>,
}

impl InternalEvent for CleanupSkipped<'_> {
    fn emit(self) {
        tracing::info!(
            table = self.table,
            checkpoint_timestamp = ?self.checkpoint_timestamp,
            "outbox cleanup: nothing is old enough to delete (no checkpoint, or it is younger than the safety margin)"
        );
    }
}

/// One cleanup batch ran.
#[derive(Debug)]
pub struct CleanupBatchDeleted<'a> {
    /// The outbox table.
    pub table: &'a str,
    /// Rows the batch deleted.
    pub rows: u64,
    /// The cutoff (Unix seconds) rows were older than (`None`: poll mode's retention).
    pub cutoff_unix_seconds: Option<i64>,
}

impl InternalEvent for CleanupBatchDeleted<'_> {
    fn emit(self) {
        tracing::debug!(
            table = self.table,
            rows = self.rows,
            cutoff_unix_seconds = ?self.cutoff_unix_seconds,
            "outbox cleanup: batch deleted"
        );
    }
}
