//! `outbox-relay poll ddl|status|replay`: the outbox table's poll-mode columns and its
//! rows' delivery states.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};
use outbox_poll::ReplaySelection;

use crate::cli::PollAction;
use crate::config::RelayConfig;
use crate::pipeline::{poll_connection_settings, polled_tables};

/// Runs a `poll` action; returns the exit code.
pub async fn poll_command(action: PollAction, out: &mut dyn Write) -> anyhow::Result<i32> {
    match action {
        PollAction::Ddl { config } => {
            // Any mode: a binlog relay's operator readies the table before switching.
            let config = RelayConfig::load(&config)?;
            let columns = config.source.poll.columns.poll_columns();
            for table in &config.outbox {
                for statement in outbox_poll::poll_mode_ddl_for_relay_table(
                    &table.table,
                    &table.column_mapping(),
                    &columns,
                ) {
                    writeln!(out, "{statement};")?;
                }
            }
            Ok(0)
        }
        PollAction::Status { config } => {
            let config = load(&config)?;
            let mut conn = connect(&config).await?;
            for (table, poller) in polled_tables(&config) {
                let status = poller
                    .status(&mut conn)
                    .await
                    .with_context(|| format!("reading the poll states of {table}"))?;
                let mut line = backlog_fields(&status);
                line.insert("table".into(), table.to_string().into());
                writeln!(out, "{}", serde_json::Value::Object(line))?;
            }
            Ok(0)
        }
        PollAction::Replay {
            config,
            id,
            all,
            since,
        } => {
            let selection = match (id, all, since) {
                (Some(id), _, _) => ReplaySelection::Id(id),
                (None, true, _) => ReplaySelection::All,
                (None, false, Some(since)) => ReplaySelection::Since(checked_utc_time(&since)?),
                (None, false, None) => {
                    bail!("say which DEAD rows to replay: --id ID, --all or --since 'YYYY-MM-DD HH:MM:SS'")
                }
            };
            let config = load(&config)?;
            let mut conn = connect(&config).await?;
            for (table, poller) in polled_tables(&config) {
                let replayed = poller
                    .replay(&mut conn, &selection)
                    .await
                    .with_context(|| format!("replaying DEAD rows of {table}"))?;
                let line = serde_json::json!({"table": table.to_string(), "replayed": replayed});
                writeln!(out, "{line}")?;
            }
            Ok(0)
        }
    }
}

/// A table's backlog as `poll status` and `status` print it.
pub(crate) fn backlog_fields(
    status: &outbox_poll::TableStatus,
) -> serde_json::Map<String, serde_json::Value> {
    let mut fields = serde_json::Map::new();
    fields.insert("pending".into(), status.pending.into());
    fields.insert("processing".into(), status.processing.into());
    fields.insert("dead".into(), status.dead.into());
    fields.insert(
        "oldest_due_wait_seconds".into(),
        status.oldest_due_wait.as_secs_f64().into(),
    );
    fields
}

fn load(path: &Path) -> anyhow::Result<RelayConfig> {
    let config = RelayConfig::load(path)?;
    if config.source.mode != crate::poll_config::SourceMode::Poll {
        bail!(
            "{}: [source] mode is \"binlog\"; `poll` commands read the poll-mode columns of a relay with mode = \"poll\"",
            path.display()
        );
    }
    Ok(config)
}

async fn connect(config: &RelayConfig) -> anyhow::Result<mysql_async::Conn> {
    poll_connection_settings(config)
        .open()
        .await
        .with_context(|| format!("connecting to {}", config.source.redacted_url()))
}

/// `YYYY-MM-DD HH:MM:SS` (the server would read anything else as a zero date and replay
/// every DEAD row).
fn checked_utc_time(text: &str) -> anyhow::Result<String> {
    let bytes = text.as_bytes();
    let shape_ok = bytes.len() == 19
        && bytes.iter().enumerate().all(|(index, byte)| match index {
            4 | 7 => *byte == b'-',
            10 => *byte == b' ',
            13 | 16 => *byte == b':',
            _ => byte.is_ascii_digit(),
        });
    if !shape_ok {
        bail!(
            "--since `{text}` is not a UTC time `YYYY-MM-DD HH:MM:SS`, e.g. `2026-12-06 17:30:00`"
        );
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_only_a_full_utc_time() {
        assert_eq!(
            checked_utc_time("2026-12-06 17:30:00").unwrap(),
            "2026-12-06 17:30:00"
        );
        for bad in [
            "2026-12-06",
            "2026-12-06T17:30:00Z",
            "yesterday",
            "2026-12-06 17:30:0x",
        ] {
            let error = checked_utc_time(bad).unwrap_err().to_string();
            assert!(error.contains("YYYY-MM-DD HH:MM:SS"), "{error}");
        }
    }
}
