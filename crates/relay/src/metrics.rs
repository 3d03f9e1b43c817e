//! Prometheus metrics of one relay, and a tiny HTTP responder serving them.
//!
//! # Contract
//! * Every counter is changed only through [`crate::internal_events`], so a log line and its
//!   counter never disagree.
//! * `GET /metrics` answers in the Prometheus text format; every other request gets a 404.
//!   The responder reads one request per connection and closes it (no keep-alive): enough
//!   for a scraper, and no HTTP library needed.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus::{Encoder, Gauge, IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::shutdown::Shutdown;

/// All metrics of one relay; cheap to share behind an `Arc`.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// The registry the text endpoint encodes; one per relay so in-process tests don't mix.
    pub registry: Registry,
    /// Row changes of watched tables read from the binlog.
    pub events_read: IntCounter,
    /// Committed transactions read (watched rows or not).
    pub transactions_read: IntCounter,
    /// Rows the router turned into records.
    pub events_routed: IntCounter,
    /// Rows the router skipped by design (updates, deletes of outbox rows).
    pub events_skipped: IntCounter,
    /// Records Kafka acknowledged.
    pub records_delivered: IntCounter,
    /// Failed deliveries, by `kind` (`transient`, `fatal`, `permanent`).
    pub delivery_errors: IntCounterVec,
    /// Events written to the dead-letter topic (and acked there), by error `class`.
    pub dead_lettered: IntCounterVec,
    /// Records sent and not yet acknowledged.
    pub in_flight: IntGauge,
    /// Bytes of row data reserved between the reader and Kafka's ack
    /// (`pipeline.max_in_flight_bytes`).
    pub in_flight_bytes: IntGauge,
    /// Checkpoint commits that reached the store.
    pub checkpoint_commits: IntCounter,
    /// Byte offset of the last committed checkpoint position.
    pub checkpoint_binlog_offset: IntGauge,
    /// Numeric suffix of the last committed binlog file (`binlog.000042` -> 42).
    pub checkpoint_binlog_file_number: IntGauge,
    /// Seconds between now and the server timestamp of the last committed transaction;
    /// 0 when every read transaction is committed (caught up and idle).
    pub checkpoint_lag_seconds: Gauge,
    /// Reconnects of the binlog source after transient errors.
    pub source_reconnects: IntCounter,
    /// Times the Kafka producer was rebuilt (fatal error, failed delivery, stall).
    pub producer_recreations: IntCounter,
    /// Times the stall watchdog fired: the oldest unacked record had no ack for
    /// `kafka.stall_timeout_ms` (an alert rule can page on its rate).
    pub producer_stalls: IntCounter,
    /// Topics the relay created through the admin API.
    pub topics_created: IntCounter,
    /// Seconds since the `XA PREPARE` (server clock) of the oldest prepared XA transaction
    /// whose outbox rows the relay holds until its outcome; 0 when none. A prepared XA
    /// transaction also holds the checkpoint back, so a growing value needs an operator
    /// (`XA RECOVER` lists them).
    pub xa_oldest_prepared_age_seconds: IntGauge,
    /// Prepared XA transactions whose outbox rows the relay holds.
    pub xa_prepared_held: IntGauge,
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Arc<Metrics> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(format!("outbox_relay_{name}"), help)
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            // Registering distinct, constant names in a fresh registry cannot fail.
            let _ = registry.register(Box::new(c.clone()));
            c
        };
        let int_gauge = |name: &str, help: &str| {
            let g = IntGauge::new(format!("outbox_relay_{name}"), help)
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            let _ = registry.register(Box::new(g.clone()));
            g
        };
        let delivery_errors = IntCounterVec::new(
            Opts::new(
                "outbox_relay_delivery_errors_total",
                "Failed Kafka deliveries by kind (transient, fatal, permanent)",
            ),
            &["kind"],
        )
        .unwrap_or_else(|e| panic!("metric delivery_errors: {e}"));
        let _ = registry.register(Box::new(delivery_errors.clone()));
        let dead_lettered = IntCounterVec::new(
            Opts::new(
                "outbox_relay_dead_lettered_total",
                "Events sent to the dead-letter topic, by error class",
            ),
            &["class"],
        )
        .unwrap_or_else(|e| panic!("metric dead_lettered: {e}"));
        let _ = registry.register(Box::new(dead_lettered.clone()));
        let checkpoint_lag_seconds = Gauge::new(
            "outbox_relay_checkpoint_lag_seconds",
            "Now minus the server timestamp of the last committed transaction; 0 when caught up",
        )
        .unwrap_or_else(|e| panic!("metric checkpoint_lag_seconds: {e}"));
        let _ = registry.register(Box::new(checkpoint_lag_seconds.clone()));
        // The checkpoint crate's own counters (commit durations, failures, ack errors).
        if let Err(error) = outbox_checkpoint::register_metrics(&registry) {
            tracing::warn!(%error, "checkpoint metrics not registered");
        }
        // The binlog reader's counters (events, bytes, rows, commits, heartbeats, errors).
        if let Err(error) = outbox_binlog::register_metrics(&registry) {
            tracing::warn!(%error, "binlog reader metrics not registered");
        }
        Arc::new(Metrics {
            events_read: counter("events_read_total", "Row changes of watched tables read"),
            transactions_read: counter("transactions_read_total", "Committed transactions read"),
            events_routed: counter("events_routed_total", "Rows routed to a Kafka record"),
            events_skipped: counter(
                "events_skipped_total",
                "Rows the router skipped by design (updates, deletes)",
            ),
            records_delivered: counter("records_delivered_total", "Records acknowledged by Kafka"),
            delivery_errors,
            dead_lettered,
            in_flight: int_gauge("in_flight", "Records sent and not yet acknowledged"),
            in_flight_bytes: int_gauge(
                "in_flight_bytes",
                "Bytes of row data between the binlog reader and Kafka's acknowledgement",
            ),
            checkpoint_commits: counter("checkpoint_commits_total", "Checkpoint commits"),
            checkpoint_binlog_offset: int_gauge(
                "checkpoint_binlog_offset",
                "Byte offset of the committed checkpoint position",
            ),
            checkpoint_binlog_file_number: int_gauge(
                "checkpoint_binlog_file_number",
                "Numeric suffix of the committed checkpoint's binlog file",
            ),
            checkpoint_lag_seconds,
            source_reconnects: counter(
                "source_reconnects_total",
                "Binlog source reconnects after transient errors",
            ),
            producer_recreations: counter(
                "producer_recreations_total",
                "Kafka producer rebuilds (fatal error, failed delivery, stall)",
            ),
            producer_stalls: counter(
                "producer_stalls_total",
                "Times the oldest unacked record had no ack for kafka.stall_timeout_ms",
            ),
            topics_created: counter("topics_created_total", "Topics created by the relay"),
            xa_oldest_prepared_age_seconds: int_gauge(
                "xa_oldest_prepared_age_seconds",
                "Seconds since the XA PREPARE of the oldest prepared XA transaction held; 0 when none",
            ),
            xa_prepared_held: int_gauge(
                "xa_prepared_held",
                "Prepared XA transactions whose outbox rows are held until their outcome",
            ),
            registry,
        })
    }

    /// The registry in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        let encoder = prometheus::TextEncoder::new();
        if let Err(error) = encoder.encode(&self.registry.gather(), &mut buffer) {
            tracing::error!(%error, "cannot encode metrics");
        }
        String::from_utf8_lossy(&buffer).into_owned()
    }
}

/// Binds `listen` (so a taken port fails at startup, not later) and returns the bound
/// address and the serving future, which runs until `shutdown` fires.
pub async fn bind_metrics_server(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) -> std::io::Result<(
    SocketAddr,
    impl std::future::Future<Output = ()> + Send + 'static,
)> {
    let listener = TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    let serve = async move {
        loop {
            let accepted = tokio::select! {
                _ = shutdown.recv() => return,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, _peer)) => {
                    let metrics = metrics.clone();
                    tokio::spawn(async move {
                        if let Err(error) = answer_one_request(stream, &metrics).await {
                            tracing::debug!(%error, "metrics request failed");
                        }
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "metrics listener accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    };
    Ok((bound, serve))
}

async fn answer_one_request(
    mut stream: tokio::net::TcpStream,
    metrics: &Metrics,
) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    // Read until the end of the headers (or 16 KiB, or 5 s): we only need the request line.
    let read_headers = async {
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            request.extend_from_slice(&chunk[..n]);
            if request.windows(4).any(|w| w == b"\r\n\r\n") || request.len() > 16 * 1024 {
                break;
            }
        }
        Ok::<(), std::io::Error>(())
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), read_headers)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "slow request"))??;
    let line = request.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) =
        if method == "GET" && (path == "/metrics" || path.starts_with("/metrics?")) {
            ("200 OK", "text/plain; version=0.0.4", metrics.render())
        } else {
            (
                "404 Not Found",
                "text/plain",
                "not found; try GET /metrics\n".to_owned(),
            )
        };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shutdown::ShutdownController;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn serves_metrics_text_and_404_elsewhere() {
        let metrics = Metrics::new();
        metrics.records_delivered.inc_by(7);
        metrics
            .delivery_errors
            .with_label_values(&["transient"])
            .inc();
        let controller = ShutdownController::new();
        let (addr, serve) = bind_metrics_server(
            "127.0.0.1:0".parse().unwrap(),
            metrics,
            controller.subscribe(),
        )
        .await
        .unwrap();
        let server = tokio::spawn(serve);
        let ok = get(addr, "/metrics").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(
            ok.contains("outbox_relay_records_delivered_total 7"),
            "{ok}"
        );
        assert!(
            ok.contains("outbox_relay_delivery_errors_total{kind=\"transient\"} 1"),
            "{ok}"
        );
        assert!(ok.contains("outbox_relay_checkpoint_lag_seconds 0"), "{ok}");
        assert!(ok.contains("# TYPE outbox_relay_in_flight gauge"), "{ok}");
        assert!(ok.contains("outbox_checkpoint_commits_total"), "{ok}");
        let missing = get(addr, "/nope").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        controller.trigger();
        tokio::time::timeout(std::time::Duration::from_secs(2), server)
            .await
            .unwrap()
            .unwrap();
    }
}
