//! `[source] on_purged = "fill_from_table"`: the way out of a purged checkpoint position
//! that needs no archived binlog files, because the outbox table still holds the rows.
//!
//! # Order
//! The reader is connected at the server's current position **before** the table is read,
//! so every transaction is either before that position (committed before the table's read
//! began, so its rows are in the read) or after it (read from the binlog): none falls
//! between. The fill publishes every row whose timestamp column is at or after the
//! checkpoint's time less `[source] fill_margin_s` (transactions open that long when the
//! checkpoint was taken), waits for Kafka to acknowledge them all, and only then hands the
//! reader to the pipeline; the checkpoint moves on with the first transaction acked after
//! it. A crash before that fills again: at-least-once, same ids.
//!
//! # What it cannot see
//! A row deleted before the fill is gone. The writer's cleanup deletes only rows older than
//! the stored checkpoint's time less its `safety_margin`, oldest first; with `fill_margin_s`
//! below that margin, the rows between the two stay and prove that nothing in the fill's
//! window was deleted. A table without any row older than the window cannot prove it: the
//! fill says so at error level and counts `outbox_relay_gap_unrecoverable_total` (an idle
//! table looks the same, so it is a warning to audit, not a stop).

use outbox_audit::{check_table, has_row_before, AuditWindow, UtcTime, WindowRows};
use outbox_checkpoint::Checkpoint;
use outbox_router::{RouteOutcome, Router};

use super::error::RelayError;
use super::router_task::routing_dead_letter;
use crate::audit_command::audit_tables;
use crate::config::RelayConfig;
use crate::dead_letter::RecordOrigin;
use crate::internal_events::{GapFilled, GapUnrecoverable, InternalEvent};
use crate::metrics::Metrics;
use crate::sink::OutboundRecord;
use crate::table_fill::TableFill;

/// Rows per statement of the fill's walk.
const FILL_PAGE_ROWS: u32 = 2_000;

fn gap_fill_error(error: impl std::fmt::Display) -> RelayError {
    RelayError::GapFill(error.to_string())
}

/// Whether every `[[outbox]]` table can be filled from (the event id and timestamp columns,
/// an index that starts with the timestamp column): checked at startup and by `check` when
/// `on_purged = "fill_from_table"`, so a table that cannot be filled is found before a
/// purge needs it. `Err` names the table and the fix.
pub(crate) async fn check_fill_ready(config: &RelayConfig) -> Result<(), String> {
    let mut conn = crate::pipeline::poll_connection_settings(config)
        .open()
        .await
        .map_err(|error| format!("connecting to {}: {error}", config.source.redacted_url()))?;
    for table in audit_tables(config) {
        check_table(&mut conn, &table)
            .await
            .map_err(|error| error.to_string())?;
    }
    Ok(())
}

/// Publishes every `[[outbox]]` table's rows written since `checkpoint` (less the margin)
/// and waits for their acknowledgements. Call it with the reader already connected at the
/// server's current position.
pub(super) async fn fill_gap_from_table(
    config: &RelayConfig,
    router: &Router,
    checkpoint: &Checkpoint,
    metrics: &Metrics,
) -> Result<(), RelayError> {
    let checkpoint_seconds = i64::from(checkpoint.position.timestamp);
    if checkpoint_seconds == 0 {
        return Err(gap_fill_error(format!(
            "the stored checkpoint ({}) has no transaction time (it was set at a position by hand), so the fill cannot tell which rows came after it; recover from archived binlogs (`outbox-relay recover`) or set the checkpoint knowingly",
            checkpoint.position.binlog
        )));
    }
    let margin = i64::try_from(config.source.fill_margin_s).unwrap_or(i64::MAX);
    let since = UtcTime::from_unix_micros(
        checkpoint_seconds
            .saturating_sub(margin)
            .saturating_mul(1_000_000),
    );
    let since_text = since.to_string();
    let mut conn = crate::pipeline::poll_connection_settings(config)
        .open()
        .await
        .map_err(|error| {
            gap_fill_error(format!(
                "connecting to {}: {error}",
                config.source.redacted_url()
            ))
        })?;
    let window = AuditWindow {
        since: Some(since),
        until: None,
    };
    let fill = TableFill::start(config);
    let mut filled_per_table = Vec::new();
    let walk = async {
        for table in audit_tables(config) {
            check_table(&mut conn, &table)
                .await
                .map_err(gap_fill_error)?;
            let proven = has_row_before(&mut conn, &table, since)
                .await
                .map_err(gap_fill_error)?;
            let mut rows = WindowRows::new(&table, &window, FILL_PAGE_ROWS);
            let mut published = 0u64;
            while let Some(page) = rows.next_page(&mut conn).await.map_err(gap_fill_error)? {
                let mut records = Vec::with_capacity(page.len());
                for row in page {
                    let origin = RecordOrigin::of_row(&row.change);
                    match router.route(&row.change) {
                        Ok(RouteOutcome::Record(record)) => {
                            records.push((OutboundRecord::from(record), origin));
                        }
                        Ok(RouteOutcome::Skipped { .. }) => {}
                        Err(error) if !config.dead_letter.dead_letters("routing") => {
                            return Err(RelayError::Routing(Box::new(error)));
                        }
                        Err(error) => {
                            let (letter, _) = routing_dead_letter(
                                &error,
                                &row.change,
                                &config.dead_letter,
                                metrics,
                            );
                            records.push((letter, origin));
                        }
                    }
                }
                published += records.len() as u64;
                if fill.publish(records).await.is_err() {
                    // The sink's own error comes from `finish`.
                    break;
                }
            }
            filled_per_table.push((table.name.to_string(), published, proven));
        }
        Ok(())
    }
    .await;
    let acknowledged = fill.finish(walk.is_err()).await;
    walk?;
    let acknowledged = acknowledged.map_err(gap_fill_error)?;
    let handed_over: u64 = filled_per_table.iter().map(|(_, rows, _)| rows).sum();
    if acknowledged != handed_over {
        return Err(gap_fill_error(format!(
            "Kafka acknowledged {acknowledged} of the {handed_over} records"
        )));
    }
    for (table, rows, proven) in &filled_per_table {
        GapFilled {
            table,
            rows: *rows,
            since: &since_text,
        }
        .emit(metrics);
        if !proven {
            GapUnrecoverable {
                table,
                since: &since_text,
            }
            .emit(metrics);
        }
    }
    Ok(())
}
