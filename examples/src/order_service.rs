//! The order service: an order and its `OrderCreated` event commit together.

use mysql_async::prelude::Queryable;
use mysql_async::{Pool, TxOpts};
use outbox_writer::{append_events, OutboxEvent, OutboxTable, Uuid, WriterError};
use serde::{Deserialize, Serialize};

/// The `OrderCreated` payload (also what the inventory service parses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderCreated {
    /// The order's id (also the aggregate id, so the Kafka key).
    pub order_id: i64,
    /// What was ordered.
    pub sku: String,
    /// How many.
    pub quantity: i32,
}

/// The event type the inventory service reacts to.
pub const ORDER_CREATED: &str = "OrderCreated";

/// The aggregate type: the relay routes it to topic `...outbox.event.order`.
pub const ORDER_AGGREGATE: &str = "order";

/// Why placing an order failed (nothing was written).
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    /// Writing the order row or committing failed.
    #[error("order {order_id}: {source}")]
    Database {
        /// The order.
        order_id: i64,
        /// The driver's error.
        source: mysql_async::Error,
    },
    /// Building or appending the event failed.
    #[error("order {order_id}: {source}")]
    Outbox {
        /// The order.
        order_id: i64,
        /// The writer's error.
        source: WriterError,
    },
}

/// Places orders.
pub struct OrderService {
    /// Connections to the shop database.
    pool: Pool,
    /// Where the events go.
    outbox: OutboxTable,
}

impl OrderService {
    /// A service writing through `pool` to `outbox`.
    pub fn new(pool: Pool, outbox: OutboxTable) -> Self {
        Self { pool, outbox }
    }

    /// Inserts the order and its `OrderCreated` event in one transaction and commits;
    /// returns the event id.
    pub async fn place_order(&self, order: &OrderCreated) -> Result<Uuid, OrderError> {
        self.write_order(order, true).await
    }

    /// The same writes, then a rollback (a failed business check after the writes): neither
    /// the order nor its event may exist afterwards, and the relay must publish nothing.
    pub async fn place_order_then_roll_back(
        &self,
        order: &OrderCreated,
    ) -> Result<Uuid, OrderError> {
        self.write_order(order, false).await
    }

    async fn write_order(&self, order: &OrderCreated, commit: bool) -> Result<Uuid, OrderError> {
        let database = |source| OrderError::Database {
            order_id: order.order_id,
            source,
        };
        let outbox = |source| OrderError::Outbox {
            order_id: order.order_id,
            source,
        };
        let mut transaction = self
            .pool
            .start_transaction(TxOpts::default())
            .await
            .map_err(database)?;
        transaction
            .exec_drop(
                "INSERT INTO shop.orders (id, sku, quantity) VALUES (?, ?, ?)",
                (order.order_id, &order.sku, order.quantity),
            )
            .await
            .map_err(database)?;
        let event = OutboxEvent::new(
            ORDER_AGGREGATE,
            &order.order_id.to_string(),
            ORDER_CREATED,
            order,
        )
        .map_err(outbox)?;
        append_events(&mut transaction, &self.outbox, std::slice::from_ref(&event))
            .await
            .map_err(outbox)?;
        if commit {
            transaction.commit().await.map_err(database)?;
        } else {
            transaction.rollback().await.map_err(database)?;
        }
        Ok(event.event_id())
    }
}
