//! The purge horizon: how much of the source server's binlog retention is left before the
//! checkpoint's binlog file would be purged, and how far (bytes) the checkpoint is behind
//! the server's newest position. A stopped or slow relay is paged days before it loses its
//! resume point, not after.
//!
//! # How the server purges (MySQL and MariaDB alike)
//! * By age (`binlog_expire_logs_seconds`, or `expire_logs_days` on servers without it; 0
//!   means never): at startup and at each rotation, every file whose last write (its
//!   modification time) is older than the expiry is deleted, never the active one. A file's
//!   last write is when the next file was started, i.e. the timestamp of the next file's
//!   first event (its format description). So the checkpoint's file `F` goes at
//!   `first_event_time(F + 1) + expiry`; while `F` is the active file at least the whole
//!   expiry is left.
//! * By size (`max_binlog_total_size`, MariaDB 11.4+, 0 means none): the oldest files are
//!   deleted while all files together exceed the limit. `F` goes once the files from `F` on
//!   exceed it, so `limit - size(F..)` bytes are left.
//!
//! A horizon that does not apply (no expiry, no size limit) is `+Inf`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use mysql_async::prelude::Queryable;
use outbox_binlog::TlsOptions;

use crate::internal_events::{InternalEvent, PurgeHorizonMeasured, PurgeHorizonUnknown};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// How long connecting for a measurement may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Time between two measurements of a running relay.
pub const MEASURE_INTERVAL: Duration = Duration::from_secs(30);

/// What the server says about its binlog files and retention.
#[derive(Debug, Clone, PartialEq)]
pub struct BinlogRetention {
    /// `SHOW BINARY LOGS`: each file and its size, oldest first (the last is active).
    pub files: Vec<(String, u64)>,
    /// The age expiry in seconds (0: none).
    pub expire_seconds: u64,
    /// `max_binlog_total_size` in bytes (0 or absent: none).
    pub max_total_size: u64,
}

/// The horizon of one checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct PurgeHorizon {
    /// Seconds until the checkpoint's file may be purged by age (`+Inf`: never; negative:
    /// overdue, it goes at the next rotation or restart).
    pub seconds: f64,
    /// Bytes the server may still write before the checkpoint's file is purged by size
    /// (`+Inf`: no size limit).
    pub bytes: f64,
    /// Binlog bytes between the checkpoint and the server's newest position.
    pub bytes_behind: u64,
}

/// Why the horizon could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum PurgeHorizonError {
    /// A query failed.
    #[error("querying the source server: {0}")]
    Query(#[from] mysql_async::Error),
    /// Connecting failed (with the source's TLS settings).
    #[error("connecting to the source server: {0}")]
    Connect(#[from] outbox_binlog::BinlogError),
    /// The checkpoint's file is not on the server any more.
    #[error("the checkpoint's binlog file `{0}` is not on the server (purged?)")]
    FileGone(String),
    /// The next file's first event could not be read.
    #[error("reading the first event of binlog file `{0}`: none came")]
    NoFirstEvent(String),
}

/// The horizon of a checkpoint in `checkpoint_file` at byte `checkpoint_offset`, given the
/// server's `retention`, the time `now` (Unix seconds) and `first_event_time` of the file
/// after the checkpoint's (`None` when the checkpoint's file is the active one).
pub fn compute_horizon(
    retention: &BinlogRetention,
    checkpoint_file: &str,
    checkpoint_offset: u64,
    next_file_first_event_time: Option<u32>,
    now: f64,
) -> Result<PurgeHorizon, PurgeHorizonError> {
    let index = retention
        .files
        .iter()
        .position(|(name, _)| name == checkpoint_file)
        .ok_or_else(|| PurgeHorizonError::FileGone(checkpoint_file.to_string()))?;
    let seconds = match (retention.expire_seconds, next_file_first_event_time) {
        (0, _) => f64::INFINITY,
        (expire, None) => expire as f64,
        (expire, Some(closed_at)) => f64::from(closed_at) + expire as f64 - now,
    };
    let from_checkpoint_file: u64 = retention.files[index..].iter().map(|(_, size)| size).sum();
    let bytes = match retention.max_total_size {
        0 => f64::INFINITY,
        limit => limit as f64 - from_checkpoint_file as f64,
    };
    let bytes_behind = from_checkpoint_file.saturating_sub(checkpoint_offset);
    Ok(PurgeHorizon {
        seconds,
        bytes,
        bytes_behind,
    })
}

/// Reads the server's binlog files and retention settings.
pub async fn read_retention(
    conn: &mut mysql_async::Conn,
) -> Result<BinlogRetention, PurgeHorizonError> {
    let files: Vec<(String, u64)> = conn
        .query_map("SHOW BINARY LOGS", |row: mysql_async::Row| {
            let name: Option<String> = row.get(0);
            let size: Option<u64> = row.get(1);
            (name.unwrap_or_default(), size.unwrap_or(0))
        })
        .await?;
    let variables: Vec<(String, String)> = conn
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN \
             ('binlog_expire_logs_seconds', 'expire_logs_days', 'max_binlog_total_size')",
        )
        .await?;
    let value = |name: &str| {
        variables
            .iter()
            .find(|(variable, _)| variable.eq_ignore_ascii_case(name))
            .and_then(|(_, value)| value.parse::<f64>().ok())
    };
    let expire_seconds = match value("binlog_expire_logs_seconds") {
        Some(seconds) => seconds as u64,
        None => value("expire_logs_days").map_or(0, |days| (days * 86_400.0) as u64),
    };
    Ok(BinlogRetention {
        files,
        expire_seconds,
        max_total_size: value("max_binlog_total_size").map_or(0, |bytes| bytes as u64),
    })
}

/// The timestamp of `file`'s first real event (its format description: when the server
/// started the file), read over a non-blocking binlog dump on a connection of its own.
/// Server id 0 with the non-blocking flag is what `mysqlbinlog` uses: it does not replace
/// the relay's own dump connection.
pub async fn first_event_time(
    url: &str,
    tls: &TlsOptions,
    file: &str,
) -> Result<u32, PurgeHorizonError> {
    let (conn, _tls) = outbox_binlog::connect_to_server(url, tls, CONNECT_TIMEOUT).await?;
    let request = mysql_async::BinlogStreamRequest::new(0)
        .with_non_blocking()
        .with_filename(file.as_bytes())
        .with_pos(4u64);
    let mut stream = conn.get_binlog_stream(request).await?;
    let mut found = None;
    while let Some(event) = stream.next().await {
        let timestamp = event?.header().timestamp();
        // The artificial rotate event that starts a dump has timestamp 0.
        if timestamp != 0 {
            found = Some(timestamp);
            break;
        }
    }
    let _ = stream.close().await;
    found.ok_or_else(|| PurgeHorizonError::NoFirstEvent(file.to_string()))
}

/// Measures the horizon of a checkpoint at `checkpoint_file`:`checkpoint_offset`, caching
/// first-event times (they never change) in `first_events`.
pub async fn measure(
    url: &str,
    tls: &TlsOptions,
    checkpoint_file: &str,
    checkpoint_offset: u64,
    first_events: &mut HashMap<String, u32>,
) -> Result<PurgeHorizon, PurgeHorizonError> {
    let (mut conn, _tls) = outbox_binlog::connect_to_server(url, tls, CONNECT_TIMEOUT).await?;
    let retention = read_retention(&mut conn).await;
    let _ = conn.disconnect().await;
    let retention = retention?;
    let next_file = retention
        .files
        .iter()
        .position(|(name, _)| name == checkpoint_file)
        .and_then(|index| retention.files.get(index + 1))
        .map(|(name, _)| name.clone());
    let next_first_event = match next_file {
        None => None,
        Some(next) => match first_events.get(&next) {
            Some(time) => Some(*time),
            None => {
                let time = first_event_time(url, tls, &next).await?;
                first_events.insert(next, time);
                Some(time)
            }
        },
    };
    let now = crate::health::unix_millis_now() as f64 / 1000.0;
    compute_horizon(
        &retention,
        checkpoint_file,
        checkpoint_offset,
        next_first_event,
        now,
    )
}

/// Measures the horizon of the committed checkpoint (as the metrics know it) every
/// [`MEASURE_INTERVAL`] until `shutdown` fires.
pub async fn run_purge_horizon(
    url: String,
    tls: TlsOptions,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) {
    let mut first_events = HashMap::new();
    let mut ticker = tokio::time::interval(MEASURE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.recv() => return,
            _ = ticker.tick() => {}
        }
        let Some((file, offset)) = metrics.committed_checkpoint() else {
            continue;
        };
        let measured = tokio::select! {
            _ = shutdown.recv() => return,
            measured = measure(&url, &tls, &file, offset, &mut first_events) => measured,
        };
        match measured {
            Ok(horizon) => PurgeHorizonMeasured { horizon: &horizon }.emit(&metrics),
            Err(error) => PurgeHorizonUnknown { error: &error }.emit(&metrics),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retention(expire_seconds: u64, max_total_size: u64) -> BinlogRetention {
        BinlogRetention {
            files: vec![
                ("binlog.000001".into(), 1000),
                ("binlog.000002".into(), 2000),
                ("binlog.000003".into(), 500),
            ],
            expire_seconds,
            max_total_size,
        }
    }

    #[test]
    fn the_horizon_counts_from_the_next_files_start_and_the_files_from_the_checkpoint_on() {
        let horizon = compute_horizon(
            &retention(3600, 10_000),
            "binlog.000002",
            300,
            Some(1000),
            1600.0,
        )
        .unwrap();
        assert_eq!(horizon.seconds, 3000.0);
        assert_eq!(horizon.bytes, 10_000.0 - 2500.0);
        assert_eq!(horizon.bytes_behind, 2200);
        // In the active file: at least the whole expiry is left.
        let active =
            compute_horizon(&retention(3600, 0), "binlog.000003", 4, None, 1600.0).unwrap();
        assert_eq!(active.seconds, 3600.0);
        assert_eq!(active.bytes, f64::INFINITY);
        assert_eq!(active.bytes_behind, 496);
        let never = compute_horizon(&retention(0, 0), "binlog.000001", 4, Some(5), 1600.0).unwrap();
        assert_eq!(never.seconds, f64::INFINITY);
        assert!(matches!(
            compute_horizon(&retention(1, 0), "binlog.000000", 4, None, 1.0),
            Err(PurgeHorizonError::FileGone(_))
        ));
    }
}
