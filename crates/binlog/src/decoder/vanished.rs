//! Which watched tables a DDL statement leaves without a table of their name: `DROP TABLE`,
//! `DROP DATABASE`, `RENAME TABLE` (simulated pair by pair, so the rename swap
//! `RENAME TABLE outbox TO outbox_old, outbox_new TO outbox` leaves `outbox` in place) and
//! `ALTER TABLE ... RENAME TO`. The decoder reports them loudly (`WatchedTableVanished`) and
//! reads on: rows of a table by that name, should one be created again, are still read.

use crate::types::TableName;

/// One token of a statement: an identifier (unquoted or in backticks) or a punctuation byte.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// An identifier or keyword; `quoted` ones are never keywords.
    Word { text: String, quoted: bool },
    /// `.`, `,`, `;`, `(`, ...
    Punct(u8),
}

fn tokens(statement: &[u8]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut index = 0;
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
    while let Some(&byte) = statement.get(index) {
        if byte.is_ascii_whitespace() {
            index += 1;
        } else if byte == b'`' {
            let mut text = Vec::new();
            index += 1;
            while let Some(&b) = statement.get(index) {
                if b == b'`' {
                    if statement.get(index + 1) == Some(&b'`') {
                        text.push(b'`');
                        index += 2;
                        continue;
                    }
                    index += 1;
                    break;
                }
                text.push(b);
                index += 1;
            }
            out.push(Token::Word {
                text: String::from_utf8_lossy(&text).into_owned(),
                quoted: true,
            });
        } else if byte == b'\'' || byte == b'"' {
            // A string literal (a comment, a default value): skipped whole.
            index += 1;
            while let Some(&b) = statement.get(index) {
                index += 1;
                if b == b'\\' {
                    index += 1;
                } else if b == byte {
                    break;
                }
            }
        } else if is_word(byte) {
            let start = index;
            while statement.get(index).is_some_and(|&b| is_word(b)) {
                index += 1;
            }
            out.push(Token::Word {
                text: String::from_utf8_lossy(&statement[start..index]).into_owned(),
                quoted: false,
            });
        } else {
            out.push(Token::Punct(byte));
            index += 1;
        }
    }
    out
}

/// Reads statements token by token.
struct Cursor {
    /// The statement's tokens.
    tokens: Vec<Token>,
    /// The next token to read.
    at: usize,
}

impl Cursor {
    /// Consumes the next token when it is the keyword `word` (case-insensitive, unquoted).
    fn keyword(&mut self, word: &str) -> bool {
        match self.tokens.get(self.at) {
            Some(Token::Word {
                text,
                quoted: false,
            }) if text.eq_ignore_ascii_case(word) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    fn punct(&mut self, byte: u8) -> bool {
        if self.tokens.get(self.at) == Some(&Token::Punct(byte)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn word(&mut self) -> Option<String> {
        match self.tokens.get(self.at) {
            Some(Token::Word { text, .. }) => {
                self.at += 1;
                Some(text.clone())
            }
            _ => None,
        }
    }

    /// `name` or `db.name`, unqualified names in `default_db`.
    fn table_name(&mut self, default_db: &str) -> Option<TableName> {
        let first = self.word()?;
        if self.punct(b'.') {
            let table = self.word()?;
            Some(TableName::new(first, table))
        } else {
            Some(TableName::new(default_db, first))
        }
    }
}

fn same_table(a: &TableName, b: &TableName) -> bool {
    a.database.eq_ignore_ascii_case(&b.database) && a.table.eq_ignore_ascii_case(&b.table)
}

/// The watched tables (of `watched`) that no table carries the name of after `statement`
/// (a DDL statement, leading comments already skipped), run with default database
/// `default_db`. Names compare case-insensitively (reporting one too many only logs).
pub(crate) fn watched_tables_gone_after(
    statement: &[u8],
    default_db: &str,
    watched: &[&TableName],
) -> Vec<TableName> {
    let mut cursor = Cursor {
        tokens: tokens(statement),
        at: 0,
    };
    let is_watched = |name: &TableName| watched.iter().any(|w| same_table(w, name));
    let mut gone: Vec<TableName> = Vec::new();
    if cursor.keyword("DROP") {
        if cursor.keyword("TEMPORARY") {
            return gone;
        }
        if cursor.keyword("DATABASE") || cursor.keyword("SCHEMA") {
            let _ = cursor.keyword("IF") && cursor.keyword("EXISTS");
            if let Some(database) = cursor.word() {
                gone.extend(
                    watched
                        .iter()
                        .filter(|w| w.database.eq_ignore_ascii_case(&database))
                        .map(|w| TableName::clone(w)),
                );
            }
            return gone;
        }
        if !(cursor.keyword("TABLE") || cursor.keyword("TABLES")) {
            return gone;
        }
        let _ = cursor.keyword("IF") && cursor.keyword("EXISTS");
        while let Some(name) = cursor.table_name(default_db) {
            if is_watched(&name) {
                gone.push(name);
            }
            if !cursor.punct(b',') {
                break;
            }
        }
    } else if cursor.keyword("RENAME") {
        if !(cursor.keyword("TABLE") || cursor.keyword("TABLES")) {
            return gone;
        }
        // Pair by pair: a watched name renamed away is gone until another table is renamed
        // to it (the swap).
        loop {
            let _ = cursor.keyword("IF") && cursor.keyword("EXISTS");
            let Some(from) = cursor.table_name(default_db) else {
                break;
            };
            if !cursor.keyword("TO") {
                break;
            }
            let Some(to) = cursor.table_name(default_db) else {
                break;
            };
            if is_watched(&from) && !gone.iter().any(|g| same_table(g, &from)) {
                gone.push(from);
            }
            gone.retain(|g| !same_table(g, &to));
            if !cursor.punct(b',') {
                break;
            }
        }
    } else if cursor.keyword("ALTER") {
        let _ = cursor.keyword("ONLINE") || cursor.keyword("IGNORE");
        if !cursor.keyword("TABLE") {
            return gone;
        }
        let _ = cursor.keyword("IF") && cursor.keyword("EXISTS");
        let Some(table) = cursor.table_name(default_db) else {
            return gone;
        };
        if !is_watched(&table) {
            return gone;
        }
        // `RENAME [TO|AS] new` anywhere among the alter options (not RENAME COLUMN/INDEX/KEY).
        while cursor.at < cursor.tokens.len() {
            if cursor.keyword("RENAME") {
                if cursor.keyword("COLUMN") || cursor.keyword("INDEX") || cursor.keyword("KEY") {
                    continue;
                }
                let _ = cursor.keyword("TO") || cursor.keyword("AS");
                if let Some(to) = cursor.table_name(&table.database) {
                    if !same_table(&to, &table) {
                        gone.push(table);
                    }
                }
                break;
            }
            cursor.at += 1;
        }
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gone(statement: &str) -> Vec<String> {
        let outbox = TableName::new("shop", "outbox");
        let other = TableName::new("billing", "outbox");
        watched_tables_gone_after(statement.as_bytes(), "shop", &[&outbox, &other])
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn drops_and_renames_without_a_swap_make_a_watched_table_vanish() {
        assert_eq!(gone("DROP TABLE outbox"), ["shop.outbox"]);
        assert_eq!(
            gone("DROP TABLE IF EXISTS `shop`.`outbox` /* generated by server */"),
            ["shop.outbox"]
        );
        assert_eq!(gone("drop table a, billing.outbox"), ["billing.outbox"]);
        assert_eq!(gone("DROP DATABASE billing"), ["billing.outbox"]);
        assert_eq!(gone("RENAME TABLE outbox TO outbox_old"), ["shop.outbox"]);
        assert_eq!(
            gone("ALTER TABLE outbox RENAME TO outbox_2024"),
            ["shop.outbox"]
        );
        assert_eq!(
            gone("ALTER TABLE shop.outbox ADD x INT, RENAME AS archive.outbox"),
            ["shop.outbox"]
        );
    }

    #[test]
    fn the_rename_swap_and_other_ddl_leave_the_table_in_place() {
        assert!(gone("RENAME TABLE outbox TO outbox_old, outbox_new TO outbox").is_empty());
        assert!(
            gone("RENAME TABLE `outbox` TO `outbox_old`, `outbox_new` TO `shop`.`outbox`")
                .is_empty()
        );
        assert!(gone("DROP TABLE outbox_old").is_empty());
        assert!(gone("DROP TEMPORARY TABLE outbox").is_empty());
        assert!(gone("ALTER TABLE outbox RENAME COLUMN a TO b").is_empty());
        assert!(gone("ALTER TABLE outbox ADD COLUMN c INT COMMENT 'RENAME TO x'").is_empty());
        assert!(gone("CREATE TABLE outbox_new LIKE outbox").is_empty());
        assert!(gone("DROP TABLE other.outbox").is_empty());
    }
}
