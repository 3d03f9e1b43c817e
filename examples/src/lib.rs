//! Two small services on the transactional outbox, wired through `outbox-relay`:
//!
//! * [`order_service`]: places an order: `shop.orders` row and an `OrderCreated` outbox event
//!   in one transaction ([`outbox_writer`]).
//! * [`inventory_service`]: consumes `OrderCreated` ([`outbox_consumer`]) and reserves
//!   stock: `inventory.stock` goes down, `inventory.reservations` gets a row, exactly once per
//!   order however often the event is delivered.
//!
//! Run them end to end against the test harness (scratch MariaDB, real Kafka broker, the
//! relay binary) with:
//!
//! ```text
//! cargo test -p outbox-examples --test order_inventory -- --nocapture
//! ```
//!
//! `order_places_and_stock_is_reserved_once` is the walk-through; the other tests of that
//! file replay the failures (redelivery, relay crash, consumer crash, timeouts, poison
//! events) and check the business state after each.

pub mod inventory_service;
pub mod order_service;
pub mod schema;
