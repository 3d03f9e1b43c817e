//! The DDL that readies an outbox table for poll mode.

use outbox_writer::OutboxTable;

use crate::columns::{quote, PollColumns};

/// The `ALTER TABLE` statements that add the poll-mode columns and indexes to `table`
/// (created by [`outbox_writer::create_table_sql`] or by hand with the preset's columns):
///
/// * the state columns ([`PollColumns`]); a new row is PENDING and due at once, so the
///   writer's INSERT does not change; the times are `TIMESTAMP`s, instants compared alike
///   whatever a session's `time_zone` (as `DATETIME`s, a writer in another zone would set a
///   due time hours off);
/// * the claim token is `NOT NULL DEFAULT ''` (no claim): a new row holds its 36 bytes
///   already, so a claim writes it in place; a NULL growing to 36 bytes split the pages of
///   freshly written rows (17 % more server CPU per row drained, measured with
///   `examples/claim_cost.rs`);
/// * `poll_seq`, an AUTO_INCREMENT insertion order (existing rows are numbered in primary
///   key order when it is added);
/// * an index on (status, sequence) that serves the claim's `ORDER BY` (without it every
///   claim sorts the whole backlog: 16 times slower at 50,000 rows, measured in
///   ../shared/notes/poll-claim-index.md) and the lease scan;
/// * an index on (aggregate id, aggregate type, status, sequence) for the per-aggregate
///   order check.
///
/// Rows already in the table become PENDING: publish or delete them first if the binlog
/// relay has sent them.
pub fn poll_mode_ddl(table: &OutboxTable, columns: &PollColumns) -> Vec<String> {
    ddl(
        &table.quoted_name(),
        table.table(),
        table.columns(),
        columns,
    )
}

/// [`poll_mode_ddl`] for a relay's `[[outbox]]` table and its router columns.
pub fn poll_mode_ddl_for_relay_table(
    table: &outbox_binlog::TableName,
    mapping: &outbox_router::ColumnMapping,
    columns: &PollColumns,
) -> Vec<String> {
    ddl(
        &format!("{}.{}", quote(&table.database), quote(&table.table)),
        &table.table,
        mapping,
        columns,
    )
}

fn ddl(
    name: &str,
    table: &str,
    mapping: &outbox_router::ColumnMapping,
    columns: &PollColumns,
) -> Vec<String> {
    let indexes = PollIndexes::for_table(table);
    vec![format!(
        "ALTER TABLE {name}\n  \
             ADD COLUMN {status} VARCHAR(10) CHARACTER SET ascii NOT NULL DEFAULT 'PENDING',\n  \
             ADD COLUMN {attempts} INT UNSIGNED NOT NULL DEFAULT 0,\n  \
             ADD COLUMN {next} TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),\n  \
             ADD COLUMN {locked} TIMESTAMP(6) NULL,\n  \
             ADD COLUMN {token} CHAR(36) CHARACTER SET ascii NOT NULL DEFAULT '',\n  \
             ADD COLUMN {error} TEXT NULL,\n  \
             ADD COLUMN {sent} TIMESTAMP(6) NULL,\n  \
             ADD COLUMN {seq} BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,\n  \
             ADD UNIQUE KEY {seq_key} ({seq}),\n  \
             ADD KEY {claim_key} ({status}, {seq}),\n  \
             ADD KEY {aggregate_key} ({aggregate_id}, {aggregate_type}, {status}, {seq})",
        status = quote(&columns.status),
        attempts = quote(&columns.attempts),
        next = quote(&columns.next_attempt_at),
        locked = quote(&columns.locked_until),
        token = quote(&columns.claim_token),
        error = quote(&columns.last_error),
        sent = quote(&columns.sent_at),
        seq = quote(&columns.sequence),
        seq_key = quote(&indexes.sequence),
        claim_key = quote(&indexes.claim),
        aggregate_key = quote(&indexes.aggregate),
        aggregate_id = quote(&mapping.aggregate_id),
        aggregate_type = quote(&mapping.aggregate_type),
    )]
}

/// The names of the indexes [`poll_mode_ddl`] adds. The claim names the claim and
/// aggregate indexes (`FORCE INDEX`): left to itself the optimizer has served the
/// per-aggregate check from the claim index once the table's statistics changed mid-drain
/// (750,000 rows read per claim, a second each, measured with `examples/claim_cost.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollIndexes {
    /// UNIQUE (sequence).
    pub sequence: String,
    /// (status, sequence): the claim's candidates in order, and the status counts.
    pub claim: String,
    /// (aggregate id, aggregate type, status, sequence): an aggregate's unsent rows.
    pub aggregate: String,
}

impl PollIndexes {
    /// The names for the table named `table` (its own name, without the database): that
    /// name cut to keep them within MySQL's 64 characters, and a suffix.
    pub fn for_table(table: &str) -> Self {
        let prefix: String = table.chars().take(40).collect();
        Self {
            sequence: format!("{prefix}_poll_seq_uq"),
            claim: format!("{prefix}_poll_claim_idx"),
            aggregate: format!("{prefix}_poll_aggregate_idx"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_router::ColumnPreset;

    #[test]
    fn the_ddl_names_every_column_and_index() {
        let table = OutboxTable::new("outbox", ColumnPreset::Seeds)
            .and_then(|table| table.in_database("shop"))
            .expect("a valid table");
        let ddl = poll_mode_ddl(&table, &PollColumns::default()).join("\n");
        for needle in [
            "ALTER TABLE `shop`.`outbox`",
            "`poll_status` VARCHAR(10)",
            "`poll_seq` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT",
            "ADD KEY `outbox_poll_claim_idx` (`poll_status`, `poll_seq`)",
            "ADD KEY `outbox_poll_aggregate_idx` (`aggregate_id`, `aggregate_type`, `poll_status`, `poll_seq`)",
        ] {
            assert!(ddl.contains(needle), "{needle} missing from\n{ddl}");
        }
        // Index names come from the table's own name, dots and all (the claim forces the
        // same names: `Poller::new` takes them from the same place).
        let dotted = OutboxTable::new("my.outbox", ColumnPreset::Seeds)
            .and_then(|table| table.in_database("sh.op"))
            .expect("a valid table");
        let ddl = poll_mode_ddl(&dotted, &PollColumns::default()).join("\n");
        assert!(ddl.contains("ADD KEY `my.outbox_poll_claim_idx`"), "{ddl}");
    }
}
