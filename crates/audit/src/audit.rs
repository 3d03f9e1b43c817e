//! One audit: the window's rows, then the routed topics, then the rows no record matched.

use std::collections::BTreeSet;
use std::time::Duration;

use outbox_binlog::RowChange;
use outbox_router::{BinaryEncoding, KafkaRecord, RouteOutcome, Router};
use rdkafka::config::ClientConfig;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::digest::{ExpectedEvents, Match, RecordDigest};
use crate::error::AuditError;
use crate::table_scan::{check_table, existing_ids, AuditTable, AuditWindow, WindowRows};
use crate::time::UtcTime;
use crate::topic_scan::{read_topics, SeenRecord};

/// Records outside the window whose row is looked up at once.
const LOOKUP_BATCH: usize = 500;

/// How an audit reads.
#[derive(Debug, Clone)]
pub struct AuditSettings {
    /// Rows per statement of the table walk (memory: one page of rows).
    pub page_rows: u32,
    /// The topics are read from this long before the window's start: a record's Kafka
    /// timestamp may be older than its row's column (a `DATETIME` written in a zone ahead
    /// of UTC, another clock), and one read too early is only skipped.
    pub kafka_margin: Duration,
    /// No record for this long while partitions remain unread ends the audit with an error.
    pub kafka_stall_timeout: Duration,
    /// How the `id` header encodes a binary event id (`[route] event_id_encoding`), to look
    /// a record's row up by its id.
    pub event_id_encoding: BinaryEncoding,
}

impl Default for AuditSettings {
    fn default() -> Self {
        Self {
            page_rows: 5_000,
            kafka_margin: Duration::from_secs(3_600),
            kafka_stall_timeout: Duration::from_secs(60),
            event_id_encoding: BinaryEncoding::Utf8,
        }
    }
}

/// One finding, a JSON line of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "finding", rename_all = "snake_case")]
pub enum Finding {
    /// A row of the window with no record in its topic: the event never reached Kafka (or
    /// its record was deleted). `--fill` publishes it.
    Missing {
        table: String,
        id: String,
        topic: String,
        row_timestamp: String,
    },
    /// A record whose row is in the window, with a topic, key or payload other than the
    /// router makes of the row now (the row was updated after it was published, or the
    /// route changed). Its event was delivered: never refilled.
    Differs {
        id: String,
        topic: String,
        partition: i32,
        offset: i64,
        parts: Vec<&'static str>,
    },
    /// A record of the window's time whose id has no row in any outbox table: deleted
    /// (the writer's cleanup, or by hand), or written by someone else.
    NoRow {
        id: String,
        topic: String,
        partition: i32,
        offset: i64,
        timestamp_ms: Option<i64>,
    },
    /// A row the router cannot route: the relay dead-lettered it (or stopped), so no record
    /// is expected in the routed topics.
    Unroutable {
        table: String,
        row_timestamp: String,
        error: String,
    },
    /// A second row of the window with an id already seen (in another outbox table): only
    /// the first is compared.
    DuplicateId {
        table: String,
        id: String,
        row_timestamp: String,
    },
}

/// What an audit counted: the last line of the report.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct AuditSummary {
    /// The window's start (`None`: from the first row), UTC.
    pub since: Option<String>,
    /// The window's end (exclusive), UTC (`None`: to the last row).
    pub until: Option<String>,
    /// Rows of the window read.
    pub rows: u64,
    /// Rows the router cannot route (no record expected).
    pub unroutable_rows: u64,
    /// The topics the window's rows route to (read).
    pub topics: Vec<String>,
    /// Those of them the cluster does not have.
    pub topics_absent: Vec<String>,
    /// Records read from the topics.
    pub records_read: u64,
    /// Records without an `id` header (not outbox events).
    pub records_without_id: u64,
    /// Records of rows outside the window, or of times outside it (not compared).
    pub records_outside_window: u64,
    /// Records read a second time for one row (at-least-once duplicates).
    pub duplicates: u64,
    /// Rows with no record (the findings `missing`).
    pub missing: u64,
    /// Records that differ from their row (`differs`).
    pub differs: u64,
    /// Records of the window's time with no row (`no_row`).
    pub no_row: u64,
}

/// A row of the window that has no record, with the record the router makes of it.
#[derive(Debug)]
pub struct MissingEvent {
    /// Its report line.
    pub finding: Finding,
    /// What `--fill` publishes: the record as the relay would have.
    pub record: KafkaRecord,
    /// The row it was routed from (a dead letter names its table).
    pub row: RowChange,
}

/// An audit of the `[[outbox]]` tables over one window.
pub struct Audit<'a> {
    /// The relay's router: the records the rows should have become.
    router: &'a Router,
    /// The tables, in config order.
    tables: Vec<AuditTable>,
    settings: AuditSettings,
    window: AuditWindow,
    /// The window's events by id.
    expected: ExpectedEvents,
    /// The topics they route to.
    topics: BTreeSet<String>,
    summary: AuditSummary,
    /// The walk for missing rows: which table, where in it.
    missing_walk: Option<(usize, WindowRows)>,
}

impl<'a> Audit<'a> {
    pub fn new(
        router: &'a Router,
        tables: Vec<AuditTable>,
        settings: AuditSettings,
        window: AuditWindow,
    ) -> Self {
        let summary = AuditSummary {
            since: window.since.map(|since| since.to_string()),
            until: window.until.map(|until| until.to_string()),
            ..AuditSummary::default()
        };
        Self {
            router,
            tables,
            settings,
            window,
            expected: ExpectedEvents::default(),
            topics: BTreeSet::new(),
            summary,
            missing_walk: None,
        }
    }

    /// The counts so far.
    pub fn summary(&self) -> &AuditSummary {
        &self.summary
    }

    /// First step: reads the window's rows of every table and remembers what the router
    /// makes of each (hashes only). `progress` is called after each page.
    pub async fn read_rows(
        &mut self,
        conn: &mut mysql_async::Conn,
        findings: &mut dyn FnMut(Finding),
        progress: &mut dyn FnMut(&AuditSummary),
    ) -> Result<(), AuditError> {
        for table in &self.tables {
            check_table(conn, table).await?;
        }
        for table in &self.tables {
            let mut pager = WindowRows::new(table, &self.window, self.settings.page_rows);
            while let Some(page) = pager.next_page(conn).await? {
                for row in page {
                    self.summary.rows += 1;
                    match self.router.route(&row.change) {
                        Ok(RouteOutcome::Record(record)) => {
                            let digest = RecordDigest::of(
                                &record.topic,
                                record.key.as_deref(),
                                record.value.as_deref(),
                            );
                            if !self.expected.insert(record.event_id.as_bytes(), digest) {
                                findings(Finding::DuplicateId {
                                    table: table.name.to_string(),
                                    id: record.event_id,
                                    row_timestamp: row.timestamp,
                                });
                                continue;
                            }
                            if !self.topics.contains(&record.topic) {
                                self.topics.insert(record.topic);
                            }
                        }
                        // An INSERT is never skipped; nothing to expect if it were.
                        Ok(RouteOutcome::Skipped { .. }) => {}
                        Err(error) => {
                            self.summary.unroutable_rows += 1;
                            findings(Finding::Unroutable {
                                table: table.name.to_string(),
                                row_timestamp: row.timestamp,
                                error: error.to_string(),
                            });
                        }
                    }
                }
                progress(&self.summary);
            }
        }
        self.summary.topics = self.topics.iter().cloned().collect();
        tracing::debug!(
            events = self.expected.len(),
            "audit: the window's rows read"
        );
        Ok(())
    }

    /// Second step: reads the routed topics from the window's start (less the margin) to
    /// their ends and matches each record with its row by the `id` header; a record of the
    /// window's time with no row there is looked up in every table before it is reported.
    pub async fn read_topics(
        &mut self,
        conn: &mut mysql_async::Conn,
        consumer: ClientConfig,
        findings: &mut dyn FnMut(Finding),
        progress: &mut dyn FnMut(&AuditSummary),
    ) -> Result<(), AuditError> {
        let topics: Vec<String> = self.topics.iter().cloned().collect();
        let start_ms = self
            .window
            .since
            .map(|since| since.minus(self.settings.kafka_margin).unix_millis());
        let stall_timeout = self.settings.kafka_stall_timeout;
        let (batches_tx, mut batches) = mpsc::channel::<Vec<SeenRecord>>(4);
        let reader = std::thread::Builder::new()
            .name("audit-topics".to_owned())
            .spawn(move || read_topics(consumer, &topics, start_ms, stall_timeout, &batches_tx))
            .map_err(|error| AuditError::ReaderStopped(error.to_string()))?;
        let mut outside: Vec<SeenRecord> = Vec::new();
        let window_ms = (
            self.window.since.map(|since| since.unix_millis()),
            self.window.until.map(UtcTime::unix_millis),
        );
        while let Some(batch) = batches.recv().await {
            for record in batch {
                self.summary.records_read += 1;
                let Some(id) = &record.id else {
                    self.summary.records_without_id += 1;
                    continue;
                };
                match self.expected.record_found(id, &record.digest) {
                    Match::Same { duplicate } => {
                        if duplicate {
                            self.summary.duplicates += 1;
                        }
                    }
                    Match::Differs(parts) => {
                        self.summary.differs += 1;
                        findings(Finding::Differs {
                            id: String::from_utf8_lossy(id).into_owned(),
                            topic: record.topic.to_string(),
                            partition: record.partition,
                            offset: record.offset,
                            parts,
                        });
                    }
                    Match::NotInWindow => {
                        let in_window_time = record.timestamp_ms.is_some_and(|ms| {
                            window_ms.0.is_none_or(|since| ms >= since)
                                && window_ms.1.is_none_or(|until| ms < until)
                        });
                        if in_window_time {
                            outside.push(record);
                        } else {
                            self.summary.records_outside_window += 1;
                        }
                    }
                }
            }
            if outside.len() >= LOOKUP_BATCH {
                self.report_rowless(conn, std::mem::take(&mut outside), findings)
                    .await?;
            }
            progress(&self.summary);
        }
        let reading = reader
            .join()
            .map_err(|_| AuditError::ReaderStopped("the topic reader panicked".to_owned()))??;
        self.summary.topics_absent = reading.topics_absent;
        self.report_rowless(conn, outside, findings).await?;
        Ok(())
    }

    /// Reports the records of `records` whose id no table has; the others belong to rows
    /// outside the window.
    async fn report_rowless(
        &mut self,
        conn: &mut mysql_async::Conn,
        records: Vec<SeenRecord>,
        findings: &mut dyn FnMut(Finding),
    ) -> Result<(), AuditError> {
        if records.is_empty() {
            return Ok(());
        }
        let column_ids: Vec<Vec<u8>> = records
            .iter()
            .filter_map(|record| record.id.as_deref())
            .filter_map(|id| column_bytes(id, self.settings.event_id_encoding))
            .collect();
        let mut found: BTreeSet<Vec<u8>> = BTreeSet::new();
        for table in &self.tables {
            found.extend(existing_ids(conn, table, &column_ids).await?);
        }
        for record in records {
            let Some(id) = record.id else { continue };
            let has_row = column_bytes(&id, self.settings.event_id_encoding)
                .is_some_and(|bytes| found.contains(&bytes));
            if has_row {
                self.summary.records_outside_window += 1;
                continue;
            }
            self.summary.no_row += 1;
            findings(Finding::NoRow {
                id: String::from_utf8_lossy(&id).into_owned(),
                topic: record.topic.to_string(),
                partition: record.partition,
                offset: record.offset,
                timestamp_ms: record.timestamp_ms,
            });
        }
        Ok(())
    }

    /// Last step, page by page: the window's rows no record was read for, with their
    /// records. Reads the window a second time (so only hashes were kept); `None` at the
    /// end.
    pub async fn next_missing(
        &mut self,
        conn: &mut mysql_async::Conn,
    ) -> Result<Option<Vec<MissingEvent>>, AuditError> {
        loop {
            let (index, pager) = match &mut self.missing_walk {
                Some(walk) => walk,
                None => {
                    let Some(first) = self.tables.first() else {
                        return Ok(None);
                    };
                    let pager = WindowRows::new(first, &self.window, self.settings.page_rows);
                    self.missing_walk.insert((0, pager))
                }
            };
            let Some(page) = pager.next_page(conn).await? else {
                let next = *index + 1;
                let Some(table) = self.tables.get(next) else {
                    return Ok(None);
                };
                let pager = WindowRows::new(table, &self.window, self.settings.page_rows);
                self.missing_walk = Some((next, pager));
                continue;
            };
            let table_name = self.tables[*index].name.to_string();
            let mut missing = Vec::new();
            for row in page {
                let Ok(RouteOutcome::Record(record)) = self.router.route(&row.change) else {
                    continue;
                };
                // `None`: a row that came after the first read (or a second row with an id
                // already compared): not part of this audit.
                if self.expected.delivered(record.event_id.as_bytes()) != Some(false) {
                    continue;
                }
                self.summary.missing += 1;
                missing.push(MissingEvent {
                    finding: Finding::Missing {
                        table: table_name.clone(),
                        id: record.event_id.clone(),
                        topic: record.topic.clone(),
                        row_timestamp: row.timestamp,
                    },
                    record,
                    row: row.change,
                });
            }
            return Ok(Some(missing));
        }
    }
}

/// The event id column's bytes for an `id` header's text under `encoding`; `None` when the
/// text is not of that form (then no row can have it).
fn column_bytes(id: &[u8], encoding: BinaryEncoding) -> Option<Vec<u8>> {
    match encoding {
        BinaryEncoding::Utf8 | BinaryEncoding::Raw => Some(id.to_vec()),
        BinaryEncoding::Hex => hex_bytes(id),
        BinaryEncoding::Uuid => {
            let digits: Vec<u8> = id.iter().copied().filter(|byte| *byte != b'-').collect();
            hex_bytes(&digits).filter(|bytes| bytes.len() == 16)
        }
        BinaryEncoding::Base64 => base64_bytes(id),
    }
}

fn hex_bytes(text: &[u8]) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    let digit = |byte: u8| char::from(byte).to_digit(16).map(|value| value as u8);
    text.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

fn base64_bytes(text: &[u8]) -> Option<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if text.len() % 4 != 0 {
        return None;
    }
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    for chunk in text.chunks(4) {
        let padding = chunk.iter().rev().take_while(|byte| **byte == b'=').count();
        if padding > 2 {
            return None;
        }
        let mut group = 0u32;
        for (index, byte) in chunk.iter().enumerate() {
            let value = if index >= 4 - padding {
                0
            } else {
                ALPHABET.iter().position(|letter| letter == byte)? as u32
            };
            group = group << 6 | value;
        }
        let decoded = group.to_be_bytes();
        bytes.extend_from_slice(&decoded[1..4 - padding]);
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_header_becomes_the_column_bytes_it_was_made_of() {
        assert_eq!(
            column_bytes(b"abc", BinaryEncoding::Utf8),
            Some(b"abc".to_vec())
        );
        assert_eq!(
            column_bytes(b"00ff10", BinaryEncoding::Hex),
            Some(vec![0, 255, 16])
        );
        assert_eq!(column_bytes(b"0g", BinaryEncoding::Hex), None);
        let uuid = column_bytes(
            b"0193a5b2-7c4d-7e8f-9a0b-1c2d3e4f5a6b",
            BinaryEncoding::Uuid,
        )
        .unwrap();
        assert_eq!(uuid.len(), 16);
        assert_eq!(uuid[0], 0x01);
        assert_eq!(uuid[15], 0x6b);
        assert_eq!(
            column_bytes(b"AP8Q", BinaryEncoding::Base64),
            Some(vec![0, 255, 16])
        );
        assert_eq!(
            column_bytes(b"AP8=", BinaryEncoding::Base64),
            Some(vec![0, 255])
        );
        assert_eq!(column_bytes(b"AA==", BinaryEncoding::Base64), Some(vec![0]));
        assert_eq!(column_bytes(b"A===", BinaryEncoding::Base64), None);
        assert_eq!(column_bytes(b"AP8", BinaryEncoding::Base64), None);
    }
}
