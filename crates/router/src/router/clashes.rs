//! Configured column types checked against the server's own description of the columns
//! before the first row: a `column_type`, `nullable` or `connect_schema` setting overrides
//! what the server describes, and Debezium always writes what the server describes, so a
//! difference between the two is a record that differs from Debezium's (usually a typo or
//! a table altered since the config was written). A `column_default` stands for the
//! server's `DEFAULT`, which the binlog does not carry: one that differs from it is a
//! clash too.

use std::fmt;

use outbox_binlog::{ColumnDescription, TableName, WatchedTableColumns};

use super::Router;
use crate::column_type::SqlColumnType;
use crate::config::{ConnectSchemaType, RecordFormat};

/// A configured type or nullability of a column that its server-side definition
/// contradicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnTypeClash {
    /// The outbox table.
    pub table: TableName,
    /// The column.
    pub column: String,
    /// The setting, as the config names it (`[route] envelope_fields`' `column_type`).
    pub setting: String,
    /// The configured value.
    pub configured: String,
    /// What the server says instead (`decimal(20,10)`, `NOT NULL`).
    pub server: String,
    /// How to mend it.
    pub fix: &'static str,
}

/// The fix of a type, nullability or `connect_schema` clash.
const SETTING_FIX: &str =
    "correct the setting or leave it out (the server's definition is then used)";
/// The fix of a `column_default` clash (the binlog carries no defaults).
const DEFAULT_FIX: &str =
    "set column_default to the server's DEFAULT, or leave it out for a column without one (`config from-debezium --probe` writes it)";

impl fmt::Display for ColumnTypeClash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outbox table `{}` column `{}`: {} is {}, but the server defines the column as {}; Debezium writes the column as the server defines it, so these records differ from Debezium's: {}",
            self.table, self.column, self.setting, self.configured, self.server, self.fix
        )
    }
}

fn null_text(nullable: bool) -> &'static str {
    if nullable {
        "NULL"
    } else {
        "NOT NULL"
    }
}

impl Router {
    /// Every configured column type, nullability, default and `connect_schema` setting of
    /// `tables`' routes that the server's description of the columns contradicts. Columns a
    /// table lacks are [`Router::missing_columns`]' to report; a server type the relay does
    /// not render by Debezium's rules (TINYINT, unknown types) is no clash: there the setting
    /// is the only way. A table the router does not watch has none.
    pub fn column_type_clashes(&self, tables: &[WatchedTableColumns]) -> Vec<ColumnTypeClash> {
        tables
            .iter()
            .flat_map(|table| self.table_clashes(table))
            .collect()
    }

    /// [`Router::column_type_clashes`] of one table.
    fn table_clashes(&self, table: &WatchedTableColumns) -> Vec<ColumnTypeClash> {
        let Some(route) = self.tables.get(&table.table) else {
            return Vec::new();
        };
        let describe = |column: &str| -> Option<&ColumnDescription> {
            let index = table.columns.iter().position(|name| name == column)?;
            table.descriptions.get(index)
        };
        let mut clashes = Vec::new();
        let mut clash = |column: &str, setting: String, configured: String, server: String| {
            clashes.push(ColumnTypeClash {
                table: table.table.clone(),
                column: column.to_string(),
                fix: if setting.ends_with("column_default") {
                    DEFAULT_FIX
                } else {
                    SETTING_FIX
                },
                setting,
                configured,
                server,
            })
        };
        let typed_columns = route
            .additional_headers
            .iter()
            .map(|header| ("additional_headers", &header.column, &header.column_type))
            .chain(
                self.settings
                    .envelope_fields
                    .iter()
                    .map(|field| ("[route] envelope_fields", &field.column, &field.column_type)),
            );
        for (list, column, configured) in typed_columns {
            let (Some(configured), Some(description)) = (configured, describe(column)) else {
                continue;
            };
            let Some(server) = SqlColumnType::from_server(&description.described) else {
                continue;
            };
            if server.kind() != configured.kind() {
                clash(
                    column,
                    format!("{list}' column_type"),
                    format!("\"{configured}\""),
                    format!("`{}`", description.column_type),
                );
            }
        }
        for field in &self.settings.envelope_fields {
            let (Some(nullable), Some(description)) = (field.nullable, describe(&field.column))
            else {
                continue;
            };
            if nullable != description.described.nullable {
                clash(
                    &field.column,
                    "[route] envelope_fields' nullable".to_string(),
                    nullable.to_string(),
                    null_text(description.described.nullable).to_string(),
                );
            }
        }
        // Column defaults stand in for NULLs and are in the envelope's field schemas: the
        // binlog does not carry them, so they are configured. A NOT NULL column's default
        // matters only in a field schema.
        let value_schemas = self.settings.value_format == RecordFormat::JsonWithSchema;
        let defaulted_columns = route
            .additional_headers
            .iter()
            .map(|header| {
                (
                    "additional_headers",
                    &header.column,
                    &header.column_type,
                    &header.column_default,
                    false,
                )
            })
            .chain(self.settings.envelope_fields.iter().map(|field| {
                (
                    "[route] envelope_fields",
                    &field.column,
                    &field.column_type,
                    &field.column_default,
                    value_schemas,
                )
            }));
        for (list, column, configured_type, configured_default, in_schema) in defaulted_columns {
            let Some(description) = describe(column) else {
                continue;
            };
            let matters = description.described.nullable || in_schema;
            if !matters && configured_default.is_none() {
                continue;
            }
            let column_type = configured_type
                .clone()
                .or_else(|| SqlColumnType::from_server(&description.described))
                .or_else(|| SqlColumnType::parse(&description.column_type).ok());
            let Some(Ok(server)) = column_type
                .map(|column_type| column_type.default_value_of(description.default.as_ref()))
            else {
                continue;
            };
            if server != *configured_default {
                clash(
                    column,
                    format!("{list}' column_default"),
                    configured_default
                        .as_ref()
                        .map_or_else(|| "unset".to_string(), ToString::to_string),
                    match server {
                        Some(default) => format!("`{} DEFAULT {default}`", description.column_type),
                        None => format!("`{}` without a DEFAULT", description.column_type),
                    },
                );
            }
        }
        // The key and payload schemas matter only where a converter writes them.
        let schema = &route.connect_schema;
        let schema_columns = [
            (
                self.settings.key_format == RecordFormat::JsonWithSchema,
                &route.mapping.aggregate_id,
                ("key_type", schema.key_type),
                ("key_optional", schema.key_optional),
            ),
            (
                self.settings.value_format == RecordFormat::JsonWithSchema,
                &route.mapping.payload,
                ("payload_type", schema.payload_type),
                ("payload_optional", schema.payload_optional),
            ),
        ];
        for (written, column, (type_key, schema_type), (optional_key, optional)) in schema_columns {
            let Some(description) = describe(column).filter(|_| written) else {
                continue;
            };
            let server_type = ConnectSchemaType::described(description.described.sql_type);
            if let (Some(configured), Some(server)) = (schema_type, server_type) {
                if configured != server {
                    clash(
                        column,
                        format!("connect_schema.{type_key}"),
                        format!("\"{}\"", configured.as_str()),
                        format!(
                            "`{}` (Connect type \"{}\")",
                            description.column_type,
                            server.as_str()
                        ),
                    );
                }
            }
            if let Some(optional) = optional {
                if optional != description.described.nullable {
                    clash(
                        column,
                        format!("connect_schema.{optional_key}"),
                        optional.to_string(),
                        null_text(description.described.nullable).to_string(),
                    );
                }
            }
        }
        clashes
    }
}

#[cfg(test)]
mod tests {
    use outbox_binlog::{ColumnDefault, ColumnType, SqlType};

    use super::*;
    use crate::config::{ColumnPreset, OutboxTableConfig, RouteConfig};

    fn described(column_type: &str, nullable: bool) -> ColumnDescription {
        ColumnDescription {
            column_type: column_type.to_string(),
            described: ColumnType {
                sql_type: SqlType::from_column_type(column_type),
                nullable,
            },
            default: None,
        }
    }

    #[test]
    fn settings_the_server_contradicts_are_clashes() {
        let table: TableName = "shop.outbox".parse().unwrap();
        let route: RouteConfig = toml::from_str(
            r#"
            key_format = "json_with_schema"
            value_format = "json_with_schema"
            debezium_topic_prefix = "shop"
            connect_schema = { key_type = "int64", key_optional = false, payload_type = "string" }
            additional_headers = [
                { column = "tenant" },
                { column = "created", column_type = "datetime(3)" },
                { column = "flag", column_type = "smallint" },
                { column = "region", column_type = "varchar(16)" },
            ]
            envelope_fields = [
                { column = "amount", column_type = "int", nullable = false },
                { column = "due", column_type = "date", nullable = true },
                { column = "channel", column_default = "web" },
                { column = "rank", column_default = 2 },
            ]
            "#,
        )
        .unwrap();
        let router = Router::new(
            &[OutboxTableConfig::new(
                table.clone(),
                ColumnPreset::Debezium,
            )],
            &route,
        )
        .unwrap();
        let columns = [
            ("id", described("varchar(64)", false)),
            ("aggregatetype", described("varchar(64)", false)),
            ("aggregateid", described("varchar(64)", false)),
            ("type", described("varchar(64)", false)),
            ("payload", described("longtext", true)),
            // DATETIME(6) is epoch microseconds to Debezium, DATETIME(3) milliseconds.
            ("created", described("datetime(6)", false)),
            // TINYINT(1): not rendered from the server's type, so no clash.
            ("flag", described("tinyint(1)", false)),
            ("region", described("varchar(16)", true)),
            ("amount", described("decimal(20,10)", true)),
            ("due", described("date", true)),
            // NOT NULL: its default never stands in for a NULL, and a header has no schema.
            (
                "tenant",
                ColumnDescription {
                    default: Some(ColumnDefault::Literal("acme".into())),
                    ..described("varchar(32)", false)
                },
            ),
            (
                "channel",
                ColumnDescription {
                    default: Some(ColumnDefault::Literal("web".into())),
                    ..described("varchar(8)", true)
                },
            ),
            (
                "rank",
                ColumnDescription {
                    default: Some(ColumnDefault::Literal("3".into())),
                    ..described("int", true)
                },
            ),
        ];
        let watched = WatchedTableColumns {
            table: table.clone(),
            columns: columns.iter().map(|(name, _)| name.to_string()).collect(),
            descriptions: columns.iter().map(|(_, column)| column.clone()).collect(),
        };
        let clashes: Vec<(String, String, String)> = router
            .column_type_clashes(std::slice::from_ref(&watched))
            .into_iter()
            .map(|clash| (clash.column, clash.setting, clash.server))
            .collect();
        let expected = [
            (
                "created",
                "additional_headers' column_type",
                "`datetime(6)`",
            ),
            (
                "amount",
                "[route] envelope_fields' column_type",
                "`decimal(20,10)`",
            ),
            ("amount", "[route] envelope_fields' nullable", "NULL"),
            (
                "rank",
                "[route] envelope_fields' column_default",
                "`int DEFAULT 3`",
            ),
            (
                "aggregateid",
                "connect_schema.key_type",
                "`varchar(64)` (Connect type \"string\")",
            ),
        ];
        assert_eq!(
            clashes,
            expected
                .iter()
                .map(|(column, setting, server)| (
                    column.to_string(),
                    setting.to_string(),
                    server.to_string()
                ))
                .collect::<Vec<_>>()
        );
        // Without the schemas written, connect_schema is not checked; the message says
        // what to do.
        let raw = Router::new(
            &[OutboxTableConfig::new(table, ColumnPreset::Debezium)],
            &RouteConfig {
                key_format: RecordFormat::Raw,
                value_format: RecordFormat::Raw,
                ..route
            },
        )
        .unwrap();
        // The defaults stand in for NULLs whatever the format.
        let clashes = raw.column_type_clashes(std::slice::from_ref(&watched));
        assert_eq!(clashes.len(), 4, "{clashes:?}");
        assert!(clashes[0]
            .to_string()
            .contains("column `created`: additional_headers' column_type is \"datetime(3)\", but the server defines the column as `datetime(6)`"));
        let default = clashes
            .iter()
            .find(|clash| clash.column == "rank")
            .expect("the rank default clash");
        assert!(
            default.to_string().ends_with("set column_default to the server's DEFAULT, or leave it out for a column without one (`config from-debezium --probe` writes it)"),
            "{default}"
        );
    }
}
