//! Claim, mark, expire: the poller's statements.

use std::collections::HashMap;

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, TxOpts, Value};
use outbox_writer::OutboxTable;

use crate::columns::{quote, PollColumns, RowStatus};
use crate::ddl::PollIndexes;
use crate::error::PollError;
use crate::ledger::SettledClaim;
use crate::sql_row::{column_names, column_types, row_image};

/// One table's poller: the statements of the protocol (see the crate docs), built once.
#[derive(Debug, Clone)]
pub struct Poller {
    /// `database.table`, for messages.
    table_name: String,
    /// The claim's SELECT: due PENDING rows up to a `poll_seq` (every column: the router
    /// reads them) whose older siblings are not in flight or backing off, oldest first.
    select_claimable: String,
    /// The last `poll_seq` written (the claim's end without a window).
    select_last_sequence: String,
    /// The `poll_seq` of the Nth oldest PENDING row: the bound of a windowed claim.
    select_window_end: String,
    /// The claim's state columns, unquoted, to find them among the selected ones.
    state_columns: ClaimColumns,
    /// Sets the selected rows PROCESSING under the new token and lease; completed by
    /// `IN (?, ...)` with one placeholder per selected row.
    update_claimed_prefix: String,
    /// Marks a claim's rows SENT while its token holds; completed by `IN (?, ...)` with one
    /// placeholder per row: point lookups by `poll_seq`, so the mark touches no other
    /// claim's rows (a range scan of the status index did, and deadlocked with claims).
    update_sent_prefix: String,
    /// Extends the lease of a claim's rows while its token holds; completed by
    /// `IN (?, ...)` with one placeholder per token.
    update_renew_prefix: String,
    /// The lease expiry: PROCESSING rows whose lease ended become PENDING.
    update_expired: String,
    /// Puts one claimed row back to PENDING (due after a delay) or DEAD, under its token.
    update_failed: String,
    /// Puts DEAD rows back to PENDING; completed by the selection's condition.
    update_replay_prefix: String,
    /// The table's quoted name (the cleanup's statement is the writer's).
    quoted_table: String,
    /// Counts the unfinished and DEAD rows, and the oldest due PENDING row's wait.
    select_status: String,
    /// The event id column, quoted (replay by id).
    quoted_event_id: String,
    /// The next-attempt column, quoted (replay since a time).
    quoted_next_attempt: String,
    /// The indexes the claim forces, with the columns each must start with
    /// ([`Poller::check_indexes`]).
    required_indexes: Vec<(String, Vec<String>)>,
    /// The database (`None`: the connection's default) and bare name of the table, to
    /// look its indexes up.
    schema_and_table: (Option<String>, String),
}

/// The claim query's extra column: how many older rows of the row's aggregate are unsent.
const OLDER_UNSENT_COLUMN: &str = "outbox_poll_older_unsent";

/// The statements run on every poller connection before its first claim: TIMESTAMP columns
/// in UTC (the row image's seconds since the epoch), and READ COMMITTED: the mark, lease
/// and expiry UPDATEs scan the PROCESSING rows of every relay, and under REPEATABLE READ
/// they would keep every scanned row locked (three relays measured: marks deadlocking
/// and waiting, 40 rows/s); under READ COMMITTED a row that does not match is unlocked at
/// once and no gap is locked. The claim stays sound: its locking read sees the latest
/// committed rows, and its subqueries a snapshot at least as new as the statement. Text
/// comes as utf8mb4, the client library's connection character set.
pub const SESSION_SETUP: &[&str] = &[
    "SET time_zone = '+00:00'",
    // MySQL 8 and MariaDB name the variable differently; this statement is both's.
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
];

/// The claim's own columns, by name (unquoted).
#[derive(Debug, Clone)]
struct ClaimColumns {
    status: String,
    sent_at: String,
    sequence: String,
    event_id: String,
    aggregate_type: String,
    aggregate_id: String,
    attempts: String,
}

/// Where [`ClaimColumns`] are in a claim's result.
struct StatePositions {
    sequence: usize,
    event_id: usize,
    aggregate_type: usize,
    aggregate_id: usize,
    attempts: usize,
}

/// A duration in whole microseconds, for `INTERVAL ? MICROSECOND`.
fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// What became of a claimed row whose publish failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureOutcome {
    /// Back to PENDING, due after the delay.
    Retrying,
    /// DEAD: attempts exhausted or rejected for good; `last_error` says why.
    Dead,
    /// The claim no longer held the row (its lease ended and it was reclaimed): nothing
    /// was changed.
    Fenced,
}

/// A failed publish of one claimed row, as [`Poller::record_failure`] records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure<'a> {
    /// Why (stored in the last-error column).
    pub error: &'a str,
    /// Rejected for good (a permanent error): DEAD at once.
    pub permanent: bool,
    /// Attempts after which a transient failure is DEAD too.
    pub max_attempts: u32,
    /// When the row is due again (a transient failure below `max_attempts`).
    pub delay: std::time::Duration,
}

/// Which DEAD rows `poll replay` puts back to PENDING.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaySelection {
    /// One event, by id.
    Id(String),
    /// Every DEAD row.
    All,
    /// DEAD rows whose last attempt was due at or after this time (`YYYY-MM-DD HH:MM:SS`,
    /// in the session's time zone: UTC after [`SESSION_SETUP`]).
    Since(String),
}

/// A claimed row: what the router needs, and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedRow {
    /// The insertion order (`poll_seq`).
    pub sequence: u64,
    /// The event id.
    pub event_id: String,
    /// The aggregate type.
    pub aggregate_type: String,
    /// The aggregate id.
    pub aggregate_id: String,
    /// Claims of this row so far, this one included.
    pub attempts: u32,
}

/// One claim: its rows (oldest first) and the token that fences them.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The fencing token written into every claimed row.
    pub token: String,
    /// The claimed rows, in `poll_seq` order.
    pub rows: Vec<ClaimedRow>,
}

/// A claim made by [`Poller::claim_rows_admitting`].
#[derive(Debug)]
pub struct AdmittedClaim<P> {
    /// The claimed rows and their token.
    pub claim: Claim,
    /// Each claimed row's image and the permit its admission returned, in the claim's order.
    pub images: Vec<(outbox_binlog::Row, P)>,
    /// Whether the admission refused a row: the claim stopped there, not for want of
    /// claimable rows.
    pub refused: bool,
}

/// When a row whose publish failed is due again, and when it is given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after which a failed row is DEAD.
    pub max_attempts: u32,
    /// Backoff after the first failure (doubling, full jitter).
    pub initial: std::time::Duration,
    /// Bound of the backoff.
    pub max: std::time::Duration,
}

/// A table's backlog, as [`Poller::status`] counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStatus {
    /// Rows waiting to be claimed (due or backing off).
    pub pending: u64,
    /// Rows claimed and not settled.
    pub processing: u64,
    /// Rows given up on.
    pub dead: u64,
    /// How long the oldest due PENDING row has been due (its age, for a row that never
    /// failed); zero when none is due.
    pub oldest_due_wait: std::time::Duration,
}

/// What settling a claim did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SettleOutcome {
    /// Rows marked SENT.
    pub marked: u64,
    /// Rows marked DEAD (dead-lettered, or failed `max_attempts` times).
    pub dead: u64,
    /// Rows back to PENDING after a failed publish, due after a backoff.
    pub retrying: u64,
    /// Rows the claim no longer held (reclaimed after its lease ended): their publish was
    /// a duplicate, a fencing rejection.
    pub fenced: u64,
}

/// What a mark did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkOutcome {
    /// Rows marked SENT.
    pub marked: u64,
    /// Rows of the claim that were no longer held by its token (reclaimed after the lease
    /// ended): a fencing rejection; their publish was a duplicate.
    pub fenced: u64,
}

impl Poller {
    /// The statements for a table the writer library describes.
    pub fn new(table: &OutboxTable, columns: &PollColumns) -> Self {
        Self::for_table(
            table.quoted_name(),
            table.display_name(),
            (
                table.database().map(str::to_owned),
                table.table().to_owned(),
            ),
            table.columns(),
            columns,
        )
    }

    /// The statements for `database.table` (the relay's `[[outbox]]` table) whose router
    /// columns are `mapping`.
    pub fn for_relay_table(
        table: &outbox_binlog::TableName,
        mapping: &outbox_router::ColumnMapping,
        columns: &PollColumns,
    ) -> Self {
        Self::for_table(
            format!("{}.{}", quote(&table.database), quote(&table.table)),
            format!("{}.{}", table.database, table.table),
            (Some(table.database.clone()), table.table.clone()),
            mapping,
            columns,
        )
    }

    fn for_table(
        name: String,
        display_name: String,
        schema_and_table: (Option<String>, String),
        mapping: &outbox_router::ColumnMapping,
        columns: &PollColumns,
    ) -> Self {
        let indexes = PollIndexes::for_table(&schema_and_table.1);
        let claim_index = quote(&indexes.claim);
        let aggregate_index = quote(&indexes.aggregate);
        let status = quote(&columns.status);
        let seq = quote(&columns.sequence);
        let next = quote(&columns.next_attempt_at);
        let locked = quote(&columns.locked_until);
        let token = quote(&columns.claim_token);
        let attempts = quote(&columns.attempts);
        let event_id = quote(&mapping.event_id);
        let aggregate_type = quote(&mapping.aggregate_type);
        let aggregate_id = quote(&mapping.aggregate_id);
        let pending = RowStatus::Pending.as_str();
        let processing = RowStatus::Processing.as_str();
        let sent = RowStatus::Sent.as_str();
        // A row is a candidate when no older row of its aggregate is PROCESSING or backing
        // off; `older_unsent` (a consistent read) lets the caller keep only rows whose
        // every older unsent sibling it selected too (see `claim_rows`). `bound` narrows
        // the candidates (a window's end).
        let claim_select = |bound: &str| {
            format!(
                "SELECT o.*, (SELECT COUNT(*) FROM {name} e FORCE INDEX ({aggregate_index}) \
                   WHERE e.{aggregate_id} = o.{aggregate_id} AND e.{aggregate_type} = o.{aggregate_type} \
                   AND e.{status} IN ('{pending}', '{processing}') AND e.{seq} < o.{seq}) AS {older} \
                 FROM {name} o FORCE INDEX ({claim_index}) \
                 WHERE o.{status} = '{pending}' AND o.{next} <= NOW(6){bound} \
                 AND NOT EXISTS (SELECT 1 FROM {name} e FORCE INDEX ({aggregate_index}) \
                   WHERE e.{aggregate_id} = o.{aggregate_id} AND e.{aggregate_type} = o.{aggregate_type} \
                   AND e.{seq} < o.{seq} \
                   AND (e.{status} = '{processing}' OR (e.{status} = '{pending}' AND e.{next} > NOW(6)))) \
                 ORDER BY o.{seq} LIMIT ? FOR UPDATE SKIP LOCKED",
                older = quote(OLDER_UNSENT_COLUMN),
            )
        };
        Self {
            table_name: display_name,
            select_claimable: claim_select(&format!(" AND o.{seq} <= ?")),
            select_last_sequence: format!("SELECT MAX({seq}) FROM {name}"),
            select_window_end: format!(
                "SELECT {seq} FROM {name} FORCE INDEX ({claim_index}) \
                 WHERE {status} = '{pending}' ORDER BY {seq} LIMIT 1 OFFSET ?"
            ),
            update_claimed_prefix: format!(
                "UPDATE {name} SET {status} = '{processing}', {attempts} = {attempts} + 1, \
                 {locked} = NOW(6) + INTERVAL ? MICROSECOND, {token} = ? \
                 WHERE {seq} IN "
            ),
            update_sent_prefix: format!(
                "UPDATE {name} SET {status} = '{sent}', {sent_at} = NOW(6), {locked} = NULL \
                 WHERE {token} = ? AND {status} = '{processing}' AND {seq} IN ",
                sent_at = quote(&columns.sent_at),
            ),
            update_renew_prefix: format!(
                "UPDATE {name} SET {locked} = NOW(6) + INTERVAL ? MICROSECOND \
                 WHERE {status} = '{processing}' AND {token} IN "
            ),
            update_expired: format!(
                "UPDATE {name} SET {status} = '{pending}', {token} = '', {locked} = NULL \
                 WHERE {status} = '{processing}' AND {locked} < NOW(6)"
            ),
            update_failed: format!(
                "UPDATE {name} SET {status} = ?, {next} = NOW(6) + INTERVAL ? MICROSECOND, \
                 {locked} = NULL, {token} = '', {last_error} = ? \
                 WHERE {seq} = ? AND {token} = ? AND {status} = '{processing}'",
                last_error = quote(&columns.last_error),
            ),
            update_replay_prefix: format!(
                "UPDATE {name} SET {status} = '{pending}', {attempts} = 0, {next} = NOW(6) \
                 WHERE {status} = '{dead}' AND ",
                dead = RowStatus::Dead.as_str(),
            ),
            quoted_table: name.clone(),
            select_status: format!(
                "SELECT {status}, COUNT(*), \
                 COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(IF({next} <= NOW(6), {next}, NULL)), NOW(6)), 0) \
                 FROM {name} WHERE {status} IN ('{pending}', '{processing}', '{dead}') GROUP BY {status}",
                dead = RowStatus::Dead.as_str(),
            ),
            quoted_event_id: event_id.clone(),
            quoted_next_attempt: next.clone(),
            required_indexes: vec![
                (
                    indexes.claim.clone(),
                    vec![columns.status.clone(), columns.sequence.clone()],
                ),
                (
                    indexes.aggregate.clone(),
                    vec![
                        mapping.aggregate_id.clone(),
                        mapping.aggregate_type.clone(),
                        columns.status.clone(),
                        columns.sequence.clone(),
                    ],
                ),
            ],
            schema_and_table,
            state_columns: ClaimColumns {
                status: columns.status.clone(),
                sent_at: columns.sent_at.clone(),
                sequence: columns.sequence.clone(),
                event_id: mapping.event_id.clone(),
                aggregate_type: mapping.aggregate_type.clone(),
                aggregate_id: mapping.aggregate_id.clone(),
                attempts: columns.attempts.clone(),
            },
        }
    }

    /// Checks that the table has the indexes the claim forces, each on the columns it
    /// reads ([`PollIndexes`]): without them the claim fails, or sorts the backlog.
    pub async fn check_indexes(&self, conn: &mut mysql_async::Conn) -> Result<(), PollError> {
        let (schema, table) = &self.schema_and_table;
        let found: Vec<(String, String)> = conn
            .exec(
                "SELECT INDEX_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ',') \
                 FROM information_schema.STATISTICS \
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                 GROUP BY INDEX_NAME",
                (schema.as_deref(), table.as_str()),
            )
            .await
            .map_err(|source| self.failed("reading the table's indexes", source))?;
        for (index, columns) in &self.required_indexes {
            let has = found
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(index));
            let starts_right = has.is_some_and(|(_, actual)| {
                let actual: Vec<&str> = actual.split(',').collect();
                actual.len() >= columns.len()
                    && columns
                        .iter()
                        .zip(&actual)
                        .all(|(wanted, actual)| wanted.eq_ignore_ascii_case(actual))
            });
            if !starts_right {
                return Err(PollError::IndexMissing {
                    table: self.table_name.clone(),
                    index: index.clone(),
                    columns: columns.join(", "),
                    found: has.map(|(_, actual)| actual.replace(',', ", ")),
                });
            }
        }
        Ok(())
    }

    /// The claim's SELECT (for `EXPLAIN` in tests and `check`): its first `?` is the last
    /// `poll_seq` looked at, the second the LIMIT.
    pub fn claim_query(&self) -> &str {
        &self.select_claimable
    }

    /// Claims up to `limit` due rows for `lease` in one transaction (see the crate docs).
    /// An empty claim is no error.
    pub async fn claim(
        &self,
        conn: &mut mysql_async::Conn,
        limit: u32,
        lease: std::time::Duration,
    ) -> Result<Claim, PollError> {
        self.claim_rows(conn, limit, lease, None)
            .await
            .map(|(claim, _images)| claim)
    }

    /// [`Poller::claim`], with each claimed row's image for the router (every column, as
    /// the binlog decoder types them; in the claim's order). The connection's session must
    /// have run [`SESSION_SETUP`] (TIMESTAMPs in UTC).
    ///
    /// With `window = Some(n)` only the `n` oldest PENDING rows are looked at. A claim finds
    /// no row only after reading every candidate, and when every PENDING row waits behind
    /// a sibling in flight that is the whole backlog (50,000 rows: a second per claim,
    /// measured); the window bounds that. It can hide claimable rows behind blocked ones
    /// (an aggregate backing off with many rows): claim without a window when a windowed
    /// claim finds nothing and no claim of the caller's is in flight.
    pub async fn claim_rows(
        &self,
        conn: &mut mysql_async::Conn,
        limit: u32,
        lease: std::time::Duration,
        window: Option<u32>,
    ) -> Result<(Claim, Vec<outbox_binlog::Row>), PollError> {
        let claimed = self
            .claim_rows_admitting(conn, limit, lease, window, |_| Some(()))
            .await?;
        let images = claimed
            .images
            .into_iter()
            .map(|(image, ())| image)
            .collect();
        Ok((claimed.claim, images))
    }

    /// [`Poller::claim_rows`], where `admit` decides on each claimable row, in order, once
    /// its image is read: `Some(permit)` takes it (the permit comes back with its image: a
    /// reservation of memory, say), `None` takes neither it nor any row after it. The
    /// result is read row by row, so a refused row's image is dropped at once: what the
    /// claim holds is only what `admit` let in.
    pub async fn claim_rows_admitting<P>(
        &self,
        conn: &mut mysql_async::Conn,
        limit: u32,
        lease: std::time::Duration,
        window: Option<u32>,
        mut admit: impl FnMut(&outbox_binlog::Row) -> Option<P>,
    ) -> Result<AdmittedClaim<P>, PollError> {
        let token = uuid::Uuid::now_v7().to_string();
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(|source| self.failed("starting the claim", source))?;
        // The claim reads its candidates with a locking read (the newest committed rows)
        // but counts their older siblings in its statement's snapshot: a row committed
        // between the two would be a candidate whose older sibling, committed just before
        // it and held by another claim, the count misses (measured: two relays publishing
        // one aggregate's consecutive rows out of order). So the candidates end at a
        // `poll_seq` read by an earlier statement (under READ COMMITTED an older
        // snapshot): every row at or below it committed before the claim's snapshot, and
        // so did each one's older siblings, written before it.
        let end: Option<u64> = match window {
            Some(rows) => tx
                .exec_first(&self.select_window_end, (rows.saturating_sub(1),))
                .await
                .map_err(|source| self.failed("finding the claim window", source))?,
            None => None,
        };
        let end = match end {
            Some(end) => Some(end),
            // No window asked for, or fewer PENDING rows than the window: every row so far.
            None => tx
                .query_first::<Option<u64>, _>(&self.select_last_sequence)
                .await
                .map_err(|source| self.failed("finding the last row", source))?
                .flatten(),
        };
        let mut claimed = AdmittedClaim {
            claim: Claim {
                token,
                rows: Vec::new(),
            },
            images: Vec::new(),
            refused: false,
        };
        if let Some(end) = end {
            self.select_claimable_rows(&mut tx, end, limit, &mut admit, &mut claimed)
                .await?;
        }
        if !claimed.claim.rows.is_empty() {
            let placeholders = vec!["?"; claimed.claim.rows.len()].join(", ");
            let statement = format!("{}({placeholders})", self.update_claimed_prefix);
            let mut values = vec![
                Value::from(micros(lease)),
                Value::from(claimed.claim.token.as_str()),
            ];
            values.extend(
                claimed
                    .claim
                    .rows
                    .iter()
                    .map(|row| Value::from(row.sequence)),
            );
            tx.exec_drop(statement, Params::Positional(values))
                .await
                .map_err(|source| self.failed("claiming rows", source))?;
        }
        tx.commit()
            .await
            .map_err(|source| self.failed("committing the claim", source))?;
        Ok(claimed)
    }

    /// Reads the candidates up to `end` row by row into `claimed`: per aggregate a prefix
    /// of its unsent rows, each admitted by `admit`, until it refuses one.
    async fn select_claimable_rows<P>(
        &self,
        tx: &mut mysql_async::Transaction<'_>,
        end: u64,
        limit: u32,
        admit: &mut impl FnMut(&outbox_binlog::Row) -> Option<P>,
        claimed: &mut AdmittedClaim<P>,
    ) -> Result<(), PollError> {
        let selecting = |source| self.failed("selecting claimable rows", source);
        let mut result = tx
            .exec_iter(&self.select_claimable, (end, limit))
            .await
            .map_err(selecting)?;
        // Set from the first row: the table's columns and their types, and where the state
        // columns are.
        let mut layout: Option<(
            outbox_binlog::ColumnNames,
            outbox_binlog::ColumnTypes,
            StatePositions,
        )> = None;
        // Per aggregate: how many older siblings this claim took, and whether one was
        // left out (locked by another claim, past the LIMIT, or refused): then no younger
        // row of the aggregate may be taken, or two relays would publish one key at once.
        let mut taken: HashMap<(String, String), (u64, bool)> = HashMap::new();
        // Every row is read (the result must be drained) but none is kept once `admit`
        // refused one.
        while let Some(mut row) = result.next().await.map_err(selecting)? {
            if claimed.refused {
                continue;
            }
            let (names, types, positions) = match &layout {
                Some(layout) => layout,
                None => {
                    let mut names = column_names(row.columns_ref()).to_vec();
                    // The last column is the count of older unsent siblings, not the table's.
                    names.pop();
                    let names: outbox_binlog::ColumnNames = names.into();
                    let types = column_types(row.columns_ref());
                    let positions = self.state_positions(&names)?;
                    layout.insert((names, types, positions))
                }
            };
            let older_unsent: u64 = row.take(names.len()).ok_or_else(|| PollError::BadRow {
                table: self.table_name.clone(),
                message: "a claimed row lacks its older-siblings count".to_owned(),
            })?;
            let row_state = self.claimed_row(&row, positions)?;
            let key = (
                row_state.aggregate_type.clone(),
                row_state.aggregate_id.clone(),
            );
            let (count, blocked) = taken.entry(key).or_insert((0, false));
            if *blocked || older_unsent != *count {
                *blocked = true;
                continue;
            }
            let image = row_image(row, names, types).map_err(|message| PollError::BadRow {
                table: self.table_name.clone(),
                message: format!("event {}: {message}", row_state.event_id),
            })?;
            let Some(permit) = admit(&image) else {
                claimed.refused = true;
                continue;
            };
            *count += 1;
            claimed.claim.rows.push(row_state);
            claimed.images.push((image, permit));
        }
        Ok(())
    }

    /// Extends by `lease` (from now) the lease of every row still held by one of `tokens`
    /// (claims still being published); how many rows. A token whose rows were reclaimed
    /// extends nothing.
    pub async fn renew_leases(
        &self,
        conn: &mut mysql_async::Conn,
        tokens: &[&str],
        lease: std::time::Duration,
    ) -> Result<u64, PollError> {
        if tokens.is_empty() {
            return Ok(0);
        }
        let placeholders = vec!["?"; tokens.len()].join(", ");
        let statement = format!("{}({placeholders})", self.update_renew_prefix);
        let mut values = vec![Value::from(micros(lease))];
        values.extend(tokens.iter().map(|token| Value::from(*token)));
        conn.exec_drop(statement, Params::Positional(values))
            .await
            .map_err(|source| self.failed("renewing leases", source))?;
        Ok(conn.affected_rows())
    }

    /// Marks `claim`'s rows SENT where its token still holds; the rest are counted as
    /// fenced (another worker reclaimed them after the lease ended).
    pub async fn mark_sent(
        &self,
        conn: &mut mysql_async::Conn,
        claim: &Claim,
    ) -> Result<MarkOutcome, PollError> {
        if claim.rows.is_empty() {
            return Ok(MarkOutcome {
                marked: 0,
                fenced: 0,
            });
        }
        let placeholders = vec!["?"; claim.rows.len()].join(", ");
        let statement = format!("{}({placeholders})", self.update_sent_prefix);
        let mut values = vec![Value::from(claim.token.as_str())];
        values.extend(claim.rows.iter().map(|row| Value::from(row.sequence)));
        conn.exec_drop(statement, Params::Positional(values))
            .await
            .map_err(|source| self.failed("marking rows sent", source))?;
        let marked = conn.affected_rows();
        let claimed = claim.rows.len() as u64;
        Ok(MarkOutcome {
            marked,
            fenced: claimed.saturating_sub(marked),
        })
    }

    /// Marks a claim whose every row was settled, each only where the claim's token still
    /// holds: dead-lettered rows DEAD with their reason; rows whose publish failed PENDING
    /// again after a backoff ([`RetryPolicy`]), or DEAD at its `max_attempts`; the rest SENT.
    pub async fn settle(
        &self,
        conn: &mut mysql_async::Conn,
        settled: &SettledClaim,
        retry: &RetryPolicy,
    ) -> Result<SettleOutcome, PollError> {
        let mut outcome = SettleOutcome::default();
        let mut fenced = 0;
        let failures = settled
            .dead
            .iter()
            .map(|row| (row, true))
            .chain(settled.failed.iter().map(|row| (row, false)));
        for ((row, reason), permanent) in failures {
            let failure = Failure {
                error: reason,
                permanent,
                max_attempts: retry.max_attempts,
                delay: crate::retry::jittered_retry_delay(row.attempts, retry.initial, retry.max),
            };
            match self
                .record_failure(conn, &settled.claim, row, &failure)
                .await?
            {
                FailureOutcome::Fenced => fenced += 1,
                FailureOutcome::Dead => outcome.dead += 1,
                FailureOutcome::Retrying => outcome.retrying += 1,
            }
        }
        let marked = self.mark_sent(conn, &settled.claim).await?;
        outcome.marked = marked.marked;
        // mark_sent counts every row it did not mark; the failed ones were not fenced.
        let unmarked_failures = outcome.dead + outcome.retrying + fenced;
        outcome.fenced = fenced + marked.fenced.saturating_sub(unmarked_failures);
        Ok(outcome)
    }

    /// How many rows are PENDING, PROCESSING and DEAD, and how long the oldest due PENDING
    /// row has waited (SENT rows are not counted: the index serves the other states only).
    pub async fn status(&self, conn: &mut mysql_async::Conn) -> Result<TableStatus, PollError> {
        let rows: Vec<(String, u64, i64)> = conn
            .query(&self.select_status)
            .await
            .map_err(|source| self.failed("counting rows by status", source))?;
        let mut status = TableStatus::default();
        for (state, count, wait_micros) in rows {
            match state.as_str() {
                "PENDING" => {
                    status.pending = count;
                    status.oldest_due_wait =
                        std::time::Duration::from_micros(u64::try_from(wait_micros).unwrap_or(0));
                }
                "PROCESSING" => status.processing = count,
                _ => status.dead = count,
            }
        }
        Ok(status)
    }

    /// Returns PROCESSING rows whose lease ended to PENDING (no token: the old claim can no
    /// longer mark them); how many.
    pub async fn expire_leases(&self, conn: &mut mysql_async::Conn) -> Result<u64, PollError> {
        conn.query_drop(&self.update_expired)
            .await
            .map_err(|source| self.failed("expiring leases", source))?;
        Ok(conn.affected_rows())
    }

    /// A claimed row's publish failed: DEAD when the failure is permanent or the row's
    /// attempts reached `max_attempts`, else PENDING again, due after `delay`. Only while
    /// `claim` still holds the row ([`FailureOutcome::Fenced`] otherwise).
    pub async fn record_failure(
        &self,
        conn: &mut mysql_async::Conn,
        claim: &Claim,
        row: &ClaimedRow,
        failure: &Failure<'_>,
    ) -> Result<FailureOutcome, PollError> {
        let dies = failure.permanent || row.attempts >= failure.max_attempts;
        let status = if dies {
            RowStatus::Dead
        } else {
            RowStatus::Pending
        };
        let delay_micros = micros(failure.delay);
        conn.exec_drop(
            &self.update_failed,
            (
                status.as_str(),
                delay_micros,
                failure.error,
                row.sequence,
                claim.token.as_str(),
            ),
        )
        .await
        .map_err(|source| self.failed("recording a failed attempt", source))?;
        Ok(match (conn.affected_rows(), dies) {
            (0, _) => FailureOutcome::Fenced,
            (_, true) => FailureOutcome::Dead,
            (_, false) => FailureOutcome::Retrying,
        })
    }

    /// Puts the selected DEAD rows back to PENDING with their ids unchanged (attempts from
    /// zero, due now); how many.
    pub async fn replay(
        &self,
        conn: &mut mysql_async::Conn,
        selection: &ReplaySelection,
    ) -> Result<u64, PollError> {
        let (condition, params): (String, Vec<Value>) = match selection {
            ReplaySelection::Id(id) => (
                format!("{} = ?", self.quoted_event_id),
                vec![Value::from(id.as_str())],
            ),
            ReplaySelection::All => ("1 = 1".to_owned(), Vec::new()),
            ReplaySelection::Since(time) => (
                format!("{} >= ?", self.quoted_next_attempt),
                vec![Value::from(time.as_str())],
            ),
        };
        let statement = format!("{}{condition}", self.update_replay_prefix);
        conn.exec_drop(statement, Params::Positional(params))
            .await
            .map_err(|source| self.failed("replaying dead rows", source))?;
        Ok(conn.affected_rows())
    }

    /// Deletes SENT rows sent more than `retention` ago, `batch` rows per statement (short
    /// locks), until none is left; how many (the writer's poll-mode cleanup,
    /// [`outbox_writer::delete_sent_poll_rows`]).
    pub async fn delete_sent(
        &self,
        conn: &mut mysql_async::Conn,
        retention: std::time::Duration,
        batch: u32,
    ) -> Result<u64, PollError> {
        let rows = outbox_writer::SentPollRows {
            table: &self.table_name,
            quoted_table: &self.quoted_table,
            status_column: &self.state_columns.status,
            sent_at_column: &self.state_columns.sent_at,
            sequence_column: &self.state_columns.sequence,
        };
        let policy = outbox_writer::CleanupPolicy {
            batch_size: batch,
            max_batches: u32::MAX,
            ..outbox_writer::CleanupPolicy::default()
        };
        match outbox_writer::delete_sent_poll_rows(conn, &rows, retention, &policy).await {
            Ok(report) => Ok(report.deleted_rows),
            Err(outbox_writer::CleanupError::Database { source, .. }) => {
                Err(self.failed("deleting sent rows", source))
            }
            Err(other) => Err(PollError::BadRow {
                table: self.table_name.clone(),
                message: other.to_string(),
            }),
        }
    }

    /// Where the claim's own columns are among the selected ones.
    fn state_positions(&self, names: &[String]) -> Result<StatePositions, PollError> {
        let find = |name: &str| {
            names
                .iter()
                .position(|selected| selected == name)
                .ok_or_else(|| PollError::BadRow {
                    table: self.table_name.clone(),
                    message: format!(
                        "the table has no column `{name}` (columns: {}); add the poll-mode columns (`outbox-relay poll ddl` prints them) or fix the column names in the config",
                        names.join(", ")
                    ),
                })
        };
        let columns = &self.state_columns;
        Ok(StatePositions {
            sequence: find(&columns.sequence)?,
            event_id: find(&columns.event_id)?,
            aggregate_type: find(&columns.aggregate_type)?,
            aggregate_id: find(&columns.aggregate_id)?,
            attempts: find(&columns.attempts)?,
        })
    }

    fn claimed_row(&self, row: &Row, at: &StatePositions) -> Result<ClaimedRow, PollError> {
        let read = |index: usize, what: &str| {
            row.as_ref(index).cloned().ok_or_else(|| PollError::BadRow {
                table: self.table_name.clone(),
                message: format!("a claimed row has no {what}"),
            })
        };
        let bad = |what: &str, error: mysql_async::FromValueError| PollError::BadRow {
            table: self.table_name.clone(),
            message: format!("a claimed row's {what} does not read: {error:?}"),
        };
        let text = |index: usize, what: &str| {
            mysql_async::from_value_opt::<String>(read(index, what)?)
                .map_err(|error| bad(what, error))
        };
        let sequence = mysql_async::from_value_opt::<u64>(read(at.sequence, "sequence")?)
            .map_err(|error| bad("sequence", error))?;
        let attempts = mysql_async::from_value_opt::<u32>(read(at.attempts, "attempts")?)
            .map_err(|error| bad("attempts", error))?;
        Ok(ClaimedRow {
            sequence,
            event_id: text(at.event_id, "event id")?,
            aggregate_type: text(at.aggregate_type, "aggregate type")?,
            aggregate_id: text(at.aggregate_id, "aggregate id")?,
            // This claim counts as an attempt (the UPDATE adds it).
            attempts: attempts + 1,
        })
    }

    fn failed(&self, operation: &'static str, source: mysql_async::Error) -> PollError {
        PollError::Mysql {
            table: self.table_name.clone(),
            operation,
            source,
        }
    }
}
