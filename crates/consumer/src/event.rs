//! One consumed event as the handler sees it, and payload decoding.

use serde::de::DeserializeOwned;

use crate::config::PayloadFormat;
use crate::handler::HandlerError;

/// The header that carries the event id (the relay's and Debezium's `id`).
pub const EVENT_ID_HEADER: &str = "id";

/// A Kafka record turned into an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedEvent {
    /// The event id (header `id`): what `processed_event` deduplicates on.
    pub event_id: String,
    /// The topic it came from.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// The record key (the aggregate id with the relay), raw bytes.
    pub key: Option<Vec<u8>>,
    /// Every header in record order (a header without value has `None`).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The decoded payload (see [`PayloadFormat`]); `None` for a tombstone.
    pub payload: Option<Vec<u8>>,
    /// The record timestamp (ms since the epoch), when the record has one.
    pub timestamp_ms: Option<i64>,
}

impl ConsumedEvent {
    /// The key as UTF-8 text, when it is.
    pub fn key_str(&self) -> Option<&str> {
        std::str::from_utf8(self.key.as_deref()?).ok()
    }

    /// The first header named `name` as UTF-8 text, when present and text.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        let (_, value) = self.headers.iter().find(|(key, _)| key == name)?;
        std::str::from_utf8(value.as_deref()?).ok()
    }

    /// The payload parsed as JSON into `T`; a tombstone or a payload that does not parse is
    /// a [`HandlerError::Permanent`] (it fails the same way every time).
    pub fn payload_json<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        let payload = self.payload.as_deref().ok_or_else(|| {
            HandlerError::Permanent(format!(
                "event {} has no payload (tombstone)",
                self.event_id
            ))
        })?;
        serde_json::from_slice(payload).map_err(|error| {
            HandlerError::Permanent(format!(
                "event {} payload is not the expected JSON: {error}",
                self.event_id
            ))
        })
    }
}

/// A value that does not match the configured [`PayloadFormat`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the record value is not a Debezium JsonConverter string (a JSON string literal or a {{\"schema\", \"payload\": string}} envelope): {reason}")]
pub struct PayloadDecodeError {
    /// What was found instead.
    pub reason: String,
}

/// Turns a record value into the payload per `format`.
pub fn decode_payload(value: &[u8], format: PayloadFormat) -> Result<Vec<u8>, PayloadDecodeError> {
    match format {
        PayloadFormat::Raw => Ok(value.to_vec()),
        PayloadFormat::DebeziumJsonString => unwrap_json_string(value),
        PayloadFormat::Auto => Ok(unwrap_json_string(value).unwrap_or_else(|_| value.to_vec())),
    }
}

/// The content of a JSON string literal, or of a schema envelope's string `payload`.
fn unwrap_json_string(value: &[u8]) -> Result<Vec<u8>, PayloadDecodeError> {
    let parsed: serde_json::Value =
        serde_json::from_slice(value).map_err(|error| PayloadDecodeError {
            reason: format!("not JSON ({error})"),
        })?;
    match parsed {
        serde_json::Value::String(text) => Ok(text.into_bytes()),
        serde_json::Value::Object(mut envelope)
            if envelope.len() == 2 && envelope.contains_key("schema") =>
        {
            match envelope.remove("payload") {
                Some(serde_json::Value::String(text)) => Ok(text.into_bytes()),
                other => Err(PayloadDecodeError {
                    reason: format!(
                        "a schema envelope whose payload is {}",
                        other.map_or("missing".to_owned(), |value| kind_of(&value).to_owned())
                    ),
                }),
            }
        }
        other => Err(PayloadDecodeError {
            reason: format!("a JSON {}", kind_of(&other)),
        }),
    }
}

fn kind_of(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYLOAD: &str = r#"{"orderId":7,"note":"caf\u00e9 \"q\""}"#;

    #[test]
    fn raw_values_pass_unchanged() {
        assert_eq!(
            decode_payload(PAYLOAD.as_bytes(), PayloadFormat::Raw).unwrap(),
            PAYLOAD.as_bytes()
        );
    }

    #[test]
    fn debezium_json_string_values_are_unwrapped() {
        let wrapped = serde_json::to_string(PAYLOAD).unwrap();
        assert!(wrapped.starts_with("\"{\\\"orderId"));
        let envelope =
            format!(r#"{{"schema":{{"type":"string","optional":true}},"payload":{wrapped}}}"#);
        for value in [&wrapped, &envelope] {
            for format in [PayloadFormat::DebeziumJsonString, PayloadFormat::Auto] {
                assert_eq!(
                    decode_payload(value.as_bytes(), format).unwrap(),
                    PAYLOAD.as_bytes(),
                    "{format:?} of {value}"
                );
            }
        }
    }

    #[test]
    fn a_raw_object_is_not_a_debezium_string() {
        assert!(decode_payload(PAYLOAD.as_bytes(), PayloadFormat::DebeziumJsonString).is_err());
        assert!(decode_payload(b"not json", PayloadFormat::DebeziumJsonString).is_err());
        assert_eq!(
            decode_payload(PAYLOAD.as_bytes(), PayloadFormat::Auto).unwrap(),
            PAYLOAD.as_bytes()
        );
    }
}
