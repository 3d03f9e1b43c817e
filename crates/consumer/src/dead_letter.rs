//! The consumer-side dead letter: the original record plus failure headers named as the
//! relay names them (`outbox_relay::dead_letter::headers`), so the same tools read both.

use rdkafka::message::{Header, OwnedHeaders};

/// Header names of a consumer-side dead letter (besides the original record's headers).
pub mod headers {
    /// The topic the record was consumed from.
    pub const ORIGINAL_TOPIC: &str = "dlq.original_topic";
    /// Always `true` here (the relay writes `false` for routing errors).
    pub const ORIGINAL_TOPIC_KNOWN: &str = "dlq.original_topic_known";
    /// `handler_permanent`, `handler_retries_exhausted`, `missing_event_id`,
    /// `undecodable_payload` or `event_id_too_long`.
    pub const ERROR_CLASS: &str = "dlq.error_class";
    /// The last error's text.
    pub const ERROR_MESSAGE: &str = "dlq.error_message";
    /// Handler attempts made.
    pub const ATTEMPTS: &str = "dlq.attempts";
    /// First failure, ms since the epoch.
    pub const FIRST_FAILURE_MS: &str = "dlq.first_failure_ms";
    /// Last failure, ms since the epoch.
    pub const LAST_FAILURE_MS: &str = "dlq.last_failure_ms";
    /// Consumer-side only: the partition the record was consumed from.
    pub const ORIGINAL_PARTITION: &str = "dlq.original_partition";
    /// Consumer-side only: its offset there.
    pub const ORIGINAL_OFFSET: &str = "dlq.original_offset";
    /// Consumer-side only: the `consumer_name` that gave up on it.
    pub const CONSUMER: &str = "dlq.consumer";
}

/// Error classes a consumer-side dead letter can carry.
pub mod error_classes {
    /// The handler returned [`crate::HandlerError::Permanent`].
    pub const HANDLER_PERMANENT: &str = "handler_permanent";
    /// The handler failed `max_attempts` times.
    pub const HANDLER_RETRIES_EXHAUSTED: &str = "handler_retries_exhausted";
    /// The record has no text header `id` (it cannot be deduplicated).
    pub const MISSING_EVENT_ID: &str = "missing_event_id";
    /// The value does not match the configured payload format.
    pub const UNDECODABLE_PAYLOAD: &str = "undecodable_payload";
    /// The event id is longer than `processed_event.event_id` holds.
    pub const EVENT_ID_TOO_LONG: &str = "event_id_too_long";
}

/// Why a record is dead-lettered.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// One of [`error_classes`].
    pub class: &'static str,
    /// The error text.
    pub message: String,
    /// Handler attempts made (0 when the record never reached the handler).
    pub attempts: u32,
    /// First failure, ms since the epoch.
    pub first_failure_ms: i64,
    /// Last failure, ms since the epoch.
    pub last_failure_ms: i64,
}

/// Where the record came from.
pub(crate) struct Origin<'a> {
    /// Topic consumed from.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// `consumer_name`.
    pub consumer: &'a str,
}

/// The original headers (values verbatim) followed by the `dlq.*` headers.
pub(crate) fn dead_letter_headers(
    original: &[(String, Option<Vec<u8>>)],
    origin: &Origin<'_>,
    failure: &Failure,
) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(original.len() + 10);
    for (key, value) in original {
        headers = headers.insert(Header {
            key,
            value: value.as_deref(),
        });
    }
    let added: [(&str, String); 10] = [
        (headers::ORIGINAL_TOPIC, origin.topic.to_owned()),
        (headers::ORIGINAL_TOPIC_KNOWN, "true".to_owned()),
        (headers::ERROR_CLASS, failure.class.to_owned()),
        (headers::ERROR_MESSAGE, failure.message.clone()),
        (headers::ATTEMPTS, failure.attempts.to_string()),
        (
            headers::FIRST_FAILURE_MS,
            failure.first_failure_ms.to_string(),
        ),
        (
            headers::LAST_FAILURE_MS,
            failure.last_failure_ms.to_string(),
        ),
        (headers::ORIGINAL_PARTITION, origin.partition.to_string()),
        (headers::ORIGINAL_OFFSET, origin.offset.to_string()),
        (headers::CONSUMER, origin.consumer.to_owned()),
    ];
    for (key, value) in &added {
        headers = headers.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
    headers
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Headers;

    #[test]
    fn the_original_headers_come_first_then_the_failure() {
        let original = vec![
            ("id".to_owned(), Some(b"e-1".to_vec())),
            ("empty".to_owned(), None),
        ];
        let failure = Failure {
            class: error_classes::HANDLER_PERMANENT,
            message: "no such sku".into(),
            attempts: 1,
            first_failure_ms: 5,
            last_failure_ms: 6,
        };
        let origin = Origin {
            topic: "orders",
            partition: 2,
            offset: 41,
            consumer: "inventory",
        };
        let built = dead_letter_headers(&original, &origin, &failure);
        let pairs: Vec<(String, Option<String>)> = built
            .iter()
            .map(|h| {
                (
                    h.key.to_owned(),
                    h.value.map(|v| String::from_utf8_lossy(v).into_owned()),
                )
            })
            .collect();
        assert_eq!(pairs[0], ("id".into(), Some("e-1".into())));
        assert_eq!(pairs[1], ("empty".into(), None));
        assert!(pairs.contains(&("dlq.error_class".into(), Some("handler_permanent".into()))));
        assert!(pairs.contains(&("dlq.original_topic".into(), Some("orders".into()))));
        assert!(pairs.contains(&("dlq.original_offset".into(), Some("41".into()))));
        assert_eq!(pairs.len(), 12);
    }
}
