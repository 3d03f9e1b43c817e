//! `outbox-relay audit`: the outbox rows of a window against the records in their topics
//! (`outbox-audit`), and with `--fill` the missing rows published through the relay's
//! Kafka sink (idempotent producer, retries, dead letters per `[dead_letter]`).
//!
//! Prints one JSON line per finding and a summary line last. The fill never touches the
//! checkpoint: a filled event may reach Kafka twice (a relay that was only late publishes
//! it too), always with the same id.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use outbox_audit::{Audit, AuditSettings, AuditTable, AuditWindow, Finding, UtcTime};
use outbox_router::Router;

use crate::config::RelayConfig;
use crate::dead_letter::RecordOrigin;
use crate::progress::FileProgress;
use crate::sink::OutboundRecord;
use crate::table_fill::TableFill;

/// How far back the window ends by default: events the relay is publishing now are not
/// missing.
pub const DEFAULT_UNTIL_AGO: Duration = Duration::from_secs(60);

/// The command's options (see `cli::Command::Audit`).
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// The window's start, UTC text.
    pub since: Option<String>,
    /// The window's end, UTC text (default: a minute ago).
    pub until: Option<String>,
    /// Publish the missing rows.
    pub fill: bool,
    /// Rows per statement of the table walk.
    pub page_rows: u32,
    /// The topics are read from this long before `since`.
    pub kafka_margin: Duration,
    /// Where to write the summary as Prometheus metrics (node_exporter's textfile
    /// collector), for a scheduled audit's alerts.
    pub metrics_file: Option<std::path::PathBuf>,
}

/// The window the options name; `Err` says which option is wrong and how.
fn window(options: &AuditOptions) -> anyhow::Result<AuditWindow> {
    let since = options
        .since
        .as_deref()
        .map(UtcTime::parse)
        .transpose()
        .map_err(|problem| anyhow::anyhow!("--since: {problem}"))?;
    let until = match options.until.as_deref() {
        Some(text) => {
            UtcTime::parse(text).map_err(|problem| anyhow::anyhow!("--until: {problem}"))?
        }
        None => UtcTime::now().minus(DEFAULT_UNTIL_AGO),
    };
    if let Some(since) = since {
        if since >= until {
            bail!("--since {since} is not before the window's end {until}: nothing to audit");
        }
    }
    Ok(AuditWindow {
        since,
        until: Some(until),
    })
}

/// The `[[outbox]]` tables as the audit and the gap fill read them, in config order.
pub(crate) fn audit_tables(config: &RelayConfig) -> Vec<AuditTable> {
    config
        .outbox
        .iter()
        .map(|table| AuditTable {
            name: Arc::new(table.table.clone()),
            mapping: table.column_mapping(),
        })
        .collect()
}

/// `outbox-relay audit --config FILE [--since T] [--until T] [--fill]`: exit 0 when nothing
/// is missing (with `--fill`: when every missing row was published and acknowledged).
pub async fn audit_command(
    config_path: &Path,
    options: &AuditOptions,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    let config = RelayConfig::load(config_path)?;
    let router = Router::new(&config.outbox, &config.route)
        .map_err(|e| anyhow::anyhow!("invalid [[outbox]]/[route]: {e}"))?;
    let window = window(options)?;
    if options.page_rows == 0 {
        bail!("--page-rows must be at least 1");
    }
    let mut conn = crate::pipeline::poll_connection_settings(&config)
        .open()
        .await
        .with_context(|| format!("connecting to {}", config.source.redacted_url()))?;
    let tables = audit_tables(&config);
    let settings = AuditSettings {
        page_rows: options.page_rows,
        kafka_margin: options.kafka_margin,
        event_id_encoding: config.route.event_id_encoding,
        ..AuditSettings::default()
    };
    let mut audit = Audit::new(&router, tables, settings, window);

    // Findings go out as they are found; the first failing write ends the command.
    let mut write_failure: Option<std::io::Error> = None;
    let mut write_finding = |finding: Finding, out: &mut dyn Write| {
        if write_failure.is_none() {
            let line = serde_json::to_string(&finding).unwrap_or_default();
            if let Err(error) = writeln!(out, "{line}") {
                write_failure = Some(error);
            }
        }
    };
    let mut progress = FileProgress::on_stderr("audit: reading the outbox rows", 0);
    audit
        .read_rows(
            &mut conn,
            &mut |finding| write_finding(finding, out),
            &mut |summary| progress.update(0, summary.rows),
        )
        .await?;
    progress.restart("audit: reading the topics");
    let mut consumer = outbox_kafka::dead_letter::consumer_config(&config.kafka);
    consumer.set(
        "group.id",
        format!("outbox-relay-audit-{}", std::process::id()),
    );
    audit
        .read_topics(
            &mut conn,
            consumer,
            &mut |finding| write_finding(finding, out),
            &mut |summary| progress.update(0, summary.records_read),
        )
        .await?;
    progress.finish();

    let fill = options.fill.then(|| TableFill::start(&config));
    let mut walk_result = Ok(());
    loop {
        match audit.next_missing(&mut conn).await {
            Ok(Some(page)) => {
                let mut records = Vec::with_capacity(page.len());
                for missing in page {
                    write_finding(missing.finding, out);
                    let origin = RecordOrigin::of_row(&missing.row);
                    records.push((OutboundRecord::from(missing.record), origin));
                }
                if let Some(fill) = &fill {
                    if fill.publish(records).await.is_err() {
                        walk_result = Err(anyhow::anyhow!(
                            "the Kafka sink stopped while missing rows were still being read"
                        ));
                        break;
                    }
                }
            }
            Ok(None) => break,
            Err(error) => {
                walk_result = Err(anyhow::Error::from(error));
                break;
            }
        }
    }
    let filled = match fill {
        Some(fill) => Some(
            fill.finish(walk_result.is_err())
                .await
                .context("publishing the missing rows")?,
        ),
        None => None,
    };
    walk_result.context("reading the missing rows")?;
    if let Some(error) = write_failure {
        return Err(error).context("writing the report");
    }
    let summary = audit.summary();
    writeln!(
        out,
        "{}",
        serde_json::json!({ "summary": summary, "filled": filled })
    )?;
    if let Some(path) = &options.metrics_file {
        write_metrics_file(path, &config.checkpoint.connector, summary, filled)
            .with_context(|| format!("writing --metrics-file {}", path.display()))?;
    }
    let complete = summary.missing == 0 || filled == Some(summary.missing);
    Ok(if complete { 0 } else { 1 })
}

/// The audit's counts as Prometheus text, labelled with the connector's name: written to
/// a temporary file and renamed, so a collector never reads half of it.
fn write_metrics_file(
    path: &Path,
    connector: &str,
    summary: &outbox_audit::AuditSummary,
    filled: Option<u64>,
) -> anyhow::Result<()> {
    let registry = prometheus::Registry::new();
    let gauge = |name: &str, help: &str, value: f64| -> anyhow::Result<()> {
        let gauge = prometheus::Gauge::with_opts(
            prometheus::Opts::new(format!("outbox_relay_audit_{name}"), help)
                .const_label("connector", connector),
        )?;
        gauge.set(value);
        registry.register(Box::new(gauge))?;
        Ok(())
    };
    gauge(
        "rows",
        "Outbox rows in the last audit's window",
        summary.rows as f64,
    )?;
    gauge(
        "missing_events",
        "Rows of the last audit's window with no record in Kafka",
        summary.missing as f64,
    )?;
    gauge(
        "filled_events",
        "Missing rows the last audit published again (--fill) and Kafka acknowledged",
        filled.unwrap_or(0) as f64,
    )?;
    gauge(
        "differing_records",
        "Records of the last audit whose topic, key or payload differ from their row",
        summary.differs as f64,
    )?;
    gauge(
        "rowless_records",
        "Records of the last audit's window whose id no outbox table has",
        summary.no_row as f64,
    )?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64());
    gauge(
        "last_success_timestamp_seconds",
        "When the last audit finished (Unix seconds)",
        now,
    )?;
    let mut text = Vec::new();
    prometheus::Encoder::encode(
        &prometheus::TextEncoder::new(),
        &registry.gather(),
        &mut text,
    )?;
    let partial = path.with_extension("prom.partial");
    std::fs::write(&partial, &text)?;
    std::fs::rename(&partial, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(since: Option<&str>, until: Option<&str>) -> AuditOptions {
        AuditOptions {
            since: since.map(str::to_owned),
            until: until.map(str::to_owned),
            fill: false,
            page_rows: 10,
            kafka_margin: Duration::ZERO,
            metrics_file: None,
        }
    }

    #[test]
    fn the_window_is_checked_before_anything_is_read() {
        let error = window(&options(Some("2026-12-06"), None)).unwrap_err();
        assert!(error.to_string().starts_with("--since: "), "{error}");
        let error = window(&options(None, Some("soon"))).unwrap_err();
        assert!(error.to_string().starts_with("--until: "), "{error}");
        let error = window(&options(
            Some("2026-12-06 10:00:00"),
            Some("2026-12-06 09:00:00"),
        ))
        .unwrap_err();
        assert!(error.to_string().contains("is not before"), "{error}");
        let open_start = window(&options(None, Some("2026-12-06 10:00:00"))).unwrap();
        assert_eq!(open_start.since, None);
        let default_end = window(&options(Some("2026-12-06 10:00:00"), None)).unwrap();
        assert!(default_end
            .until
            .is_some_and(|until| until < UtcTime::now()));
    }
}
