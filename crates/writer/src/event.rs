//! One outbox event, as the application builds it.

use std::collections::BTreeMap;

use serde::Serialize;
use uuid::Uuid;

use crate::error::WriterError;

/// An event to append: what happened (`event_type`) to which aggregate, with its JSON
/// payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEvent {
    /// The stable event id, sent as header `id`: consumers deduplicate on it, so it must
    /// never change once written. A UUIDv7 by default: time-ordered, so the primary key
    /// grows at its end.
    event_id: Uuid,
    /// The aggregate's type (`order`): picks the Kafka topic.
    aggregate_type: String,
    /// The aggregate's id: the Kafka key, so one aggregate's events stay in order.
    aggregate_id: String,
    /// What happened (`OrderCreated`), sent as a header for dispatching.
    event_type: String,
    /// The payload, already serialized to JSON text (the record value).
    payload: String,
    /// Header column name → value, for the table's header columns.
    headers: BTreeMap<String, String>,
    /// The W3C trace context of the business operation, to continue the trace downstream.
    traceparent: Option<String>,
}

impl OutboxEvent {
    /// A new event with a fresh UUIDv7 id; `payload` is serialized to JSON now, so a value
    /// that cannot be serialized fails here, not inside the transaction's INSERT.
    pub fn new<P: Serialize + ?Sized>(
        aggregate_type: &str,
        aggregate_id: &str,
        event_type: &str,
        payload: &P,
    ) -> Result<Self, WriterError> {
        let payload =
            serde_json::to_string(payload).map_err(|source| WriterError::PayloadNotJson {
                aggregate_type: aggregate_type.to_owned(),
                aggregate_id: aggregate_id.to_owned(),
                event_type: event_type.to_owned(),
                source,
            })?;
        Ok(Self {
            event_id: Uuid::now_v7(),
            aggregate_type: aggregate_type.to_owned(),
            aggregate_id: aggregate_id.to_owned(),
            event_type: event_type.to_owned(),
            payload,
            headers: BTreeMap::new(),
            traceparent: None,
        })
    }

    /// Replaces the generated id, for applications that derive ids themselves (e.g. from a
    /// request id, so a retried request writes the same event id and the primary key
    /// rejects the second copy).
    pub fn with_event_id(mut self, event_id: Uuid) -> Self {
        self.event_id = event_id;
        self
    }

    /// Sets the value of a header column (the table must have it, see
    /// [`crate::OutboxTable::with_header_column`]).
    pub fn with_header(mut self, column: &str, value: &str) -> Self {
        self.headers.insert(column.to_owned(), value.to_owned());
        self
    }

    /// Sets the W3C trace context (checked: `00-<32 hex>-<16 hex>-<2 hex>`).
    pub fn with_traceparent(mut self, traceparent: &str) -> Result<Self, WriterError> {
        validate_traceparent(traceparent)?;
        self.traceparent = Some(traceparent.to_owned());
        Ok(self)
    }

    /// The event id (as the relay sends it in header `id`: its hyphenated lowercase text).
    pub fn event_id(&self) -> Uuid {
        self.event_id
    }

    /// The aggregate type.
    pub fn aggregate_type(&self) -> &str {
        &self.aggregate_type
    }

    /// The aggregate id.
    pub fn aggregate_id(&self) -> &str {
        &self.aggregate_id
    }

    /// The event type.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The payload's JSON text.
    pub fn payload_json(&self) -> &str {
        &self.payload
    }

    /// The header column values.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.headers
    }

    /// The trace context, if set.
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }
}

/// Checks the W3C Trace Context `traceparent` syntax (version 00 layout; a trace id or
/// parent id of all zeros is invalid per the spec; version `ff` is forbidden).
pub fn validate_traceparent(value: &str) -> Result<(), WriterError> {
    let fail = |reason| {
        Err(WriterError::BadTraceparent {
            value: value.to_owned(),
            reason,
        })
    };
    let parts: Vec<&str> = value.split('-').collect();
    if parts.len() < 4 {
        return fail("it does not have four dash-separated parts");
    }
    let is_lower_hex = |part: &str| {
        part.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let [version, trace_id, parent_id, flags] = [parts[0], parts[1], parts[2], parts[3]];
    if version.len() != 2 || !is_lower_hex(version) || version == "ff" {
        return fail("the version is not two lowercase hex digits other than ff");
    }
    if version == "00" && parts.len() != 4 {
        return fail("version 00 has exactly four parts");
    }
    if trace_id.len() != 32 || !is_lower_hex(trace_id) || trace_id.bytes().all(|b| b == b'0') {
        return fail("the trace id is not 32 lowercase hex digits (not all zero)");
    }
    if parent_id.len() != 16 || !is_lower_hex(parent_id) || parent_id.bytes().all(|b| b == b'0') {
        return fail("the parent id is not 16 lowercase hex digits (not all zero)");
    }
    if flags.len() != 2 || !is_lower_hex(flags) {
        return fail("the flags are not two lowercase hex digits");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_uuid_v7_and_time_ordered() {
        let first = OutboxEvent::new("order", "1", "OrderCreated", &1).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = OutboxEvent::new("order", "1", "OrderCreated", &2).unwrap();
        assert_eq!(first.event_id().get_version_num(), 7);
        assert!(
            first.event_id().to_string() < second.event_id().to_string(),
            "the text form sorts by time, like the primary key"
        );
    }

    #[test]
    fn payload_is_serialized_once_up_front() {
        let event = OutboxEvent::new(
            "order",
            "1",
            "OrderCreated",
            &serde_json::json!({"a": [1, 2]}),
        )
        .unwrap();
        assert_eq!(event.payload_json(), r#"{"a":[1,2]}"#);
        let mut not_json = BTreeMap::new();
        not_json.insert(vec![1u8], 1);
        assert!(matches!(
            OutboxEvent::new("order", "1", "OrderCreated", &not_json),
            Err(WriterError::PayloadNotJson { .. })
        ));
    }

    #[test]
    fn traceparent_is_checked() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(validate_traceparent(good).is_ok());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(
                validate_traceparent(bad).is_err(),
                "{bad:?} must be refused"
            );
        }
    }
}
