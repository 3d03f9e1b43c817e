//! The `processed_event` table: which events each consumer has applied.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Transaction;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

/// The table name (in the pool's default database).
pub const PROCESSED_EVENT_TABLE: &str = "processed_event";

/// MySQL's duplicate-key error.
const ER_DUP_ENTRY: u16 = 1062;

/// `CREATE TABLE IF NOT EXISTS processed_event`: primary key `(consumer_name, event_id)`
/// (the deduplication), `processed_at` indexed for [`prune_processed_events`]. Create it in
/// the database the handler's business tables live in, so one transaction covers both.
pub fn create_processed_event_table_sql() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS `{PROCESSED_EVENT_TABLE}` (\n  \
         `consumer_name` VARCHAR(128) NOT NULL,\n  \
         `event_id` VARCHAR(255) NOT NULL,\n  \
         `processed_at` DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),\n  \
         PRIMARY KEY (`consumer_name`, `event_id`),\n  \
         KEY `processed_event_processed_at_idx` (`processed_at`)\n\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )
}

/// What inserting the deduplication row found.
pub(crate) enum Claim {
    /// The row is new: apply the event.
    Claimed,
    /// The row exists: the event was applied before.
    AlreadyProcessed,
}

/// Inserts `(consumer_name, event_id)` inside `transaction`.
pub(crate) async fn claim_event(
    transaction: &mut Transaction<'static>,
    consumer_name: &str,
    event_id: &str,
) -> Result<Claim, mysql_async::Error> {
    let result = transaction
        .exec_drop(
            format!(
                "INSERT INTO `{PROCESSED_EVENT_TABLE}` (consumer_name, event_id) VALUES (?, ?)"
            ),
            (consumer_name, event_id),
        )
        .await;
    match result {
        Ok(()) => Ok(Claim::Claimed),
        Err(mysql_async::Error::Server(server)) if server.code == ER_DUP_ENTRY => {
            Ok(Claim::AlreadyProcessed)
        }
        Err(error) => Err(error),
    }
}

/// Why pruning failed (rows deleted by earlier batches stay deleted).
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// The DELETE failed.
    #[error("pruning processed_event of consumer {consumer_name}: {source}")]
    Database {
        /// The consumer whose rows were pruned.
        consumer_name: String,
        /// The driver's error.
        source: mysql_async::Error,
    },
    /// The topic's retention could not be read.
    #[error("reading retention.ms of topic {topic}: {reason}")]
    Retention {
        /// The topic.
        topic: String,
        /// What went wrong.
        reason: String,
    },
}

/// Deletes `consumer_name`'s rows processed more than `older_than` ago, in batches of
/// `batch_size` (each autocommitted); returns the rows deleted.
///
/// Pass at least the topic's retention ([`topic_retention`]) plus the longest time a
/// consumer group may lag or be reset: a record can only be redelivered while the topic
/// still holds it, so an entry older than that can never see its event again. A replay from
/// a dead-letter topic with longer retention needs its retention too.
pub async fn prune_processed_events(
    connection: &mut mysql_async::Conn,
    consumer_name: &str,
    older_than: Duration,
    batch_size: u32,
) -> Result<u64, PruneError> {
    let seconds = older_than.as_secs_f64();
    let mut deleted = 0;
    loop {
        connection
            .exec_drop(
                format!(
                    "DELETE FROM `{PROCESSED_EVENT_TABLE}` WHERE consumer_name = ? \
                     AND processed_at < NOW(6) - INTERVAL ? SECOND ORDER BY processed_at LIMIT ?"
                ),
                (consumer_name, seconds, batch_size.max(1)),
            )
            .await
            .map_err(|source| PruneError::Database {
                consumer_name: consumer_name.to_owned(),
                source,
            })?;
        let batch = connection.affected_rows();
        deleted += batch;
        if batch < u64::from(batch_size.max(1)) {
            return Ok(deleted);
        }
    }
}

/// The topic's `retention.ms` (`None`: infinite, `-1`), read with an admin request.
pub async fn topic_retention(
    brokers: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Option<Duration>, PruneError> {
    let failure = |reason: String| PruneError::Retention {
        topic: topic.to_owned(),
        reason,
    };
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|error| failure(error.to_string()))?;
    let results = admin
        .describe_configs(
            &[ResourceSpecifier::Topic(topic)],
            &AdminOptions::new().request_timeout(Some(timeout)),
        )
        .await
        .map_err(|error| failure(error.to_string()))?;
    let resource = results
        .into_iter()
        .next()
        .ok_or_else(|| failure("no result".to_owned()))?
        .map_err(|error| failure(error.to_string()))?;
    let value = resource
        .get("retention.ms")
        .and_then(|entry| entry.value.clone())
        .ok_or_else(|| failure("no retention.ms entry".to_owned()))?;
    let millis: i64 = value
        .parse()
        .map_err(|_| failure(format!("retention.ms {value:?} is not a number")))?;
    Ok(u64::try_from(millis).ok().map(Duration::from_millis))
}
