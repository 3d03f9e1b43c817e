//! The inventory service: reserves stock for each `OrderCreated`, inside the consumer's
//! transaction (so exactly once per order).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::Transaction;
use outbox_consumer::{ConsumedEvent, EventHandler, HandlerError};

use crate::order_service::{OrderCreated, ORDER_CREATED};

/// The relay's header carrying the event type.
pub const EVENT_TYPE_HEADER: &str = "event_type";

/// The handler: `inventory.stock` down by the quantity, a row in `inventory.reservations`.
/// An unknown SKU or too little stock is a permanent error (dead-lettered).
#[derive(Debug, Clone, Default)]
pub struct ReserveStock {
    /// Failure tests: the next this-many attempts fail with a simulated timeout
    /// ([`HandlerError::Transient`]) before touching the database.
    pub simulated_timeouts: Arc<AtomicU32>,
}

impl EventHandler for ReserveStock {
    async fn handle(
        &self,
        event: &ConsumedEvent,
        transaction: &mut Transaction<'static>,
    ) -> Result<(), HandlerError> {
        if event.header_str(EVENT_TYPE_HEADER) != Some(ORDER_CREATED) {
            return Ok(()); // Not ours; recorded as processed, nothing to change.
        }
        let timeouts_left = self.simulated_timeouts.load(Ordering::SeqCst);
        if timeouts_left > 0 {
            self.simulated_timeouts
                .store(timeouts_left - 1, Ordering::SeqCst);
            return Err(HandlerError::Transient(
                "simulated timeout of the stock service".to_owned(),
            ));
        }
        let order: OrderCreated = event.payload_json()?;
        transaction
            .exec_drop(
                "UPDATE inventory.stock SET available = available - ?, reserved = reserved + ? \
                 WHERE sku = ? AND available >= ?",
                (order.quantity, order.quantity, &order.sku, order.quantity),
            )
            .await?;
        if transaction.affected_rows() != 1 {
            return Err(HandlerError::Permanent(format!(
                "order {}: no stock of {} for {} unit(s) (unknown sku or not enough left)",
                order.order_id, order.sku, order.quantity
            )));
        }
        transaction
            .exec_drop(
                "INSERT INTO inventory.reservations (order_id, sku, quantity) VALUES (?, ?, ?)",
                (order.order_id, &order.sku, order.quantity),
            )
            .await?;
        Ok(())
    }
}
