//! The outbox table as the proof (issue 28): an audit compares the outbox rows of a time
//! window with what reached the routed Kafka topics.
//!
//! # What it proves
//! Every row of the window (by the table's timestamp column, in UTC) is routed as the
//! relay routes it; every record of the topics it routes to, from the window's start to
//! their ends, is matched with its row by the `id` header. A row no record matched is
//! **missing**: its event never reached Kafka (or its record was deleted there), and
//! `outbox-relay audit --fill` publishes it with the same id, key, topic and payload. A
//! record whose topic, key or payload differ from what the router makes of its row
//! **differs** (the row was updated after it was published); a record of the window's
//! time whose id no outbox table has is **no_row** (the row was deleted). Neither is
//! refilled.
//!
//! # Memory
//! Rows are read in pages (`page_rows`), records in batches; per row of the window the
//! audit keeps 128 bits of its id's hashes and 192 bits of its record's, so a million rows
//! take about a hundred MiB. The rows to report as missing are found by reading the window
//! a second time.
//!
//! # Steps
//! [`Audit::read_rows`], [`Audit::read_topics`], then [`Audit::next_missing`] until `None`.

mod audit;
mod digest;
mod error;
mod table_scan;
mod time;
mod topic_scan;

pub use audit::{Audit, AuditSettings, AuditSummary, Finding, MissingEvent};
pub use error::AuditError;
pub use table_scan::{check_table, has_row_before, AuditTable, AuditWindow, WindowRow, WindowRows};
pub use time::UtcTime;
