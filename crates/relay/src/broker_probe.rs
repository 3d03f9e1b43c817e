//! The broker check of `/readyz`: a metadata request to the Kafka cluster every
//! [`PROBE_INTERVAL`], on a client of its own (with the sink's connection settings), so
//! an idle relay notices a lost cluster too, not only one that has records to send.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{FutureProducer, Producer};

use crate::internal_events::{BrokerProbed, InternalEvent};
use crate::kafka_context::RelayClientContext;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::sink::{create_kafka_client, KafkaSinkSettings};

/// Time between two probes.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// Longest a probe waits for an answer (at most `kafka.admin_timeout_ms`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Probes the cluster until `shutdown` fires, reporting each outcome to `metrics.health`.
pub async fn run_broker_probe(
    settings: KafkaSinkSettings,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) {
    let client: FutureProducer<RelayClientContext> =
        match create_kafka_client(&settings.client_properties, RelayClientContext::default()) {
            Ok(client) => client,
            Err(error) => {
                // The sink creates the same client and stops the relay with this error.
                BrokerProbed {
                    error: Some(&error.to_string()),
                }
                .emit(&metrics);
                return;
            }
        };
    let timeout = PROBE_TIMEOUT.min(settings.admin_timeout);
    let mut ticker = tokio::time::interval(PROBE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.recv() => break,
            _ = ticker.tick() => {}
        }
        let probing = client.clone();
        let probe = tokio::task::spawn_blocking(move || {
            probing.client().fetch_metadata(None, timeout).map(|_| ())
        });
        let outcome = match tokio::time::timeout(timeout.saturating_mul(2), probe).await {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(error))) => Some(error.to_string()),
            Ok(Err(join_error)) => Some(format!("probe failed: {join_error}")),
            Err(_elapsed) => Some(format!("no metadata answer within {timeout:?}")),
        };
        BrokerProbed {
            error: outcome.as_deref(),
        }
        .emit(&metrics);
    }
    tokio::task::spawn_blocking(move || drop(client));
}
