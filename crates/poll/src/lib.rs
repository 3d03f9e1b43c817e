//! The polling source of outbox-relay (issue 27), for servers whose binlog the relay may
//! not read (no REPLICATION grants): the outbox table itself is the queue.
//!
//! Each row carries its delivery state in columns the writer's poll-mode DDL adds
//! ([`poll_mode_ddl`]): `status` (PENDING, PROCESSING, SENT, DEAD), `attempts`,
//! `next_attempt_at`, `locked_until` (the lease), `claim_token` (the fencing token),
//! `last_error`, `sent_at`, and `poll_seq`, the insertion order.
//!
//! # The protocol ([`Poller`])
//! 1. **Claim**, one short transaction: the due PENDING rows that are each the oldest unsent
//!    row of their aggregate, oldest first, `FOR UPDATE SKIP LOCKED`, become PROCESSING with
//!    `attempts + 1`, `locked_until = now + lease` and a fresh claim token.
//! 2. The caller publishes them.
//! 3. **Mark**: `SENT ... WHERE claim_token = ?` — only rows this claim still holds. A worker
//!    whose lease ran out and whose rows were reclaimed marks nothing (a fencing rejection):
//!    its late publish is a duplicate with the same id, never a loss.
//! 4. **Lease expiry** ([`Poller::expire_leases`]): PROCESSING rows whose lease ended go back
//!    to PENDING without a token, so another worker can claim them.
//!
//! # Per-key order
//! A row is claimable only if no older row (`poll_seq`) of its aggregate (type and id) is
//! PENDING or PROCESSING: at most one row per aggregate is in flight across all relays, and
//! an aggregate's rows are published in insertion order. DEAD rows do not block their
//! aggregate (they went to the dead-letter topic; a replay sends them after later ones).
//!
//! # Running it ([`PollConnection`], [`mark_settled_claims`], [`maintain_leases`])
//! The relay claims, routes and publishes; this crate keeps the rest: connections that
//! reconnect after a backoff and retry lock conflicts at once, the task that marks each
//! settled claim under its token (retried until the shutdown timeout), and the task that
//! renews the leases of the claims in flight every third of the lease, returns anyone's
//! expired leases to PENDING, measures the backlog and deletes SENT rows past the retention.
//!
//! # Servers
//! `SKIP LOCKED` needs MySQL 8.0 or MariaDB 10.6; [`check_server`] refuses older ones.

mod claim;
mod columns;
mod connection;
mod ddl;
mod error;
pub mod internal_events;
mod ledger;
mod retry;
mod server;
mod sql_row;
pub use sql_row::{
    column_names as sql_column_names, column_types as sql_column_types, row_image as sql_row_image,
    sql_row_change,
};
mod tasks;

pub use claim::{
    AdmittedClaim, Claim, ClaimedRow, Failure, FailureOutcome, MarkOutcome, Poller,
    ReplaySelection, RetryPolicy, SettleOutcome, TableStatus, SESSION_SETUP,
};
pub use columns::{PollColumns, RowStatus};
pub use connection::{
    open_poll_session, ConnectionError, ConnectionHealth, ConnectionSettings, PollConnection,
};
pub use ddl::{poll_mode_ddl, poll_mode_ddl_for_relay_table, PollIndexes};
pub use error::PollError;
pub use ledger::{ClaimLedger, RowOutcome, RowTicket, SettledClaim};
pub use retry::{jittered_retry_delay, retry_delay};
pub use server::{check_server, ServerVersion};
pub use tasks::{
    lock_ledger, maintain_leases, mark_settled_claims, LeaseSettings, MarkTask, PolledTable,
    SharedLedger,
};
