//! The librdkafka client context of the Kafka store's consumers: librdkafka's log lines and
//! errors go to `tracing`, without the noise a store load makes by design.
//!
//! * Partition EOF is how `load` learns it reached the end of the committed log; rdkafka's
//!   default context would log every one at error level.
//! * The relay's `[kafka.properties]` may hold producer settings (`linger.ms`, ...); a
//!   consumer ignores them, and librdkafka's warning that it does is dropped.

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;

/// Client context of the store's consumers (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StoreClientContext;

impl ClientContext for StoreClientContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if crate::kafka_context::explain_confwarn(facility, message) {
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility, "{message}")
            }
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", facility, "{message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", facility, "{message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", facility, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error, KafkaError::PartitionEOF(_))
            || matches!(
                error.rdkafka_error_code(),
                Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF)
            )
        {
            return;
        }
        tracing::warn!(target: "librdkafka", %error, "checkpoint store client: {reason}");
    }
}

impl ConsumerContext for StoreClientContext {}
