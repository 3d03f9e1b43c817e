//! Every watched table must exist under the exact name the binlog will give it: the reader
//! matches TABLE_MAP names byte for byte, so `shop.Outbox` for a table the server logs as
//! `shop.outbox` (a typo, or `lower_case_table_names=1`, which stores and logs names in
//! lowercase) would silently skip every row. `information_schema.TABLES` holds the names as
//! the server stores them, which is how its TABLE_MAPs name them.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::{ColumnType, SqlType, TableName};

/// A watched table that does not exist as named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MissingTable {
    /// The name as configured.
    pub(crate) table: TableName,
    /// The existing table whose name is closest (same name in another case first, then the
    /// fewest edits), to name the likely fix.
    pub(crate) closest: Option<TableName>,
    /// The relay's user (`CURRENT_USER()`) may not read it, so the server hides it
    /// whether it exists or not: the fix is a grant, not a name.
    pub(crate) denied_to: Option<String>,
}

/// A watched table as it exists on the server: its columns, in table order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedTableColumns {
    /// The table.
    pub table: TableName,
    /// Its column names as the server stores them (and the binlog names them).
    pub columns: Vec<String>,
    /// How the server describes each column (`descriptions[i]` belongs to `columns[i]`):
    /// what a configured `column_type` is checked against before the first row.
    pub descriptions: Vec<ColumnDescription>,
}

/// One column as `information_schema.COLUMNS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDescription {
    /// `COLUMN_TYPE` as the server writes it (`decimal(20,10)`, `varchar(16)`), for messages.
    pub column_type: String,
    /// The same as the binlog's TABLE_MAP describes it ([`SqlType::from_column_type`], and
    /// `IS_NULLABLE`).
    pub described: ColumnType,
    /// `COLUMN_DEFAULT`; `None` for no default or `DEFAULT NULL`.
    pub default: Option<ColumnDefault>,
}

/// A column's `DEFAULT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnDefault {
    /// A literal, unquoted (`acme` for `'acme'`, `-3`, `1.50`).
    Literal(String),
    /// An expression, as the server writes it (`current_timestamp(6)`, `uuid()`).
    Expression(String),
}

/// `COLUMN_DEFAULT` and `EXTRA` as a [`ColumnDefault`]: MariaDB (10.2.7+) quotes text
/// literals, writes expressions bare and `DEFAULT NULL` as `NULL`; MySQL writes literals
/// bare, NULL as SQL NULL, and marks expressions `DEFAULT_GENERATED` in `EXTRA`.
fn column_default(raw: Option<String>, extra: &str, mariadb: bool) -> Option<ColumnDefault> {
    let raw = raw?;
    if raw == "NULL" && mariadb {
        return None;
    }
    if let Some(quoted) = raw
        .strip_prefix('\'')
        .and_then(|rest| rest.strip_suffix('\''))
    {
        return Some(ColumnDefault::Literal(quoted.replace("''", "'")));
    }
    // A BIT literal, b'101', kept whole (its column type reads it).
    if raw.starts_with("b'") && raw.ends_with('\'') {
        return Some(ColumnDefault::Literal(raw));
    }
    let numeric = !raw.is_empty()
        && raw
            .trim_start_matches(['-', '+'])
            .bytes()
            .all(|byte| byte.is_ascii_digit() || byte == b'.');
    if numeric || !(mariadb || extra.to_ascii_uppercase().contains("DEFAULT_GENERATED")) {
        Some(ColumnDefault::Literal(raw))
    } else {
        Some(ColumnDefault::Expression(raw))
    }
}

/// Watched tables that do not resolve on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnresolvedTables {
    /// The configured names that do not resolve.
    pub tables: Vec<TableName>,
    /// One sentence per table: what is wrong (missing, or not readable by the relay's
    /// user) and the fix.
    pub message: String,
}

/// Every watched table as the server has it (`Ok(Ok(columns))`), or the tables that do not
/// resolve (`Ok(Err(..))`): the check `run` makes before it reads, and `check` shows.
/// `Err`: the lookup itself failed.
pub async fn resolve_watched_tables(
    conn: &mut Conn,
    watched: &[TableName],
) -> Result<Result<Vec<WatchedTableColumns>, UnresolvedTables>, mysql_async::Error> {
    let (missing, lower_case_table_names) = missing_tables(conn, watched).await?;
    if !missing.is_empty() {
        return Ok(Err(UnresolvedTables {
            message: describe(&missing, lower_case_table_names),
            tables: missing.into_iter().map(|missing| missing.table).collect(),
        }));
    }
    table_columns(conn, watched).await.map(Ok)
}

/// The columns of every table of `watched` (each must exist as named: see
/// [`missing_tables`]), for the checks that need them (the relay's columns check).
async fn table_columns(
    conn: &mut Conn,
    watched: &[TableName],
) -> Result<Vec<WatchedTableColumns>, mysql_async::Error> {
    let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
    let mariadb = version.is_some_and(|version| version.contains("MariaDB"));
    let mut tables = Vec::with_capacity(watched.len());
    for table in watched {
        let rows: Vec<(String, String, String, Option<String>, String)> = conn
            .exec(
                "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA \
                 FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                (&table.database, &table.table),
            )
            .await?;
        let (columns, descriptions) = rows
            .into_iter()
            .map(|(name, column_type, is_nullable, default, extra)| {
                let described = ColumnType {
                    sql_type: SqlType::from_column_type(&column_type),
                    nullable: is_nullable == "YES",
                };
                (
                    name,
                    ColumnDescription {
                        column_type,
                        described,
                        default: column_default(default, &extra, mariadb),
                    },
                )
            })
            .unzip();
        tables.push(WatchedTableColumns {
            table: table.clone(),
            columns,
            descriptions,
        });
    }
    Ok(tables)
}

/// Server errors that mean "you may not read this" (MySQL and MariaDB hide a table's
/// existence from a user without privileges on it): table access denied (1142), database
/// access denied (1044), column access denied (1143).
const ACCESS_DENIED_CODES: [u16; 3] = [1142, 1044, 1143];

/// `CURRENT_USER()` when it may not `SELECT` from `table`, else `None` (it may, or the
/// server says the table does not exist).
async fn denied_to(
    conn: &mut Conn,
    table: &TableName,
) -> Result<Option<String>, mysql_async::Error> {
    let quoted = |name: &str| format!("`{}`", name.replace('`', "``"));
    let probe = format!(
        "SELECT 1 FROM {}.{} LIMIT 0",
        quoted(&table.database),
        quoted(&table.table)
    );
    match conn.query_drop(probe).await {
        Err(mysql_async::Error::Server(error)) if ACCESS_DENIED_CODES.contains(&error.code) => {
            let user: Option<String> = conn.query_first("SELECT CURRENT_USER()").await?;
            Ok(Some(user.unwrap_or_else(|| "the relay's user".to_owned())))
        }
        Err(mysql_async::Error::Server(_)) | Ok(()) => Ok(None),
        Err(other) => Err(other),
    }
}

/// The watched tables of `watched` that do not exist on the server as named, and
/// `@@lower_case_table_names` (for the message).
async fn missing_tables(
    conn: &mut Conn,
    watched: &[TableName],
) -> Result<(Vec<MissingTable>, u32), mysql_async::Error> {
    let lower_case_table_names: Option<u32> =
        conn.query_first("SELECT @@lower_case_table_names").await?;
    let existing: Vec<(String, String)> = conn
        .query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')",
        )
        .await?;
    let existing: Vec<TableName> = existing
        .into_iter()
        .map(|(database, table)| TableName::new(database, table))
        .collect();
    let mut missing = Vec::new();
    for table in watched.iter().filter(|table| !existing.contains(table)) {
        missing.push(MissingTable {
            table: table.clone(),
            closest: closest(table, &existing).cloned(),
            denied_to: denied_to(conn, table).await?,
        });
    }
    Ok((missing, lower_case_table_names.unwrap_or(0)))
}

/// The existing table closest to `wanted`: equal ignoring case first, else the fewest
/// single-character edits of `db.table` (at most a third of its length, so an unrelated
/// table is not offered).
fn closest<'a>(wanted: &TableName, existing: &'a [TableName]) -> Option<&'a TableName> {
    let wanted_text = wanted.to_string();
    if let Some(same) = existing
        .iter()
        .find(|table| table.to_string().eq_ignore_ascii_case(&wanted_text))
    {
        return Some(same);
    }
    existing
        .iter()
        .map(|table| (edit_distance(&wanted_text, &table.to_string()), table))
        .filter(|(distance, _)| *distance <= wanted_text.chars().count().div_ceil(3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, table)| table)
}

/// Levenshtein distance over characters, ignoring ASCII case.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// The operator's message for the missing tables (one sentence each).
fn describe(missing: &[MissingTable], lower_case_table_names: u32) -> String {
    missing
        .iter()
        .map(|missing| {
            if let Some(user) = &missing.denied_to {
                let grantee = match user.rsplit_once('@') {
                    Some((name, host)) => format!("'{name}'@'{host}'"),
                    None => user.clone(),
                };
                return format!(
                    "the relay's user {user} may not read watched table `{}` (the server hides \
                     the tables a user has no privilege on, so it may also not exist): \
                     GRANT SELECT ON {} TO {grantee}",
                    missing.table, missing.table
                );
            }
            let hint = match &missing.closest {
                Some(closest) if closest.to_string().eq_ignore_ascii_case(&missing.table.to_string()) => {
                    let why = if lower_case_table_names == 1 {
                        " (the server has lower_case_table_names=1: it stores and logs table \
                         names in lowercase)"
                    } else {
                        " (table names are case-sensitive on this server)"
                    };
                    format!("; the binlog names it `{closest}`{why}: write table = \"{closest}\"")
                }
                Some(closest) => {
                    format!("; the closest existing table is `{closest}`: did you mean table = \"{closest}\"?")
                }
                None => "; create it, or fix the [[outbox]] table name".into(),
            };
            format!(
                "watched table `{}` does not exist as the binlog names it, so none of its rows \
                 would be read{hint}",
                missing.table
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_table_is_the_same_name_in_another_case_then_the_fewest_edits() {
        let existing = [
            TableName::new("shop", "outbox"),
            TableName::new("shop", "orders"),
            TableName::new("billing", "outbox_events"),
        ];
        let closest_to = |db: &str, table: &str| {
            closest(&TableName::new(db, table), &existing).map(ToString::to_string)
        };
        assert_eq!(closest_to("shop", "Outbox").as_deref(), Some("shop.outbox"));
        assert_eq!(closest_to("SHOP", "OUTBOX").as_deref(), Some("shop.outbox"));
        assert_eq!(closest_to("shop", "outbx").as_deref(), Some("shop.outbox"));
        assert_eq!(closest_to("shop", "order").as_deref(), Some("shop.orders"));
        assert_eq!(closest_to("crm", "customers"), None, "nothing alike");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn the_message_names_the_table_the_fix_and_lower_case_table_names() {
        let missing = [MissingTable {
            table: TableName::new("shop", "Outbox"),
            closest: Some(TableName::new("shop", "outbox")),
            denied_to: None,
        }];
        let text = describe(&missing, 1);
        assert!(text.contains("`shop.Outbox` does not exist"), "{text}");
        assert!(text.contains("table = \"shop.outbox\""), "{text}");
        assert!(text.contains("lower_case_table_names=1"), "{text}");

        let denied = [MissingTable {
            table: TableName::new("shop", "outbox"),
            closest: None,
            denied_to: Some("relay@%".into()),
        }];
        let text = describe(&denied, 0);
        assert!(
            text.contains("relay@% may not read watched table `shop.outbox`"),
            "{text}"
        );
        assert!(
            text.contains("GRANT SELECT ON shop.outbox TO 'relay'@'%'"),
            "{text}"
        );
        assert!(!text.contains("does not exist as"), "{text}");
    }
}

#[cfg(test)]
mod column_default_tests {
    use super::*;

    #[test]
    fn column_defaults_read_as_the_ddl_wrote_them() {
        let literal = |text: &str| Some(ColumnDefault::Literal(text.to_string()));
        // MariaDB.
        assert_eq!(
            column_default(Some("'acme'".into()), "", true),
            literal("acme")
        );
        assert_eq!(
            column_default(Some("'it''s'".into()), "", true),
            literal("it's")
        );
        assert_eq!(column_default(Some("-3".into()), "", true), literal("-3"));
        assert_eq!(column_default(Some("NULL".into()), "", true), None);
        assert_eq!(
            column_default(Some("b'101'".into()), "", true),
            literal("b'101'")
        );
        assert_eq!(
            column_default(Some("current_timestamp(6)".into()), "", true),
            Some(ColumnDefault::Expression("current_timestamp(6)".into()))
        );
        // MySQL.
        assert_eq!(
            column_default(Some("acme".into()), "", false),
            literal("acme")
        );
        assert_eq!(column_default(None, "", false), None);
        assert_eq!(
            column_default(Some("CURRENT_TIMESTAMP".into()), "DEFAULT_GENERATED", false),
            Some(ColumnDefault::Expression("CURRENT_TIMESTAMP".into()))
        );
    }
}
