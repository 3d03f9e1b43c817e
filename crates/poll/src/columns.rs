//! The poll-mode state columns and the row states.

/// Names of the state columns poll mode adds to an outbox table (the defaults are the
/// DDL's, [`crate::poll_mode_ddl`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollColumns {
    /// The row's state: PENDING, PROCESSING, SENT or DEAD.
    pub status: String,
    /// Claims so far (publish attempts).
    pub attempts: String,
    /// A PENDING row is due from this time on (backoff after a failure).
    pub next_attempt_at: String,
    /// The lease: a PROCESSING row whose time has passed may be reclaimed.
    pub locked_until: String,
    /// The fencing token of the claim holding the row.
    pub claim_token: String,
    /// Why the last attempt failed (DEAD rows: why they died).
    pub last_error: String,
    /// When the row was marked SENT.
    pub sent_at: String,
    /// Insertion order (AUTO_INCREMENT): the claim order and the per-aggregate order.
    pub sequence: String,
}

impl Default for PollColumns {
    fn default() -> Self {
        Self {
            status: "poll_status".into(),
            attempts: "poll_attempts".into(),
            next_attempt_at: "poll_next_attempt_at".into(),
            locked_until: "poll_locked_until".into(),
            claim_token: "poll_claim_token".into(),
            last_error: "poll_last_error".into(),
            sent_at: "poll_sent_at".into(),
            sequence: "poll_seq".into(),
        }
    }
}

/// The states of a row, as stored in the status column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowStatus {
    /// Waiting to be claimed (when due).
    Pending,
    /// Claimed; its lease says until when.
    Processing,
    /// Published and acknowledged.
    Sent,
    /// Given up on (attempts exhausted or rejected for good); see the last error.
    Dead,
}

impl RowStatus {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            RowStatus::Pending => "PENDING",
            RowStatus::Processing => "PROCESSING",
            RowStatus::Sent => "SENT",
            RowStatus::Dead => "DEAD",
        }
    }
}

/// Backquotes an identifier (names come from the relay's validated config).
pub(crate) fn quote(identifier: &str) -> String {
    format!("`{}`", identifier.replace('`', "``"))
}
