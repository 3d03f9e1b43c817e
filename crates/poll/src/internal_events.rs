//! Internal events (as in `outbox-binlog`): each thing worth telling an operator about the
//! polling source is a struct whose [`InternalEvent::emit`] logs it and counts it in one
//! place.
//!
//! # Metrics
//! The collectors are process-wide; [`register_metrics`] adds them to the relay's registry.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `outbox_poll_claims_total{table}` | counter | claims that took at least one row |
//! | `outbox_poll_claimed_rows_total{table}` | counter | rows claimed (attempts started) |
//! | `outbox_poll_rows_settled_total{table,outcome}` | counter | claimed rows marked `sent`, `dead` (dead-lettered, or `max_attempts` reached), or `retrying` (PENDING again after a failed publish) |
//! | `outbox_poll_fencing_rejections_total{table}` | counter | rows a relay could not mark because its claim's lease had ended and the row was reclaimed: their publish was a duplicate |
//! | `outbox_poll_lease_expiries_total{table}` | counter | PROCESSING rows returned to PENDING because their lease ended (a relay died or lost the database) |
//! | `outbox_poll_rows{table,status}` | gauge | rows `pending`, `processing`, `dead` (measured every third of the lease) |
//! | `outbox_poll_oldest_pending_age_seconds{table}` | gauge | how long the oldest due PENDING row has waited |
//! | `outbox_poll_attempts` | histogram | attempts a row took, observed when it is marked SENT or DEAD |

use std::sync::LazyLock;

use prometheus::{GaugeVec, Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::claim::{SettleOutcome, TableStatus};
use crate::ledger::SettledClaim;

/// Something that happened, logged and counted by [`InternalEvent::emit`].
pub trait InternalEvent {
    /// Logs the event and updates its metrics.
    fn emit(self);
}

/// The polling source's collectors.
struct PollMetrics {
    claims: IntCounterVec,
    claimed_rows: IntCounterVec,
    rows_settled: IntCounterVec,
    fencing_rejections: IntCounterVec,
    lease_expiries: IntCounterVec,
    rows: IntGaugeVec,
    oldest_pending_age_seconds: GaugeVec,
    attempts: Histogram,
}

impl PollMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(format!("outbox_poll_{name}"), help), labels)
        };
        Ok(Self {
            claims: counter(
                "claims_total",
                "Claims that took at least one row",
                &["table"],
            )?,
            claimed_rows: counter("claimed_rows_total", "Rows claimed", &["table"])?,
            rows_settled: counter(
                "rows_settled_total",
                "Claimed rows marked sent, dead or retrying",
                &["table", "outcome"],
            )?,
            fencing_rejections: counter(
                "fencing_rejections_total",
                "Rows a relay could not mark: its lease had ended and the row was reclaimed",
                &["table"],
            )?,
            lease_expiries: counter(
                "lease_expiries_total",
                "PROCESSING rows returned to PENDING because their lease ended",
                &["table"],
            )?,
            rows: IntGaugeVec::new(
                Opts::new(
                    "outbox_poll_rows",
                    "Rows pending, processing or dead in the outbox table",
                ),
                &["table", "status"],
            )?,
            oldest_pending_age_seconds: GaugeVec::new(
                Opts::new(
                    "outbox_poll_oldest_pending_age_seconds",
                    "How long the oldest due PENDING row has waited",
                ),
                &["table"],
            )?,
            attempts: Histogram::with_opts(
                HistogramOpts::new(
                    "outbox_poll_attempts",
                    "Attempts a row took, observed when it is marked SENT or DEAD",
                )
                .buckets(vec![1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0]),
            )?,
        })
    }
}

static METRICS: LazyLock<Result<PollMetrics, prometheus::Error>> = LazyLock::new(PollMetrics::new);

fn metrics() -> Option<&'static PollMetrics> {
    METRICS.as_ref().ok()
}

/// Registers this crate's collectors into `registry` (the relay owns the registry). Fails
/// if they are already registered there.
pub fn register_metrics(registry: &Registry) -> Result<(), prometheus::Error> {
    let metrics = METRICS
        .as_ref()
        .map_err(|error| prometheus::Error::Msg(error.to_string()))?;
    let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
        Box::new(metrics.claims.clone()),
        Box::new(metrics.claimed_rows.clone()),
        Box::new(metrics.rows_settled.clone()),
        Box::new(metrics.fencing_rejections.clone()),
        Box::new(metrics.lease_expiries.clone()),
        Box::new(metrics.rows.clone()),
        Box::new(metrics.oldest_pending_age_seconds.clone()),
        Box::new(metrics.attempts.clone()),
    ];
    for collector in collectors {
        registry.register(collector)?;
    }
    Ok(())
}

/// A claim took rows.
#[derive(Debug)]
pub struct RowsClaimed<'a> {
    /// `database.table`.
    pub table: &'a str,
    /// How many.
    pub rows: usize,
}

impl InternalEvent for RowsClaimed<'_> {
    fn emit(self) {
        tracing::trace!(table = self.table, rows = self.rows, "rows claimed");
        if let Some(metrics) = metrics() {
            metrics.claims.with_label_values(&[self.table]).inc();
            metrics
                .claimed_rows
                .with_label_values(&[self.table])
                .inc_by(self.rows as u64);
        }
    }
}

/// A claim was marked.
#[derive(Debug)]
pub struct ClaimMarked<'a> {
    /// `database.table`.
    pub table: &'a str,
    /// The claim.
    pub settled: &'a SettledClaim,
    /// What the marks did.
    pub outcome: &'a SettleOutcome,
}

impl InternalEvent for ClaimMarked<'_> {
    fn emit(self) {
        let outcome = self.outcome;
        if outcome.fenced > 0 {
            tracing::warn!(
                table = self.table,
                fenced = outcome.fenced,
                "rows of a claim were reclaimed after its lease ended: their publish was a duplicate (same ids)"
            );
        }
        if outcome.retrying + outcome.dead > 0 {
            let reason = self
                .settled
                .failed
                .first()
                .or(self.settled.dead.first())
                .map(|(_, reason)| reason.as_str())
                .unwrap_or("");
            tracing::warn!(
                table = self.table,
                retrying = outcome.retrying,
                dead = outcome.dead,
                reason,
                "rows not delivered: back to PENDING with a backoff, or DEAD (dead-lettered, or max_attempts reached)"
            );
        }
        let Some(metrics) = metrics() else {
            return;
        };
        for (label, count) in [
            ("sent", outcome.marked),
            ("dead", outcome.dead),
            ("retrying", outcome.retrying),
        ] {
            if count > 0 {
                metrics
                    .rows_settled
                    .with_label_values(&[self.table, label])
                    .inc_by(count);
            }
        }
        if outcome.fenced > 0 {
            metrics
                .fencing_rejections
                .with_label_values(&[self.table])
                .inc_by(outcome.fenced);
        }
        // Rows that end here (SENT or DEAD); those retrying are observed when they end.
        for row in &self.settled.claim.rows {
            let retrying = self
                .settled
                .failed
                .iter()
                .any(|(failed, _)| failed.sequence == row.sequence);
            if !retrying {
                metrics.attempts.observe(f64::from(row.attempts));
            }
        }
    }
}

/// Leases ended: PROCESSING rows returned to PENDING.
#[derive(Debug)]
pub struct LeasesExpired<'a> {
    /// `database.table`.
    pub table: &'a str,
    /// How many rows.
    pub rows: u64,
}

impl InternalEvent for LeasesExpired<'_> {
    fn emit(self) {
        if self.rows == 0 {
            return;
        }
        tracing::warn!(
            table = self.table,
            rows = self.rows,
            "leases ended (a relay stopped or lost the database): the rows are claimable again"
        );
        if let Some(metrics) = metrics() {
            metrics
                .lease_expiries
                .with_label_values(&[self.table])
                .inc_by(self.rows);
        }
    }
}

/// A table's backlog was measured.
#[derive(Debug)]
pub struct BacklogMeasured<'a> {
    /// `database.table`.
    pub table: &'a str,
    /// The counts.
    pub status: &'a TableStatus,
}

impl InternalEvent for BacklogMeasured<'_> {
    fn emit(self) {
        let status = self.status;
        tracing::trace!(table = self.table, ?status, "poll backlog");
        let Some(metrics) = metrics() else {
            return;
        };
        for (label, count) in [
            ("pending", status.pending),
            ("processing", status.processing),
            ("dead", status.dead),
        ] {
            metrics
                .rows
                .with_label_values(&[self.table, label])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        metrics
            .oldest_pending_age_seconds
            .with_label_values(&[self.table])
            .set(status.oldest_due_wait.as_secs_f64());
    }
}
