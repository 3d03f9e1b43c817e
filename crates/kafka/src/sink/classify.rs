//! What a failed delivery means for the sink: retry, rebuild the producer, or a
//! permanent rejection.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// How a failed delivery is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Not the record's fault. Refused at enqueue (queue full): resent in order after a
    /// backoff. Reported on delivery (librdkafka, which retries without a time limit, gave
    /// up on it): the producer is replaced and everything unacked resent in input order.
    Transient,
    /// The producer is unusable: replace it, resend everything unacked in input order.
    Fatal,
    /// The record is rejected for good: resent within `dead_letter.max_attempts`, then
    /// dead-lettered, or the relay stops (see `dead_letter.fail_on`).
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
