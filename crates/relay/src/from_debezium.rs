//! `outbox-relay config from-debezium CONNECTOR.json|.properties`: the relay config
//! equivalent to a Debezium MySQL/MariaDB connector with the Outbox Event Router, so a
//! migration starts from the user's own file.
//!
//! Reads Kafka Connect's REST form (`{"name": ..., "config": {...}}`), a plain JSON object
//! of options, or a `.properties` file (`key=value` / `key: value`, `#`/`!` comments,
//! backslash continuations). Every option is accounted for in the output: mapped to a TOML
//! key, or named in a comment saying why it has no equivalent (not needed, not supported,
//! or a secret that must not be copied). Nothing is dropped silently. The printed TOML
//! loads as a relay config ([`crate::RelayConfig::parse`]; the command checks that before
//! printing).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{bail, Context};

/// The EventRouter's class name in `transforms.<alias>.type`.
const EVENT_ROUTER_CLASS: &str = "io.debezium.transforms.outbox.EventRouter";

/// Connector classes whose binlog the relay reads.
const SUPPORTED_CONNECTORS: [&str; 2] = [
    "io.debezium.connector.mysql.MySqlConnector",
    "io.debezium.connector.mariadb.MariaDbConnector",
];

/// Options that matter to Debezium only, with why the relay needs no equivalent.
const NOT_NEEDED: &[(&str, &str)] = &[
    ("name", "the connector's name; the relay's checkpoint store names its own"),
    ("tasks.max", "the relay is one process per source"),
    ("topic.prefix", "Debezium's logical name for its own topics; the outbox topics come from [route] (keep it for `checkpoint import-debezium`, which finds the offset by it)"),
    ("database.include.list", "the relay reads only the [[outbox]] tables"),
    ("include.schema.changes", "the relay writes no schema-change topic"),
    ("tombstones.on.delete", "the relay drops DELETEs of outbox rows (no tombstones)"),
    ("snapshot.locking.mode", "the relay takes no snapshot"),
    ("snapshot.mode", "the relay takes no snapshot: a first run starts at [source] start (`latest`); to continue where Debezium stopped use `outbox-relay checkpoint import-debezium`"),
    ("database.connectionTimeZone", "the relay reads temporal values from the binlog as stored"),
    ("topic.creation.enable", "see [kafka] create_topics"),
    ("errors.log.enable", "the relay logs every failure itself"),
    ("errors.log.include.messages", "the relay logs every failure itself"),
    ("bigint.unsigned.handling.mode", "an outbox payload is passed through as written"),
    ("gtid.source.includes", "the relay keeps the whole GTID set"),
    ("gtid.source.excludes", "the relay keeps the whole GTID set"),
    ("provide.transaction.metadata", "the relay writes no transaction topic"),
    ("transforms", "read: the EventRouter's options are mapped below"),
];

/// Prefixes of options that matter to Debezium only.
const NOT_NEEDED_PREFIXES: &[(&str, &str)] = &[
    ("schema.history.internal.", "Debezium's schema history; the relay takes column names from the binlog (binlog_row_metadata=FULL) or information_schema"),
    ("database.history.", "Debezium's schema history (pre-2.0 name); not needed"),
    ("topic.creation.", "topic creation of Debezium's topics; the relay creates outbox topics by [kafka] create_topics"),
    ("signal.", "Debezium's signalling (incremental snapshots); the relay takes no snapshot"),
    ("incremental.snapshot.", "the relay takes no snapshot"),
    ("snapshot.", "the relay takes no snapshot"),
    ("errors.", "Kafka Connect's error handling; see [dead_letter]"),
    ("predicates", "Kafka Connect predicates; the EventRouter of this file is applied to every outbox row"),
];

/// A connector config as key -> value text, and where it came from.
#[derive(Debug)]
pub struct ConnectorConfig {
    /// The connector's options (values as Kafka Connect reads them: text).
    pub options: BTreeMap<String, String>,
}

/// Parses Kafka Connect's JSON (`{"name":..,"config":{..}}` or a flat object) or a
/// `.properties` text.
pub fn parse_connector_config(text: &str) -> anyhow::Result<ConnectorConfig> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        let json: serde_json::Value =
            serde_json::from_str(text).context("the connector file is not valid JSON")?;
        let mut object = json
            .as_object()
            .cloned()
            .context("the connector JSON is not an object")?;
        let name = object
            .get("name")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        if let Some(config) = object.get("config").and_then(|v| v.as_object()) {
            object = config.clone();
        }
        let mut options = BTreeMap::new();
        for (key, value) in object {
            let text = match value {
                serde_json::Value::String(text) => text,
                serde_json::Value::Null => continue,
                other => other.to_string(),
            };
            options.insert(key, text);
        }
        if let Some(name) = name {
            options.entry("name".into()).or_insert(name);
        }
        return Ok(ConnectorConfig { options });
    }
    Ok(ConnectorConfig {
        options: parse_properties(text),
    })
}

/// Java `.properties`: `key=value`, `key: value` or `key value`; `#`/`!` comments; a
/// trailing backslash continues the line.
fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut options = BTreeMap::new();
    let mut logical = String::new();
    for line in text.lines() {
        let line = line.trim_start();
        if logical.is_empty() && (line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        if let Some(continued) = line.strip_suffix('\\') {
            logical.push_str(continued);
            continue;
        }
        logical.push_str(line);
        let entry = std::mem::take(&mut logical);
        if entry.trim().is_empty() {
            continue;
        }
        let split = entry
            .find(['=', ':'])
            .or_else(|| entry.find(char::is_whitespace));
        let (key, value) = match split {
            Some(at) => (&entry[..at], &entry[at + 1..]),
            None => (entry.as_str(), ""),
        };
        options.insert(key.trim().to_owned(), value.trim().to_owned());
    }
    options
}

mod probe;

use probe::ServerFacts;

/// A TOML string literal.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// What the conversion produced: TOML lines per section and the options it could not map.
#[derive(Debug, Default)]
struct Conversion {
    /// `[source]` lines.
    source: Vec<String>,
    /// `[source.tls]` lines.
    source_tls: Vec<String>,
    /// `[[outbox]]` tables (each its lines).
    outbox: Vec<Vec<String>>,
    /// `[route]` lines.
    route: Vec<String>,
    /// `[kafka]` lines.
    kafka: Vec<String>,
    /// `[heartbeat]` lines (none: no section, heartbeats off).
    heartbeat: Vec<String>,
    /// Options mapped, for the header comment.
    mapped: Vec<String>,
    /// Options with no equivalent: `(option, why)`.
    unmapped: Vec<(String, String)>,
    /// What the source server said of the outbox tables (`--probe`), or why the config
    /// was not checked against one.
    server_notes: Vec<String>,
}

impl Conversion {
    fn not_mapped(&mut self, key: &str, why: impl Into<String>) {
        self.unmapped.push((key.to_owned(), why.into()));
    }
}

/// The relay's `key_format`/`value_format` for a converter class and its
/// `schemas.enable` (JsonConverter's default: true).
fn record_format(class: &str, schemas_enable: Option<&str>) -> Result<&'static str, String> {
    match class.rsplit('.').next().unwrap_or(class) {
        "StringConverter" | "ByteArrayConverter" => Ok("raw"),
        "JsonConverter" => match schemas_enable.map(str::trim) {
            Some("false") => Ok("json"),
            None | Some("true") => Ok("json_with_schema"),
            Some(other) => Err(format!("schemas.enable = {other:?} is not true or false")),
        },
        _ => Err(format!(
            "converter {class} is not one the relay reproduces (String, ByteArray, Json)"
        )),
    }
}

/// Debezium's heartbeat options as `[heartbeat]`: `heartbeat.interval.ms`, the topic
/// (`topic.heartbeat.name`, else `topic.heartbeat.prefix` + `.` + `topic.prefix`) and
/// `topic.prefix` (the key's `serverName`). The key and value follow the converters, as the
/// outbox records' formats do.
fn convert_heartbeat(
    take: &dyn Fn(&str) -> Option<String>,
    out: &mut Conversion,
) -> anyhow::Result<()> {
    let interval = take("heartbeat.interval.ms");
    let topic_name = take("topic.heartbeat.name");
    let topics_prefix = take("topic.heartbeat.prefix");
    if let Some(query) = take("heartbeat.action.query") {
        out.not_mapped(
            "heartbeat.action.query",
            format!("the relay runs no query on the source (`{query}`); its heartbeat records need none"),
        );
    }
    let interval_ms = match &interval {
        Some(text) => text.parse::<u64>().with_context(|| {
            format!("heartbeat.interval.ms = {text:?} is not a number of milliseconds")
        })?,
        None => 0,
    };
    if interval_ms == 0 {
        if interval.is_some() {
            out.mapped.push("heartbeat.interval.ms".into());
        }
        for (key, value) in [
            ("topic.heartbeat.name", &topic_name),
            ("topic.heartbeat.prefix", &topics_prefix),
        ] {
            if value.is_some() {
                out.not_mapped(
                    key,
                    "heartbeats are off (heartbeat.interval.ms is 0 or absent), as in Debezium",
                );
            }
        }
        return Ok(());
    }
    let Some(prefix) = take("topic.prefix") else {
        out.not_mapped(
            "heartbeat.interval.ms",
            "heartbeats need topic.prefix (the key's serverName), which this file lacks: add [heartbeat] interval_ms and topic_prefix by hand",
        );
        return Ok(());
    };
    out.mapped.extend([
        "heartbeat.interval.ms".to_owned(),
        "topic.prefix".to_owned(),
    ]);
    if interval_ms < crate::config::MIN_HEARTBEAT_INTERVAL_MS {
        out.heartbeat.push(format!(
            "# Debezium's heartbeat.interval.ms was {interval_ms}; the relay's minimum is {} ms",
            crate::config::MIN_HEARTBEAT_INTERVAL_MS
        ));
    }
    out.heartbeat.push(format!(
        "interval_ms = {}",
        interval_ms.max(crate::config::MIN_HEARTBEAT_INTERVAL_MS)
    ));
    out.heartbeat
        .push(format!("topic_prefix = {}", quoted(&prefix)));
    match (topic_name, topics_prefix) {
        (Some(name), other) => {
            out.heartbeat.push(format!("topic = {}", quoted(&name)));
            out.mapped.push("topic.heartbeat.name".into());
            if other.is_some() {
                out.not_mapped(
                    "topic.heartbeat.prefix",
                    "topic.heartbeat.name names the topic, as in Debezium",
                );
            }
        }
        (None, Some(topics_prefix)) => {
            out.heartbeat.push(format!(
                "topic = {}",
                quoted(&format!("{topics_prefix}.{prefix}"))
            ));
            out.mapped.push("topic.heartbeat.prefix".into());
        }
        (None, None) => {}
    }
    Ok(())
}

/// Converts a connector config into relay TOML (validated by loading it).
pub fn convert(config: &ConnectorConfig) -> anyhow::Result<String> {
    convert_with(config, None)
}

/// [`convert`], with what `--probe` learned of the source server: the additional columns'
/// `column_type` where the binlog will not describe them as Debezium's DDL does, the
/// `connect_schema` where it will not describe the key and payload columns, and notes on
/// what the server lacks.
fn convert_with(config: &ConnectorConfig, facts: Option<&ServerFacts>) -> anyhow::Result<String> {
    let options = &config.options;
    let get = |key: &str| options.get(key).map(|v| v.trim().to_owned());
    let mut out = Conversion::default();
    let handled: std::cell::RefCell<std::collections::BTreeSet<String>> = Default::default();
    let take = |key: &str| {
        handled.borrow_mut().insert(key.to_owned());
        get(key)
    };

    // The connector plugin's name, as Debezium's `__debezium.context.connectorName` says it.
    let plugin = match take("connector.class") {
        Some(class) if SUPPORTED_CONNECTORS.contains(&class.as_str()) => {
            out.mapped.push("connector.class".into());
            if class.contains(".mariadb.") {
                "mariadb"
            } else {
                "mysql"
            }
        }
        Some(class) => bail!(
            "connector.class = {class}: the relay reads MySQL and MariaDB binlogs only ({})",
            SUPPORTED_CONNECTORS.join(", ")
        ),
        None => bail!(
            "the connector config has no connector.class: is this a Debezium connector config?"
        ),
    };

    // [source]
    let host = take("database.hostname").unwrap_or_else(|| "localhost".into());
    let port = take("database.port").unwrap_or_else(|| "3306".into());
    let user = take("database.user").unwrap_or_else(|| "root".into());
    out.source.push(format!(
        "url = {}",
        quoted(&format!("mysql://{user}@{host}:{port}"))
    ));
    out.mapped.extend(
        ["database.hostname", "database.port", "database.user"]
            .into_iter()
            .filter(|key| options.contains_key(*key))
            .map(String::from),
    );
    if take("database.password").is_some() {
        out.not_mapped(
            "database.password",
            "a secret is not copied into the file: put it in a file named by [source] password_file, or in OUTBOX_RELAY_SOURCE_PASSWORD",
        );
    }
    match take("database.server.id") {
        Some(id) => {
            let id: u32 = id
                .parse()
                .with_context(|| format!("database.server.id = {id:?} is not a server id"))?;
            out.source.push(format!("# a server id no other replica uses; Debezium's was {id}: reuse it only once Debezium is stopped"));
            out.source.push(format!("server_id = {id}"));
            out.mapped.push("database.server.id".into());
        }
        None => out
            .source
            .push("server_id = 5400 # pick one no other replica uses".into()),
    }
    if let Some(mode) = take("database.ssl.mode") {
        let ours = match mode.as_str() {
            "disabled" | "disable" => Some("disabled"),
            "preferred" | "prefer" => Some("preferred"),
            "required" | "require" => Some("required"),
            "verify_ca" => Some("verify_ca"),
            "verify_identity" => Some("verify_identity"),
            _ => None,
        };
        match ours {
            Some(ours) => {
                out.source_tls.push(format!("mode = {}", quoted(ours)));
                out.mapped.push("database.ssl.mode".into());
            }
            None => out.not_mapped(
                "database.ssl.mode",
                format!("{mode:?} is not a MySQL ssl-mode"),
            ),
        }
    }
    for key in [
        "database.ssl.truststore",
        "database.ssl.keystore",
        "database.ssl.truststore.password",
        "database.ssl.keystore.password",
    ] {
        if take(key).is_some() {
            out.not_mapped(key, "Java key stores are not read: give PEM files in [source.tls] ca_file / cert_file / key_file");
        }
    }
    convert_heartbeat(&take, &mut out)?;

    // [[outbox]]: the captured tables.
    let tables = take("table.include.list").unwrap_or_default();
    for table in tables.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let literal = table.replace("\\.", ".");
        if literal.contains(['*', '?', '[', '(', '|', '+', '^', '$']) {
            out.not_mapped(
                "table.include.list",
                format!("`{table}` is a regular expression: the relay watches tables named exactly; add one [[outbox]] per table"),
            );
            continue;
        }
        if literal.split('.').count() != 2 {
            out.not_mapped(
                "table.include.list",
                format!("`{table}` is not `database.table`"),
            );
            continue;
        }
        out.outbox.push(vec![
            format!("table = {}", quoted(&literal)),
            "preset = \"debezium\"".into(),
            // Debezium stamps records with the processing time unless told otherwise.
            "timestamp_source = \"producer_time\"".into(),
        ]);
    }
    if out.outbox.is_empty() {
        bail!("table.include.list names no outbox table (`database.table`) the relay can watch");
    }
    out.mapped.push("table.include.list".into());

    // The EventRouter.
    let aliases: Vec<String> = take("transforms")
        .unwrap_or_default()
        .split(',')
        .map(|alias| alias.trim().to_owned())
        .filter(|alias| !alias.is_empty())
        .collect();
    let router_alias = aliases.iter().find(|alias| {
        get(&format!("transforms.{alias}.type")).as_deref() == Some(EVENT_ROUTER_CLASS)
    });
    let Some(alias) = router_alias.cloned() else {
        bail!("no transform of type {EVENT_ROUTER_CLASS} in `transforms`: the relay replaces Debezium's Outbox Event Router, not a plain CDC connector");
    };
    for other in aliases.iter().filter(|other| **other != alias) {
        let class = get(&format!("transforms.{other}.type")).unwrap_or_default();
        out.not_mapped(
            &format!("transforms.{other}"),
            format!("another transform ({class}) is not applied by the relay"),
        );
        for key in options
            .keys()
            .filter(|key| key.starts_with(&format!("transforms.{other}.")))
        {
            handled.borrow_mut().insert(key.clone());
        }
    }
    handled
        .borrow_mut()
        .insert(format!("transforms.{alias}.type"));
    out.mapped.push(format!("transforms.{alias}.type"));
    let prefix = format!("transforms.{alias}.");
    let router = |key: &str| format!("{prefix}{key}");
    let router_take = |key: &str| {
        let full = router(key);
        handled.borrow_mut().insert(full.clone());
        get(&full).map(|value| (full, value))
    };

    // Columns.
    let mut columns = Vec::new();
    let (mut key_column, mut payload_column) = ("aggregateid".to_owned(), "payload".to_owned());
    for (option, column, default) in [
        ("table.field.event.id", "event_id", "id"),
        ("table.field.event.key", "aggregate_id", "aggregateid"),
        ("table.field.event.payload", "payload", "payload"),
        ("route.by.field", "aggregate_type", "aggregatetype"),
    ] {
        if let Some((full, value)) = router_take(option) {
            if value != default {
                columns.push(format!("{column} = {}", quoted(&value)));
            }
            match column {
                "aggregate_id" => key_column.clone_from(&value),
                "payload" => payload_column.clone_from(&value),
                _ => {}
            }
            out.mapped.push(full);
        }
    }
    if let Some((full, value)) = router_take("table.field.event.type") {
        columns.push(format!("event_type = {}", quoted(&value)));
        out.mapped.push(full);
    }
    if let Some((full, value)) = router_take("table.field.event.timestamp") {
        columns.push(format!("timestamp = {}", quoted(&value)));
        for table in &mut out.outbox {
            table.retain(|line| !line.starts_with("timestamp_source"));
            table.push("timestamp_source = \"column\"".into());
        }
        out.mapped.push(full);
    }
    if !columns.is_empty() {
        for table in &mut out.outbox {
            table.push(format!("columns = {{ {} }}", columns.join(", ")));
        }
    }
    if let Some((full, _)) = router_take("table.field.event.schema.version") {
        out.not_mapped(
            &full,
            "the schema-version column (written into a Connect schema's version) is not read",
        );
    }

    // Headers: Debezium sends only `id` (and the additional header columns).
    out.route
        .push("headers = { event_type = \"\", aggregate_type = \"\", aggregate_id = \"\" }".into());
    if let Some((full, value)) = router_take("table.fields.additional.placement") {
        let mut headers = Vec::new();
        let mut envelope = Vec::new();
        let mut partition = None;
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let parts: Vec<&str> = entry.split(':').collect();
            // Its type and nullability come from the binlog's TABLE_MAP, as Debezium takes
            // them from the DDL; the probe writes the server's type where the binlog will
            // not describe the column so (TINYINT, metadata below FULL).
            let mut typed = |column: &str, header: bool| -> String {
                let Some(facts) = facts else {
                    return String::new();
                };
                let decision = facts.decide(column, header);
                out.server_notes.extend(decision.note);
                let column_type = decision
                    .column_type
                    .map(|column_type| format!(", column_type = {}", quoted(&column_type)))
                    .unwrap_or_default();
                let default = decision
                    .column_default
                    .map(|default| format!(", column_default = {default}"))
                    .unwrap_or_default();
                format!("{column_type}{default}")
            };
            match parts.as_slice() {
                [column, "header"] => headers.push(format!(
                    "{{ column = {}{} }}",
                    quoted(column),
                    typed(column, true)
                )),
                [column, "header", alias] => headers.push(format!(
                    "{{ column = {}, header = {}{} }}",
                    quoted(column),
                    quoted(alias),
                    typed(column, true)
                )),
                [column, "envelope", rest @ ..] if rest.len() <= 1 => {
                    let field = rest
                        .first()
                        .map(|alias| format!(", field = {}", quoted(alias)))
                        .unwrap_or_default();
                    envelope.push(format!(
                        "{{ column = {}{field}{} }}",
                        quoted(column),
                        typed(column, false)
                    ));
                }
                [column, "partition"] => {
                    if let Some(earlier) = partition.replace(column.to_string()) {
                        out.not_mapped(&full, format!("`{earlier}:partition` is overridden by a later partition column, as in Debezium"));
                    }
                }
                _ => out.not_mapped(&full, format!("`{entry}` is not column:placement[:alias]")),
            }
        }
        if !headers.is_empty() {
            // Headers in Debezium's forms of the columns' types, as the binlog describes them.
            out.route.push("debezium_column_types = true".into());
            out.route
                .push(format!("additional_headers = [{}]", headers.join(", ")));
        }
        if !envelope.is_empty() {
            out.route
                .push(format!("envelope_fields = [{}]", envelope.join(", ")));
            if let Some(prefix) = get("topic.prefix") {
                // It names the envelope's schema under json_with_schema.
                out.route
                    .push(format!("debezium_topic_prefix = {}", quoted(&prefix)));
            }
        }
        if let Some(column) = partition {
            // Debezium's `column:partition`: the column's INT value is the partition.
            for table in &mut out.outbox {
                let entry = format!("partition = {}", quoted(&column));
                match table
                    .iter_mut()
                    .find(|line| line.starts_with("columns = { "))
                {
                    Some(line) => {
                        *line = line.replacen("columns = { ", &format!("columns = {{ {entry}, "), 1)
                    }
                    None => table.push(format!("columns = {{ {entry} }}")),
                }
            }
        }
        out.mapped.push(full);
    }
    // Debezium's default binary.handling.mode (`bytes`): a binary event id is Base64 in the
    // `id` header (SimpleHeaderConverter); text ids are unaffected.
    match take("binary.handling.mode").as_deref() {
        None | Some("bytes") | Some("base64") => {
            out.route.push("event_id_encoding = \"base64\"".into());
            if options.contains_key("binary.handling.mode") {
                out.mapped.push("binary.handling.mode".into());
            }
        }
        Some(other) => out.not_mapped(
            "binary.handling.mode",
            format!("`{other}` is not reproduced for binary ids (bytes and base64 are: Base64)"),
        ),
    }
    match take("time.precision.mode").as_deref() {
        None => {}
        Some("adaptive_time_microseconds") => {
            out.route
                .push("time_precision_mode = \"adaptive_time_microseconds\"".into());
            out.mapped.push("time.precision.mode".into());
        }
        Some(other) => out.not_mapped(
            "time.precision.mode",
            format!("`{other}` is not supported: the relay renders temporal header and envelope columns as Debezium's default adaptive_time_microseconds does (DATETIME(0-3) epoch ms, DATETIME(4-6) epoch µs, TIME µs, DATE days, TIMESTAMP ISO text); switch Debezium to it before the cutover, or keep temporal columns out of the additional fields"),
        ),
    }
    match take("decimal.handling.mode").as_deref() {
        None => {}
        Some("precise") => out.mapped.push("decimal.handling.mode".into()),
        Some(other) => out.not_mapped(
            "decimal.handling.mode",
            format!("`{other}` is not reproduced: the relay renders DECIMAL header and envelope columns as Debezium's default `precise` does (Connect decimals); switch Debezium to it before the cutover, or keep DECIMAL columns out of the additional fields"),
        ),
    }
    if let Some((full, value)) = router_take("table.fields.additional.error.on.missing") {
        out.not_mapped(&full, format!("= {value}: a missing additional column is always a routing error (dead letter) in the relay"));
    }

    // Routing.
    let regex = router_take("route.topic.regex");
    let replacement = router_take("route.topic.replacement");
    let replacement_text = replacement
        .as_ref()
        .map(|(_, value)| value.clone())
        .unwrap_or_else(|| "outbox.event.${routedByValue}".into());
    match &regex {
        Some((full, value)) if value != "(?<routedByValue>.*)" => {
            out.route.push(format!("topic_regex = {}", quoted(value)));
            out.route
                .push(format!("topic_replacement = {}", quoted(&replacement_text)));
            out.mapped.push(full.clone());
        }
        other => {
            if let Some((full, _)) = other {
                out.mapped.push(full.clone());
            }
            out.route.push(format!(
                "topic = {}",
                quoted(&replacement_text.replace("${routedByValue}", "${aggregate_type}"))
            ));
        }
    }
    if let Some((full, _)) = replacement {
        out.mapped.push(full);
    }
    if let Some((full, value)) = router_take("route.tombstone.on.empty.payload") {
        out.route
            .push(format!("tombstone_on_empty_payload = {}", value == "true"));
        out.mapped.push(full);
    }
    // Debezium drops a DELETE of an outbox row always, silently, and handles an UPDATE as
    // `table.op.invalid.behavior` says: skipped with a log line (`warn`, the default, or
    // `error`) or a stop (`fatal`). The relay splits `invalid_operation` per operation.
    let invalid = router_take("table.op.invalid.behavior");
    out.route.push("invalid_delete = \"ignore\"".into());
    let update = match invalid {
        None => "warn",
        Some((full, value)) => match value.as_str() {
            "warn" => {
                out.mapped.push(full);
                "warn"
            }
            "error" => {
                out.mapped.push(full.clone());
                out.not_mapped(&full, "`error` (skip, logged at error level) is `warn` in the relay: the UPDATE is skipped and logged at warn level");
                "warn"
            }
            "fatal" => {
                out.mapped.push(full);
                out.route.push(
                    "# Debezium's `fatal`: an UPDATE is a routing error, which stops the relay with \
                     [dead_letter] enabled = false or fail_on = [\"routing\"] (else it is dead-lettered)"
                        .into(),
                );
                "fail"
            }
            other => {
                out.not_mapped(&full, format!("`{other}` is not warn, error or fatal"));
                "warn"
            }
        },
    };
    out.route.push(format!("invalid_update = \"{update}\""));
    // Converters: the connector's own, else the worker's (not in this file).
    let mut formats = Vec::new();
    for role in ["key", "value"] {
        let class_key = format!("{role}.converter");
        let schemas_key = format!("{role}.converter.schemas.enable");
        let class = take(&class_key);
        let schemas = take(&schemas_key);
        match class {
            Some(class) => match record_format(&class, schemas.as_deref()) {
                Ok(format) => {
                    // A binary aggregate id: ByteArrayConverter writes its bytes, JsonConverter
                    // Base64 (StringConverter Java's identity hash, which nothing reproduces).
                    if role == "key" {
                        if class.ends_with("ByteArrayConverter") {
                            out.route.push("key_encoding = \"raw\"".into());
                        } else if class.ends_with("JsonConverter") {
                            out.route.push("key_encoding = \"base64\"".into());
                        }
                    }
                    out.route
                        .push(format!("{role}_format = {}", quoted(format)));
                    formats.push(format);
                    out.mapped.push(class_key);
                    if schemas.is_some() {
                        out.mapped.push(schemas_key);
                    }
                }
                Err(why) => out.not_mapped(&class_key, why),
            },
            None => {
                out.route.push(format!("# {role}_format: the worker's {role}.converter applies (not in this file): \"raw\" for String/ByteArrayConverter, \"json\" / \"json_with_schema\" for JsonConverter"));
                if schemas.is_some() {
                    out.not_mapped(
                        &schemas_key,
                        format!("without {class_key} in this file; see {role}_format"),
                    );
                }
            }
        }
    }
    if formats.contains(&"json_with_schema") {
        out.route.push("# connect_schema: the key and payload schemas come from the columns as the binlog describes them, as Debezium's come from the DDL; set connect_schema only to override them".into());
        if let Some(facts) = facts {
            for table in &mut out.outbox {
                let Some(name) = table
                    .first()
                    .and_then(|line| line.strip_prefix("table = "))
                    .and_then(|quoted_name| {
                        quoted_name
                            .trim_matches('"')
                            .parse::<outbox_binlog::TableName>()
                            .ok()
                    })
                else {
                    continue;
                };
                match facts.connect_schema(&name, &key_column, &payload_column) {
                    Ok(Some(line)) => table.push(line),
                    Ok(None) => {}
                    Err(why) => out.server_notes.push(format!("connect_schema: {why}")),
                }
            }
        }
    }
    if let Some((full, value)) = router_take("table.expand.json.payload") {
        if value == "true" {
            if formats.last().is_some_and(|format| *format != "raw") {
                out.route.push("expand_json_payload = true".into());
            } else {
                out.not_mapped(&full, "an expanded payload needs a JsonConverter value (value_format json or json_with_schema)");
            }
        }
        out.mapped.push(full);
    }
    if let Some((full, value)) = router_take("table.json.payload.null.behavior") {
        out.route
            .push(format!("json_payload_null_behavior = {}", quoted(&value)));
        out.mapped.push(full);
    }
    // Debezium writes a NULL key / payload as a null key / value.
    out.route.push("null_values = \"as_debezium\"".into());
    // Debezium's connectors put their context headers on every record unless
    // extended.headers.enabled = false; consumers may read them.
    let extended_headers = take("extended.headers.enabled");
    if extended_headers.is_some() {
        out.mapped.push("extended.headers.enabled".into());
    }
    if extended_headers.is_none_or(|value| value.eq_ignore_ascii_case("true")) {
        match get("topic.prefix") {
            Some(prefix) => {
                if !out
                    .route
                    .iter()
                    .any(|line| line.starts_with("debezium_topic_prefix ="))
                {
                    out.route
                        .push(format!("debezium_topic_prefix = {}", quoted(&prefix)));
                }
                out.route.push(format!(
                    "debezium_context_headers = {{ connector = {} }}",
                    quoted(plugin)
                ));
            }
            None => out.not_mapped(
                "extended.headers.enabled",
                "Debezium's __debezium.context.* headers name its topic.prefix, which this file lacks: add debezium_topic_prefix and debezium_context_headers by hand if consumers read them",
            ),
        }
    }
    if let Some((full, value)) = router_take("tracing.span.context.field") {
        out.route
            .push(format!("tracing_span_context_column = {}", quoted(&value)));
        out.mapped.push(full);
    }
    for key in ["tracing.operation.name", "tracing.with.context.field.only"] {
        if let Some((full, _)) = router_take(key) {
            out.not_mapped(&full, "the relay starts no OpenTelemetry span; it forwards the span context column as the traceparent header");
        }
    }

    // [kafka]
    let brokers = take("bootstrap.servers")
        .or_else(|| get("schema.history.internal.kafka.bootstrap.servers"))
        .unwrap_or_else(|| "localhost:9092".into());
    if options.contains_key("bootstrap.servers") {
        out.mapped.push("bootstrap.servers".into());
    }
    out.kafka.push(format!("brokers = {}", quoted(&brokers)));
    out.kafka.push("create_topics = true".into());
    if let Some(partitions) = take("topic.creation.default.partitions") {
        out.kafka.push(format!(
            "topic_partitions = {}",
            partitions
                .parse::<i32>()
                .with_context(|| format!("topic.creation.default.partitions = {partitions:?}"))?
        ));
        out.mapped.push("topic.creation.default.partitions".into());
    }
    if let Some(factor) = take("topic.creation.default.replication.factor") {
        out.kafka.push(format!(
            "topic_replication_factor = {}",
            factor.parse::<i32>().with_context(|| format!(
                "topic.creation.default.replication.factor = {factor:?}"
            ))?
        ));
        out.mapped
            .push("topic.creation.default.replication.factor".into());
    }

    // Everything else: named, with why.
    for (key, _) in options
        .iter()
        .filter(|(key, _)| !handled.borrow().contains(*key))
    {
        if let Some((_, why)) = NOT_NEEDED.iter().find(|(name, _)| name == key) {
            out.not_mapped(key, *why);
        } else if let Some((_, why)) = NOT_NEEDED_PREFIXES
            .iter()
            .find(|(prefix, _)| key.starts_with(prefix))
        {
            out.not_mapped(key, *why);
        } else if key.starts_with(&prefix) {
            out.not_mapped(key, "an EventRouter option the relay does not know");
        } else {
            out.not_mapped(key, "a connector option the relay has no equivalent for");
        }
    }
    match facts {
        Some(facts) => {
            let mut notes = facts.summary();
            notes.append(&mut out.server_notes);
            out.server_notes = notes;
        }
        None => out.server_notes.push(
            "Not checked against the source server (`--probe` reads the outbox tables' columns): the additional columns' types come from the binlog's TABLE_MAP at run time, which needs binlog_row_metadata = FULL, and a missing column or a TINYINT (int16 or boolean to Debezium) shows only when a row is routed".into(),
        ),
    }
    let toml = render(&out, options.get("name").map(String::as_str));
    let relay_config = crate::RelayConfig::parse(&toml).map_err(|error| {
        anyhow::anyhow!("the converted config does not load ({error}); this is a bug of `config from-debezium`:\n{toml}")
    })?;
    if let Some(facts) = facts {
        // The columns every row needs, checked as `run` will check them.
        let router = outbox_router::Router::new(&relay_config.outbox, &relay_config.route)
            .map_err(|error| anyhow::anyhow!("the converted [route] does not build ({error}); this is a bug of `config from-debezium`"))?;
        if let Some(missing) = crate::pipeline::describe_missing_columns(&router, &facts.tables) {
            out.server_notes.push(missing);
            return Ok(render(&out, options.get("name").map(String::as_str)));
        }
    }
    Ok(toml)
}

fn render(out: &Conversion, name: Option<&str>) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# outbox-relay config converted from Debezium connector {} by `outbox-relay config from-debezium`.",
        name.unwrap_or("(unnamed)")
    );
    let _ = writeln!(text, "# Mapped: {}.", out.mapped.join(", "));
    if out.unmapped.is_empty() {
        let _ = writeln!(text, "# Every option has an equivalent.");
    } else {
        let _ = writeln!(text, "# Not mapped (no equivalent in the relay, and why):");
        for (key, why) in &out.unmapped {
            let _ = writeln!(text, "#   {key}: {why}");
        }
    }
    for note in &out.server_notes {
        let _ = writeln!(text, "# {note}");
    }
    let _ = writeln!(text, "\n[source]");
    for line in &out.source {
        let _ = writeln!(text, "{line}");
    }
    if !out.source_tls.is_empty() {
        let _ = writeln!(text, "\n[source.tls]");
        for line in &out.source_tls {
            let _ = writeln!(text, "{line}");
        }
    }
    for table in &out.outbox {
        let _ = writeln!(text, "\n[[outbox]]");
        for line in table {
            let _ = writeln!(text, "{line}");
        }
    }
    let _ = writeln!(text, "\n[route]");
    for line in &out.route {
        let _ = writeln!(text, "{line}");
    }
    let _ = writeln!(text, "\n[kafka]");
    for line in &out.kafka {
        let _ = writeln!(text, "{line}");
    }
    if !out.heartbeat.is_empty() {
        let _ = writeln!(text, "\n[heartbeat]");
        for line in &out.heartbeat {
            let _ = writeln!(text, "{line}");
        }
    }
    let _ = writeln!(
        text,
        "\n[checkpoint]\nstore = \"file\"\npath = \"/var/lib/outbox-relay/checkpoint.json\""
    );
    text
}

/// `config from-debezium FILE [--probe]`: prints the TOML; exit 0. With `probe`, the
/// converted `[source]` is connected to (the password from `OUTBOX_RELAY_SOURCE_PASSWORD`,
/// else the connector's `database.password` when it is a literal, never written out) and
/// the outbox tables' columns complete the config ([`ServerFacts`]).
pub async fn from_debezium_command(
    path: &std::path::Path,
    probe: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the connector config {}", path.display()))?;
    let config = parse_connector_config(&text)
        .with_context(|| format!("reading the connector config {}", path.display()))?;
    let mut toml = convert(&config).with_context(|| format!("converting {}", path.display()))?;
    if probe {
        let relay_config = crate::RelayConfig::parse(&toml)
            .with_context(|| format!("converting {}", path.display()))?;
        let mut url = relay_config.source.connection_url();
        if let Some(password) = config
            .options
            .get("database.password")
            .filter(|password| !password.contains("${"))
        {
            url = crate::config::with_password(&url, password);
        }
        let facts = ServerFacts::probe(
            &url,
            &relay_config.source.tls_options(),
            &relay_config.outbox_tables(),
        )
        .await
        .with_context(|| {
            format!(
                "--probe: {} (the connector's database.hostname, port and user; the password from OUTBOX_RELAY_SOURCE_PASSWORD or database.password)",
                relay_config.source.redacted_url()
            )
        })?;
        toml = convert_with(&config, Some(&facts))
            .with_context(|| format!("converting {}", path.display()))?;
    }
    out.write_all(toml.as_bytes())?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debezium's outbox documentation example, as Kafka Connect's REST JSON.
    const DOCS_EXAMPLE: &str = r#"{
      "name": "outbox-connector",
      "config": {
        "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "tasks.max": "1",
        "database.hostname": "mysql",
        "database.port": "3306",
        "database.user": "debezium",
        "database.password": "dbz",
        "database.server.id": 184054,
        "topic.prefix": "dbserver1",
        "table.include.list": "inventory.outboxevent",
        "schema.history.internal.kafka.bootstrap.servers": "kafka:9092",
        "schema.history.internal.kafka.topic": "schema-changes.inventory",
        "tombstones.on.delete": "false",
        "transforms": "outbox",
        "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
        "transforms.outbox.route.topic.replacement": "${routedByValue}.events",
        "transforms.outbox.table.fields.additional.placement": "type:header:eventType,tenant:envelope",
        "transforms.outbox.table.field.event.timestamp": "timestamp",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "some.future.option": "x"
      }
    }"#;

    #[test]
    fn the_documentation_example_converts_to_a_loadable_config() {
        let toml = convert(&parse_connector_config(DOCS_EXAMPLE).unwrap()).unwrap();
        let config = crate::RelayConfig::parse(&toml).unwrap();
        assert_eq!(config.source.server_id, 184054);
        assert_eq!(config.outbox.len(), 1);
        assert_eq!(config.outbox[0].table.to_string(), "inventory.outboxevent");
        assert_eq!(config.route.topic, "${aggregate_type}.events");
        assert_eq!(config.route.value_format, outbox_router::RecordFormat::Json);
        assert_eq!(config.route.key_format, outbox_router::RecordFormat::Raw);
        assert_eq!(config.route.additional_headers.len(), 1);
        assert_eq!(
            config.route.additional_headers[0].header_name(),
            "eventType"
        );
        assert_eq!(
            config.outbox[0].timestamp_source,
            outbox_router::TimestampSource::Column
        );
        assert!(toml.contains("mysql://debezium@mysql:3306"), "{toml}");
        // Nothing dropped silently: each unmapped option is named with why.
        for named in [
            "database.password: a secret",
            "some.future.option: a connector option",
            "topic.prefix:",
            "schema.history.internal.kafka.topic:",
            "tasks.max:",
        ] {
            assert!(toml.contains(named), "{named} not named:\n{toml}");
        }
        assert!(!toml.contains("dbz\""), "the password leaked:\n{toml}");
        // `tenant:envelope`: an envelope field whose type and nullability come from the
        // binlog's description of the column, as Debezium's come from the DDL.
        assert_eq!(config.route.envelope_fields.len(), 1);
        assert_eq!(config.route.envelope_fields[0].field_name(), "tenant");
        assert_eq!(config.route.envelope_fields[0].column_type, None);
        assert_eq!(config.route.envelope_fields[0].nullable, None);
        assert_eq!(
            config.route.debezium_topic_prefix.as_deref(),
            Some("dbserver1")
        );
        assert!(
            !toml.contains("tenant:envelope"),
            "mapped, not named:\n{toml}"
        );
        assert_eq!(
            config.route.event_id_encoding,
            outbox_router::BinaryEncoding::Base64
        );
    }

    #[test]
    fn debeziums_context_headers_are_on_unless_the_connector_turned_them_off() {
        let load = |class: &str, extra: &str| {
            let connector = format!(
                "connector.class=io.debezium.connector.{class}\n\
                 topic.prefix=dbserver1\n\
                 table.include.list=shop.outbox\n\
                 transforms=outbox\n\
                 transforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n\
                 {extra}"
            );
            let toml = convert(&parse_connector_config(&connector).unwrap()).unwrap();
            (crate::RelayConfig::parse(&toml).unwrap(), toml)
        };
        let (config, toml) = load("mysql.MySqlConnector", "");
        let context = config.route.debezium_context_headers.as_ref();
        assert_eq!(
            context.map(|c| c.connector.as_str()),
            Some("mysql"),
            "{toml}"
        );
        assert_eq!(context.map(|c| c.task_id.as_str()), Some("0"));
        assert_eq!(
            config.route.debezium_topic_prefix.as_deref(),
            Some("dbserver1")
        );
        let (config, toml) = load(
            "mariadb.MariaDbConnector",
            "extended.headers.enabled=true\n",
        );
        let context = config.route.debezium_context_headers.as_ref();
        assert_eq!(
            context.map(|c| c.connector.as_str()),
            Some("mariadb"),
            "{toml}"
        );
        assert!(toml.contains("extended.headers.enabled"), "mapped: {toml}");
        let (config, toml) = load("mysql.MySqlConnector", "extended.headers.enabled=false\n");
        assert_eq!(config.route.debezium_context_headers, None, "{toml}");
    }

    #[test]
    fn heartbeat_options_map_to_the_heartbeat_section() {
        let connector = |extra: &str| {
            format!(
                "connector.class=io.debezium.connector.mysql.MySqlConnector\n\
                 topic.prefix=dbserver1\n\
                 table.include.list=shop.outbox\n\
                 transforms=outbox\n\
                 transforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n\
                 key.converter=org.apache.kafka.connect.json.JsonConverter\n\
                 key.converter.schemas.enable=false\n\
                 {extra}"
            )
        };
        let load = |extra: &str| {
            let toml = convert(&parse_connector_config(&connector(extra)).unwrap()).unwrap();
            (crate::RelayConfig::parse(&toml).unwrap(), toml)
        };

        // Debezium's default topic: the relay's default too.
        let (config, toml) = load("heartbeat.interval.ms=5000\n");
        assert_eq!(config.heartbeat.interval_ms, 5000, "{toml}");
        assert_eq!(config.heartbeat.topic_prefix.as_deref(), Some("dbserver1"));
        assert_eq!(
            config.heartbeat.effective_topic(&config.route).as_deref(),
            Some("__debezium-heartbeat.dbserver1")
        );
        assert_eq!(config.route.key_format, outbox_router::RecordFormat::Json);
        assert!(
            !toml.contains("#   topic.prefix:"),
            "topic.prefix is mapped:\n{toml}"
        );
        assert!(!toml.contains("#   heartbeat.interval.ms:"), "{toml}");

        // topic.heartbeat.prefix, and a query the relay does not run.
        let (config, toml) = load(
            "heartbeat.interval.ms=1000\ntopic.heartbeat.prefix=beats\nheartbeat.action.query=UPDATE hb SET ts=NOW()\n",
        );
        assert_eq!(
            config.heartbeat.effective_topic(&config.route).as_deref(),
            Some("beats.dbserver1")
        );
        assert!(
            toml.contains("#   heartbeat.action.query: the relay runs no query"),
            "{toml}"
        );

        // topic.heartbeat.name wins over the prefix, as in Debezium.
        let (config, toml) = load(
            "heartbeat.interval.ms=1000\ntopic.heartbeat.name=hb-topic\ntopic.heartbeat.prefix=beats\n",
        );
        assert_eq!(config.heartbeat.topic.as_deref(), Some("hb-topic"));
        assert!(
            toml.contains("#   topic.heartbeat.prefix: topic.heartbeat.name names"),
            "{toml}"
        );

        // Below the relay's minimum: raised, and said so.
        let (config, toml) = load("heartbeat.interval.ms=10\n");
        assert_eq!(
            config.heartbeat.interval_ms,
            crate::config::MIN_HEARTBEAT_INTERVAL_MS
        );
        assert!(toml.contains("heartbeat.interval.ms was 10"), "{toml}");

        // Off (0): no section; the topic options are named as unused.
        let (config, toml) = load("heartbeat.interval.ms=0\ntopic.heartbeat.prefix=beats\n");
        assert!(!config.heartbeat.enabled());
        assert!(!toml.contains("[heartbeat]"), "{toml}");
        assert!(
            toml.contains("#   topic.heartbeat.prefix: heartbeats are off"),
            "{toml}"
        );

        // Not a number: refused with the option's name.
        let error =
            convert(&parse_connector_config(&connector("heartbeat.interval.ms=soon\n")).unwrap())
                .unwrap_err();
        assert!(
            format!("{error:#}").contains("heartbeat.interval.ms"),
            "{error:#}"
        );
    }

    #[test]
    fn partition_placement_time_precision_and_binary_handling_map() {
        let connector = |extra: &str| {
            format!(
                "connector.class=io.debezium.connector.mysql.MySqlConnector\n\
                 table.include.list=shop.outbox\n\
                 transforms=outbox\n\
                 transforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n\
                 transforms.outbox.table.field.event.key=agg\n\
                 transforms.outbox.table.fields.additional.placement=a:partition,tenant:header,shard:partition\n\
                 key.converter=org.apache.kafka.connect.converters.ByteArrayConverter\n\
                 {extra}"
            )
        };
        let toml = convert(
            &parse_connector_config(&connector(
                "time.precision.mode=adaptive_time_microseconds\n",
            ))
            .unwrap(),
        )
        .unwrap();
        let config = crate::RelayConfig::parse(&toml).unwrap();
        // The last partition column wins, as in Debezium; the earlier one is named.
        assert_eq!(config.outbox[0].columns.partition.as_deref(), Some("shard"));
        assert_eq!(
            config.outbox[0].columns.aggregate_id.as_deref(),
            Some("agg")
        );
        assert!(toml.contains("`a:partition` is overridden"), "{toml}");
        assert_eq!(
            config.route.key_encoding,
            outbox_router::BinaryEncoding::Raw
        );
        assert_eq!(config.route.additional_headers.len(), 1);
        let toml = convert(
            &parse_connector_config(&connector(
                "time.precision.mode=connect\nbinary.handling.mode=hex\ndecimal.handling.mode=string\n",
            ))
            .unwrap(),
        )
        .unwrap();
        for named in [
            "time.precision.mode: `connect` is not supported",
            "binary.handling.mode: `hex` is not reproduced",
            "decimal.handling.mode: `string` is not reproduced",
        ] {
            assert!(toml.contains(named), "{named} not named:\n{toml}");
        }
    }

    #[test]
    fn properties_files_and_regex_routes_convert() {
        let properties = "# a comment\n\
            name=orders\n\
            connector.class=io.debezium.connector.mysql.MySqlConnector\n\
            database.hostname: db\n\
            database.port=3307\n\
            database.user=relay\n\
            database.server.id=77\n\
            table.include.list=shop.outbox, shop.outbox_b\n\
            transforms=unwrap,router\n\
            transforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState\n\
            transforms.router.type=io.debezium.transforms.outbox.EventRouter\n\
            transforms.router.route.topic.regex=(?<routedByValue>order|customer)\n\
            transforms.router.route.topic.replacement=events.${routedByValue}\n\
            transforms.router.table.op.invalid.behavior=fatal\n\
            transforms.router.route.by.field=kind\n\
            transforms.router.table.field.event.key=\\\n  aggregate_key\n";
        let toml = convert(&parse_connector_config(properties).unwrap()).unwrap();
        let config = crate::RelayConfig::parse(&toml).unwrap();
        assert_eq!(config.outbox.len(), 2);
        assert_eq!(
            config.route.topic_regex.as_deref(),
            Some("(?<routedByValue>order|customer)")
        );
        assert_eq!(
            config.route.topic_replacement.as_deref(),
            Some("events.${routedByValue}")
        );
        assert_eq!(
            config.outbox[1].columns.aggregate_id.as_deref(),
            Some("aggregate_key")
        );
        assert_eq!(
            config.outbox[0].columns.aggregate_type.as_deref(),
            Some("kind")
        );
        assert!(
            toml.contains("transforms.unwrap: another transform"),
            "{toml}"
        );
        // `fatal`: an UPDATE is a routing error; a DELETE is dropped, as Debezium does.
        assert!(toml.contains("Debezium's `fatal`"), "{toml}");
        assert_eq!(
            config.route.invalid_update,
            Some(outbox_router::InvalidOperationBehavior::Fail)
        );
        assert_eq!(
            config.route.invalid_delete,
            Some(outbox_router::InvalidOperationBehavior::Ignore)
        );
    }

    /// The connector `tests/debezium_side_by_side.rs` gives Debezium (the harness's
    /// properties plus the differential test's EventRouter options and converters), whose
    /// records that test proves equal to the relay's with its hand-written `[route]`.
    fn side_by_side_connector(converters: &str, expand: bool) -> String {
        format!(
            "name=tag-json-dbz\n\
             connector.class=io.debezium.connector.mysql.MySqlConnector\n\
             tasks.max=1\n\
             database.hostname=127.0.0.1\n\
             database.port=33061\n\
             database.user=root\n\
             database.password=\n\
             database.server.id=54400\n\
             topic.prefix=tag-json-dbz\n\
             table.include.list=shop.outbox_diff\n\
             schema.history.internal.kafka.bootstrap.servers=127.0.0.1:9092\n\
             schema.history.internal.kafka.topic=tag-json-dbz.schema-history\n\
             snapshot.mode=no_data\n\
             tombstones.on.delete=false\n\
             topic.creation.default.replication.factor=1\n\
             topic.creation.default.partitions=3\n\
             transforms=outbox\n\
             transforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n\
             transforms.outbox.route.topic.replacement=tag.dbz.outbox.event.${{routedByValue}}\n\
             transforms.outbox.table.fields.additional.placement=tenant:header:tenantId,seq:envelope,part:partition\n\
             transforms.outbox.table.expand.json.payload={expand}\n\
             transforms.outbox.route.topic.regex=(?<routedByValue>order|customer)\n\
             snapshot.locking.mode=none\n\
             {converters}"
        )
    }

    /// The relay's `[route]` the differential test proves equal to Debezium's records.
    fn proven_route(extra: &[&str]) -> String {
        let mut route = vec![
            "topic_regex = \"(?<routedByValue>order|customer)\"",
            "topic_replacement = \"tag.dbz.outbox.event.${routedByValue}\"",
            "headers = { event_type = \"\", aggregate_type = \"\", aggregate_id = \"\" }",
            "additional_headers = [{ column = \"tenant\", header = \"tenantId\" }]",
            "envelope_fields = [{ column = \"seq\", column_type = \"int\", nullable = false }]",
            "debezium_topic_prefix = \"tag-json-dbz\"",
            "null_values = \"as_debezium\"",
        ];
        route.extend(extra);
        format!(
            "[source]\nurl = \"mysql://root@127.0.0.1:33061\"\nserver_id = 1\n\
             [[outbox]]\ntable = \"shop.outbox_diff\"\npreset = \"debezium\"\n\
             columns = {{ partition = \"part\" }}\n\
             [route]\n{}\n[kafka]\nbrokers = \"127.0.0.1:9092\"\n\
             [checkpoint]\nstore = \"file\"\npath = \"/tmp/x.json\"\n",
            route.join("\n")
        )
    }

    /// Rows of the differential test's table: text, nested JSON with nulls and decimals,
    /// an empty array, a mixed array, a NULL key, a NULL payload.
    fn diff_rows() -> Vec<outbox_binlog::RowChange> {
        use outbox_binlog::{BinlogPosition, Row, RowChange, RowOperation, Value};
        let columns: std::sync::Arc<[String]> = [
            "id",
            "aggregatetype",
            "aggregateid",
            "type",
            "payload",
            "tenant",
            "timestamp",
            "seq",
            "part",
        ]
        .map(String::from)
        .into();
        let text = |t: &str| Value::Text(t.to_owned());
        // As the binlog describes the differential test's table (`DIFFERENTIAL_TABLE`).
        let column = |sql_type, nullable| outbox_binlog::ColumnType { sql_type, nullable };
        let int = |nullable| {
            column(
                outbox_binlog::SqlType::Integer {
                    bytes: 4,
                    unsigned: false,
                },
                nullable,
            )
        };
        let text_column = |nullable| column(outbox_binlog::SqlType::Text, nullable);
        let types: outbox_binlog::ColumnTypes = vec![
            text_column(false),
            text_column(false),
            text_column(true),
            text_column(false),
            text_column(true),
            text_column(false),
            column(outbox_binlog::SqlType::DateTime { fsp: 6 }, false),
            int(false),
            int(true),
        ]
        .into();
        let rows: [(&str, &str, Option<&str>, Option<&str>); 5] = [
            ("diff-text", "order", Some("o-1"), Some("\"plain text caf\u{e9}\"")),
            (
                "diff-nested",
                "order",
                Some("o-3"),
                Some("{\"z\": 1, \"order\": {\"id\": 7, \"note\": null, \"total\": 12.50, \"lines\": []}, \"ok\": true}"),
            ),
            ("diff-mixed", "customer", Some("c-2"), Some("{\"mixed\": [1, \"a\"], \"n\": null}")),
            ("diff-nullkey", "customer", None, Some("{\"k\": \"no key\"}")),
            ("diff-nullpayload", "order", Some("o-4"), None),
        ];
        rows.iter()
            .enumerate()
            .map(|(index, (id, kind, key, payload))| RowChange {
                table: std::sync::Arc::new("shop.outbox_diff".parse().unwrap()),
                operation: RowOperation::Insert,
                before: None,
                after: Some(Row {
                    columns: columns.clone(),
                    values: vec![
                        text(id),
                        text(kind),
                        key.map_or(Value::Null, text),
                        text("created"),
                        payload.map_or(Value::Null, text),
                        text("acme"),
                        Value::Null,
                        Value::Int(index as i64),
                        if *id == "diff-nullkey" {
                            Value::Int(1)
                        } else {
                            Value::Null
                        },
                    ],
                    types: Some(types.clone()),
                }),
                event_timestamp: 1_700_000_000,
                event_position: BinlogPosition::new("binlog.000001", 4),
                transaction_gtid: None,
                in_xa_transaction: false,
            })
            .collect()
    }

    /// The converted config routes every row exactly as the `[route]` the differential
    /// test proves byte-identical to Debezium: topic, key, value, headers, partition.
    #[test]
    fn the_side_by_side_connector_converts_to_a_config_that_routes_identically() {
        let string = "key.converter=org.apache.kafka.connect.storage.StringConverter\n\
                      value.converter=org.apache.kafka.connect.storage.StringConverter\n";
        let json = "key.converter=org.apache.kafka.connect.json.JsonConverter\n\
                    key.converter.schemas.enable=false\n\
                    value.converter=org.apache.kafka.connect.json.JsonConverter\n\
                    value.converter.schemas.enable=false\n";
        let modes: [(&str, bool, &[&str]); 3] = [
            (string, false, &[]),
            (
                json,
                false,
                &["key_format = \"json\"", "value_format = \"json\""],
            ),
            (
                json,
                true,
                &[
                    "key_format = \"json\"",
                    "value_format = \"json\"",
                    "expand_json_payload = true",
                ],
            ),
        ];
        for (converters, expand, extra) in modes {
            let connector = side_by_side_connector(converters, expand);
            let toml = convert(&parse_connector_config(&connector).unwrap()).unwrap();
            // The envelope column's type comes from the binlog: nothing to state by hand.
            assert!(
                toml.contains("envelope_fields = [{ column = \"seq\" }]"),
                "{toml}"
            );
            let converted = crate::RelayConfig::parse(&toml).unwrap();
            let proven = crate::RelayConfig::parse(&proven_route(extra)).unwrap();
            let ours = outbox_router::Router::new(&converted.outbox, &converted.route).unwrap();
            let theirs = outbox_router::Router::new(&proven.outbox, &proven.route).unwrap();
            assert_eq!(converted.kafka.topic_partitions, 3, "{toml}");
            // Debezium's context headers, on by default there, come first; the proven route
            // leaves them out (the differential test compares them on their own).
            assert!(
                toml.contains("debezium_context_headers = { connector = \"mysql\" }"),
                "{toml}"
            );
            for row in diff_rows() {
                let record = |router: &outbox_router::Router| match router.route(&row) {
                    Ok(outbox_router::RouteOutcome::Record(record)) => (
                        record.topic,
                        record.key,
                        record.value,
                        record.headers,
                        record.partition,
                    ),
                    other => panic!("{other:?}"),
                };
                let mut converted_record = record(&ours);
                let context: Vec<String> = converted_record
                    .3
                    .drain(..outbox_router::DEBEZIUM_CONTEXT_HEADERS.len())
                    .map(|(name, _)| name)
                    .collect();
                assert_eq!(context, outbox_router::DEBEZIUM_CONTEXT_HEADERS);
                assert_eq!(
                    converted_record,
                    record(&theirs),
                    "{converters} expand={expand}:\n{toml}"
                );
            }
        }
    }

    #[test]
    fn a_connector_without_an_event_router_is_refused() {
        let error = convert(
            &parse_connector_config(
                r#"{"connector.class":"io.debezium.connector.mysql.MySqlConnector","table.include.list":"a.b"}"#,
            )
            .unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("EventRouter"), "{error}");
        let error = convert(
            &parse_connector_config(
                r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector"}"#,
            )
            .unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("MySQL and MariaDB"), "{error}");
    }
}
