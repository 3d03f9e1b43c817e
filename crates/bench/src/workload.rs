//! The workload: the schema, the outbox events (a pure function of their index, so the bare
//! producer sends exactly the records the relay routes from the rows), and the bulk writer.

use anyhow::{Context, Result};
use mysql_async::prelude::Queryable;

/// The aggregate types the events cycle through (one topic each).
pub const AGGREGATE_TYPES: [&str; 3] = ["order", "customer", "payment"];

/// Distinct aggregate ids (record keys) per aggregate type.
const AGGREGATES_PER_TYPE: u64 = 10_000;

/// Transactions per multi-statement round trip of the bulk writer (fewer for big rows, see
/// [`MAX_BATCH_TEXT_BYTES`]).
const TRANSACTIONS_PER_ROUND_TRIP: u64 = 500;

/// Upper bound on one round trip's SQL text, so big payloads do not build huge strings.
const MAX_BATCH_TEXT_BYTES: usize = 8 << 20;

/// The shape of the generated log.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Transactions.
    pub transactions: u64,
    /// Outbox rows per transaction.
    pub rows_per_transaction: u32,
    /// Bytes of each payload (the base JSON is padded up to this size).
    pub payload_bytes: usize,
    /// Noise tables written once per transaction.
    pub noise_tables: u32,
}

/// One outbox event, as the row is written and as the record must arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedEvent {
    /// `id` column: the record's `id` header.
    pub id: String,
    /// `aggregatetype`: the topic.
    pub aggregate_type: &'static str,
    /// `aggregateid`: the record key.
    pub aggregate_id: String,
    /// `type`: the `event_type` header.
    pub event_type: &'static str,
    /// `payload`: the record value.
    pub payload: String,
}

impl Workload {
    /// Outbox events in the log.
    pub fn events(&self) -> u64 {
        self.transactions * u64::from(self.rows_per_transaction)
    }

    /// The event with global index `index` (0-based; events of transaction `t` are
    /// `t * rows_per_transaction ..`).
    pub fn event(&self, index: u64) -> GeneratedEvent {
        let aggregate_type = AGGREGATE_TYPES[(index % AGGREGATE_TYPES.len() as u64) as usize];
        let mut payload = format!(
            r#"{{"orderId":{index},"customerId":"c-{:06}","items":[{{"sku":"sku-{:05}","qty":2,"price":"19.99"}}],"total":"39.98","currency":"EUR","note":"bench""#,
            index % 100_000,
            index % 50_000
        );
        // `,"pad":"xxx"}` (10 bytes besides the x's) brings the payload to the requested size.
        if self.payload_bytes > payload.len() + 10 {
            let pad = self.payload_bytes - payload.len() - 10;
            payload.push_str(r#","pad":""#);
            payload.extend(std::iter::repeat_n('x', pad));
            payload.push('"');
        }
        payload.push('}');
        GeneratedEvent {
            id: format!("00000000-0000-4000-8000-{index:012}"),
            aggregate_type,
            aggregate_id: format!("{aggregate_type}-{}", index % AGGREGATES_PER_TYPE),
            event_type: "OrderCreated",
            payload,
        }
    }

    /// The schema: orders, Debezium's documented outbox table, the noise tables.
    pub fn schema(&self) -> Vec<String> {
        let mut statements = vec![
            "CREATE DATABASE shop".to_string(),
            "CREATE TABLE shop.orders (id BIGINT NOT NULL PRIMARY KEY, customer VARCHAR(64) NOT NULL, \
             total DECIMAL(12,2) NOT NULL, created_at DATETIME(6) NOT NULL) ENGINE=InnoDB"
                .to_string(),
            "CREATE TABLE shop.outbox (id VARCHAR(64) NOT NULL PRIMARY KEY, \
             aggregatetype VARCHAR(64) NOT NULL, aggregateid VARCHAR(64) NOT NULL, \
             type VARCHAR(64) NOT NULL, payload JSON, \
             timestamp DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"
                .to_string(),
        ];
        for table in 0..self.noise_tables {
            statements.push(format!(
                "CREATE TABLE shop.noise_{table} (id BIGINT NOT NULL PRIMARY KEY, \
                 note VARCHAR(255) NOT NULL, amount DECIMAL(12,2) NOT NULL) ENGINE=InnoDB"
            ));
        }
        statements
    }

    /// The SQL of transaction `transaction` (BEGIN ... COMMIT), appended to `sql`.
    pub fn push_transaction_sql(&self, transaction: u64, sql: &mut String) {
        use std::fmt::Write;
        let _ = write!(
            sql,
            "BEGIN;INSERT INTO shop.orders VALUES ({transaction}, 'c-{:06}', 39.98, NOW(6));",
            transaction % 100_000
        );
        for table in 0..self.noise_tables {
            let _ = write!(
                sql,
                "INSERT INTO shop.noise_{table} VALUES ({transaction}, 'noise row of a business table', 1.25);"
            );
        }
        sql.push_str(
            "INSERT INTO shop.outbox (id, aggregatetype, aggregateid, type, payload) VALUES ",
        );
        let first = transaction * u64::from(self.rows_per_transaction);
        for row in 0..u64::from(self.rows_per_transaction) {
            let event = self.event(first + row);
            if row > 0 {
                sql.push(',');
            }
            let _ = write!(
                sql,
                "('{}', '{}', '{}', '{}', '{}')",
                event.id, event.aggregate_type, event.aggregate_id, event.event_type, event.payload
            );
        }
        sql.push_str(";COMMIT;");
    }

    /// Writes transactions `from..to` on `conn`, several per round trip.
    pub async fn write(&self, conn: &mut mysql_async::Conn, from: u64, to: u64) -> Result<()> {
        let mut next = from;
        while next < to {
            let mut sql = String::new();
            let mut in_batch = 0;
            while next < to
                && in_batch < TRANSACTIONS_PER_ROUND_TRIP
                && sql.len() < MAX_BATCH_TEXT_BYTES
            {
                self.push_transaction_sql(next, &mut sql);
                next += 1;
                in_batch += 1;
            }
            conn.query_drop(sql)
                .await
                .with_context(|| format!("writing transactions up to {next}"))?;
        }
        Ok(())
    }
}

/// A binlog file and position.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct LogPoint {
    /// `binlog.NNNNNN` (fixed width, so names order like the files).
    pub file: String,
    /// Byte offset in the file.
    pub position: u64,
}

/// The server's current end of the binlog (`SHOW MASTER STATUS`).
pub async fn end_of_log(conn: &mut mysql_async::Conn) -> Result<LogPoint> {
    let row: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .context("SHOW MASTER STATUS")?
        .context("SHOW MASTER STATUS returned no row: binary logging is off")?;
    let file: String = row.get(0).context("SHOW MASTER STATUS: no file")?;
    let position: u64 = row.get(1).context("SHOW MASTER STATUS: no position")?;
    Ok(LogPoint { file, position })
}

/// The oldest binlog file the server has.
pub async fn first_log_file(conn: &mut mysql_async::Conn) -> Result<String> {
    let row: mysql_async::Row = conn
        .query_first("SHOW BINARY LOGS")
        .await
        .context("SHOW BINARY LOGS")?
        .context("SHOW BINARY LOGS returned no row")?;
    row.get(0).context("SHOW BINARY LOGS: no name")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_have_the_requested_size_and_stay_json() {
        for payload_bytes in [150, 1_000, 70_000] {
            let workload = Workload {
                transactions: 1,
                rows_per_transaction: 1,
                payload_bytes,
                noise_tables: 0,
            };
            let event = workload.event(123_456);
            let parsed: serde_json::Value =
                serde_json::from_str(&event.payload).expect("payload is JSON");
            assert_eq!(parsed["orderId"], 123_456);
            if payload_bytes > 200 {
                assert_eq!(event.payload.len(), payload_bytes);
            } else {
                assert!(
                    (130..=200).contains(&event.payload.len()),
                    "{}",
                    event.payload
                );
            }
        }
    }

    #[test]
    fn events_cycle_through_three_aggregate_types() {
        let workload = Workload {
            transactions: 3,
            rows_per_transaction: 2,
            payload_bytes: 150,
            noise_tables: 1,
        };
        assert_eq!(workload.events(), 6);
        let types: Vec<_> = (0..3).map(|i| workload.event(i).aggregate_type).collect();
        assert_eq!(types, AGGREGATE_TYPES);
        let mut sql = String::new();
        workload.push_transaction_sql(1, &mut sql);
        assert!(sql.contains("INSERT INTO shop.noise_0"), "{sql}");
        assert!(sql.contains(&workload.event(2).id) && sql.contains(&workload.event(3).id));
    }
}
