//! The [`Router`]: one outbox row change in, one Kafka record (or a skip, or an error) out.
//!
//! # Contract
//! * Pure: no I/O; the same row and configuration always give the same result.
//! * Total: every input gives `Ok` or a [`RoutingError`]; no panic, no silent drop. Inserts
//!   always give a record or an error; only UPDATE/DELETE rows may be skipped, and only
//!   when `invalid_operation` says so.
//! * A routed record's topic is always a legal Kafka topic name.
//!
//! # Performance
//! Column positions are resolved once per column list: rows of one TABLE_MAP share an
//! `Arc` of column names, so the cache check is a pointer comparison (with a slice
//! comparison as fallback when the reader re-creates an identical list).

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, PoisonError};

use outbox_binlog::{ColumnNames, Row, RowChange, RowOperation, TableFilter, TableName, Value};

use crate::column_type::{header_bytes, push_java_text, SqlColumnType};
use crate::config::{
    validate_router_config, AdditionalHeader, BinaryEncoding, ColumnMapping, ConnectSchema,
    ConnectSchemaConfig, ConnectSchemaType, EnvelopeField, InvalidOperationBehavior,
    JsonNullBehavior, NullValues, OutboxTableConfig, PayloadMode, RecordFormat, RouteConfig,
    RouterConfigError, TimestampSource, DEBEZIUM_CONTEXT_HEADERS, TRACEPARENT_HEADER,
};
use crate::connect_json::{self, Data, Kind, Schema};
use crate::error::{RoutingError, RoutingErrorKind};
use crate::record::{KafkaRecord, NullHeader, RouteOutcome, SkipReason};
use crate::render::{
    find_traceparent, render_value_bytes, render_value_text, timestamp_millis, unusable_value_error,
};
use crate::topic::{
    check_topic_name, TopicNameProblem, TopicPlaceholder, TopicTemplate, TopicValues,
};
use crate::topic_regex::TopicRegex;

mod clashes;
pub use clashes::ColumnTypeClash;

/// Routes rows of the configured outbox tables to Kafka records. Cheap to share between
/// threads (`Send + Sync`); build it once with [`Router::new`].
#[derive(Debug)]
pub struct Router {
    /// Per-table mapping and column cache, looked up by the row's table.
    tables: HashMap<TableName, TableRoute>,
    /// The watched tables in configuration order, for [`Router::watched_tables`].
    watched: Vec<TableName>,
    /// The compiled `[route]` section.
    settings: RouteSettings,
}

/// The `[route]` section with templates parsed.
#[derive(Debug)]
struct RouteSettings {
    /// Default topic template.
    topic: TopicTemplate,
    /// Topic template per aggregate type.
    topic_overrides: HashMap<String, TopicTemplate>,
    /// Binary aggregate id to key bytes.
    key_encoding: BinaryEncoding,
    /// Binary event id to text.
    event_id_encoding: BinaryEncoding,
    /// Payload checks.
    payload: PayloadMode,
    /// NULL/empty payload becomes a tombstone.
    tombstone_on_empty_payload: bool,
    /// Standard header names (empty = off, except `id`).
    id_header: String,
    /// Event type header name, empty when off.
    event_type_header: String,
    /// Aggregate type header name, empty when off.
    aggregate_type_header: String,
    /// Aggregate id header name, empty when off.
    aggregate_id_header: String,
    /// Tracing span context column.
    tracing_span_context_column: Option<String>,
    /// UPDATE handling (`invalid_update`, else `invalid_operation`).
    invalid_update: InvalidOperationBehavior,
    /// DELETE handling (`invalid_delete`, else `invalid_operation`).
    invalid_delete: InvalidOperationBehavior,
    /// True when some route-level template uses `${event_type}`.
    templates_use_event_type: bool,
    /// Key bytes as this converter writes them.
    key_format: RecordFormat,
    /// Value bytes as this converter writes them.
    value_format: RecordFormat,
    /// Debezium's `table.expand.json.payload`.
    expand_json_payload: bool,
    /// Null fields of an expanded payload.
    json_payload_null_behavior: JsonNullBehavior,
    /// NULL aggregate ids and payloads: errors, or null as Debezium writes them.
    null_values: NullValues,
    /// Debezium's regex router, replacing `topic` when configured.
    topic_regex: Option<TopicRegex>,
    /// Columns placed in the value struct (`column:envelope`); empty: the value is the payload.
    envelope_fields: Vec<EnvelopeField>,
    /// Debezium's `topic.prefix`, naming the envelope's schema.
    debezium_topic_prefix: Option<String>,
    /// Additional headers without a `column_type` take the server's column type.
    debezium_column_types: bool,
    /// Debezium's `__debezium.context.*` headers (name, value), the same on every record
    /// of this router's run, put before the `id` header as Debezium's connectors do; empty
    /// unless `debezium_context_headers` is set.
    context_headers: Vec<(String, Vec<u8>)>,
}

/// One watched table: its mapping, topic and column position cache.
#[derive(Debug)]
struct TableRoute {
    /// The table, for errors (an `Arc` so errors clone it cheaply).
    table: Arc<TableName>,
    /// Effective column names.
    mapping: ColumnMapping,
    /// Table-level topic template replacing the route's.
    topic: Option<TopicTemplate>,
    /// Where the Kafka timestamp comes from.
    timestamp_source: TimestampSource,
    /// Extra header columns: the route's, then the table's own.
    additional_headers: Vec<AdditionalHeader>,
    /// Key and payload column schemas: the table's own, else the route's.
    connect_schema: ConnectSchemaConfig,
    /// The event type column must be read (a header or a template needs it).
    event_type_needed: bool,
    /// Column positions of the last column list seen.
    column_cache: Mutex<Option<Arc<ColumnIndexes>>>,
}

/// Positions of the mapped columns in one column list (`None`: the table lacks it).
#[derive(Debug, Clone)]
struct ColumnIndexes {
    /// The column list these positions belong to (compared by pointer first).
    columns: ColumnNames,
    /// Event id column position.
    event_id: Option<usize>,
    /// Aggregate type column position.
    aggregate_type: Option<usize>,
    /// Aggregate id column position.
    aggregate_id: Option<usize>,
    /// Event type column position.
    event_type: Option<usize>,
    /// Payload column position.
    payload: Option<usize>,
    /// Timestamp column position.
    timestamp: Option<usize>,
    /// Partition column position.
    partition: Option<usize>,
    /// Tracing span context column position.
    tracing: Option<usize>,
    /// Additional header column positions, in configuration order.
    additional: Vec<Option<usize>>,
    /// Envelope field column positions, in configuration order.
    envelope: Vec<Option<usize>>,
}

impl TableRoute {
    /// The column positions for `columns`, from the cache when the list is unchanged.
    fn indexes(&self, columns: &ColumnNames, settings: &RouteSettings) -> Arc<ColumnIndexes> {
        let mut cache = self
            .column_cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = cache.as_ref() {
            if Arc::ptr_eq(&cached.columns, columns) {
                return Arc::clone(cached);
            }
            if cached.columns[..] == columns[..] {
                // Same names in a new list: adopt the new pointer so later rows hit fast.
                let mut adopted = ColumnIndexes::clone(cached);
                adopted.columns = Arc::clone(columns);
                let adopted = Arc::new(adopted);
                *cache = Some(Arc::clone(&adopted));
                return adopted;
            }
        }
        let position = |name: &str| columns.iter().position(|column| column == name);
        let resolved = Arc::new(ColumnIndexes {
            columns: Arc::clone(columns),
            event_id: position(&self.mapping.event_id),
            aggregate_type: position(&self.mapping.aggregate_type),
            aggregate_id: position(&self.mapping.aggregate_id),
            event_type: position(&self.mapping.event_type),
            payload: position(&self.mapping.payload),
            timestamp: position(&self.mapping.timestamp),
            partition: self.mapping.partition.as_deref().and_then(position),
            tracing: settings
                .tracing_span_context_column
                .as_deref()
                .and_then(position),
            additional: self
                .additional_headers
                .iter()
                .map(|extra| position(&extra.column))
                .collect(),
            envelope: settings
                .envelope_fields
                .iter()
                .map(|field| position(&field.column))
                .collect(),
        });
        if let (Some(column), None) = (&settings.tracing_span_context_column, resolved.tracing) {
            tracing::warn!(
                table = %self.table,
                column = %column,
                "the outbox table has no tracing span context column of this name; its \
                 records carry no tracing header"
            );
        }
        *cache = Some(Arc::clone(&resolved));
        resolved
    }
}

/// Builds errors for one row: knows the table and, once read, the event id.
struct ErrorContext<'a> {
    /// The row's table.
    table: &'a Arc<TableName>,
    /// The event id, once it has been read.
    event_id: Option<&'a str>,
}

impl ErrorContext<'_> {
    /// An error about `column`.
    fn error(&self, column: &str, kind: RoutingErrorKind) -> RoutingError {
        RoutingError {
            event_id: self.event_id.map(str::to_string),
            table: Arc::clone(self.table),
            column: Some(column.to_string()),
            kind,
        }
    }

    /// The value at `index`, or a missing-column error naming `column`.
    fn present<'r>(
        &self,
        row: &'r Row,
        index: Option<usize>,
        column: &str,
    ) -> Result<&'r Value, RoutingError> {
        index
            .and_then(|index| row.values.get(index))
            .ok_or_else(|| self.error(column, RoutingErrorKind::MissingColumn))
    }

    /// The non-NULL value at `index`, or an error naming `column`.
    fn required<'r>(
        &self,
        row: &'r Row,
        index: Option<usize>,
        column: &str,
    ) -> Result<&'r Value, RoutingError> {
        match self.present(row, index, column)? {
            Value::Null => Err(self.error(column, RoutingErrorKind::NullColumn)),
            value => Ok(value),
        }
    }
}

impl Router {
    /// Validates the configuration (see [`validate_router_config`]) and builds the router.
    pub fn new(
        tables: &[OutboxTableConfig],
        route: &RouteConfig,
    ) -> Result<Router, RouterConfigError> {
        validate_router_config(tables, route)?;
        // Validation parsed every template already; parse again keeping the result.
        let parse = |template: &str| {
            TopicTemplate::parse(template).map_err(|problem| RouterConfigError {
                problems: vec![crate::config::ConfigProblem::TopicTemplate {
                    setting: "topic".to_string(),
                    template: template.to_string(),
                    problem,
                }],
            })
        };
        let topic = parse(&route.topic)?;
        let mut topic_overrides = HashMap::with_capacity(route.topic_overrides.len());
        for (aggregate_type, template) in &route.topic_overrides {
            topic_overrides.insert(aggregate_type.clone(), parse(template)?);
        }
        let templates_use_event_type = topic.uses(TopicPlaceholder::EventType)
            || topic_overrides
                .values()
                .any(|template| template.uses(TopicPlaceholder::EventType));
        let settings = RouteSettings {
            topic,
            topic_overrides,
            key_encoding: route.key_encoding,
            event_id_encoding: route.event_id_encoding,
            payload: route.payload,
            tombstone_on_empty_payload: route.tombstone_on_empty_payload,
            id_header: route.headers.id.clone(),
            event_type_header: route.headers.event_type.clone(),
            aggregate_type_header: route.headers.aggregate_type.clone(),
            aggregate_id_header: route.headers.aggregate_id.clone(),
            tracing_span_context_column: route.tracing_span_context_column.clone(),
            invalid_update: route.invalid_update.unwrap_or(route.invalid_operation),
            invalid_delete: route.invalid_delete.unwrap_or(route.invalid_operation),
            templates_use_event_type,
            key_format: route.key_format,
            value_format: route.value_format,
            expand_json_payload: route.expand_json_payload,
            json_payload_null_behavior: route.json_payload_null_behavior,
            null_values: route.null_values,
            topic_regex: match (&route.topic_regex, &route.topic_replacement) {
                (Some(regex), Some(replacement)) => {
                    Some(TopicRegex::new(regex, replacement).map_err(|reason| {
                        RouterConfigError {
                            problems: vec![crate::config::ConfigProblem::TopicRegex { reason }],
                        }
                    })?)
                }
                _ => None,
            },
            envelope_fields: route.envelope_fields.clone(),
            debezium_topic_prefix: route.debezium_topic_prefix.clone(),
            debezium_column_types: route.debezium_column_types,
            context_headers: route
                .debezium_context_headers
                .as_ref()
                .map(|context| {
                    let values = [
                        route.debezium_topic_prefix.clone().unwrap_or_default(),
                        context.task_id.clone(),
                        context.connector.clone(),
                        // A run id per router, as Debezium makes one per task start.
                        uuid::Uuid::now_v7().to_string(),
                    ];
                    DEBEZIUM_CONTEXT_HEADERS
                        .iter()
                        .zip(values)
                        .map(|(name, value)| (name.to_string(), value.into_bytes()))
                        .collect()
                })
                .unwrap_or_default(),
        };
        let mut routes = HashMap::with_capacity(tables.len());
        let mut watched = Vec::with_capacity(tables.len());
        for table in tables {
            let topic = table.topic.as_deref().map(parse).transpose()?;
            let event_type_needed = !settings.event_type_header.is_empty()
                || settings.templates_use_event_type
                || topic
                    .as_ref()
                    .is_some_and(|template| template.uses(TopicPlaceholder::EventType));
            watched.push(table.table.clone());
            routes.insert(
                table.table.clone(),
                TableRoute {
                    table: Arc::new(table.table.clone()),
                    mapping: table.column_mapping(),
                    topic,
                    timestamp_source: table.timestamp_source,
                    additional_headers: route
                        .additional_headers
                        .iter()
                        .chain(&table.additional_headers)
                        .cloned()
                        .collect(),
                    connect_schema: table
                        .connect_schema
                        .map_or(route.connect_schema, |own| own.or(route.connect_schema)),
                    event_type_needed,
                    column_cache: Mutex::new(None),
                },
            );
        }
        Ok(Router {
            tables: routes,
            watched,
            settings,
        })
    }

    /// The configured outbox tables, in configuration order.
    pub fn watched_tables(&self) -> Vec<TableName> {
        self.watched.clone()
    }

    /// The columns of `table` (a watched table; `None` for another) that every row needs
    /// and `columns` (the table's, as the server names them) lacks, each with the config
    /// key it comes from, e.g. `("columns.payload", "payload")`. Names match exactly, as rows are
    /// matched: a column missing here would fail every row of the table, so the relay
    /// checks this before it reads (`check` and `run`).
    pub fn missing_columns<'a>(
        &'a self,
        table: &TableName,
        columns: &[String],
    ) -> Option<Vec<(&'static str, &'a str)>> {
        let route = self.tables.get(table)?;
        let mapping = &route.mapping;
        let mut required: Vec<(&'static str, &str)> = vec![
            ("columns.event_id", &mapping.event_id),
            ("columns.aggregate_type", &mapping.aggregate_type),
            ("columns.aggregate_id", &mapping.aggregate_id),
            ("columns.payload", &mapping.payload),
        ];
        if route.event_type_needed {
            required.push(("columns.event_type", &mapping.event_type));
        }
        if route.timestamp_source == TimestampSource::Column {
            required.push(("columns.timestamp", &mapping.timestamp));
        }
        if let Some(partition) = &mapping.partition {
            required.push(("columns.partition", partition));
        }
        required.extend(
            route
                .additional_headers
                .iter()
                .map(|extra| ("additional_headers", extra.column.as_str())),
        );
        required.extend(
            self.settings
                .envelope_fields
                .iter()
                .map(|field| ("[route] envelope_fields", field.column.as_str())),
        );
        Some(
            required
                .into_iter()
                .filter(|(_, column)| !columns.iter().any(|existing| existing == column))
                .collect(),
        )
    }

    /// A binlog table filter selecting exactly the configured outbox tables.
    pub fn table_filter(&self) -> TableFilter {
        TableFilter::tables(self.watched.iter().cloned())
    }

    /// The route of `change`'s table when it is an INSERT; otherwise what routing it
    /// returns: an unknown table's error, or the skip or error `route_invalid_operation`
    /// gives an UPDATE or DELETE. Shared by [`Router::route`] and
    /// [`Router::route_taking_payload`].
    fn insert_table(
        &self,
        change: &RowChange,
    ) -> ControlFlow<Result<RouteOutcome, RoutingError>, &TableRoute> {
        let Some(table) = self.tables.get(&*change.table) else {
            return ControlFlow::Break(Err(RoutingError {
                event_id: None,
                table: Arc::clone(&change.table),
                column: None,
                kind: RoutingErrorKind::UnknownTable,
            }));
        };
        if change.operation != RowOperation::Insert {
            return ControlFlow::Break(self.route_invalid_operation(table, change));
        }
        ControlFlow::Continue(table)
    }

    /// Routes one row change: a record for an insert, a skip or an error for an update or
    /// delete (per `invalid_operation`), a [`RoutingError`] for a row that cannot be routed.
    pub fn route(&self, change: &RowChange) -> Result<RouteOutcome, RoutingError> {
        let table = match self.insert_table(change) {
            ControlFlow::Continue(table) => table,
            ControlFlow::Break(not_an_insert) => return not_an_insert,
        };
        let Some(row) = &change.after else {
            return Err(missing_row_image(table, change));
        };
        self.route_insert(table, change, row, &mut None)
            .map(RouteOutcome::Record)
    }

    /// Routes one row change it takes by value, like [`Router::route`], moving the payload
    /// column's bytes into the record's value instead of copying them (for a `raw` value
    /// format; a JSON format writes new bytes either way). For big payloads this halves the
    /// memory a row needs on its way to Kafka.
    pub fn route_owned(&self, mut change: RowChange) -> Result<RouteOutcome, RoutingError> {
        self.route_taking_payload(&mut change)
    }

    /// Like [`Router::route_owned`], for a caller that still needs the row afterwards (for
    /// its position, or a dead letter): the payload value moves into the record only when a
    /// record is produced, and is then `Value::Null` in `change`'s after image. A skip or a
    /// routing error leaves `change` exactly as it was.
    pub fn route_taking_payload(
        &self,
        change: &mut RowChange,
    ) -> Result<RouteOutcome, RoutingError> {
        let table = match self.insert_table(change) {
            ControlFlow::Continue(table) => table,
            ControlFlow::Break(not_an_insert) => return not_an_insert,
        };
        let Some(mut row) = change.after.take() else {
            return Err(missing_row_image(table, change));
        };
        let indexes = table.indexes(&row.columns, &self.settings);
        // Take the payload out of the row only when no other mapped column reads it.
        let payload_index = indexes.payload.filter(|payload| {
            let others = [
                indexes.event_id,
                indexes.aggregate_type,
                indexes.aggregate_id,
                indexes.event_type,
                indexes.timestamp,
                indexes.partition,
                indexes.tracing,
            ];
            !others
                .iter()
                .chain(&indexes.additional)
                .chain(&indexes.envelope)
                .any(|other| *other == Some(*payload))
        });
        let mut taken = payload_index
            .and_then(|index| row.values.get_mut(index))
            .map(|value| std::mem::replace(value, Value::Null));
        let result = self.route_insert(table, change, &row, &mut taken);
        // Not moved into a record (an error, or a value written anew): put it back.
        if let (Some(value), Some(slot)) = (
            taken,
            payload_index.and_then(|index| row.values.get_mut(index)),
        ) {
            *slot = value;
        }
        change.after = Some(row);
        result.map(RouteOutcome::Record)
    }

    /// Builds the record of an inserted row.
    /// `taken` holds the payload column's value when the caller took it out of `row`
    /// ([`Router::route_taking_payload`]); it is moved into the record only as the last
    /// step, once nothing can fail any more (else it stays for the caller to put back).
    /// `None` reads the payload from `row`.
    fn route_insert(
        &self,
        table: &TableRoute,
        change: &RowChange,
        row: &Row,
        taken: &mut Option<Value>,
    ) -> Result<KafkaRecord, RoutingError> {
        let settings = &self.settings;
        let mapping = &table.mapping;
        let indexes = table.indexes(&row.columns, settings);
        let mut context = ErrorContext {
            table: &table.table,
            event_id: None,
        };

        let event_id_value = context.required(row, indexes.event_id, &mapping.event_id)?;
        let event_id = render_value_text(event_id_value, settings.event_id_encoding)
            .map_err(|kind| context.error(&mapping.event_id, kind))?
            .into_owned();
        if event_id.is_empty() {
            return Err(context.error(&mapping.event_id, RoutingErrorKind::EmptyEventId));
        }
        context.event_id = Some(&event_id);

        let aggregate_type_value =
            context.required(row, indexes.aggregate_type, &mapping.aggregate_type)?;
        let aggregate_type = render_value_text(aggregate_type_value, BinaryEncoding::Utf8)
            .map_err(|kind| context.error(&mapping.aggregate_type, kind))?;

        let aggregate_id_value = if settings.null_values == NullValues::AsDebezium {
            context.present(row, indexes.aggregate_id, &mapping.aggregate_id)?
        } else {
            context.required(row, indexes.aggregate_id, &mapping.aggregate_id)?
        };
        // A NULL aggregate id (only with `null_values = "as_debezium"`) has no raw key bytes.
        let key = match aggregate_id_value {
            Value::Null => None,
            value => Some(
                render_value_bytes(value, settings.key_encoding)
                    .map_err(|kind| context.error(&mapping.aggregate_id, kind))?
                    .into_owned(),
            ),
        };

        let event_type = if table.event_type_needed {
            let value = context.required(row, indexes.event_type, &mapping.event_type)?;
            render_value_text(value, BinaryEncoding::Utf8)
                .map_err(|kind| context.error(&mapping.event_type, kind))?
        } else {
            Cow::Borrowed("")
        };

        let chosen = settings
            .topic_overrides
            .get(aggregate_type.as_ref())
            .or(table.topic.as_ref());
        let template = chosen.unwrap_or(&settings.topic);
        let (topic, checked_at_parse) = match (chosen, &settings.topic_regex) {
            (None, Some(regex)) => (regex.route(&aggregate_type), false),
            _ => (
                template.render(&TopicValues {
                    aggregate_type: &aggregate_type,
                    event_type: &event_type,
                    table: &change.table.table,
                    database: &change.table.database,
                }),
                // A template without placeholders renders its literal, legal by parsing.
                template.as_literal().is_some(),
            ),
        };
        let verdict = if checked_at_parse {
            Ok(())
        } else {
            check_topic_name(&topic)
        };
        if let Err(problem) = verdict {
            let column = if chosen.is_none() && settings.topic_regex.is_some() {
                Some(mapping.aggregate_type.clone())
            } else {
                topic_fault_column(
                    template,
                    &problem,
                    [
                        (
                            TopicPlaceholder::AggregateType,
                            &aggregate_type,
                            &mapping.aggregate_type,
                        ),
                        (
                            TopicPlaceholder::EventType,
                            &event_type,
                            &mapping.event_type,
                        ),
                    ],
                )
            };
            return Err(RoutingError {
                event_id: Some(event_id),
                table: Arc::clone(&table.table),
                column,
                kind: RoutingErrorKind::InvalidTopic { topic, problem },
            });
        }

        // The key and payload schemas: as configured, else as the server describes the
        // columns.
        let connect_schema = table.connect_schema.resolve(
            indexes
                .aggregate_id
                .and_then(|index| row.column_type(index)),
            indexes.payload.and_then(|index| row.column_type(index)),
        );
        let record_key = self
            .formatted_key(connect_schema, aggregate_id_value, key.as_deref())
            .map_err(|kind| context.error(&mapping.aggregate_id, kind))?;

        let timestamp_millis = self.timestamp(table, change, row, &indexes, &context)?;

        let partition = match (&mapping.partition, indexes.partition) {
            (None, _) => None,
            (Some(column), index) => partition_number(context.present(row, index, column)?)
                .map_err(|kind| context.error(column, kind))?,
        };

        let mut headers = Vec::with_capacity(
            settings.context_headers.len() + 4 + table.additional_headers.len() + 1,
        );
        let mut null_headers = Vec::new();
        headers.extend(settings.context_headers.iter().cloned());
        headers.push((settings.id_header.clone(), event_id.as_bytes().to_vec()));
        if !settings.event_type_header.is_empty() {
            headers.push((
                settings.event_type_header.clone(),
                event_type.as_bytes().to_vec(),
            ));
        }
        if !settings.aggregate_type_header.is_empty() {
            headers.push((
                settings.aggregate_type_header.clone(),
                aggregate_type.as_bytes().to_vec(),
            ));
        }
        if let (false, Some(key)) = (settings.aggregate_id_header.is_empty(), &key) {
            headers.push((settings.aggregate_id_header.clone(), key.clone()));
        }
        for (extra, index) in table.additional_headers.iter().zip(&indexes.additional) {
            let value = context.present(row, *index, &extra.column)?;
            // The server's type only where no column_type is configured (it is built per row).
            let server_type = match &extra.column_type {
                Some(_) => None,
                None if settings.debezium_column_types => index
                    .and_then(|index| row.column_type(index))
                    .and_then(|column| SqlColumnType::from_server(&column)),
                None => None,
            };
            let column_type = extra.column_type.as_ref().or(server_type.as_ref());
            // A NULL with a configured column default is that default, as Debezium's
            // `Struct.get` returns it.
            let default = extra
                .column_default
                .as_ref()
                .filter(|_| *value == Value::Null);
            let bytes = match (value, column_type, default) {
                (_, Some(column_type), Some(default)) => header_bytes(
                    &column_type
                        .default_data(default)
                        .map_err(|kind| context.error(&extra.column, kind))?,
                ),
                (_, None, Some(default)) => Some(default.plain_text().into_bytes()),
                (_, Some(column_type), None) => header_bytes(
                    &column_type
                        .data(value)
                        .map_err(|kind| context.error(&extra.column, kind))?,
                ),
                (Value::Null, None, None) => None,
                (value, None, None) => Some(
                    render_value_bytes(value, extra.encoding)
                        .map_err(|kind| context.error(&extra.column, kind))?
                        .into_owned(),
                ),
            };
            match bytes {
                Some(bytes) => headers.push((extra.header_name().to_string(), bytes)),
                // Debezium sends a NULL column as a header with a null value.
                None if settings.null_values == NullValues::AsDebezium => {
                    null_headers.push(NullHeader {
                        position: headers.len(),
                        name: extra.header_name().to_string(),
                    })
                }
                None => {}
            }
        }
        // A table without the span context column simply has no traces to carry (warned
        // about once per column list, in `indexes`).
        let tracing_value = settings
            .tracing_span_context_column
            .as_ref()
            .zip(indexes.tracing.and_then(|index| row.values.get(index)));
        if let Some((column, value)) = tracing_value {
            if let Some(header) =
                tracing_header(value).map_err(|kind| context.error(column, kind))?
            {
                headers.push(match header {
                    TracingHeader::Traceparent(traceparent) => {
                        (TRACEPARENT_HEADER.to_string(), traceparent)
                    }
                    TracingHeader::Other(bytes) => (column.clone(), bytes),
                });
            }
        }

        // Last, so that nothing fails after an owned payload moved into the value.
        let payload_value = match taken.as_ref() {
            Some(value) => value,
            None => context.present(row, indexes.payload, &mapping.payload)?,
        };
        let value = if settings.envelope_fields.is_empty() {
            match settings.value_format {
                RecordFormat::Raw => match self
                    .payload_has_bytes(payload_value)
                    .map_err(|kind| context.error(&mapping.payload, kind))?
                {
                    false => None,
                    true => Some(match taken.take() {
                        Some(value) => payload_into_bytes(Cow::Owned(value)),
                        None => payload_into_bytes(Cow::Borrowed(context.present(
                            row,
                            indexes.payload,
                            &mapping.payload,
                        )?)),
                    }),
                },
                format => self
                    .formatted_payload(connect_schema, format, payload_value)
                    .map_err(|kind| context.error(&mapping.payload, kind))?,
            }
        } else {
            self.envelope_value(
                connect_schema,
                change,
                row,
                &indexes,
                payload_value,
                &aggregate_type,
                &context,
                &mapping.payload,
            )?
        };

        Ok(KafkaRecord {
            topic,
            key: record_key,
            value,
            headers,
            timestamp_millis,
            partition,
            event_id,
            null_headers,
        })
    }

    /// Whether a payload column value gives value bytes under the raw format (`false`: a
    /// tombstone or null value), checked without taking the value, so the caller can move
    /// them out afterwards ([`payload_into_bytes`]).
    fn payload_has_bytes(&self, value: &Value) -> Result<bool, RoutingErrorKind> {
        let tombstone = self.settings.tombstone_on_empty_payload;
        let bytes: &[u8] = match value {
            Value::Null if tombstone => return Ok(false),
            // Debezium's StringConverter writes a NULL payload as a null value.
            Value::Null if self.settings.null_values == NullValues::AsDebezium => return Ok(false),
            Value::Null => return Err(RoutingErrorKind::NullPayload),
            // Already JSON text (Debezium's form): emitted as it is, never a quoted string.
            Value::Json(_) => return Ok(true),
            // Debezium: `payload.toString().trim().isEmpty()` (Java's trim: every char <= ' ').
            Value::Text(text) if tombstone && text.trim_matches(|c: char| c <= ' ').is_empty() => {
                return Ok(false)
            }
            Value::Text(text) => text.as_bytes(),
            Value::Bytes(bytes) => bytes,
            other => {
                return Err(unusable_value_error(
                    other,
                    "the payload (use a JSON, text or binary column)",
                ))
            }
        };
        if bytes.is_empty() && tombstone {
            return Ok(false);
        }
        if self.settings.payload == PayloadMode::RequireJson {
            require_json(bytes)?;
        }
        Ok(true)
    }

    /// The record value with `envelope_fields`: the struct `{payload, field...}` Debezium's
    /// EventRouter builds, as the value converter writes it (`None`: tombstone).
    #[allow(clippy::too_many_arguments)]
    fn envelope_value(
        &self,
        config: ConnectSchema,
        change: &RowChange,
        row: &Row,
        indexes: &ColumnIndexes,
        payload: &Value,
        aggregate_type: &str,
        context: &ErrorContext<'_>,
        payload_column: &str,
    ) -> Result<Option<Vec<u8>>, RoutingError> {
        let settings = &self.settings;
        let payload_error = |kind| context.error(payload_column, kind);
        let format = settings.value_format;
        let mut payload_schema =
            connect_json::configured_schema(config.payload_type, config.payload_optional);
        let payload_text: Option<Cow<'_, str>> = match payload {
            Value::Null => None,
            Value::Text(text) => Some(Cow::Borrowed(text.as_str())),
            Value::Json(document) => Some(Cow::Borrowed(document.as_str())),
            Value::Bytes(bytes) if config.payload_type != ConnectSchemaType::Bytes => {
                Some(Cow::Borrowed(
                    std::str::from_utf8(bytes)
                        .map_err(|_| payload_error(RoutingErrorKind::NotUtf8))?,
                ))
            }
            Value::Bytes(_) => None,
            other => {
                return Err(payload_error(unusable_value_error(
                    other,
                    "the payload (use a JSON, text or binary column)",
                )))
            }
        };
        // Debezium: `payload == null || payload.toString().trim().isEmpty()` (a byte[]'s
        // toString is never empty).
        let blank = match (payload, &payload_text) {
            (Value::Null, _) => true,
            (_, Some(text)) => text.trim_matches(|c: char| c <= ' ').is_empty(),
            _ => false,
        };
        if blank && settings.tombstone_on_empty_payload {
            return Ok(None);
        }
        if let (Value::Null, NullValues::Error) = (payload, settings.null_values) {
            return Err(payload_error(RoutingErrorKind::NullPayload));
        }
        if let (Some(text), PayloadMode::RequireJson) = (&payload_text, settings.payload) {
            require_json(text.as_bytes()).map_err(payload_error)?;
        }
        let mut payload_data = match (payload, &payload_text) {
            (Value::Bytes(bytes), None) => Data::Bytes(bytes.clone()),
            (_, Some(text)) => Data::String(text.to_string()),
            _ => Data::Null,
        };
        if let (true, Some(text)) = (settings.expand_json_payload, &payload_text) {
            if let Some((schema, data)) =
                connect_json::expand_payload(text, settings.json_payload_null_behavior)
                    .map_err(payload_error)?
            {
                payload_schema = schema;
                payload_data = data;
            }
        }
        let mut fields = vec![("payload".to_string(), payload_schema)];
        let mut values = vec![payload_data];
        for (field, index) in settings.envelope_fields.iter().zip(&indexes.envelope) {
            let value = context.present(row, *index, &field.column)?;
            let server = index.and_then(|index| row.column_type(index));
            let column_type = match &field.column_type {
                Some(configured) => configured.clone(),
                None => server
                    .as_ref()
                    .and_then(SqlColumnType::from_server)
                    .ok_or_else(|| {
                        context.error(
                            &field.column,
                            RoutingErrorKind::ColumnTypeNotRenderable {
                                described: server.map_or_else(
                                    || "no type".to_string(),
                                    |column| format!("{:?}", column.sql_type),
                                ),
                            },
                        )
                    })?,
            };
            let nullable = field
                .nullable
                .or(server.map(|column| column.nullable))
                .unwrap_or(true);
            // A NULL with a configured column default is that default, as Debezium's
            // `Struct.get` and JsonConverter's `replace.null.with.default` write it.
            let data = match (value, &field.column_default) {
                (Value::Null, Some(default)) => column_type.default_data(default),
                _ => column_type.data(value),
            };
            values.push(data.map_err(|kind| context.error(&field.column, kind))?);
            let mut schema = column_type.schema(nullable);
            if let Some(default) = &field.column_default {
                schema.default = Some(Box::new(
                    column_type
                        .default_data(default)
                        .map_err(|kind| context.error(&field.column, kind))?,
                ));
            }
            fields.push((field.field_name().to_string(), schema));
        }
        if format == RecordFormat::Raw {
            // StringConverter: Java's `Struct.toString()`, null fields left out.
            let mut text = String::from("Struct{");
            let mut first = true;
            for ((name, _), value) in fields.iter().zip(&values) {
                if *value == Data::Null {
                    continue;
                }
                if !first {
                    text.push(',');
                }
                first = false;
                text.push_str(name);
                text.push('=');
                push_java_text(&mut text, value).ok_or_else(|| {
                    context.error(
                        name,
                        RoutingErrorKind::UnsupportedType {
                            value_type: "binary payload",
                            usage: "an envelope's payload under value_format = \"raw\"",
                        },
                    )
                })?;
            }
            text.push('}');
            return Ok(Some(text.into_bytes()));
        }
        // Debezium names the struct after the table's value schema with the routed-by value
        // (`PREFIX.DB.TABLE.AGGREGATE_TYPE.Value`).
        let name = settings.debezium_topic_prefix.as_ref().map(|prefix| {
            format!(
                "{prefix}.{}.{}.{aggregate_type}.Value",
                change.table.database, change.table.table
            )
        });
        let schema = Schema {
            kind: Kind::Struct(fields),
            optional: false,
            name,
            version: None,
            parameters: Vec::new(),
            default: None,
        };
        connect_json::converter_bytes(format, &schema, &Data::Struct(values))
            .map(Some)
            .map_err(payload_error)
    }

    /// The record key under `key_format`: the raw key bytes, or the aggregate id as Kafka
    /// Connect's `JsonConverter` writes it with the configured key schema.
    /// `raw` is `None` for a NULL aggregate id: a null key, or JSON `null` under a JSON format.
    fn formatted_key(
        &self,
        config: ConnectSchema,
        value: &Value,
        raw: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RoutingErrorKind> {
        let format = self.settings.key_format;
        if format == RecordFormat::Raw {
            return Ok(raw.map(<[u8]>::to_vec));
        }
        let schema = connect_json::configured_schema(config.key_type, config.key_optional);
        let data = match (value, config.key_type) {
            (Value::Null, _) => Data::Null,
            (Value::Int(number), ConnectSchemaType::Int32 | ConnectSchemaType::Int64) => {
                Data::Integer(*number)
            }
            (Value::UInt(number), ConnectSchemaType::Int32 | ConnectSchemaType::Int64) => {
                Data::Integer(
                    i64::try_from(*number)
                        .map_err(|_| schema_mismatch(value, "key_type", config.key_type))?,
                )
            }
            (Value::Bytes(bytes), ConnectSchemaType::Bytes) => Data::Bytes(bytes.clone()),
            (_, ConnectSchemaType::String) => {
                Data::String(render_value_text(value, self.settings.key_encoding)?.into_owned())
            }
            _ => return Err(schema_mismatch(value, "key_type", config.key_type)),
        };
        if let (Data::Integer(number), ConnectSchemaType::Int32) = (&data, config.key_type) {
            if i32::try_from(*number).is_err() {
                return Err(schema_mismatch(value, "key_type", config.key_type));
            }
        }
        connect_json::converter_bytes(format, &schema, &data).map(Some)
    }

    /// The record value under a JSON `value_format` (`None`: tombstone), as Debezium's
    /// router and Kafka Connect's `JsonConverter` write it.
    fn formatted_payload(
        &self,
        config: ConnectSchema,
        format: RecordFormat,
        value: &Value,
    ) -> Result<Option<Vec<u8>>, RoutingErrorKind> {
        let settings = &self.settings;
        let schema = connect_json::configured_schema(config.payload_type, config.payload_optional);
        let text: Cow<'_, str> = match (value, config.payload_type) {
            (Value::Null, _) if settings.tombstone_on_empty_payload => return Ok(None),
            (Value::Null, _) if settings.null_values == NullValues::Error => {
                return Err(RoutingErrorKind::NullPayload)
            }
            (Value::Null, _) => {
                return connect_json::converter_bytes(format, &schema, &Data::Null).map(Some)
            }
            (Value::Bytes(bytes), ConnectSchemaType::Bytes) => {
                if bytes.is_empty() && settings.tombstone_on_empty_payload {
                    return Ok(None);
                }
                return connect_json::converter_bytes(format, &schema, &Data::Bytes(bytes.clone()))
                    .map(Some);
            }
            (Value::Text(text), _) => Cow::Borrowed(text.as_str()),
            (Value::Json(document), _) => Cow::Borrowed(document.as_str()),
            (Value::Bytes(bytes), _) => {
                Cow::Borrowed(std::str::from_utf8(bytes).map_err(|_| RoutingErrorKind::NotUtf8)?)
            }
            (other, _) => {
                return Err(unusable_value_error(
                    other,
                    "the payload (use a JSON, text or binary column)",
                ))
            }
        };
        if settings.payload == PayloadMode::RequireJson {
            require_json(text.as_bytes())?;
        }
        if settings.expand_json_payload {
            if let Some((expanded_schema, data)) =
                connect_json::expand_payload(&text, settings.json_payload_null_behavior)?
            {
                return connect_json::converter_bytes(format, &expanded_schema, &data).map(Some);
            }
        }
        // Debezium: `payload.toString().trim().isEmpty()` (Java's trim: every char <= ' ').
        if settings.tombstone_on_empty_payload && text.trim_matches(|c: char| c <= ' ').is_empty() {
            return Ok(None);
        }
        connect_json::string_record(format, &schema, Some(&text)).map(Some)
    }

    /// The Kafka timestamp per the table's `timestamp_source`.
    fn timestamp(
        &self,
        table: &TableRoute,
        change: &RowChange,
        row: &Row,
        indexes: &ColumnIndexes,
        context: &ErrorContext<'_>,
    ) -> Result<Option<i64>, RoutingError> {
        let event_time = Some(i64::from(change.event_timestamp) * 1000);
        let column = &table.mapping.timestamp;
        let value = match table.timestamp_source {
            TimestampSource::EventTime => return Ok(event_time),
            TimestampSource::ProducerTime => return Ok(None),
            TimestampSource::ColumnOrEventTime => {
                match indexes.timestamp.and_then(|index| row.values.get(index)) {
                    None => return Ok(event_time),
                    Some(value) => value,
                }
            }
            TimestampSource::Column => context.required(row, indexes.timestamp, column)?,
        };
        match timestamp_millis(value).map_err(|kind| context.error(column, kind))? {
            Some(millis) => Ok(Some(millis)),
            None => Ok(event_time),
        }
    }

    /// Skips or rejects an UPDATE/DELETE row per `invalid_update` / `invalid_delete`
    /// (each defaulting to `invalid_operation`).
    fn route_invalid_operation(
        &self,
        table: &TableRoute,
        change: &RowChange,
    ) -> Result<RouteOutcome, RoutingError> {
        let operation = change.operation;
        let event_id = change
            .after
            .as_ref()
            .or(change.before.as_ref())
            .and_then(|row| {
                let indexes = table.indexes(&row.columns, &self.settings);
                let value = indexes.event_id.and_then(|index| row.values.get(index))?;
                render_value_text(value, self.settings.event_id_encoding)
                    .ok()
                    .map(Cow::into_owned)
            });
        let behavior = match operation {
            RowOperation::Delete => self.settings.invalid_delete,
            _ => self.settings.invalid_update,
        };
        match behavior {
            InvalidOperationBehavior::Ignore => Ok(RouteOutcome::Skipped {
                reason: SkipReason::InvalidOperation {
                    operation,
                    event_id,
                },
            }),
            InvalidOperationBehavior::Warn => {
                tracing::warn!(
                    table = %table.table,
                    event_id = event_id.as_deref().unwrap_or("<unreadable>"),
                    ?operation,
                    "skipping a non-insert row on an outbox table (only inserts are events)"
                );
                Ok(RouteOutcome::Skipped {
                    reason: SkipReason::InvalidOperation {
                        operation,
                        event_id,
                    },
                })
            }
            InvalidOperationBehavior::Fail => Err(RoutingError {
                event_id,
                table: Arc::clone(&table.table),
                column: None,
                kind: RoutingErrorKind::InvalidOperation { operation },
            }),
        }
    }
}

/// The error for an INSERT without an after image (a malformed rows event).
fn missing_row_image(table: &TableRoute, change: &RowChange) -> RoutingError {
    RoutingError {
        event_id: None,
        table: Arc::clone(&table.table),
        column: None,
        kind: RoutingErrorKind::MissingRowImage {
            operation: change.operation,
        },
    }
}

/// The column to blame for an illegal rendered topic: the first placeholder column the
/// template uses whose value can explain the problem (for an illegal character: contains
/// it). `None` when only the table or database name can (e.g. `${table}` with a `$`).
fn topic_fault_column(
    template: &TopicTemplate,
    problem: &TopicNameProblem,
    candidates: [(TopicPlaceholder, &str, &String); 2],
) -> Option<String> {
    candidates
        .into_iter()
        .find(|(placeholder, value, _)| {
            template.uses(*placeholder)
                && match problem {
                    TopicNameProblem::IllegalCharacter { character } => value.contains(*character),
                    _ => true,
                }
        })
        .map(|(_, _, column)| column.clone())
}

/// A value that does not fit the configured Connect schema type.
fn schema_mismatch(
    value: &Value,
    setting: &'static str,
    schema: ConnectSchemaType,
) -> RoutingErrorKind {
    RoutingErrorKind::SchemaMismatch {
        value_type: crate::render::value_type_name(value),
        setting,
        schema: match schema {
            ConnectSchemaType::String => "string",
            ConnectSchemaType::Json => "json",
            ConnectSchemaType::Int32 => "int32",
            ConnectSchemaType::Int64 => "int64",
            ConnectSchemaType::Bytes => "bytes",
        },
    }
}

/// The bytes of a payload value already checked to be JSON, text or binary: moved out of an
/// owned value, copied from a borrowed one.
fn payload_into_bytes(value: Cow<'_, Value>) -> Vec<u8> {
    match value {
        Cow::Owned(Value::Text(text)) => text.into_bytes(),
        Cow::Owned(Value::Bytes(bytes)) => bytes,
        Cow::Owned(Value::Json(document)) => document.into_string().into_bytes(),
        Cow::Borrowed(Value::Text(text)) => text.as_bytes().to_vec(),
        Cow::Borrowed(Value::Bytes(bytes)) => bytes.clone(),
        Cow::Borrowed(Value::Json(document)) => document.as_str().as_bytes().to_vec(),
        // Callers check the type first; any other value has no payload bytes.
        _ => Vec::new(),
    }
}

/// A partition number from the partition column (`None` for NULL).
fn partition_number(value: &Value) -> Result<Option<i32>, RoutingErrorKind> {
    let number = match value {
        Value::Null => return Ok(None),
        Value::Int(number) => i128::from(*number),
        Value::UInt(number) => i128::from(*number),
        other => {
            return Err(unusable_value_error(
                other,
                "a partition (use an integer column)",
            ))
        }
    };
    match i32::try_from(number) {
        Ok(partition) if partition >= 0 => Ok(Some(partition)),
        _ => Err(RoutingErrorKind::InvalidPartition {
            reason: format!("{number} is not between 0 and {}", i32::MAX),
        }),
    }
}

/// The header a tracing span context value becomes.
enum TracingHeader {
    /// A W3C `traceparent` value.
    Traceparent(Vec<u8>),
    /// Any other span context, sent under the column's name.
    Other(Vec<u8>),
}

/// The tracing header for a span context column value (`None` for NULL).
fn tracing_header(value: &Value) -> Result<Option<TracingHeader>, RoutingErrorKind> {
    let text: Cow<'_, str> = match value {
        Value::Null => return Ok(None),
        Value::Bytes(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => return Ok(Some(TracingHeader::Other(bytes.clone()))),
        },
        other => render_value_text(other, BinaryEncoding::Utf8)?,
    };
    Ok(Some(match find_traceparent(&text) {
        Some(traceparent) => TracingHeader::Traceparent(traceparent.as_bytes().to_vec()),
        None => TracingHeader::Other(text.as_bytes().to_vec()),
    }))
}

/// `payload = "require_json"`: `bytes` must be one JSON text, and JSON text is UTF-8 (RFC
/// 8259). serde_json does not check UTF-8 inside strings it skips, so it is checked first: a
/// LONGBLOB holding `{"name":"caf\xe9"}` (Latin-1) is refused, not published.
fn require_json(bytes: &[u8]) -> Result<(), RoutingErrorKind> {
    let text = std::str::from_utf8(bytes).map_err(|error| RoutingErrorKind::PayloadNotJson {
        reason: format!("not UTF-8: {error}"),
    })?;
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(drop)
        .map_err(|error| RoutingErrorKind::PayloadNotJson {
            reason: error.to_string(),
        })
}
