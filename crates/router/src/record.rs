//! What routing produces: a Kafka record, or a deliberate skip.

use outbox_binlog::RowOperation;

/// One record to produce to Kafka, built from one outbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaRecord {
    /// Target topic; always a legal Kafka topic name.
    pub topic: String,
    /// Record key: the aggregate id bytes, so all events of an aggregate share a partition
    /// and stay ordered. Always set by the router today; optional for the producer's sake.
    pub key: Option<Vec<u8>>,
    /// Record value: the payload bytes, or `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers in a fixed order: `id`, event type, aggregate type, aggregate id, the
    /// additional columns in configuration order, then the tracing span context.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Kafka timestamp in milliseconds since the epoch (CreateTime); `None` lets the
    /// producer stamp it. Always set by the router today.
    pub timestamp_millis: Option<i64>,
    /// Explicit partition from the partition column, when one is configured and not NULL;
    /// `None` lets the producer's partitioner hash the key.
    pub partition: Option<i32>,
    /// The event id as text (also in the `id` header), for logs, dead letters and dedupe.
    pub event_id: String,
    /// Headers whose value is null (a NULL additional column under
    /// `null_values = "as_debezium"`, as Debezium sends it), each with its place among
    /// `headers`. Kept apart so `headers` stays a list of byte values for every sink;
    /// [`KafkaRecord::all_headers`] gives the one ordered list to send.
    pub null_headers: Vec<NullHeader>,
}

/// A header sent with a null value (not an empty one: Kafka tells them apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NullHeader {
    /// Its position in the full header list: it goes before `headers[position]` (after
    /// every header when `position == headers.len()`). Null headers keep their order.
    pub position: usize,
    /// The header name.
    pub name: String,
}

/// Every header in sending order, `None` for a null value: `headers` with each of
/// `null_headers` placed before `headers[position]` (after all of them when `position` is
/// past the end). The one merge both the router's record and the sink's record use.
pub fn headers_in_sending_order<'a>(
    headers: &'a [(String, Vec<u8>)],
    null_headers: &'a [NullHeader],
) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> + 'a {
    let mut nulls = null_headers.iter().peekable();
    let mut values = headers.iter().enumerate().peekable();
    std::iter::from_fn(move || {
        let null_first = |null: &&NullHeader| {
            values
                .peek()
                .is_none_or(|(index, _)| null.position <= *index)
        };
        if let Some(null) = nulls.next_if(null_first) {
            return Some((null.name.as_str(), None));
        }
        values
            .next()
            .map(|(_, (name, value))| (name.as_str(), Some(value.as_slice())))
    })
}

impl KafkaRecord {
    /// Every header in sending order, `None` for a null value: `headers` with
    /// `null_headers` placed where the router put them.
    pub fn all_headers(&self) -> Vec<(&str, Option<&[u8]>)> {
        headers_in_sending_order(&self.headers, &self.null_headers).collect()
    }

    /// The value of the first header called `name`, if any.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_slice())
    }
}

/// The result of routing one row change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteOutcome {
    /// The row is an event: produce this record.
    Record(KafkaRecord),
    /// The row is deliberately not an event (configured behaviour); nothing to produce.
    Skipped {
        /// Why, for counters and debug logs.
        reason: SkipReason,
    },
}

/// Why a row change produced no record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// An UPDATE or DELETE on an outbox table with `invalid_operation = "ignore"` or `"warn"`.
    InvalidOperation {
        /// The row's operation (never `Insert`).
        operation: RowOperation,
        /// The row's event id, when it could be read from the row image.
        event_id: Option<String>,
    },
}

impl SkipReason {
    /// A short, fixed label for metrics (`"update"` or `"delete"`): bounded cardinality,
    /// unlike the `Debug` text, which contains the event id.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SkipReason::InvalidOperation {
                operation: RowOperation::Update,
                ..
            } => "update",
            SkipReason::InvalidOperation {
                operation: RowOperation::Delete,
                ..
            } => "delete",
            SkipReason::InvalidOperation {
                operation: RowOperation::Insert,
                ..
            } => "insert",
        }
    }
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::InvalidOperation {
                operation,
                event_id,
            } => {
                write!(
                    f,
                    "{operation:?} on an outbox table (only inserts are events)"
                )?;
                if let Some(event_id) = event_id {
                    write!(f, ", event `{event_id}`")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn null(position: usize, name: &str) -> NullHeader {
        NullHeader {
            position,
            name: name.to_owned(),
        }
    }

    #[test]
    fn null_headers_go_before_the_header_at_their_position_and_keep_their_order() {
        let headers = vec![
            ("id".to_owned(), b"e-1".to_vec()),
            ("tenant".to_owned(), b"t".to_vec()),
        ];
        let nulls = vec![
            null(0, "first"),
            null(1, "a"),
            null(1, "b"),
            null(2, "last"),
            null(9, "beyond"),
        ];
        let names_and_values: Vec<(&str, Option<&[u8]>)> =
            headers_in_sending_order(&headers, &nulls).collect();
        assert_eq!(
            names_and_values,
            vec![
                ("first", None),
                ("id", Some(&b"e-1"[..])),
                ("a", None),
                ("b", None),
                ("tenant", Some(&b"t"[..])),
                ("last", None),
                ("beyond", None),
            ]
        );
        assert_eq!(
            headers_in_sending_order(&headers, &[]).collect::<Vec<_>>(),
            vec![("id", Some(&b"e-1"[..])), ("tenant", Some(&b"t"[..]))]
        );
        assert_eq!(
            headers_in_sending_order(&[], &[null(0, "only")]).collect::<Vec<_>>(),
            vec![("only", None)]
        );
    }
}
