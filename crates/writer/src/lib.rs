//! outbox-writer: the producer side of the transactional outbox.
//!
//! An application writes its business change and the event that announces it **in one
//! database transaction**; the relay (`outbox-relay`) tails the binlog and publishes the
//! committed outbox rows to Kafka. A rollback writes neither, so no event is ever published for
//! a change that did not happen, and no committed change goes unannounced.
//!
//! ```no_run
//! use mysql_async::prelude::*;
//! use outbox_writer::{append_events, ColumnPreset, OutboxEvent, OutboxTable};
//!
//! # async fn place_order(pool: &mysql_async::Pool) -> Result<(), Box<dyn std::error::Error>> {
//! let outbox = OutboxTable::new("outbox", ColumnPreset::Seeds)?.in_database("shop")?;
//! let mut tx = pool.start_transaction(mysql_async::TxOpts::default()).await?;
//! tx.exec_drop("INSERT INTO shop.orders (id, sku, quantity) VALUES (?, ?, ?)", (7, "apple", 2))
//!     .await?;
//! let event = OutboxEvent::new(
//!     "order",
//!     "7",
//!     "OrderCreated",
//!     &serde_json::json!({"orderId": 7, "sku": "apple", "quantity": 2}),
//! )?;
//! append_events(&mut tx, &outbox, &[event]).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! # What the crate gives
//! * [`OutboxEvent`]: one event; its id is a UUIDv7 by default (time-ordered, so InnoDB
//!   appends to the primary key instead of splitting pages), sent by the relay as header `id`
//!   for consumers to deduplicate on.
//! * [`OutboxTable`]: the table's name and column layout, from the relay's presets
//!   ([`ColumnPreset::Seeds`], [`ColumnPreset::Debezium`]) plus optional header columns
//!   (the relay's `additional_headers`) and a W3C trace context column (the relay's
//!   `tracing_span_context_column`).
//! * [`append_events`]: appends a batch in one multi-row `INSERT` inside the caller's
//!   `mysql_async::Transaction` (`append_events_sqlx` with feature `sqlx`).
//! * [`create_table_sql`]: the table's DDL per preset (also shipped as migration files in
//!   `migrations/`).
//! * [`delete_published_events`]: the cleanup job, which deletes only rows older than the
//!   relay's stored checkpoint minus a safety margin, in bounded batches.
//!
//! With feature `sqlx`, [`append_events_sqlx`] does the same inside an
//! `sqlx::Transaction<'_, MySql>`.

#![warn(missing_docs)]

mod append;
#[cfg(feature = "sqlx")]
mod append_sqlx;
mod cleanup;
mod ddl;
mod error;
mod event;
pub mod internal_events;
mod table;

pub use append::{append_event, append_events, MAX_PLACEHOLDERS_PER_STATEMENT};
#[cfg(feature = "sqlx")]
pub use append_sqlx::append_events_sqlx;
pub use cleanup::{
    delete_published_events, delete_sent_poll_rows, CleanupError, CleanupPolicy, CleanupReport,
    SentPollRows,
};
pub use ddl::{create_table_sql, DDL_HEADER_COLUMN_TYPE, DDL_TRACE_CONTEXT_COLUMN_TYPE};
pub use error::WriterError;
pub use event::{validate_traceparent, OutboxEvent};
pub use outbox_router::ColumnPreset;
pub use table::{OutboxTable, DEBEZIUM_TRACING_SPAN_CONTEXT_COLUMN};
pub use uuid::Uuid;
