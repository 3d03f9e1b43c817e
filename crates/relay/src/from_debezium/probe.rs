//! `config from-debezium --probe`: the source server's own description of the outbox
//! tables, so the converted config needs no hand edit. Debezium takes every column's type
//! from the DDL; the relay takes it from the binlog's TABLE_MAP at run time, which describes
//! text against binary columns and signedness only with `binlog_row_metadata = FULL`, and
//! never TINYINT(1) against other TINYINTs. Where the binlog will not describe a column as
//! Debezium's DDL does, the probe writes the server's `column_type` (and `connect_schema`)
//! into the config, and names what the relay cannot reproduce.

use std::time::Duration;

use outbox_binlog::{ColumnDescription, ServerReport, TableName, WatchedTableColumns};
use outbox_router::{ConnectSchemaType, SqlColumnType};

/// What the probe learned from the source server.
#[derive(Debug, Clone)]
pub(crate) struct ServerFacts {
    /// The server's identity and the settings and grants it lacks (`check`'s report).
    pub(crate) report: ServerReport,
    /// The outbox tables as the server has them (those that exist as named).
    pub(crate) tables: Vec<WatchedTableColumns>,
    /// Why some outbox tables did not resolve (missing, or hidden from the user).
    pub(crate) unresolved: Option<String>,
}

/// What the converted config says of one additional column.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ColumnDecision {
    /// The `column_type` to write (the server's `COLUMN_TYPE`), when the binlog will not
    /// describe the column as Debezium's DDL does.
    pub(crate) column_type: Option<String>,
    /// The `column_default` to write (TOML), for a column with a DEFAULT: Debezium sends it
    /// in place of NULLs and writes it into the field's schema.
    pub(crate) column_default: Option<String>,
    /// What the relay cannot reproduce, for the config's header.
    pub(crate) note: Option<String>,
}

impl ServerFacts {
    /// Connects with `url` and `tls` (the converted `[source]`) and reads the server's
    /// report and `tables`' columns.
    pub(crate) async fn probe(
        url: &str,
        tls: &outbox_binlog::TlsOptions,
        tables: &[TableName],
    ) -> anyhow::Result<ServerFacts> {
        use anyhow::Context as _;
        let report = outbox_binlog::check_server(url, tls)
            .await
            .context("probing the source server")?;
        let (mut conn, _tls) = outbox_binlog::connect_to_server(url, tls, Duration::from_secs(30))
            .await
            .context("probing the source server")?;
        let resolved = outbox_binlog::resolve_watched_tables(&mut conn, tables)
            .await
            .context("reading the outbox tables' columns")?;
        let _ = conn.disconnect().await;
        let (tables, unresolved) = match resolved {
            Ok(tables) => (tables, None),
            Err(unresolved) => (Vec::new(), Some(unresolved.message)),
        };
        Ok(ServerFacts {
            report,
            tables,
            unresolved,
        })
    }

    /// The binlog describes every column's type (`binlog_row_metadata = FULL`): character
    /// sets and signedness come with each TABLE_MAP.
    pub(crate) fn binlog_describes_columns(&self) -> bool {
        !self
            .report
            .checks
            .iter()
            .any(|check| check.setting == "binlog_row_metadata")
    }

    /// The column `column` of the first outbox table that has it, with that table.
    fn column(&self, column: &str) -> Option<(&TableName, &ColumnDescription)> {
        self.tables.iter().find_map(|table| {
            let index = table.columns.iter().position(|name| name == column)?;
            Some((&table.table, table.descriptions.get(index)?))
        })
    }

    /// What to write for the additional column `column` placed as a header or an envelope
    /// field.
    pub(crate) fn decide(&self, column: &str, header: bool) -> ColumnDecision {
        // A column no table has is named by the missing-columns check, as `run` names it.
        let Some((table, description)) = self.column(column) else {
            return ColumnDecision::default();
        };
        let mut decision = self.decide_type(table, description, column, header);
        let column_type = SqlColumnType::parse(&description.column_type)
            .ok()
            .or_else(|| SqlColumnType::from_server(&description.described));
        // A NOT NULL column's default matters only in an envelope field's schema.
        let default_matters = !header || description.described.nullable;
        if let (true, Some(column_type)) = (default_matters, column_type) {
            match column_type.default_value_of(description.default.as_ref()) {
                Ok(default) => decision.column_default = default.map(|default| default.to_string()),
                Err(why) => {
                    decision.note.get_or_insert(format!(
                        "`{column}` ({table}): {why}; Debezium sends that default in place of NULLs (and in the field's schema), the relay does not"
                    ));
                }
            }
        }
        decision
    }

    /// The `column_type` part of [`ServerFacts::decide`].
    fn decide_type(
        &self,
        table: &TableName,
        description: &ColumnDescription,
        column: &str,
        header: bool,
    ) -> ColumnDecision {
        let described = SqlColumnType::from_server(&description.described).is_some();
        if described && self.binlog_describes_columns() {
            return ColumnDecision::default();
        }
        match SqlColumnType::parse(&description.column_type) {
            Ok(_) if description.column_type.to_ascii_lowercase().starts_with("tinyint(1)") => {
                ColumnDecision {
                    column_type: Some(description.column_type.clone()),
                    note: Some(format!(
                        "`{column}` ({table}) is TINYINT(1): written as int16, as Debezium writes a column it knows from its snapshot (BOOLEAN columns too); if Debezium read the column's BOOLEAN DDL from the binlog (created or altered after the connector started), it writes a boolean: then set its column_type = \"boolean\""
                    )),
                    ..ColumnDecision::default()
                }
            }
            Ok(_) => ColumnDecision {
                column_type: Some(description.column_type.clone()),
                ..ColumnDecision::default()
            },
            Err(why) if header => ColumnDecision {
                column_type: None,
                column_default: None,
                note: Some(format!(
                    "`{column}` ({table}): {why}; as a header it carries the value's plain text, which can differ from Debezium's"
                )),
            },
            Err(why) => ColumnDecision {
                column_type: None,
                column_default: None,
                note: Some(format!(
                    "`{column}` ({table}): {why}; as an envelope field each of its rows would be a dead letter: leave it out of the placement or set its column_type"
                )),
            },
        }
    }

    /// `connect_schema` for `table` whose key and payload columns are `key` and `payload`,
    /// when the binlog will not describe them (`binlog_row_metadata` below FULL): the
    /// schemas Debezium derives from the server's definitions. `Err`: what could not be
    /// decided.
    pub(crate) fn connect_schema(
        &self,
        table: &TableName,
        key: &str,
        payload: &str,
    ) -> Result<Option<String>, String> {
        if self.binlog_describes_columns() {
            return Ok(None);
        }
        let Some(columns) = self.tables.iter().find(|found| &found.table == table) else {
            return Ok(None);
        };
        let describe = |column: &str| -> Result<(&'static str, bool), String> {
            let index = columns
                .columns
                .iter()
                .position(|name| name == column)
                .ok_or_else(|| format!("`{table}` has no column `{column}`"))?;
            let description = columns
                .descriptions
                .get(index)
                .ok_or_else(|| format!("`{table}` column `{column}` is not described"))?;
            let schema_type = ConnectSchemaType::described(description.described.sql_type)
                .ok_or_else(|| {
                    format!(
                        "`{table}` column `{column}` is `{}`, which has no connect_schema type",
                        description.column_type
                    )
                })?;
            Ok((schema_type.as_str(), description.described.nullable))
        };
        let (key_type, key_optional) = describe(key)?;
        let (payload_type, payload_optional) = describe(payload)?;
        Ok(Some(format!(
            "connect_schema = {{ key_type = \"{key_type}\", key_optional = {key_optional}, payload_type = \"{payload_type}\", payload_optional = {payload_optional} }}"
        )))
    }

    /// The header lines saying what was checked against the server.
    pub(crate) fn summary(&self) -> Vec<String> {
        let identity = &self.report.identity;
        let mut lines = vec![format!(
            "Probed the source {} ({}): the additional columns' types below are the server's{}.",
            identity.address,
            identity.version,
            if self.binlog_describes_columns() {
                " where the binlog will not describe them as Debezium's DDL does"
            } else {
                " (binlog_row_metadata is below FULL, so the binlog will not describe them)"
            }
        )];
        lines.extend(
            self.report
                .checks
                .iter()
                .map(|check| format!("Source setting: {check}")),
        );
        lines.extend(self.unresolved.clone());
        lines
    }
}
