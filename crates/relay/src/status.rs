//! `outbox-relay status --config FILE [--json]`: what a person (or a script) needs to know
//! about one relay at a glance: the stored checkpoint and its age, the source server's view
//! (binlog bytes behind, purge horizon), and the running relay's own view from its HTTP
//! endpoint (`/readyz` checks, seconds behind source, the oldest unacked event, in flight).
//!
//! Each part is gathered on its own: an unreachable source or relay is reported as such,
//! the others are still shown. Exit status 0 when the running relay reports ready, 1
//! otherwise (not ready, or not reachable).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::RelayConfig;
use crate::redact::redact_secrets;
use crate::stores::open_checkpoint_store;

/// How long the status command waits for the running relay's endpoint.
const RELAY_TIMEOUT: Duration = Duration::from_secs(5);

/// A finite number as JSON, `null` for `±Inf`/NaN (no limit, or not measured).
fn finite(value: f64) -> Value {
    if value.is_finite() {
        json!(value)
    } else {
        Value::Null
    }
}

/// `GET path` on `address` (HTTP/1.0, so the server closes after the answer): (status, body).
async fn http_get(address: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<String, std::io::Error>(response)
    };
    let response = tokio::time::timeout(RELAY_TIMEOUT, exchange)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {RELAY_TIMEOUT:?}"))??;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("not an HTTP response")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .context("no HTTP status")?;
    Ok((status, body.to_string()))
}

/// The address to reach `listen` from this host (`0.0.0.0` -> `127.0.0.1`).
fn reachable_address(listen: &std::net::SocketAddr) -> String {
    let ip = if listen.ip().is_unspecified() {
        match listen {
            std::net::SocketAddr::V4(_) => "127.0.0.1".to_string(),
            std::net::SocketAddr::V6(_) => "[::1]".to_string(),
        }
    } else {
        match listen {
            std::net::SocketAddr::V4(v4) => v4.ip().to_string(),
            std::net::SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
        }
    };
    format!("{ip}:{}", listen.port())
}

/// The running relay's view: readiness and a few samples of its `/metrics`.
async fn relay_view(config: &RelayConfig) -> Value {
    let Some(listen) = config.metrics_listen() else {
        return json!({"error": "no [metrics] listen configured: the running relay cannot be asked"});
    };
    let address = reachable_address(&listen);
    let readiness = match http_get(&address, "/readyz").await {
        Ok((_, body)) => serde_json::from_str::<Value>(&body)
            .unwrap_or_else(|e| json!({"ready": false, "error": format!("bad /readyz body: {e}")})),
        Err(error) => {
            return json!({"address": address, "error": format!("not reachable: {error:#}")})
        }
    };
    let samples: HashMap<String, f64> = match http_get(&address, "/metrics").await {
        Ok((_, body)) => body
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (name, value) = line.rsplit_once(' ')?;
                Some((name.to_string(), value.parse().ok()?))
            })
            .collect(),
        Err(_) => HashMap::new(),
    };
    let sample = |name: &str| samples.get(name).copied().map_or(Value::Null, finite);
    json!({
        "address": address,
        "ready": readiness.get("ready").cloned().unwrap_or(Value::Bool(false)),
        "checks": readiness,
        "seconds_behind_source": sample("outbox_relay_source_seconds_behind"),
        "oldest_unacked_age_seconds": sample("outbox_relay_oldest_unacked_age_seconds"),
        "in_flight_records": sample("outbox_relay_in_flight"),
        "records_delivered": sample("outbox_relay_records_delivered_total"),
    })
}

/// Gathers the status of the relay `path` configures.
pub async fn gather_status(config: &RelayConfig) -> Value {
    if config.source.mode == crate::poll_config::SourceMode::Poll {
        return json!({"poll": poll_view(config).await, "relay": relay_view(config).await});
    }
    let checkpoint = match open_checkpoint_store(&config.checkpoint, &config.kafka).await {
        Ok(store) => match store.load().await {
            Ok(Some(checkpoint)) => Some(checkpoint),
            Ok(None) => None,
            Err(error) => {
                return json!({"checkpoint": {"error": redact_secrets(&error.to_string())}, "relay": relay_view(config).await})
            }
        },
        Err(error) => {
            return json!({"checkpoint": {"error": redact_secrets(&error.to_string())}, "relay": relay_view(config).await})
        }
    };
    let checkpoint_json = checkpoint.as_ref().map_or(Value::Null, |checkpoint| {
        json!({
            "position": checkpoint.position.binlog.to_string(),
            "gtid_set": checkpoint.position.gtid_set.to_string(),
            "transaction_timestamp": checkpoint.position.timestamp,
            "age_seconds": finite(crate::internal_events::lag_seconds(checkpoint.position.timestamp, false)),
        })
    });
    let source = match &checkpoint {
        None => {
            json!({"error": "no checkpoint stored yet: nothing to measure the purge horizon from"})
        }
        Some(checkpoint) => {
            let mut first_events = HashMap::new();
            match crate::purge_horizon::measure(
                &config.source.connection_url(),
                &config.source.tls_options(),
                &checkpoint.position.binlog.file,
                checkpoint.position.binlog.position,
                &mut first_events,
            )
            .await
            {
                Ok(horizon) => json!({
                    "server": config.source.redacted_url(),
                    "binlog_bytes_behind": horizon.bytes_behind,
                    "purge_horizon_seconds": finite(horizon.seconds),
                    "purge_horizon_bytes": finite(horizon.bytes),
                }),
                Err(error) => {
                    json!({"server": config.source.redacted_url(), "error": redact_secrets(&error.to_string())})
                }
            }
        }
    };
    json!({
        "checkpoint": checkpoint_json,
        "source": source,
        "relay": relay_view(config).await,
    })
}

/// Renders one JSON value for a person: `key: value` lines, nested objects indented.
fn write_human(out: &mut dyn Write, value: &Value, indent: usize) -> std::io::Result<()> {
    if let Value::Object(map) = value {
        for (key, inner) in map {
            match inner {
                Value::Object(_) => {
                    writeln!(out, "{:indent$}{key}:", "")?;
                    write_human(out, inner, indent + 2)?;
                }
                Value::Null => writeln!(out, "{:indent$}{key}: -", "")?,
                Value::String(text) => writeln!(out, "{:indent$}{key}: {text}", "")?,
                other => writeln!(out, "{:indent$}{key}: {other}", "")?,
            }
        }
    }
    Ok(())
}

/// Poll mode has no checkpoint: each outbox table's backlog instead.
async fn poll_view(config: &RelayConfig) -> Value {
    let connected = crate::pipeline::poll_connection_settings(config)
        .open()
        .await;
    let mut conn = match connected {
        Ok(conn) => conn,
        Err(error) => {
            return json!({"server": config.source.redacted_url(), "error": redact_secrets(&error.to_string())})
        }
    };
    let mut tables = serde_json::Map::new();
    for (table, poller) in crate::pipeline::polled_tables(config) {
        let view = match poller.status(&mut conn).await {
            Ok(status) => Value::Object(crate::poll_commands::backlog_fields(&status)),
            Err(error) => json!({"error": redact_secrets(&error.to_string())}),
        };
        tables.insert(table.to_string(), view);
    }
    let _ = conn.disconnect().await;
    json!({"server": config.source.redacted_url(), "tables": tables})
}

/// `status`: prints the status (JSON with `json`), returns 0 when the relay is ready.
pub async fn status_command(path: &Path, json: bool, out: &mut dyn Write) -> anyhow::Result<i32> {
    let config = RelayConfig::load(path)?;
    let status = gather_status(&config).await;
    if json {
        writeln!(out, "{status}")?;
    } else {
        write_human(out, &status, 0)?;
    }
    let ready = status["relay"]["ready"] == Value::Bool(true);
    Ok(if ready { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_listen_addresses_are_asked_on_loopback() {
        assert_eq!(
            reachable_address(&"0.0.0.0:9187".parse().unwrap()),
            "127.0.0.1:9187"
        );
        assert_eq!(
            reachable_address(&"10.1.2.3:9187".parse().unwrap()),
            "10.1.2.3:9187"
        );
        assert_eq!(
            reachable_address(&"[::]:9187".parse().unwrap()),
            "[::1]:9187"
        );
    }

    #[test]
    fn human_output_nests_and_marks_missing_values() {
        let mut out = Vec::new();
        write_human(
            &mut out,
            &json!({"checkpoint": {"position": "binlog.000001:4", "age_seconds": null}, "ready": true}),
            0,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "checkpoint:\n  age_seconds: -\n  position: binlog.000001:4\nready: true\n"
        );
    }
}
