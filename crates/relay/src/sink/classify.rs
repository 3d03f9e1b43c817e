//! What a failed delivery means for the sink: retry, rebuild the producer, or a
//! permanent rejection.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// How a failed delivery is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Retry after a backoff.
    Transient,
    /// Rebuild the producer, resend everything unacked.
    Fatal,
    /// Stop the relay.
    Permanent,
}

/// Classifies a delivery error.
pub fn classify_delivery_error(error: &KafkaError) -> FailureKind {
    use RDKafkaErrorCode as C;
    match error.rdkafka_error_code() {
        Some(C::Fatal) => FailureKind::Fatal,
        Some(
            C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::InvalidMessage
            | C::InvalidRecord
            | C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::TransactionalIdAuthorizationFailed
            | C::InvalidTopic
            | C::UnsupportedVersion
            | C::UnsupportedCompressionType
            | C::UnsupportedForMessageFormat
            | C::InvalidRequiredAcks
            | C::PolicyViolation
            // An explicit partition beyond the topic's partition count (librdkafka's
            // `_UNKNOWN_PARTITION`): the same record fails the same way every time.
            | C::UnknownPartition,
        ) => FailureKind::Permanent,
        _ => FailureKind::Transient,
    }
}
