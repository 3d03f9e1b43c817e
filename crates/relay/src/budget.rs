//! The in-flight byte budget (`pipeline.max_in_flight_bytes`): bounds the row data held
//! between the binlog reader and Kafka's acknowledgement, so big rows cannot pile up in the
//! channels or the sink's unacked set.
//!
//! The source reserves a row's estimated size before handing it on; the reservation
//! ([`BudgetPermit`]) travels with the row, then with its record (or dead letter) as part of
//! the sink ticket, and is released when Kafka acknowledged it (or when the row was skipped
//! or dropped at shutdown). A row larger than the whole budget waits until everything else
//! was released and then takes the whole budget: it passes, alone.
//!
//! In poll mode a claim keeps a row only if its share fits now
//! ([`InFlightBudget::try_reserve`]); the claim ends at the first that does not, and the
//! claim task waits for releases before it claims again.
//!
//! For a large rows event the source reserves the event's raw size *before* the reader
//! decodes it (a credit, see `pipeline/source.rs`), so a row waiting for budget is held only
//! as raw bytes; its rows then take their shares out of that credit
//! ([`InFlightBudget::take_from_credit`]), reserving more only where a row's estimate
//! exceeds what is left.

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
    /// The reserved units: held to be dropped, split when a row takes its share of a
    /// reservation made before it was decoded, merged when a row's share needed more.
    permit: OwnedSemaphorePermit,
}

impl BudgetPermit {
    /// Adds `other` (of the same budget) to this reservation: one permit per row.
    pub fn merge(&mut self, other: BudgetPermit) {
        self.permit.merge(other.permit);
    }
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
        let permit = Arc::clone(&self.units)
            .acquire_many_owned(self.units_for(bytes))
            .await
            .ok()?;
        Some(BudgetPermit { permit })
    }

    /// Reserves `bytes` if they fit now (a reservation larger than the budget fits only
    /// when nothing else is reserved); `None` otherwise.
    pub fn try_reserve(&self, bytes: usize) -> Option<BudgetPermit> {
        let permit = Arc::clone(&self.units)
            .try_acquire_many_owned(self.units_for(bytes))
            .ok()?;
        Some(BudgetPermit { permit })
    }

    /// Takes a row's reservation of `bytes` out of `credit` (budget reserved before the
    /// row was decoded, from its event's raw size) as far as the credit reaches. Returns
    /// what was taken and the bytes still to [`InFlightBudget::reserve`] for the row (0
    /// when the credit covered it); what the row does not need stays in `credit`. Like
    /// `reserve`, a row never needs more than the whole budget, so a credit of the whole
    /// budget covers any row.
    pub fn take_from_credit(
        &self,
        credit: &mut Option<BudgetPermit>,
        bytes: usize,
    ) -> (Option<BudgetPermit>, usize) {
        let needed = self.units_for(bytes);
        let Some(held) = credit.as_mut() else {
            return (None, bytes);
        };
        let available = u32::try_from(held.permit.num_permits()).unwrap_or(u32::MAX);
        if available > needed {
            let taken = held
                .permit
                .split(needed as usize)
                .map(|permit| BudgetPermit { permit });
            if taken.is_some() {
                return (taken, 0);
            }
        }
        // The credit does not reach past the row: the row takes all of it.
        let missing = u64::from(needed.saturating_sub(available)) * BYTES_PER_UNIT;
        (
            credit.take(),
            usize::try_from(missing).unwrap_or(usize::MAX),
        )
    }

    /// The budget in bytes.
    pub fn total_bytes(&self) -> u64 {
        u64::from(self.total_units) * BYTES_PER_UNIT
    }

    /// The units a reservation of `bytes` takes: rounded up, at least one, at most the
    /// whole budget.
    fn units_for(&self, bytes: usize) -> u32 {
        let units = (bytes as u64).div_ceil(BYTES_PER_UNIT).max(1);
        u32::try_from(units)
            .unwrap_or(u32::MAX)
            .min(self.total_units)
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

/// The estimated memory of one row image (see [`row_change_bytes`]).
pub fn row_bytes(row: &Row) -> usize {
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
        // try_reserve takes what fits now, and an oversized reservation only alone.
        let held = budget.try_reserve(6 * 1024).expect("fits");
        assert!(budget.try_reserve(6 * 1024).is_none());
        assert!(budget.try_reserve(100 * 1024 * 1024).is_none());
        drop(held);
        let alone = budget
            .try_reserve(100 * 1024 * 1024)
            .expect("alone, it fits");
        assert_eq!(budget.reserved_bytes(), 10 * 1024);
        drop(alone);
        // Tiny rows cost one unit.
        let tiny = budget.reserve(0).await.unwrap();
        assert_eq!(budget.reserved_bytes(), 1024);
        drop(tiny);
    }

    #[tokio::test]
    async fn rows_take_their_shares_from_a_credit_reserved_before_decoding() {
        let budget = InFlightBudget::new(100 * 1024);
        // Reserved from a large event's raw size, before its rows exist.
        let mut credit = budget.reserve(50 * 1024).await;
        assert_eq!(budget.reserved_bytes(), 50 * 1024);
        // A row within the credit takes its share; the rest stays in the credit and
        // nothing more is reserved.
        let (first, missing) = budget.take_from_credit(&mut credit, 20 * 1024);
        assert_eq!(missing, 0);
        let first = first.expect("taken from the credit");
        assert_eq!(budget.reserved_bytes(), 50 * 1024);
        // A row beyond what is left takes all of it and names what it still needs.
        let (second, missing) = budget.take_from_credit(&mut credit, 40 * 1024);
        assert!(credit.is_none(), "the credit is used up");
        assert_eq!(missing, 10 * 1024);
        let mut second = second.expect("the rest of the credit");
        second.merge(budget.reserve(missing).await.unwrap());
        assert_eq!(budget.reserved_bytes(), 60 * 1024);
        // Without a credit a row reserves all of it.
        let (none, missing) = budget.take_from_credit(&mut credit, 5 * 1024);
        assert!(none.is_none());
        assert_eq!(missing, 5 * 1024);
        // Every share goes back when its row is acked (dropped).
        drop(first);
        assert_eq!(budget.reserved_bytes(), 40 * 1024);
        drop(second);
        assert_eq!(budget.reserved_bytes(), 0);

        // A credit of the whole budget (an event larger than the budget) covers any row,
        // however large: it passes alone, and what it leaves goes back with the credit.
        let mut credit = budget.reserve(1 << 30).await;
        assert_eq!(budget.reserved_bytes(), 100 * 1024);
        let (huge, missing) = budget.take_from_credit(&mut credit, 1 << 30);
        assert_eq!(missing, 0);
        assert!(credit.is_none());
        drop(huge);
        let mut credit = budget.reserve(1 << 30).await;
        let (small, missing) = budget.take_from_credit(&mut credit, 1024);
        assert_eq!(missing, 0);
        drop(credit);
        assert_eq!(budget.reserved_bytes(), 1024);
        drop(small);
        assert_eq!(budget.reserved_bytes(), 0);
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
            types: None,
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
