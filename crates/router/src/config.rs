//! Configuration: which outbox tables are watched and how their rows become Kafka records.
//!
//! Both structs are embedded in the relay's TOML file: each `[[outbox]]` table is an
//! [`OutboxTableConfig`], the `[route]` section is a [`RouteConfig`]. Unknown keys are
//! rejected (`deny_unknown_fields`), every key has a default except `table`, and
//! [`validate_router_config`] reports every clash at once with a hint how to fix it.

use std::collections::BTreeMap;
use std::fmt;

use outbox_binlog::TableName;
use serde::{Deserialize, Serialize};

use crate::column_type::SqlColumnType;
use crate::topic::{TopicTemplate, TopicTemplateProblem};

/// The default topic template, Debezium's default shape.
pub const DEFAULT_TOPIC_TEMPLATE: &str = "outbox.event.${aggregate_type}";

/// Header name used for a tracing span context column that holds a W3C trace context.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// One watched outbox table (`[[outbox]]` in the relay's config) and its column mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxTableConfig {
    /// The table, written `"database.table"`: rows of exactly this table are routed, so the
    /// relay knows which binlog rows to decode.
    #[serde(with = "table_name_as_text")]
    pub table: TableName,
    /// Starting point of the column mapping, so common schemas need no `columns` section:
    /// `"seeds"` (`event_id`, `aggregate_type`, ...) or `"debezium"` (`id`, `aggregatetype`, ...).
    #[serde(default = "default_preset")]
    pub preset: ColumnPreset,
    /// Column names that differ from the preset, for tables with their own naming.
    #[serde(default)]
    pub columns: ColumnOverrides,
    /// Topic template for this table, replacing `[route] topic`, for tables whose events go
    /// to their own topic family. Per-aggregate-type `topic_overrides` still win.
    #[serde(default)]
    pub topic: Option<String>,
    /// Where the Kafka timestamp comes from, because not every table has a usable time column.
    #[serde(default = "default_timestamp_source")]
    pub timestamp_source: TimestampSource,
    /// Extra columns of this table sent as headers, after `[route] additional_headers`, for
    /// columns only some tables have.
    #[serde(default)]
    pub additional_headers: Vec<AdditionalHeader>,
    /// This table's key and payload column schemas, replacing `[route] connect_schema`, for
    /// a table whose DDL differs (e.g. a `BINARY(16)` aggregate id: `key_type = "bytes"`).
    #[serde(default)]
    pub connect_schema: Option<ConnectSchemaConfig>,
}

impl OutboxTableConfig {
    /// A table with the given preset and nothing overridden.
    pub fn new(table: TableName, preset: ColumnPreset) -> Self {
        Self {
            table,
            preset,
            columns: ColumnOverrides::default(),
            topic: None,
            timestamp_source: default_timestamp_source(),
            additional_headers: Vec::new(),
            connect_schema: None,
        }
    }

    /// The effective column names: the preset's, replaced by every override that is set.
    pub fn column_mapping(&self) -> ColumnMapping {
        let preset = self.preset.mapping();
        let pick = |over: &Option<String>, default: String| over.clone().unwrap_or(default);
        ColumnMapping {
            event_id: pick(&self.columns.event_id, preset.event_id),
            aggregate_type: pick(&self.columns.aggregate_type, preset.aggregate_type),
            aggregate_id: pick(&self.columns.aggregate_id, preset.aggregate_id),
            event_type: pick(&self.columns.event_type, preset.event_type),
            payload: pick(&self.columns.payload, preset.payload),
            timestamp: pick(&self.columns.timestamp, preset.timestamp),
            partition: self.columns.partition.clone(),
        }
    }

    /// How messages name this table's section.
    fn section(&self) -> String {
        format!("[[outbox]] table = \"{}\":", self.table)
    }

    /// Checks this table's settings alone (header name clashes with `[route]` need both:
    /// see [`validate_router_config`]).
    pub fn validate(&self) -> Result<(), RouterConfigError> {
        let mut problems = Vec::new();
        self.collect_problems(&mut problems);
        RouterConfigError::from_problems(problems)
    }

    /// Appends this table's problems to `problems`.
    fn collect_problems(&self, problems: &mut Vec<ConfigProblem>) {
        let mapping = self.column_mapping();
        for (key, name) in mapping.named_columns() {
            if name.is_empty() {
                problems.push(ConfigProblem::EmptyColumnName {
                    table: self.table.clone(),
                    key,
                });
            }
        }
        check_additional_headers(&self.section(), &self.additional_headers, problems);
        if let Some(schema) = &self.connect_schema {
            check_connect_schema(schema, problems);
        }
        if let Some(topic) = &self.topic {
            if let Err(problem) = TopicTemplate::parse(topic) {
                problems.push(ConfigProblem::TopicTemplate {
                    setting: format!("[[outbox]] table = \"{}\": topic", self.table),
                    template: topic.clone(),
                    problem,
                });
            }
        }
    }
}

/// Named column layouts of common outbox schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnPreset {
    /// The project's seed schema: `event_id`, `aggregate_type`, `aggregate_id`,
    /// `event_type`, `payload`, `created_at`.
    #[default]
    Seeds,
    /// Debezium Outbox Event Router defaults: `id`, `aggregatetype`, `aggregateid`, `type`,
    /// `payload`, `timestamp`.
    Debezium,
}

impl ColumnPreset {
    /// The preset's column names (no partition column).
    pub fn mapping(self) -> ColumnMapping {
        let names = match self {
            ColumnPreset::Seeds => [
                "event_id",
                "aggregate_type",
                "aggregate_id",
                "event_type",
                "payload",
                "created_at",
            ],
            ColumnPreset::Debezium => [
                "id",
                "aggregatetype",
                "aggregateid",
                "type",
                "payload",
                "timestamp",
            ],
        };
        let [event_id, aggregate_type, aggregate_id, event_type, payload, timestamp] =
            names.map(String::from);
        ColumnMapping {
            event_id,
            aggregate_type,
            aggregate_id,
            event_type,
            payload,
            timestamp,
            partition: None,
        }
    }
}

impl fmt::Display for ColumnPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ColumnPreset::Seeds => "seeds",
            ColumnPreset::Debezium => "debezium",
        })
    }
}

/// Column names that replace the preset's (`[outbox.columns]`). Unset keys keep the preset.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnOverrides {
    /// Column holding the unique event id, sent as header `id` so consumers can dedupe.
    #[serde(default)]
    pub event_id: Option<String>,
    /// Column holding the aggregate type, which picks the topic.
    #[serde(default)]
    pub aggregate_type: Option<String>,
    /// Column holding the aggregate id, which becomes the record key (per-aggregate order).
    #[serde(default)]
    pub aggregate_id: Option<String>,
    /// Column holding the event type, sent as a header and usable in topic templates.
    #[serde(default)]
    pub event_type: Option<String>,
    /// Column holding the event payload, which becomes the record value.
    #[serde(default)]
    pub payload: Option<String>,
    /// Column holding the event time, which becomes the Kafka timestamp.
    #[serde(default)]
    pub timestamp: Option<String>,
    /// Optional column holding an explicit Kafka partition (integer), for producers that
    /// pin events to partitions themselves. No preset has one.
    #[serde(default)]
    pub partition: Option<String>,
}

/// The effective column names of one outbox table (preset plus overrides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMapping {
    /// Event id column (required in every row).
    pub event_id: String,
    /// Aggregate type column (required).
    pub aggregate_type: String,
    /// Aggregate id column (required; the key).
    pub aggregate_id: String,
    /// Event type column (required).
    pub event_type: String,
    /// Payload column (required; NULL only with `tombstone_on_empty_payload`).
    pub payload: String,
    /// Timestamp column (used as `timestamp_source` says).
    pub timestamp: String,
    /// Explicit partition column, when configured.
    pub partition: Option<String>,
}

impl ColumnMapping {
    /// `(config key, column name)` of every configured column, for checks.
    fn named_columns(&self) -> Vec<(&'static str, &str)> {
        let mut named = vec![
            ("event_id", self.event_id.as_str()),
            ("aggregate_type", self.aggregate_type.as_str()),
            ("aggregate_id", self.aggregate_id.as_str()),
            ("event_type", self.event_type.as_str()),
            ("payload", self.payload.as_str()),
            ("timestamp", self.timestamp.as_str()),
        ];
        if let Some(partition) = &self.partition {
            named.push(("partition", partition.as_str()));
        }
        named
    }
}

/// Where a record's Kafka timestamp comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampSource {
    /// The timestamp column when the table has it and the row's value is not NULL,
    /// else the binlog event time. A value of an unusable type or out of range (zero
    /// date, before 1970) is a routing error, not a silent fallback.
    #[default]
    ColumnOrEventTime,
    /// The timestamp column only: a missing column or NULL value is a routing error.
    Column,
    /// Always the binlog event time (seconds precision); the column is not read.
    EventTime,
    /// No timestamp from the row: the producer stamps the record when it sends it, like
    /// Debezium's default (its processing time, `ts_ms`, unless
    /// `table.field.event.timestamp` is set). A resend gets a new time.
    ProducerTime,
}

/// How the `[route]` section maps rows to records; shared by every outbox table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Topic template; `${aggregate_type}`, `${event_type}`, `${table}` and `${database}`
    /// are replaced per row, so one table can feed a topic per aggregate.
    #[serde(default = "default_topic_template")]
    pub topic: String,
    /// Topic template per aggregate type (exact match), for aggregates whose topic does not
    /// follow the template, e.g. `{ order = "orders" }`.
    #[serde(default)]
    pub topic_overrides: BTreeMap<String, String>,
    /// How a binary (BINARY/VARBINARY/BLOB) aggregate id becomes the key bytes, because
    /// binary ids have no single obvious text form.
    #[serde(default = "default_key_encoding")]
    pub key_encoding: BinaryEncoding,
    /// How a binary event id becomes text (header `id`, logs, dead letters); `raw` is not
    /// allowed because the id must be text.
    #[serde(default = "default_event_id_encoding")]
    pub event_id_encoding: BinaryEncoding,
    /// Whether payloads pass unchecked or must be JSON, for pipelines whose consumers
    /// cannot cope with anything else.
    #[serde(default = "default_payload_mode")]
    pub payload: PayloadMode,
    /// Emit a tombstone (no value) for a NULL or empty payload, as Debezium's
    /// `route.tombstone.on.empty.payload`; when false a NULL payload is a routing error.
    #[serde(default = "default_tombstone_on_empty_payload")]
    pub tombstone_on_empty_payload: bool,
    /// Names of the standard headers, for consumers that expect other names.
    #[serde(default)]
    pub headers: HeaderNames,
    /// Extra columns sent as headers (Debezium's `table.fields.additional.placement` with
    /// header placement), so consumers can filter without parsing payloads.
    #[serde(default)]
    pub additional_headers: Vec<AdditionalHeader>,
    /// Column holding a tracing span context (Debezium's `tracingspancontext`), carried as
    /// header `traceparent` when it is a W3C trace context, else under the column's name,
    /// so traces continue across the relay. NULL, or a table without the column (logged
    /// once as a warning), sends no tracing header.
    #[serde(default)]
    pub tracing_span_context_column: Option<String>,
    /// What to do with UPDATE and DELETE rows of an outbox table (Debezium's
    /// `table.op.invalid.behavior`); cleanup jobs delete sent rows, hence `ignore`.
    #[serde(default = "default_invalid_operation")]
    pub invalid_operation: InvalidOperationBehavior,
    /// UPDATE rows only, overriding `invalid_operation`: Debezium applies
    /// `table.op.invalid.behavior` to updates only (`warn` by default).
    #[serde(default)]
    pub invalid_update: Option<InvalidOperationBehavior>,
    /// DELETE rows only, overriding `invalid_operation`: Debezium always drops deletes
    /// silently (`ignore`), whatever `table.op.invalid.behavior` says.
    #[serde(default)]
    pub invalid_delete: Option<InvalidOperationBehavior>,
    /// How the key bytes are written, matching the Kafka Connect `key.converter` a Debezium
    /// pipeline used, so its consumers read the relay's keys unchanged.
    #[serde(default)]
    pub key_format: RecordFormat,
    /// How the value bytes are written, matching the `value.converter` of that pipeline.
    #[serde(default)]
    pub value_format: RecordFormat,
    /// Debezium's `table.expand.json.payload`: a JSON payload becomes a structured value
    /// (with `value_format = "json"` or `"json_with_schema"`) instead of a JSON string.
    #[serde(default)]
    pub expand_json_payload: bool,
    /// Debezium's `table.json.payload.null.behavior`: what an expanded payload does with
    /// `null` fields.
    #[serde(default)]
    pub json_payload_null_behavior: JsonNullBehavior,
    /// The Connect schemas Debezium derives from the outbox table's DDL, which the relay does
    /// not read; used by `json_with_schema` (`[route.connect_schema]`).
    #[serde(default)]
    pub connect_schema: ConnectSchemaConfig,
    /// A NULL aggregate id or (with tombstones off) a NULL payload: a routing error (dead
    /// letter), or, as Debezium's router writes them, a null key / null value (JSON `null`
    /// under a JSON format).
    #[serde(default)]
    pub null_values: NullValues,
    /// Debezium's `route.topic.regex`: with `topic_replacement`, the topic comes from the
    /// aggregate type as Kafka Connect's RegexRouter makes it (full match; no match: the
    /// aggregate type itself), instead of the `topic` template. Topic overrides and a
    /// table's own `topic` still win.
    #[serde(default)]
    pub topic_regex: Option<String>,
    /// Debezium's `route.topic.replacement` (Java syntax: `${name}`, `$n`, `\$`).
    #[serde(default)]
    pub topic_replacement: Option<String>,
    /// Extra columns placed in the value (Debezium's `column:envelope[:alias]`): with any,
    /// the value is the struct `{payload, field...}`, as Debezium's EventRouter writes it.
    #[serde(default)]
    pub envelope_fields: Vec<EnvelopeField>,
    /// Debezium's `topic.prefix`: it names the envelope struct's schema
    /// (`PREFIX.DATABASE.TABLE.AGGREGATE_TYPE.Value`), written under `json_with_schema`.
    #[serde(default)]
    pub debezium_topic_prefix: Option<String>,
    /// Debezium's `time.precision.mode`, for temporal `column_type`s; only
    /// `adaptive_time_microseconds` (Debezium's default) is supported.
    #[serde(default)]
    pub time_precision_mode: TimePrecisionMode,
    /// Additional headers without a `column_type` take the column's type as the server
    /// describes it (the binlog's TABLE_MAP) and are written as Debezium writes that type
    /// (Kafka Connect's `SimpleHeaderConverter`: temporal values as Debezium's numbers or
    /// text, binary as Base64), instead of the value's plain text or bytes. A column type
    /// the relay cannot render that way (TINYINT, unknown types) keeps the plain form.
    #[serde(default)]
    pub debezium_column_types: bool,
    /// Debezium's `__debezium.context.*` headers on every record (its
    /// `extended.headers.enabled`, on by default there), for consumers that read them: off
    /// unless this table is given.
    #[serde(default)]
    pub debezium_context_headers: Option<DebeziumContextHeaders>,
}

/// `[route.debezium_context_headers]`: the four headers Debezium's connectors put before
/// the EventRouter's own (`connectorLogicalName` is `debezium_topic_prefix`; `runId` is a
/// UUID the relay makes each time it starts, as Debezium makes one per task start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DebeziumContextHeaders {
    /// `__debezium.context.connectorName`: the Debezium connector plugin the consumers
    /// knew (`mysql` for `MySqlConnector`, `mariadb` for `MariaDbConnector`).
    #[serde(default = "default_context_connector")]
    pub connector: String,
    /// `__debezium.context.taskId` (an outbox connector runs one task, `0`).
    #[serde(default = "default_context_task_id")]
    pub task_id: String,
}

fn default_context_connector() -> String {
    "mysql".to_string()
}

fn default_context_task_id() -> String {
    "0".to_string()
}

/// The names of Debezium's context headers, in the order its connectors add them.
pub const DEBEZIUM_CONTEXT_HEADERS: [&str; 4] = [
    "__debezium.context.connectorLogicalName",
    "__debezium.context.taskId",
    "__debezium.context.connectorName",
    "__debezium.context.runId",
];

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            topic: default_topic_template(),
            topic_overrides: BTreeMap::new(),
            key_encoding: default_key_encoding(),
            event_id_encoding: default_event_id_encoding(),
            payload: default_payload_mode(),
            tombstone_on_empty_payload: default_tombstone_on_empty_payload(),
            headers: HeaderNames::default(),
            additional_headers: Vec::new(),
            tracing_span_context_column: None,
            invalid_operation: default_invalid_operation(),
            invalid_update: None,
            invalid_delete: None,
            key_format: RecordFormat::default(),
            value_format: RecordFormat::default(),
            expand_json_payload: false,
            json_payload_null_behavior: JsonNullBehavior::default(),
            connect_schema: ConnectSchemaConfig::default(),
            null_values: NullValues::default(),
            topic_regex: None,
            topic_replacement: None,
            envelope_fields: Vec::new(),
            debezium_topic_prefix: None,
            time_precision_mode: TimePrecisionMode::default(),
            debezium_column_types: false,
            debezium_context_headers: None,
        }
    }
}

impl RouteConfig {
    /// Checks the `[route]` section alone; see [`validate_router_config`] for the whole set.
    pub fn validate(&self) -> Result<(), RouterConfigError> {
        let mut problems = Vec::new();
        self.collect_problems(&mut problems);
        RouterConfigError::from_problems(problems)
    }

    /// Appends this section's problems to `problems`.
    fn collect_problems(&self, problems: &mut Vec<ConfigProblem>) {
        if let Err(problem) = TopicTemplate::parse(&self.topic) {
            problems.push(ConfigProblem::TopicTemplate {
                setting: "[route] topic".to_string(),
                template: self.topic.clone(),
                problem,
            });
        }
        for (aggregate_type, template) in &self.topic_overrides {
            if aggregate_type.is_empty() {
                problems.push(ConfigProblem::EmptyTopicOverrideKey);
            }
            if let Err(problem) = TopicTemplate::parse(template) {
                problems.push(ConfigProblem::TopicTemplate {
                    setting: format!("[route] topic_overrides.{aggregate_type}"),
                    template: template.clone(),
                    problem,
                });
            }
        }
        if self.event_id_encoding == BinaryEncoding::Raw {
            problems.push(ConfigProblem::RawEventIdEncoding);
        }
        if self.headers.id.is_empty() {
            problems.push(ConfigProblem::EmptyIdHeaderName);
        }
        check_additional_headers("[route]", &self.additional_headers, problems);
        if self.tracing_span_context_column.as_deref() == Some("") {
            problems.push(ConfigProblem::EmptyTracingColumn);
        }
        push_duplicate_headers(&self.header_claims(), 0, problems);
        if self.expand_json_payload && self.value_format == RecordFormat::Raw {
            problems.push(ConfigProblem::ExpandWithRawValue);
        }
        check_connect_schema(&self.connect_schema, problems);
        self.collect_envelope_problems(problems);
        match (&self.topic_regex, &self.topic_replacement) {
            (None, None) => {}
            (Some(regex), Some(replacement)) => {
                if let Err(reason) = crate::topic_regex::TopicRegex::new(regex, replacement) {
                    problems.push(ConfigProblem::TopicRegex { reason });
                }
            }
            _ => problems.push(ConfigProblem::TopicRegex {
                reason: "set both topic_regex and topic_replacement, or neither".to_string(),
            }),
        }
    }

    /// Appends the problems of `envelope_fields` and `time_precision_mode`.
    fn collect_envelope_problems(&self, problems: &mut Vec<ConfigProblem>) {
        if self.time_precision_mode != TimePrecisionMode::AdaptiveTimeMicroseconds {
            problems.push(ConfigProblem::Envelope {
                reason: format!(
                    "time_precision_mode = \"{}\" is not supported: the relay renders temporal columns as Debezium's default `adaptive_time_microseconds` does; set that mode in Debezium too, or leave temporal columns out of headers and envelope",
                    match self.time_precision_mode {
                        TimePrecisionMode::Adaptive => "adaptive",
                        _ => "connect",
                    }
                ),
            });
        }
        let mut names: Vec<&str> = vec!["payload"];
        for field in &self.envelope_fields {
            if field.column.is_empty() {
                problems.push(ConfigProblem::Envelope {
                    reason: "an envelope_fields entry has an empty `column`".to_string(),
                });
            }
            let name = field.field_name();
            if names.contains(&name) {
                problems.push(ConfigProblem::Envelope {
                    reason: format!("envelope field `{name}` is named twice (or `payload`, which holds the payload); give it another `field` name"),
                });
            }
            names.push(name);
            problems.extend(default_problem(
                "[route] envelope_fields",
                &field.column,
                field.column_type.as_ref(),
                field.column_default.as_ref(),
            ));
        }
        let no_topic_prefix = self
            .debezium_topic_prefix
            .as_deref()
            .unwrap_or("")
            .is_empty();
        if self.debezium_context_headers.is_some() && no_topic_prefix {
            problems.push(ConfigProblem::Envelope {
                reason: "debezium_context_headers need debezium_topic_prefix (Debezium's topic.prefix, sent as __debezium.context.connectorLogicalName)".to_string(),
            });
        }
        if !self.envelope_fields.is_empty()
            && self.value_format == RecordFormat::JsonWithSchema
            && no_topic_prefix
        {
            problems.push(ConfigProblem::Envelope {
                    reason: "envelope_fields with value_format = \"json_with_schema\" need debezium_topic_prefix (Debezium's topic.prefix, which names the envelope's schema)".to_string(),
                });
        }
    }

    /// Every header name this section produces, with the setting that produces it.
    fn header_claims(&self) -> Vec<(&str, String)> {
        let mut claims: Vec<(&str, String)> = vec![
            (self.headers.id.as_str(), "headers.id".to_string()),
            (
                self.headers.event_type.as_str(),
                "headers.event_type".to_string(),
            ),
            (
                self.headers.aggregate_type.as_str(),
                "headers.aggregate_type".to_string(),
            ),
            (
                self.headers.aggregate_id.as_str(),
                "headers.aggregate_id".to_string(),
            ),
        ];
        for extra in &self.additional_headers {
            claims.push((
                extra.header_name(),
                format!("additional_headers (column `{}`)", extra.column),
            ));
        }
        if self.debezium_context_headers.is_some() {
            for name in DEBEZIUM_CONTEXT_HEADERS {
                claims.push((name, "debezium_context_headers".to_string()));
            }
        }
        if let Some(column) = &self.tracing_span_context_column {
            claims.push((
                TRACEPARENT_HEADER,
                "tracing_span_context_column (W3C trace context)".to_string(),
            ));
            if column != TRACEPARENT_HEADER {
                claims.push((
                    column.as_str(),
                    "tracing_span_context_column (other span context)".to_string(),
                ));
            }
        }
        claims
    }
}

/// Appends the problems of a `connect_schema` (the route's or a table's).
fn check_connect_schema(schema: &ConnectSchemaConfig, problems: &mut Vec<ConfigProblem>) {
    if schema.payload_type == Some(ConnectSchemaType::Int32)
        || schema.payload_type == Some(ConnectSchemaType::Int64)
    {
        problems.push(ConfigProblem::IntegerPayloadSchema);
    }
    if schema.key_type == Some(ConnectSchemaType::Json) {
        problems.push(ConfigProblem::JsonKeySchema);
    }
}

/// Appends the problems of one `additional_headers` list; `section` names where it is.
fn check_additional_headers(
    section: &str,
    extras: &[AdditionalHeader],
    problems: &mut Vec<ConfigProblem>,
) {
    for (index, extra) in extras.iter().enumerate() {
        if extra.column.is_empty() {
            problems.push(ConfigProblem::EmptyAdditionalHeaderColumn {
                section: section.to_string(),
                index,
            });
        }
        if extra.header.as_deref() == Some("") {
            problems.push(ConfigProblem::EmptyAdditionalHeaderName {
                section: section.to_string(),
                column: extra.column.clone(),
            });
        }
        problems.extend(default_problem(
            &format!("{section} additional_headers"),
            &extra.column,
            extra.column_type.as_ref(),
            extra.column_default.as_ref(),
        ));
    }
}

/// A `column_default` that its `column_type` cannot hold (an integer for a text column, a
/// default of a type whose defaults are not reproduced): found at load, not per row.
fn default_problem(
    list: &str,
    column: &str,
    column_type: Option<&SqlColumnType>,
    default: Option<&DefaultValue>,
) -> Option<ConfigProblem> {
    let (column_type, default) = (column_type?, default?);
    let kind = column_type.default_data(default).err()?;
    Some(ConfigProblem::ColumnDefault {
        list: list.to_string(),
        column: column.to_string(),
        column_type: column_type.to_string(),
        default: default.to_string(),
        why: kind.to_string(),
    })
}

/// Every header name may be produced by one setting only, else consumers could not tell
/// the values apart: reports each claim at or after `from` whose name an earlier claim took.
/// Empty names (headers turned off) never clash.
fn push_duplicate_headers(
    claims: &[(&str, String)],
    from: usize,
    problems: &mut Vec<ConfigProblem>,
) {
    for (index, (name, setting)) in claims.iter().enumerate().skip(from) {
        if name.is_empty() {
            continue;
        }
        if let Some((_, first)) = claims[..index].iter().find(|(taken, _)| taken == name) {
            problems.push(ConfigProblem::DuplicateHeaderName {
                header: name.to_string(),
                first: first.clone(),
                second: setting.clone(),
            });
        }
    }
}

/// How a binary column value (BINARY, VARBINARY, BLOB) becomes key, id or header bytes.
/// Text, number and date columns ignore it (see the crate docs for their renderings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryEncoding {
    /// The bytes must be valid UTF-8 and are used as that text; anything else is a
    /// routing error (ids stored in VARBINARY as text).
    #[default]
    Utf8,
    /// Lowercase hexadecimal, two characters per byte.
    Hex,
    /// Canonical UUID text `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`; the value must be
    /// exactly 16 bytes (`BINARY(16)` UUIDs, as MySQL's `UUID_TO_BIN(uuid)` without swap).
    Uuid,
    /// The bytes as they are (keys and headers only; not allowed for the event id).
    Raw,
    /// Standard Base64 with padding: what Debezium's `SimpleHeaderConverter` (the `id`
    /// header) and `JsonConverter` write for a binary column (`binary.handling.mode=bytes`).
    Base64,
}

/// Whether payloads are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadMode {
    /// Emit the payload byte-exact, whatever it holds (JSON, Avro, Protobuf, text).
    #[default]
    AsIs,
    /// The payload must be a JSON document (JSON columns always are; text and binary
    /// columns are parsed to check); it is still emitted byte-exact.
    RequireJson,
}

/// Names of the standard headers (`[route.headers]`). An empty name leaves that header
/// out, except `id`, which is always sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderNames {
    /// Header carrying the event id; Debezium-compatible consumers dedupe on `id`.
    #[serde(default = "default_id_header")]
    pub id: String,
    /// Header carrying the event type, so consumers can dispatch without the payload.
    #[serde(default = "default_event_type_header")]
    pub event_type: String,
    /// Header carrying the aggregate type, which is otherwise only implied by the topic.
    #[serde(default = "default_aggregate_type_header")]
    pub aggregate_type: String,
    /// Header carrying the aggregate id (as in the key), for consumers that ignore keys.
    #[serde(default = "default_aggregate_id_header")]
    pub aggregate_id: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        Self {
            id: default_id_header(),
            event_type: default_event_type_header(),
            aggregate_type: default_aggregate_type_header(),
            aggregate_id: default_aggregate_id_header(),
        }
    }
}

/// One extra column sent as a header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdditionalHeader {
    /// The column to read; it must exist in every watched table. A NULL value sends no
    /// header (absence is how Kafka headers say "no value").
    pub column: String,
    /// Header name; the column name when unset, as Debezium does.
    #[serde(default)]
    pub header: Option<String>,
    /// How a binary column becomes header bytes; headers are bytes, so `raw` is the default.
    /// Ignored when `column_type` is set.
    #[serde(default = "default_additional_header_encoding")]
    pub encoding: BinaryEncoding,
    /// The column's SQL type (e.g. `"datetime(6)"`): when set, the header is what Debezium
    /// sends for it (Kafka Connect's `SimpleHeaderConverter`: temporal values as Debezium's
    /// numbers, binary as Base64), because the binlog does not tell the router the column's
    /// precision.
    #[serde(default)]
    pub column_type: Option<SqlColumnType>,
    /// The column's `DEFAULT` (see [`EnvelopeField::column_default`]): a NULL value is sent
    /// as this default, as Debezium's `Struct.get` gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column_default: Option<DefaultValue>,
}

/// One extra column placed in the record value (Debezium's
/// `table.fields.additional.placement` = `column:envelope[:alias]`): the value becomes a
/// struct `{payload, field...}` as Debezium's EventRouter builds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeField {
    /// The column to read; it must exist in every watched table.
    pub column: String,
    /// The field name in the value; the column name when unset, as Debezium does.
    #[serde(default)]
    pub field: Option<String>,
    /// The column's SQL type (e.g. `"varchar(32)"`, `"datetime(6)"`), which decides the
    /// value's form and schema exactly as Debezium derives them from the DDL; unset, the
    /// type the server describes for the column (the binlog's TABLE_MAP) is used, and a
    /// type the relay cannot render that way (TINYINT, unknown types) is a routing
    /// error naming the column.
    #[serde(default)]
    pub column_type: Option<SqlColumnType>,
    /// Whether the column is nullable (the field schema's `optional`); unset, as the server
    /// describes the column (true when it does not).
    #[serde(default)]
    pub nullable: Option<bool>,
    /// The column's `DEFAULT`, which the binlog does not carry and Debezium uses twice: in
    /// the field's schema (`"default"`, under `value_format = "json_with_schema"`) and in
    /// place of a NULL value (Kafka Connect's `Struct.get`, JsonConverter's
    /// `replace.null.with.default`). An integer for integer columns, text for text and
    /// DECIMAL columns; unset: no default (the column has none, or `DEFAULT NULL`).
    /// `config from-debezium --probe` writes it; `run` warns when it differs from the
    /// server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column_default: Option<DefaultValue>,
}

/// A column default as the config writes it ([`EnvelopeField::column_default`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DefaultValue {
    /// An integer column's default.
    Integer(i64),
    /// A text or DECIMAL column's default, as written in the DDL (unquoted).
    Text(String),
}

impl DefaultValue {
    /// The default as a header carries an untyped column's value: its text.
    pub fn plain_text(&self) -> String {
        match self {
            DefaultValue::Integer(number) => number.to_string(),
            DefaultValue::Text(text) => text.clone(),
        }
    }
}

impl std::fmt::Display for DefaultValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DefaultValue::Integer(number) => write!(f, "{number}"),
            DefaultValue::Text(text) => {
                write!(f, "\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
            }
        }
    }
}

impl EnvelopeField {
    /// The field name in the value.
    pub fn field_name(&self) -> &str {
        self.field.as_deref().unwrap_or(&self.column)
    }
}

/// Debezium's `time.precision.mode`; only its default is reproduced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimePrecisionMode {
    /// DATETIME(0..3) as epoch milliseconds, DATETIME(4..6) as epoch microseconds, TIME as
    /// microseconds, DATE as days, TIMESTAMP as ISO-8601 text (Debezium's default).
    #[default]
    AdaptiveTimeMicroseconds,
    /// Debezium's `adaptive`: refused at config load (not reproduced).
    Adaptive,
    /// Debezium's `connect`: refused at config load (not reproduced).
    Connect,
}

impl AdditionalHeader {
    /// The header name this column is sent under.
    pub fn header_name(&self) -> &str {
        self.header.as_deref().unwrap_or(&self.column)
    }
}

/// What happens to UPDATE and DELETE rows of an outbox table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvalidOperationBehavior {
    /// Skip them silently (cleanup jobs delete sent rows).
    #[default]
    Ignore,
    /// Skip them and log a warning naming table and event id.
    Warn,
    /// Return a routing error, so the relay dead-letters or stops.
    Fail,
}

/// How key or value bytes are written: as a Kafka Connect converter would for Debezium.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordFormat {
    /// The column bytes as they are (`StringConverter` / `ByteArrayConverter`).
    #[default]
    Raw,
    /// `JsonConverter` with `schemas.enable=false`: a JSON string literal for text, a number
    /// for an integer column, base64 for binary, `null` for NULL.
    Json,
    /// `JsonConverter` with `schemas.enable=true`: `{"schema":...,"payload":...}` with the
    /// schemas of `[route.connect_schema]` (or of the expanded payload).
    JsonWithSchema,
}

/// What a NULL aggregate id or NULL payload becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NullValues {
    /// A routing error naming the column (the event goes to the dead-letter topic).
    #[default]
    Error,
    /// A null key / null value, as Debezium writes them (JSON `null` under a JSON format).
    AsDebezium,
}

/// Debezium's `table.json.payload.null.behavior` for expanded payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonNullBehavior {
    /// `null` fields are left out of the schema and the value (Debezium's default).
    #[default]
    Ignore,
    /// `null` fields stay, with an optional bytes schema.
    OptionalBytes,
}

/// A Kafka Connect schema type Debezium gives a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectSchemaType {
    /// `string` (CHAR, VARCHAR, TEXT columns).
    String,
    /// `string` named `io.debezium.data.Json`, version 1 (JSON columns, also MariaDB's).
    Json,
    /// `int32` (INT and smaller columns).
    Int32,
    /// `int64` (BIGINT columns).
    Int64,
    /// `bytes` (BINARY, VARBINARY, BLOB columns with `binary.handling.mode=bytes`).
    Bytes,
}

impl ConnectSchemaType {
    /// The type Debezium gives a key or payload column of `sql_type` (the binlog's or
    /// information_schema's description), when it is one of these.
    pub fn described(sql_type: outbox_binlog::SqlType) -> Option<ConnectSchemaType> {
        use outbox_binlog::SqlType;
        match sql_type {
            SqlType::Text => Some(ConnectSchemaType::String),
            SqlType::Json => Some(ConnectSchemaType::Json),
            SqlType::Binary => Some(ConnectSchemaType::Bytes),
            SqlType::Integer {
                bytes: 3,
                unsigned: _,
            }
            | SqlType::Integer {
                bytes: 4,
                unsigned: false,
            } => Some(ConnectSchemaType::Int32),
            SqlType::Integer {
                bytes: 4,
                unsigned: true,
            }
            | SqlType::Integer { bytes: 8, .. } => Some(ConnectSchemaType::Int64),
            _ => None,
        }
    }

    /// The name the config writes (`"string"`, `"json"`, `"int32"`, `"int64"`, `"bytes"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectSchemaType::String => "string",
            ConnectSchemaType::Json => "json",
            ConnectSchemaType::Int32 => "int32",
            ConnectSchemaType::Int64 => "int64",
            ConnectSchemaType::Bytes => "bytes",
        }
    }
}

/// `[route.connect_schema]`: the schemas Debezium's MySQL connector derives from the
/// outbox table's DDL for the key and payload columns. Each setting left out is taken from
/// the column as the server describes it (the binlog's TABLE_MAP: a text column is
/// `string`, MySQL's JSON `io.debezium.data.Json`, MariaDB's JSON, which is LONGTEXT, a
/// `string`, a binary column `bytes`, INT `int32`, BIGINT `int64`, nullability
/// `optional`); a row without a description gets Debezium's documented outbox table
/// (`aggregateid VARCHAR NOT NULL`, `payload JSON` nullable).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectSchemaConfig {
    /// The aggregate id column's schema type, written in the key's schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_type: Option<ConnectSchemaType>,
    /// Whether the aggregate id column is nullable (`"optional"` of the key schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_optional: Option<bool>,
    /// The payload column's schema type, written in the value's schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_type: Option<ConnectSchemaType>,
    /// Whether the payload column is nullable (`"optional"` of the value schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_optional: Option<bool>,
}

/// The key and payload schemas one row is written with ([`ConnectSchemaConfig::resolve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectSchema {
    /// The key's schema type.
    pub(crate) key_type: ConnectSchemaType,
    /// The key schema's `optional`.
    pub(crate) key_optional: bool,
    /// The payload's schema type.
    pub(crate) payload_type: ConnectSchemaType,
    /// The payload schema's `optional`.
    pub(crate) payload_optional: bool,
}

impl ConnectSchemaConfig {
    /// This table's settings, each left out taken from `route`'s.
    pub(crate) fn or(self, route: ConnectSchemaConfig) -> ConnectSchemaConfig {
        ConnectSchemaConfig {
            key_type: self.key_type.or(route.key_type),
            key_optional: self.key_optional.or(route.key_optional),
            payload_type: self.payload_type.or(route.payload_type),
            payload_optional: self.payload_optional.or(route.payload_optional),
        }
    }

    /// The schemas for a row whose key and payload columns the server describes as `key`
    /// and `payload`: each setting as configured, else from the description, else Debezium's
    /// documented outbox table.
    pub(crate) fn resolve(
        &self,
        key: Option<outbox_binlog::ColumnType>,
        payload: Option<outbox_binlog::ColumnType>,
    ) -> ConnectSchema {
        ConnectSchema {
            key_type: self
                .key_type
                .or_else(|| key.and_then(|column| ConnectSchemaType::described(column.sql_type)))
                .unwrap_or_else(default_key_schema_type),
            key_optional: self
                .key_optional
                .or(key.map(|column| column.nullable))
                .unwrap_or(false),
            payload_type: self
                .payload_type
                .or_else(|| {
                    payload.and_then(|column| ConnectSchemaType::described(column.sql_type))
                })
                .unwrap_or_else(default_payload_schema_type),
            payload_optional: self
                .payload_optional
                .or(payload.map(|column| column.nullable))
                .unwrap_or_else(default_payload_optional),
        }
    }
}

fn default_key_schema_type() -> ConnectSchemaType {
    ConnectSchemaType::String
}
fn default_payload_schema_type() -> ConnectSchemaType {
    ConnectSchemaType::Json
}
fn default_payload_optional() -> bool {
    true
}
fn default_preset() -> ColumnPreset {
    ColumnPreset::Seeds
}
fn default_timestamp_source() -> TimestampSource {
    TimestampSource::ColumnOrEventTime
}
fn default_topic_template() -> String {
    DEFAULT_TOPIC_TEMPLATE.to_string()
}
fn default_key_encoding() -> BinaryEncoding {
    BinaryEncoding::Utf8
}
fn default_event_id_encoding() -> BinaryEncoding {
    BinaryEncoding::Utf8
}
fn default_payload_mode() -> PayloadMode {
    PayloadMode::AsIs
}
fn default_tombstone_on_empty_payload() -> bool {
    false
}
fn default_invalid_operation() -> InvalidOperationBehavior {
    InvalidOperationBehavior::Ignore
}
fn default_id_header() -> String {
    "id".to_string()
}
fn default_event_type_header() -> String {
    "event_type".to_string()
}
fn default_aggregate_type_header() -> String {
    "aggregate_type".to_string()
}
fn default_aggregate_id_header() -> String {
    "aggregate_id".to_string()
}
fn default_additional_header_encoding() -> BinaryEncoding {
    BinaryEncoding::Raw
}

/// One thing wrong with the router configuration, with a hint how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigProblem {
    /// No `[[outbox]]` table: the relay would route nothing.
    #[error("no outbox table is configured; add at least one [[outbox]] section with `table = \"database.table\"`")]
    NoTables,
    /// The same table listed twice: which mapping applies would be ambiguous.
    #[error("table `{table}` is listed in more than one [[outbox]] section; merge them into one")]
    DuplicateTable {
        /// The repeated table.
        table: TableName,
    },
    /// A column override set to `""`.
    #[error("[[outbox]] table = \"{table}\": columns.{key} is empty; name the column or remove the key to use the preset's")]
    EmptyColumnName {
        /// The table whose mapping is wrong.
        table: TableName,
        /// The `columns` key.
        key: &'static str,
    },
    /// A topic template that cannot be parsed.
    #[error("{setting} = \"{template}\" is not a usable topic template: {problem}")]
    TopicTemplate {
        /// Where the template is configured.
        setting: String,
        /// The template text.
        template: String,
        /// What is wrong with it.
        problem: TopicTemplateProblem,
    },
    /// `topic_overrides` with an empty aggregate type.
    #[error("[route] topic_overrides has an empty aggregate type as key; use the aggregate type the rows carry")]
    EmptyTopicOverrideKey,
    /// `event_id_encoding = "raw"`.
    #[error("[route] event_id_encoding = \"raw\" is not allowed because the event id must be text; use \"utf8\", \"hex\" or \"uuid\"")]
    RawEventIdEncoding,
    /// `headers.id = ""`.
    #[error("[route] headers.id is empty; the event id header is always sent (Debezium consumers dedupe on `id`), give it a name")]
    EmptyIdHeaderName,
    /// An additional header without a column.
    #[error(
        "{section} additional_headers[{index}] has an empty `column`; name the column to send"
    )]
    EmptyAdditionalHeaderColumn {
        /// `[route]` or the `[[outbox]]` table whose list it is.
        section: String,
        /// Position in the list.
        index: usize,
    },
    /// An additional header with `header = ""`.
    #[error("{section} additional_headers: column `{column}` has an empty `header`; remove `header` to use the column name")]
    EmptyAdditionalHeaderName {
        /// `[route]` or the `[[outbox]]` table whose list it is.
        section: String,
        /// The column.
        column: String,
    },
    /// `tracing_span_context_column = ""`.
    #[error("[route] tracing_span_context_column is empty; name the column or remove the key")]
    EmptyTracingColumn,
    /// `expand_json_payload` with the raw value format.
    #[error("[route] expand_json_payload = true needs value_format = \"json\" or \"json_with_schema\" (Debezium with a StringConverter writes Java's Struct.toString() text, which the relay does not reproduce)")]
    ExpandWithRawValue,
    /// An integer payload schema.
    #[error("[route] connect_schema.payload_type must be \"json\", \"string\" or \"bytes\": the payload column holds text or bytes")]
    IntegerPayloadSchema,
    /// A JSON key schema.
    #[error("[route] connect_schema.key_type = \"json\" is not supported; use \"string\" for a text aggregate id")]
    JsonKeySchema,
    /// `topic_regex` / `topic_replacement` unusable.
    #[error("[route] topic_regex / topic_replacement: {reason}")]
    TopicRegex {
        /// What is wrong.
        reason: String,
    },
    /// `envelope_fields` / `time_precision_mode` / `debezium_context_headers` unusable.
    #[error("[route] {reason}")]
    Envelope {
        /// What is wrong.
        reason: String,
    },
    /// A `column_default` its `column_type` cannot hold.
    #[error("{list}: column `{column}` has column_type = \"{column_type}\" and column_default = {default}, which does not fit it ({why}); give the default as the column's DDL has it: an integer for integer columns, text for text and DECIMAL columns")]
    ColumnDefault {
        /// `[route] envelope_fields` or the `additional_headers` list.
        list: String,
        /// The column.
        column: String,
        /// The configured column type.
        column_type: String,
        /// The configured default.
        default: String,
        /// Why it does not fit.
        why: String,
    },
    /// Two settings produce the same header name.
    #[error("header `{header}` would be written by both {first} and {second}; rename one of them (an empty standard header name turns that header off)")]
    DuplicateHeaderName {
        /// The clashing header name.
        header: String,
        /// The setting that claimed it first.
        first: String,
        /// The setting that claimed it again.
        second: String,
    },
}

/// The router configuration cannot be used; lists every problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfigError {
    /// Every problem, in configuration order, so the user can fix them in one go.
    pub problems: Vec<ConfigProblem>,
}

impl RouterConfigError {
    /// `Ok` when there are no problems.
    fn from_problems(problems: Vec<ConfigProblem>) -> Result<(), RouterConfigError> {
        if problems.is_empty() {
            Ok(())
        } else {
            Err(RouterConfigError { problems })
        }
    }
}

impl fmt::Display for RouterConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.problems.as_slice() {
            [single] => write!(f, "invalid router configuration: {single}"),
            problems => {
                write!(
                    f,
                    "invalid router configuration ({} problems):",
                    problems.len()
                )?;
                for problem in problems {
                    write!(f, "\n  - {problem}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for RouterConfigError {}

/// Checks the tables and the route section together: each one's own rules plus the
/// cross-checks (at least one table, no table twice). [`crate::Router::new`] calls it.
pub fn validate_router_config(
    tables: &[OutboxTableConfig],
    route: &RouteConfig,
) -> Result<(), RouterConfigError> {
    let mut problems = Vec::new();
    if tables.is_empty() {
        problems.push(ConfigProblem::NoTables);
    }
    for (index, table) in tables.iter().enumerate() {
        if tables[..index].iter().any(|t| t.table == table.table) {
            if !problems.contains(&ConfigProblem::DuplicateTable {
                table: table.table.clone(),
            }) {
                problems.push(ConfigProblem::DuplicateTable {
                    table: table.table.clone(),
                });
            }
            continue;
        }
        table.collect_problems(&mut problems);
    }
    route.collect_problems(&mut problems);
    for table in tables {
        if table.additional_headers.is_empty() {
            continue;
        }
        let mut claims = route.header_claims();
        let from = claims.len();
        let section = table.section();
        claims.extend(table.additional_headers.iter().map(|extra| {
            (
                extra.header_name(),
                format!("{section} additional_headers (column `{}`)", extra.column),
            )
        }));
        push_duplicate_headers(&claims, from, &mut problems);
    }
    RouterConfigError::from_problems(problems)
}

/// Serde for [`TableName`] as one `"database.table"` string, as users write it.
mod table_name_as_text {
    use outbox_binlog::TableName;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(table: &TableName, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(table)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<TableName, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
