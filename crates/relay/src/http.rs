//! The relay's HTTP endpoint (axum): `GET /metrics` (Prometheus text format),
//! `GET /healthz` (the process is alive) and `GET /readyz` (JSON naming each readiness
//! check, 200 when ready, 503 when not; see [`crate::health`]).
//!
//! # Contract
//! * HTTP/1.1 with keep-alive; `HEAD` is answered like `GET` without a body; any other path
//!   is a 404 naming the endpoints, any other method a 405.
//! * The server stops accepting when the shutdown signal fires.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// The Prometheus text format's content type.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The routes, with `metrics` as their state.
pub fn routes(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(serve_healthz))
        .route("/readyz", get(serve_readyz))
        .fallback(serve_not_found)
        .with_state(metrics)
}

async fn serve_metrics(State(metrics): State<Arc<Metrics>>) -> Response {
    // Encoding walks every metric: not on an async worker for long, but cheap enough.
    let body = metrics.render();
    ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], body).into_response()
}

async fn serve_healthz() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        "{\"alive\":true}\n",
    )
        .into_response()
}

async fn serve_readyz(State(metrics): State<Arc<Metrics>>) -> Response {
    let report = metrics.health.report();
    let status = if report.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = match serde_json::to_string(&report) {
        Ok(body) => body,
        Err(error) => format!("{{\"ready\":false,\"error\":\"cannot encode: {error}\"}}"),
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn serve_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "not found; try GET /metrics, /healthz or /readyz\n",
    )
        .into_response()
}

/// Binds `listen` (so a taken port fails at startup, not later) and returns the bound
/// address and the serving future, which runs until `shutdown` fires.
pub async fn bind_http_server(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) -> std::io::Result<(
    SocketAddr,
    impl std::future::Future<Output = ()> + Send + 'static,
)> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    let app = routes(metrics);
    let serve = async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.recv().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "metrics/health HTTP server failed");
        }
    };
    Ok((bound, serve))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shutdown::ShutdownController;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    /// One response read off a keep-alive connection: status line and body.
    async fn request(
        stream: &mut BufReader<tokio::net::TcpStream>,
        method: &str,
        path: &str,
    ) -> (String, String) {
        stream
            .get_mut()
            .write_all(format!("{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut status = String::new();
        stream.read_line(&mut status).await.unwrap();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            stream.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0u8; if method == "HEAD" { 0 } else { length }];
        stream.read_exact(&mut body).await.unwrap();
        (status.trim().to_string(), String::from_utf8(body).unwrap())
    }

    #[tokio::test]
    async fn serves_metrics_health_and_readiness_on_one_keep_alive_connection() {
        let metrics = Metrics::new();
        metrics.records_delivered.inc_by(7);
        metrics
            .delivery_errors
            .with_label_values(&["transient"])
            .inc();
        let controller = ShutdownController::new();
        let (addr, serve) = bind_http_server(
            "127.0.0.1:0".parse().unwrap(),
            metrics.clone(),
            controller.subscribe(),
        )
        .await
        .unwrap();
        let server = tokio::spawn(serve);
        let mut stream = BufReader::new(tokio::net::TcpStream::connect(addr).await.unwrap());
        let (status, body) = request(&mut stream, "GET", "/metrics").await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(
            body.contains("outbox_relay_records_delivered_total 7"),
            "{body}"
        );
        assert!(
            body.contains("outbox_relay_delivery_errors_total{kind=\"transient\"} 1"),
            "{body}"
        );
        assert!(
            body.contains("# TYPE outbox_relay_in_flight gauge"),
            "{body}"
        );
        assert!(body.contains("outbox_checkpoint_commits_total"), "{body}");
        let (status, body) = request(&mut stream, "HEAD", "/metrics").await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(body, "");
        let (status, body) = request(&mut stream, "GET", "/healthz").await;
        assert_eq!(
            (status.as_str(), body.trim()),
            ("HTTP/1.1 200 OK", "{\"alive\":true}")
        );
        let (status, body) = request(&mut stream, "GET", "/readyz").await;
        assert_eq!(status, "HTTP/1.1 503 Service Unavailable");
        let report: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(report["ready"], false);
        assert_eq!(report["source_connected"]["ok"], false, "{report}");
        metrics.health.source_connected();
        metrics.health.broker_probed(None);
        let (status, body) = request(&mut stream, "GET", "/readyz").await;
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        for check in [
            "source_connected",
            "broker_reachable",
            "checkpoint_store",
            "not_backing_off",
        ] {
            assert!(
                body.contains(&format!("\"{check}\":{{\"ok\":true")),
                "{body}"
            );
        }
        let (status, _) = request(&mut stream, "GET", "/nope").await;
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        let (status, _) = request(&mut stream, "POST", "/metrics").await;
        assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
        drop(stream);
        controller.trigger();
        tokio::time::timeout(std::time::Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }
}
