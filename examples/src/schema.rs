//! The two services' schemas (one server, two databases, as two services sharing a MariaDB
//! in a demo; in production each has its own).

use outbox_writer::{create_table_sql, ColumnPreset, OutboxTable, WriterError};

/// The order service's outbox table (`shop.outbox`, seeds preset, as the relay's tests and
/// `deploy/outbox-relay.toml` configure it).
pub fn shop_outbox_table() -> Result<OutboxTable, WriterError> {
    OutboxTable::new("outbox", ColumnPreset::Seeds)?.in_database("shop")
}

/// The order service's statements: `shop.orders` and its outbox.
pub fn shop_schema() -> Result<Vec<String>, WriterError> {
    Ok(vec![
        "CREATE DATABASE IF NOT EXISTS shop".to_owned(),
        "CREATE TABLE IF NOT EXISTS shop.orders (id BIGINT NOT NULL PRIMARY KEY, \
         sku VARCHAR(64) NOT NULL, quantity INT NOT NULL) ENGINE=InnoDB"
            .to_owned(),
        create_table_sql(&shop_outbox_table()?),
    ])
}

/// The inventory service's statements: stock levels, one reservation per order, and
/// `processed_event` (in the same database, so one transaction covers all three).
pub fn inventory_schema() -> Vec<String> {
    vec![
        "CREATE DATABASE IF NOT EXISTS inventory".to_owned(),
        "CREATE TABLE IF NOT EXISTS inventory.stock (sku VARCHAR(64) NOT NULL PRIMARY KEY, \
         available INT NOT NULL, reserved INT NOT NULL DEFAULT 0) ENGINE=InnoDB"
            .to_owned(),
        "CREATE TABLE IF NOT EXISTS inventory.reservations (order_id BIGINT NOT NULL PRIMARY KEY, \
         sku VARCHAR(64) NOT NULL, quantity INT NOT NULL) ENGINE=InnoDB"
            .to_owned(),
        outbox_consumer::create_processed_event_table_sql().replacen(
            "CREATE TABLE IF NOT EXISTS `",
            "CREATE TABLE IF NOT EXISTS `inventory`.`",
            1,
        ),
    ]
}
