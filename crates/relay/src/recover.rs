//! `outbox-relay recover`: publishes the outbox events of archived binlog files, for the
//! case the relay cannot serve itself: the server purged binlog files the checkpoint still
//! needed (see [`crate::RelayError::ResumePointPurged`]).
//!
//! The files are read with [`BinlogFileReader`] (committed transactions only, CRC checked,
//! a truncated or corrupt file is an error naming file and offset), rows are routed exactly
//! as the relay routes them (same topic, key, payload and `id`), and published through the
//! relay's Kafka sink (idempotent producer, retries, dead letters per `[dead_letter]`).
//! With `--after FILE:POS` (the stored checkpoint) only rows after that transaction
//! boundary are published.
//!
//! **Only complete transactions are published.** The files are read twice: a first pass
//! finds the last commit in them (a file copied while the server wrote it, or cut, ends
//! inside a transaction), the second publishes only rows of transactions up to that commit.
//! The rows of a transaction whose commit is not in the files are never published (the
//! server may still have rolled it back, or its commit lives in a complete copy); the JSON
//! summary names them under `incomplete_transaction` (its first row's position, how many
//! rows, the reader's error) and the exit code is 1. Memory stays one event, whatever the
//! size of the transactions.
//!
//! **XA.** The records of a two-phase XA transaction are held until its outcome in the
//! files, as the relay does: published at `XA COMMIT`, dropped at `XA ROLLBACK`
//! (`xa_rolled_back_records`); those whose outcome is not in the files are not published
//! (`xa_unresolved_records`, exit code 1). Held XA records are kept in memory until then. The command returns once Kafka acknowledged every record, so a
//! successful run means the gap is delivered; running it twice delivers twice with the same
//! ids (at-least-once). On a terminal each pass shows its progress on stderr (bytes read
//! of the total, events, rate; [`crate::progress`]); off one, nothing. It never touches the
//! checkpoint: afterwards,
//! `outbox-relay checkpoint set` moves it to the oldest position the server still has.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;
use outbox_binlog::{BinlogFileReader, BinlogPosition, StreamItem, XaBoundary};
use outbox_checkpoint::compare_binlog_positions;
use outbox_router::{RouteOutcome, Router};
use tokio::sync::mpsc;

use crate::commands::describe_files;
use crate::config::{parse_file_position, RelayConfig};
use crate::dead_letter::RecordOrigin;
use crate::metrics::Metrics;
use crate::progress::FileProgress;
use crate::shutdown::ShutdownController;
use crate::sink::{run_kafka_sink, KafkaSinkSettings, OutboundRecord, SinkItem};

/// What the file-reading side of a recovery saw.
#[derive(Debug, Default)]
struct RecoveryScan {
    /// Committed transactions after `--after` (with or without outbox rows).
    transactions: u64,
    /// Records handed to the sink.
    records: u64,
    /// Outbox rows at or before `--after`, not published.
    rows_before_start: u64,
    /// Rows the router skips by design (updates, deletes).
    rows_skipped: u64,
    /// Rows that could not be routed (printed, not published).
    routing_errors: Vec<serde_json::Value>,
    /// The last commit read, `FILE:POS`.
    last_position: Option<String>,
    /// Records of XA transactions rolled back in the files (not published).
    xa_rolled_back_records: u64,
    /// Records of XA transactions whose outcome is not in the files (not published).
    xa_unresolved_records: u64,
}

/// Records of XA transactions, held until their outcome is read (as the relay does,
/// `crate::xa_hold`): a prepared transaction is not complete until its XA COMMIT.
#[derive(Default)]
struct XaRecords {
    /// Records of the XA transaction being read (before its XA PREPARE).
    open: Vec<SinkItem<u64>>,
    /// Prepared transactions' records by XID.
    prepared: std::collections::HashMap<String, Vec<SinkItem<u64>>>,
}

/// Sends one record to the sink (as a batch of one: the sink takes batches), numbering it.
fn send_record(
    records: &mpsc::Sender<Vec<SinkItem<u64>>>,
    scan: &mut RecoveryScan,
    mut item: SinkItem<u64>,
) -> anyhow::Result<()> {
    item.ticket = scan.records;
    scan.records += 1;
    if records.blocking_send(vec![item]).is_err() {
        anyhow::bail!("the Kafka sink stopped while records were still being read");
    }
    Ok(())
}

/// What the first pass found: where the last complete transaction ends, and what follows
/// it that must not be published.
#[derive(Debug, Default)]
struct CompletenessScan {
    /// Position of the last commit in the files (`None`: no transaction completes).
    last_commit: Option<BinlogPosition>,
    /// Watched rows read after that commit (their transaction's commit is missing).
    rows_after_last_commit: u64,
    /// Where the first of those rows is.
    first_row_after_last_commit: Option<BinlogPosition>,
    /// The error the reading ended with, if it did not end at the files' end.
    error: Option<String>,
}

/// The first pass: reads every file to the end (or the first error) and remembers the last
/// commit and the rows after it.
fn find_complete_transactions(
    mut reader: BinlogFileReader,
    mut progress: FileProgress,
) -> CompletenessScan {
    let mut scan = CompletenessScan::default();
    let mut events = 0u64;
    loop {
        let item = reader.next_item();
        if matches!(item, Ok(Some(StreamItem::Row(_)))) {
            events += 1;
        }
        progress.update(reader.bytes_read(), events);
        match item {
            Ok(Some(StreamItem::Row(row))) => {
                scan.rows_after_last_commit += 1;
                if scan.first_row_after_last_commit.is_none() {
                    scan.first_row_after_last_commit = Some(row.event_position);
                }
            }
            Ok(Some(StreamItem::Commit(commit))) => {
                scan.last_commit = Some(commit.position);
                scan.rows_after_last_commit = 0;
                scan.first_row_after_last_commit = None;
            }
            Ok(Some(StreamItem::Heartbeat(_))) => {}
            Ok(None) => return scan,
            Err(error) => {
                scan.error = Some(error.to_string());
                return scan;
            }
        }
    }
}

/// `outbox-relay recover --config FILE [--after FILE:POS] FILES...`: prints one JSON summary
/// line; exit 0 when every routable event was acknowledged and none failed to route.
pub async fn recover_command(
    config_path: &Path,
    after: Option<&str>,
    files: &[PathBuf],
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    let config = RelayConfig::load(config_path)?;
    let router = Router::new(&config.outbox, &config.route)
        .map_err(|e| anyhow::anyhow!("invalid [[outbox]]/[route]: {e}"))?;
    let after = after
        .map(parse_file_position)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--after: {e}"))?;
    let open = || {
        BinlogFileReader::open(files.to_vec(), router.table_filter())
            .with_context(|| format!("opening {}", describe_files(files)))
    };
    let first_pass = open()?;
    // On a terminal only: a progress line per pass on stderr (crate::progress).
    let total_bytes = crate::progress::total_size(files);
    let first_progress = FileProgress::on_stderr("checking the files (pass 1 of 2)", total_bytes);
    let completeness =
        tokio::task::spawn_blocking(move || find_complete_transactions(first_pass, first_progress))
            .await
            .context("the binlog file reader panicked")?;
    let reader = open()?;
    let publish_until = completeness.last_commit.clone();

    let (records_tx, records_rx) = mpsc::channel(config.pipeline.channel_capacity);
    let delivered = Arc::new(AtomicU64::new(0));
    let stop = ShutdownController::new();
    let sink = {
        let delivered = delivered.clone();
        tokio::spawn(run_kafka_sink(
            KafkaSinkSettings::from_relay_config(&config),
            records_rx,
            move |_ticket: u64| {
                delivered.fetch_add(1, Ordering::Relaxed);
            },
            Metrics::new(),
            stop.subscribe(),
        ))
    };
    // The file reader is blocking I/O: its own thread, handing records to the sink. Whatever
    // it ends with, the sink is awaited: what was handed over is delivered (or its failure
    // reported) before the command returns.
    let second_progress = FileProgress::on_stderr("publishing (pass 2 of 2)", total_bytes);
    let scan = tokio::task::spawn_blocking(move || {
        scan_files(
            reader,
            router,
            after,
            publish_until,
            records_tx,
            second_progress,
        )
    })
    .await
    .context("the binlog file reader panicked")?;
    let nothing_to_deliver =
        completeness.error.is_some() && scan.as_ref().is_ok_and(|scan| scan.records == 0);
    if scan.is_err() || nothing_to_deliver {
        // Deliver what was handed over (up to `pipeline.shutdown_timeout_ms`), no longer;
        // with nothing handed over, do not wait for a Kafka cluster at all.
        stop.trigger();
    }
    let sink_result = sink.await.context("the Kafka sink panicked")?;
    let sink_summary = sink_result.context("publishing the recovered records")?;
    let scan = scan.with_context(|| {
        format!(
            "reading the binlog files ({} records before the error were acknowledged)",
            delivered.load(Ordering::Relaxed)
        )
    })?;
    let incomplete = completeness.error.as_ref().map(|error| {
        serde_json::json!({
            "after_position": completeness.last_commit.as_ref().map(ToString::to_string),
            "first_row_position": completeness
                .first_row_after_last_commit
                .as_ref()
                .map(ToString::to_string),
            "rows_not_published": completeness.rows_after_last_commit,
            "error": error,
            "note": "the files end inside a transaction (or cannot be read on): its rows were not published; recover it from a complete copy of the file",
        })
    });
    let summary = serde_json::json!({
        "transactions": scan.transactions,
        "records": scan.records,
        "acknowledged": delivered.load(Ordering::Relaxed),
        "rows_before_after": scan.rows_before_start,
        "rows_skipped": scan.rows_skipped,
        "routing_errors": scan.routing_errors,
        "last_position": scan.last_position,
        "incomplete_transaction": incomplete,
        "xa_rolled_back_records": scan.xa_rolled_back_records,
        "xa_unresolved_records": scan.xa_unresolved_records,
    });
    writeln!(out, "{summary}")?;
    if let Some(error) = &completeness.error {
        anyhow::bail!(
            "reading the binlog files stopped: {error}; the transactions committed before ({}) were published, the {} rows after {} were not",
            scan.transactions,
            completeness.rows_after_last_commit,
            completeness
                .last_commit
                .as_ref()
                .map_or_else(|| "the start".to_owned(), ToString::to_string),
        );
    }
    // Records of a prepared XA transaction whose outcome is not in the files are not
    // published: the recovery is not complete.
    let complete = sink_summary.delivered == scan.records
        && scan.routing_errors.is_empty()
        && scan.xa_unresolved_records == 0;
    Ok(if complete { 0 } else { 1 })
}

/// Reads the files up to the last complete transaction (`publish_until`, from the first
/// pass; `None`: none completes), routes the rows after `after` and sends their records to
/// the sink.
fn scan_files(
    mut reader: BinlogFileReader,
    router: Router,
    after: Option<BinlogPosition>,
    publish_until: Option<BinlogPosition>,
    records: mpsc::Sender<Vec<SinkItem<u64>>>,
    mut progress: FileProgress,
) -> anyhow::Result<RecoveryScan> {
    let mut scan = RecoveryScan::default();
    let Some(publish_until) = publish_until else {
        return Ok(scan);
    };
    let mut xa = XaRecords::default();
    let mut events = 0u64;
    while let Some(item) = reader.next_item()? {
        if matches!(item, StreamItem::Row(_)) {
            events += 1;
        }
        progress.update(reader.bytes_read(), events);
        let last_complete_commit =
            matches!(&item, StreamItem::Commit(commit) if commit.position == publish_until);
        match item {
            StreamItem::Row(row) if !is_after(&row.event_position, after.as_ref())? => {
                scan.rows_before_start += 1
            }
            StreamItem::Row(row) => match router.route(&row) {
                Ok(RouteOutcome::Record(record)) => {
                    let item = SinkItem {
                        record: OutboundRecord::from(record),
                        ticket: 0,
                        origin: RecordOrigin::of_row(&row),
                    };
                    if row.in_xa_transaction {
                        xa.open.push(item);
                    } else {
                        send_record(&records, &mut scan, item)?;
                    }
                }
                Ok(RouteOutcome::Skipped { .. }) => scan.rows_skipped += 1,
                Err(error) => scan.routing_errors.push(serde_json::json!({
                    "event_id": error.event_id,
                    "table": error.table.to_string(),
                    "column": error.column,
                    "error": error.to_string(),
                    "binlog_position": row.event_position.to_string(),
                })),
            },
            StreamItem::Commit(commit) => {
                match commit.xa {
                    Some(XaBoundary::Prepare { xid }) => {
                        let open = std::mem::take(&mut xa.open);
                        if !open.is_empty() {
                            xa.prepared.insert(xid, open);
                        }
                    }
                    Some(XaBoundary::Commit { xid }) => {
                        for item in xa.prepared.remove(&xid).unwrap_or_default() {
                            send_record(&records, &mut scan, item)?;
                        }
                    }
                    Some(XaBoundary::Rollback { xid }) => {
                        let dropped = xa.prepared.remove(&xid).unwrap_or_default();
                        scan.xa_rolled_back_records += dropped.len() as u64;
                    }
                    // An ordinary commit (a one-phase XA commit among them).
                    None => {
                        for item in std::mem::take(&mut xa.open) {
                            send_record(&records, &mut scan, item)?;
                        }
                    }
                }
                if is_after(&commit.position, after.as_ref())? {
                    scan.transactions += 1;
                    scan.last_position = Some(commit.position.to_string());
                }
            }
            StreamItem::Heartbeat(_) => {}
        }
        if last_complete_commit {
            // What follows belongs to a transaction whose commit is not in the files.
            break;
        }
    }
    scan.xa_unresolved_records = xa.prepared.values().map(|items| items.len() as u64).sum();
    Ok(scan)
}

/// Whether `position` comes after `after` (always, without `--after`). Positions that cannot
/// be ordered (another binlog base name: `--after` belongs to other files) are an error,
/// not a guess that could skip rows.
fn is_after(position: &BinlogPosition, after: Option<&BinlogPosition>) -> anyhow::Result<bool> {
    let Some(after) = after else {
        return Ok(true);
    };
    match compare_binlog_positions(position, after) {
        Some(order) => Ok(order.is_gt()),
        None => anyhow::bail!(
            "--after {after} cannot be ordered against {position} read from the files: pass a position of these binlog files"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_compares_file_numbers_then_offsets_and_refuses_other_files() {
        let at = |file: &str, position| BinlogPosition::new(file, position);
        let after = |position: BinlogPosition, start: BinlogPosition| {
            is_after(&position, Some(&start)).unwrap()
        };
        assert!(after(at("binlog.000010", 4), at("binlog.000009", 900)));
        assert!(after(at("binlog.1000000", 4), at("binlog.999999", 4)));
        assert!(!after(at("binlog.000002", 100), at("binlog.000002", 200)));
        assert!(!after(at("binlog.000002", 200), at("binlog.000002", 200)));
        assert!(is_after(&at("binlog.000002", 200), None).unwrap());
        let error = is_after(&at("binlog.000002", 4), Some(&at("mysql-bin.000001", 4)))
            .unwrap_err()
            .to_string();
        assert!(error.contains("mysql-bin.000001:4"), "{error}");
    }
}
