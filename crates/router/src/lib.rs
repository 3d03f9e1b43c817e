//! outbox-router: turns one row inserted into a transactional-outbox table into one Kafka
//! record (topic, key, value, headers, timestamp, optional partition), compatible with
//! Debezium's Outbox Event Router. Pure logic, no I/O.
//!
//! ```
//! use outbox_router::{OutboxTableConfig, RouteConfig, Router, ColumnPreset};
//! let tables = [OutboxTableConfig::new("shop.outbox".parse().unwrap(), ColumnPreset::Seeds)];
//! let router = Router::new(&tables, &RouteConfig::default()).unwrap();
//! assert_eq!(router.watched_tables(), vec!["shop.outbox".parse().unwrap()]);
//! ```
//!
//! # Mapping
//! * **topic**: `[route] topic_overrides[aggregate_type]`, else the table's `topic`, else
//!   `[route] topic` (default `outbox.event.${aggregate_type}`), with `${aggregate_type}`,
//!   `${event_type}`, `${table}`, `${database}` replaced. The result must be a legal Kafka
//!   topic name; a bad one is a [`RoutingError`], never a mangled name.
//! * **key**: the aggregate id, as text bytes (binary ids per `key_encoding`), or under
//!   `key_format = "json"` / `"json_with_schema"` as Kafka Connect's JsonConverter writes
//!   it (see `connect_json.rs`).
//! * **value**: the payload as is: a JSON column as its JSON text, text and binary columns
//!   byte-exact; NULL/blank is a tombstone only with `tombstone_on_empty_payload`; under a
//!   JSON `value_format` as the JsonConverter writes Debezium's value (optionally the
//!   expanded payload, `expand_json_payload`). A NULL aggregate id or payload is an error
//!   unless `null_values = "as_debezium"`.
//! * **headers**: `id` (event id), `event_type`, `aggregate_type`, `aggregate_id`, the
//!   `additional_headers` columns (route-wide, then per table), and the tracing span
//!   context (`traceparent`).
//! * **timestamp**: the timestamp column (DATETIME as UTC, TIMESTAMP, integer epoch
//!   millis) or the binlog event time, per `timestamp_source`.
//!
//! Numbers, dates and other non-text values used as key, id or header have a fixed text
//! rendering, documented on [`render_value_text`].
//!
//! # Errors
//! A row that cannot be routed gives a [`RoutingError`] naming the event id (when
//! readable), table and column. Routing errors are permanent (same row, same error): the
//! relay dead-letters them. The router never panics and never drops an insert; only
//! UPDATE/DELETE rows are skipped, as `invalid_operation` says.
//!
//! # Configuration
//! [`OutboxTableConfig`] (`[[outbox]]`) and [`RouteConfig`] (`[route]`) deserialize from
//! the relay's TOML, reject unknown keys, and [`validate_router_config`] lists every
//! clash with a hint. See the crate README for the full key reference.

#![warn(missing_docs)]

mod column_type;
mod config;
mod connect_json;
mod error;
mod java_decimal;
mod record;
mod render;
mod router;
mod topic;
mod topic_regex;

pub use column_type::{ColumnType, SqlColumnType};
pub use config::{
    validate_router_config, AdditionalHeader, BinaryEncoding, ColumnMapping, ColumnOverrides,
    ColumnPreset, ConfigProblem, ConnectSchemaConfig, ConnectSchemaType, DebeziumContextHeaders,
    DefaultValue, EnvelopeField, HeaderNames, InvalidOperationBehavior, JsonNullBehavior,
    NullValues, OutboxTableConfig, PayloadMode, RecordFormat, RouteConfig, RouterConfigError,
    TimePrecisionMode, TimestampSource, DEBEZIUM_CONTEXT_HEADERS, DEFAULT_TOPIC_TEMPLATE,
    TRACEPARENT_HEADER,
};
pub use error::{RoutingError, RoutingErrorKind};
pub use record::{headers_in_sending_order, KafkaRecord, NullHeader, RouteOutcome, SkipReason};
pub use render::{civil_from_days, days_from_civil, render_value_bytes, render_value_text};
pub use router::{ColumnTypeClash, Router};
pub use topic::{
    check_topic_name, TopicNameProblem, TopicPlaceholder, TopicTemplate, TopicTemplateProblem,
    TopicValues, MAX_TOPIC_NAME_LENGTH,
};
