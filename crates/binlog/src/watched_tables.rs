//! Every watched table must exist under the exact name the binlog will give it: the reader
//! matches TABLE_MAP names byte for byte, so `shop.Outbox` for a table the server logs as
//! `shop.outbox` (a typo, or `lower_case_table_names=1`, which stores and logs names in
//! lowercase) would silently skip every row. `information_schema.TABLES` holds the names as
//! the server stores them, which is how its TABLE_MAPs name them.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::TableName;

/// A watched table that does not exist as named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MissingTable {
    /// The name as configured.
    pub(crate) table: TableName,
    /// The existing table whose name is closest (same name in another case first, then the
    /// fewest edits), to name the likely fix.
    pub(crate) closest: Option<TableName>,
}

/// The watched tables of `watched` that do not exist on the server as named, and
/// `@@lower_case_table_names` (for the message).
pub(crate) async fn missing_tables(
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
    let missing = watched
        .iter()
        .filter(|table| !existing.contains(table))
        .map(|table| MissingTable {
            table: table.clone(),
            closest: closest(table, &existing).cloned(),
        })
        .collect();
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
pub(crate) fn describe(missing: &[MissingTable], lower_case_table_names: u32) -> String {
    missing
        .iter()
        .map(|missing| {
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
        }];
        let text = describe(&missing, 1);
        assert!(text.contains("`shop.Outbox` does not exist"), "{text}");
        assert!(text.contains("table = \"shop.outbox\""), "{text}");
        assert!(text.contains("lower_case_table_names=1"), "{text}");
    }
}
