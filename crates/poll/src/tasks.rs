//! The poll source's background work, each run as its own task by the relay: marking the
//! settled claims, and keeping the leases (renewal, expiry, backlog, cleanup).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use outbox_binlog::TableName;
use tokio::sync::{mpsc, watch, Notify};

use crate::claim::Poller;
use crate::connection::{stopped, ConnectionError, PollConnection};
use crate::error::PollError;
use crate::internal_events::{BacklogMeasured, ClaimMarked, InternalEvent, LeasesExpired};
use crate::ledger::{ClaimLedger, SettledClaim};
use crate::RetryPolicy;

/// One polled table: its name (shared by its rows), its metrics label and its statements.
#[derive(Debug)]
pub struct PolledTable {
    /// `database.table`, as the router and the dead letters name it.
    pub name: Arc<TableName>,
    /// The same, as metrics label it.
    pub label: String,
    /// Claim, mark, renew, expire, clean up.
    pub poller: Poller,
}

/// The claims in flight, shared by the claim task (opens), the sink's ack callback
/// (settles), the mark task and the lease task (renews).
pub type SharedLedger = Arc<Mutex<ClaimLedger>>;

/// Locks `ledger`. A poisoned lock means a task panicked mid-update, and that failure
/// stops the relay: the ledger is used as it is meanwhile.
pub fn lock_ledger(ledger: &SharedLedger) -> MutexGuard<'_, ClaimLedger> {
    ledger
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the mark task works with besides its connection and channel.
pub struct MarkTask {
    /// The tables, indexed as the claims' `table`.
    pub tables: Arc<[PolledTable]>,
    /// Told when a claim is marked (its lease needs no renewing).
    pub ledger: SharedLedger,
    /// Woken per claim marked (the claim task may claim its aggregates again).
    pub claims_marked: Arc<Notify>,
    /// Backoff and `max_attempts` of rows whose publish failed.
    pub retry: RetryPolicy,
    /// Holds `true` when marks may no longer be retried (the shutdown timeout into a stop).
    pub give_up: watch::Receiver<bool>,
    /// Called before each claim's mark (a test's crash or pause point): how long to pause.
    pub before_mark: Box<dyn Fn() -> Option<Duration> + Send>,
}

/// Marks each settled claim (SENT, DEAD for dead letters, PENDING after a backoff for rows
/// whose publish failed) under its token; a lost connection is reconnected and the same
/// claim marked again. Ends when `settled` closes (the sink is done) and every claim
/// received was marked, or when `give_up` holds: the rows it could not mark are published
/// again once their leases end.
pub async fn mark_settled_claims(
    task: MarkTask,
    mut connection: PollConnection,
    mut settled: mpsc::UnboundedReceiver<SettledClaim>,
) -> Result<(), ConnectionError> {
    let MarkTask {
        tables,
        ledger,
        claims_marked,
        retry,
        mut give_up,
        before_mark,
    } = task;
    while let Some(claim) = settled.recv().await {
        let Some(table) = tables.get(claim.table) else {
            continue;
        };
        if let Some(pause) = before_mark() {
            tokio::time::sleep(pause).await;
        }
        loop {
            let Some(conn) = connection.get(&mut give_up).await? else {
                tracing::warn!(table = %table.name, "stopping with claims not marked: their rows are published again when their leases end");
                return Ok(());
            };
            match table.poller.settle(conn, &claim, &retry).await {
                Ok(outcome) => {
                    lock_ledger(&ledger).marked(claim.number);
                    claims_marked.notify_one();
                    ClaimMarked {
                        table: &table.label,
                        settled: &claim,
                        outcome: &outcome,
                    }
                    .emit();
                    break;
                }
                Err(error) => connection.failed(error)?,
            }
        }
    }
    Ok(())
}

/// What the lease task keeps.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// A claim's lease; renewed every third of it.
    pub lease: Duration,
    /// SENT rows older than this are deleted; `None`: kept.
    pub sent_retention: Option<Duration>,
    /// Rows per cleanup DELETE.
    pub cleanup_batch: u32,
}

/// How often at most the SENT rows past the retention are deleted.
const CLEANUP_EVERY: Duration = Duration::from_secs(60);

/// Every third of the lease: renews the leases of the claims in flight, returns expired
/// leases (anyone's) to PENDING, measures the backlog, and (every minute) deletes SENT rows
/// past the retention; until `stop` holds.
pub async fn maintain_leases(
    tables: Arc<[PolledTable]>,
    ledger: SharedLedger,
    mut connection: PollConnection,
    settings: LeaseSettings,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ConnectionError> {
    let mut tick = tokio::time::interval(settings.lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_cleanup: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => return Ok(()),
            _ = tick.tick() => {}
        }
        let Some(conn) = connection.get(&mut stop).await? else {
            return Ok(());
        };
        let open = lock_ledger(&ledger).open_tokens();
        let cleanup = settings
            .sent_retention
            .filter(|_| last_cleanup.is_none_or(|last| last.elapsed() >= CLEANUP_EVERY));
        let mut result = Ok(());
        for (index, table) in tables.iter().enumerate() {
            let tokens: Vec<&str> = open
                .get(&index)
                .map(|tokens| tokens.iter().map(String::as_str).collect())
                .unwrap_or_default();
            result = async {
                table
                    .poller
                    .renew_leases(conn, &tokens, settings.lease)
                    .await?;
                let expired = table.poller.expire_leases(conn).await?;
                LeasesExpired {
                    table: &table.label,
                    rows: expired,
                }
                .emit();
                let status = table.poller.status(conn).await?;
                BacklogMeasured {
                    table: &table.label,
                    status: &status,
                }
                .emit();
                if let Some(retention) = cleanup {
                    let deleted = table
                        .poller
                        .delete_sent(conn, retention, settings.cleanup_batch)
                        .await?;
                    tracing::debug!(table = %table.name, deleted, "deleted SENT rows past the retention");
                }
                Ok::<(), PollError>(())
            }
            .await;
            if result.is_err() {
                break;
            }
        }
        match result {
            Ok(()) => {
                if cleanup.is_some() {
                    last_cleanup = Some(tokio::time::Instant::now());
                }
            }
            Err(error) => connection.failed(error)?,
        }
    }
}
