//! The in-flight byte budget (`pipeline.max_in_flight_bytes`): bounds the row data held
//! between the binlog reader and Kafka's acknowledgement, so big rows cannot pile up in the
//! channels or the sink's unacked set.
//!
//! The source reserves a row's estimated size before handing it on; the reservation
//! ([`BudgetPermit`]) travels with the row, then with its record (or dead letter) as part of
//! the sink ticket, and is released when Kafka acknowledged it (or when the row was skipped
//! or dropped at shutdown). A row larger than the whole budget waits until everything else
//! was released and then takes the whole budget: it passes, alone.

use std::sync::Arc;

use outbox_binlog::{Row, RowChange, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes per semaphore permit: the budget is kept in KiB so large budgets fit the
/// semaphore's permit count and a reservation is one atomic operation.
const BYTES_PER_UNIT: u64 = 1024;

/// Shared by the source (which reserves) and everything downstream (which releases by
/// dropping permits).
#[derive(Clone)]
pub struct InFlightBudget {
    /// One permit per KiB of the budget.
    units: Arc<Semaphore>,
    /// The budget in permits: the most one reservation can take.
    total_units: u32,
}

/// A reservation of budget; released on drop.
#[derive(Debug)]
pub struct BudgetPermit {
    /// Held only to be dropped.
    _permit: OwnedSemaphorePermit,
}

impl InFlightBudget {
    /// A budget of `bytes` (at least one KiB).
    pub fn new(bytes: u64) -> Self {
        let total_units = u32::try_from((bytes / BYTES_PER_UNIT).max(1)).unwrap_or(u32::MAX);
        Self {
            units: Arc::new(Semaphore::new(total_units as usize)),
            total_units,
        }
    }

    /// Waits until `bytes` fit into the budget, then reserves them (a reservation larger
    /// than the budget takes the whole budget). `None` only if the budget was closed, which
    /// this crate never does.
    pub async fn reserve(&self, bytes: usize) -> Option<BudgetPermit> {
        let units = (bytes as u64).div_ceil(BYTES_PER_UNIT).max(1);
        let units = u32::try_from(units)
            .unwrap_or(u32::MAX)
            .min(self.total_units);
        let permit = Arc::clone(&self.units)
            .acquire_many_owned(units)
            .await
            .ok()?;
        Some(BudgetPermit { _permit: permit })
    }

    /// Bytes currently reserved (in whole KiB), for the in-flight bytes gauge.
    pub fn reserved_bytes(&self) -> u64 {
        let free = self.units.available_permits() as u64;
        (u64::from(self.total_units).saturating_sub(free)) * BYTES_PER_UNIT
    }
}

/// The estimated memory of a row change: its values' bytes plus a small overhead per value.
/// Cheap for text and bytes (lengths), linear in the document for MySQL JSON values.
pub fn row_change_bytes(row: &RowChange) -> usize {
    [&row.before, &row.after]
        .into_iter()
        .flatten()
        .map(row_bytes)
        .sum()
}

fn row_bytes(row: &Row) -> usize {
    row.values.iter().map(value_bytes).sum()
}

/// Per-value overhead: the enum itself and allocator bookkeeping.
const VALUE_OVERHEAD: usize = 32;

fn value_bytes(value: &Value) -> usize {
    VALUE_OVERHEAD
        + match value {
            Value::Decimal(text) | Value::Text(text) => text.len(),
            Value::UndecodableText { bytes, .. } | Value::Bytes(bytes) => bytes.len(),
            Value::Json(json) => json.as_str().len(),
            Value::Vector(floats) => floats.len() * 4,
            _ => 0,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn reservations_wait_for_releases_and_an_oversized_one_passes_alone() {
        let budget = InFlightBudget::new(10 * 1024);
        let first = budget.reserve(6 * 1024).await.unwrap();
        assert_eq!(budget.reserved_bytes(), 6 * 1024);
        // 6 KiB more do not fit while the first is held...
        let blocked = tokio::time::timeout(Duration::from_millis(50), budget.reserve(6 * 1024));
        assert!(blocked.await.is_err());
        // ...and do once it is released.
        drop(first);
        let second = budget.reserve(6 * 1024).await.unwrap();
        drop(second);
        // A reservation larger than the budget takes all of it, and nothing else fits.
        let huge = budget.reserve(100 * 1024 * 1024).await.unwrap();
        assert_eq!(budget.reserved_bytes(), 10 * 1024);
        let blocked = tokio::time::timeout(Duration::from_millis(50), budget.reserve(1));
        assert!(blocked.await.is_err());
        drop(huge);
        assert_eq!(budget.reserved_bytes(), 0);
        // Tiny rows cost one unit.
        let tiny = budget.reserve(0).await.unwrap();
        assert_eq!(budget.reserved_bytes(), 1024);
        drop(tiny);
    }

    #[test]
    fn row_sizes_count_text_bytes_and_json() {
        use outbox_binlog::{BinlogPosition, RowOperation, TableName};
        let row = Row {
            columns: Arc::from(vec!["a".to_string(), "b".to_string(), "c".to_string()]),
            values: vec![
                Value::Text("x".repeat(1000)),
                Value::Bytes(vec![0; 500]),
                Value::Json(serde_json::json!({"k": "v".repeat(100)}).into()),
            ],
        };
        let change = RowChange {
            table: Arc::new(TableName::new("shop", "outbox")),
            operation: RowOperation::Insert,
            before: None,
            after: Some(row),
            event_timestamp: 0,
            event_position: BinlogPosition::new("binlog.000001", 4),
            transaction_gtid: None,
            in_xa_transaction: false,
        };
        let bytes = row_change_bytes(&change);
        assert!((1600..1800).contains(&bytes), "{bytes}");
    }
}
