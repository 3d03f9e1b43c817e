//! `outbox-relay checkpoint import-debezium`: stores the relay checkpoint equivalent to a
//! Debezium MySQL connector's committed offset, so the relay continues where Debezium
//! stopped (a cutover).
//!
//! # Debezium's offset
//! Kafka Connect stores a source offset under the key `["<connector name>",
//! {"server":"<topic.prefix>"}]` (JSON) in its offsets topic; the MySQL connector's value
//! (`MySqlOffsetContext`) is `{"file", "pos", "gtids", "event", "row", "server_id",
//! "ts_sec", ...}`:
//! * `file`/`pos`: where to restart reading: after the last complete transaction, or,
//!   while Debezium was inside one, at that transaction's start (its BEGIN);
//! * `gtids`: the GTID set of the completed transactions only (the one in progress is not
//!   in it), in the server's syntax;
//! * `event`, `row`: how many events of the transaction in progress Debezium had already
//!   processed, and how many rows of the next one: on a restart Debezium skips them.
//!
//! A standalone Connect worker keeps the same key/value pairs in a file instead
//! (`offset.storage.file.filename`), read by [`crate::connect_offsets_file`].
//!
//! # What the relay stores
//! The checkpoint names the same transaction boundary: the GTID set (which survives a
//! failover, preferred whenever the relay cannot use the file offset) and, on the server
//! the offset was taken on (its `server_id`), the file+position too. The relay never skips
//! inside a transaction (invariant 2): the `event`/`row` skip counts are not applied, so the
//! transaction Debezium had partly sent is read again whole and its first records are sent
//! a second time, with the same ids (duplicates in the overlap, never a gap). An offset
//! taken during Debezium's snapshot is refused: it is not a binlog streaming position.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use outbox_binlog::{BinlogPosition, Flavor, GtidSet};
use outbox_checkpoint::CheckpointPosition;

/// A Debezium MySQL connector's source offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebeziumOffset {
    /// `file`: the binlog file to restart in.
    pub file: Option<String>,
    /// `pos`: the offset in `file`.
    pub pos: Option<u64>,
    /// `gtids`: the completed transactions (server syntax), when GTIDs are on.
    pub gtids: Option<String>,
    /// `event`: events of the transaction in progress already processed.
    pub events_to_skip: u64,
    /// `row`: rows of the next event already processed.
    pub rows_to_skip: u64,
    /// `server_id`: the server the binlog events came from.
    pub server_id: Option<u32>,
    /// `snapshot` without `snapshot_completed`: Debezium was still snapshotting.
    pub in_snapshot: bool,
}

fn as_u64(value: &serde_json::Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|text| text.trim().parse().ok()))
}

fn as_bool(value: Option<&serde_json::Value>) -> bool {
    match value {
        Some(serde_json::Value::Bool(flag)) => *flag,
        Some(serde_json::Value::String(text)) => text == "true",
        _ => false,
    }
}

/// Parses the offset value JSON Debezium's MySQL connector writes.
pub fn parse_offset(text: &str) -> anyhow::Result<DebeziumOffset> {
    let value: serde_json::Value =
        serde_json::from_str(text).context("the Debezium offset is not JSON")?;
    let object = value
        .as_object()
        .context("the Debezium offset is not a JSON object")?;
    let number = |key: &str| -> anyhow::Result<Option<u64>> {
        match object.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(value) => as_u64(value)
                .map(Some)
                .with_context(|| format!("`{key}` = {value} is not a non-negative number")),
        }
    };
    let offset = DebeziumOffset {
        file: object
            .get("file")
            .and_then(|v| v.as_str())
            .filter(|file| !file.is_empty())
            .map(str::to_owned),
        pos: number("pos")?,
        gtids: object
            .get("gtids")
            .and_then(|v| v.as_str())
            .map(|gtids| gtids.replace(['\n', '\r'], ""))
            .filter(|gtids| !gtids.trim().is_empty()),
        events_to_skip: number("event")?.unwrap_or(0),
        rows_to_skip: number("row")?.unwrap_or(0),
        server_id: number("server_id")?
            .map(|id| u32::try_from(id).context("`server_id` does not fit 32 bits"))
            .transpose()?,
        in_snapshot: as_bool(object.get("snapshot")) && !as_bool(object.get("snapshot_completed")),
    };
    if offset.file.is_none() && offset.gtids.is_none() {
        bail!("the Debezium offset has neither `file` nor `gtids`: {text}");
    }
    Ok(offset)
}

/// Whether an offsets-topic key (`["<connector>",{"server":"<prefix>"}]`) belongs to
/// `connector` (and to `server`, the connector's `topic.prefix`, when given).
pub fn key_matches(key: &[u8], connector: &str, server: Option<&str>) -> bool {
    let Ok(serde_json::Value::Array(parts)) = serde_json::from_slice::<serde_json::Value>(key)
    else {
        return false;
    };
    match parts.as_slice() {
        [serde_json::Value::String(name), partition] if name == connector => server
            .is_none_or(|server| partition.get("server").and_then(|s| s.as_str()) == Some(server)),
        _ => false,
    }
}

/// The newest offset of `connector` among offsets-topic records in topic order (later
/// records replace earlier ones; a null value, a reset, removes it).
pub fn newest_offset<'a>(
    records: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    connector: &str,
    server: Option<&str>,
) -> Option<String> {
    let mut newest = None;
    for (key, value) in records {
        if key_matches(key, connector, server) {
            newest = value.map(|v| String::from_utf8_lossy(v).into_owned());
        }
    }
    newest
}

/// What the import stores, and what the operator must be told.
#[derive(Debug)]
pub struct ImportedPosition {
    /// The checkpoint position.
    pub position: CheckpointPosition,
    /// Lines for stderr (the skip counts and what happens to them).
    pub notes: Vec<String>,
}

/// The checkpoint position for `offset` read from the server `flavor`/`server_id` the relay
/// is configured for. `gtid_only` is the relay's GTID-only marker position.
pub fn checkpoint_position(
    offset: &DebeziumOffset,
    flavor: Flavor,
    server_id: u32,
    gtid_only: BinlogPosition,
) -> anyhow::Result<ImportedPosition> {
    if offset.in_snapshot {
        bail!("the Debezium offset was taken during its snapshot (`snapshot` is true, `snapshot_completed` is not): it is no binlog streaming position; let Debezium finish its snapshot and stream first");
    }
    let gtid_set = match &offset.gtids {
        Some(text) => GtidSet::parse(flavor, text)
            .with_context(|| format!("Debezium's `gtids` `{text}` for a {flavor} server"))?,
        None => GtidSet::Empty,
    };
    let same_server = offset.server_id.is_none_or(|id| id == server_id);
    let mut notes = Vec::new();
    let binlog = match (&offset.file, offset.pos, same_server) {
        (Some(file), Some(pos), true) => BinlogPosition::new(file.clone(), pos.max(4)),
        (Some(file), _, false) if !gtid_set.is_empty() => {
            notes.push(format!("the offset was taken on server_id {} (the source now is {server_id}): its file offset {file} is not used, the relay resumes by GTID set", offset.server_id.unwrap_or_default()));
            gtid_only
        }
        (Some(file), _, false) => bail!(
            "the offset was taken on server_id {} but the source is server_id {server_id}, and it has no GTID set: {file} means nothing on this server",
            offset.server_id.unwrap_or_default()
        ),
        (Some(file), None, true) => bail!("the Debezium offset names file {file} but no `pos`"),
        (None, _, _) => gtid_only,
    };
    if offset.events_to_skip > 0 || offset.rows_to_skip > 0 {
        notes.push(format!(
            "Debezium stopped inside a transaction: it had processed {} event(s) and {} row(s) of the next one after {}; the relay never resumes inside a transaction, so it reads that transaction again whole and sends the records Debezium already sent a second time, with the same ids (duplicates in the overlap, nothing skipped)",
            offset.events_to_skip,
            offset.rows_to_skip,
            offset
                .file
                .as_ref()
                .map_or_else(|| "its GTID set".to_owned(), |file| format!("{file}:{}", offset.pos.unwrap_or(4))),
        ));
    }
    Ok(ImportedPosition {
        position: CheckpointPosition {
            binlog,
            gtid: None,
            gtid_set,
            timestamp: 0,
        },
        notes,
    })
}

/// Reads Kafka Connect's offsets topic to its end and returns the newest offset of
/// `connector` (`server`: its `topic.prefix`, to tell apart a name reused).
pub async fn read_offsets_topic(
    kafka: &crate::config::KafkaConfig,
    topic: &str,
    connector: &str,
    server: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<Option<String>> {
    let config = crate::dead_letter::consumer_config(kafka);
    let (topic, connector, server) = (
        topic.to_owned(),
        connector.to_owned(),
        server.map(str::to_owned),
    );
    tokio::task::spawn_blocking(move || {
        read_offsets_blocking(config, &topic, &connector, server.as_deref(), timeout)
    })
    .await
    .context("the offsets-topic reader panicked")?
}

fn read_offsets_blocking(
    config: rdkafka::ClientConfig,
    topic: &str,
    connector: &str,
    server: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<Option<String>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Message, Offset, TopicPartitionList};
    let started = Instant::now();
    let consumer: BaseConsumer = config.create().context("creating a Kafka consumer")?;
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .with_context(|| format!("reading the metadata of `{topic}`"))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        bail!("the offsets topic `{topic}` does not exist (Kafka Connect's offset.storage.topic)");
    }
    // Offsets of one connector live in one partition (keyed); read every one to its end.
    let mut remaining: BTreeMap<i32, i64> = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, timeout)
            .with_context(|| format!("reading the watermarks of `{topic}`"))?;
        if high > low {
            remaining.insert(partition, high);
            assignment
                .add_partition_offset(topic, partition, Offset::Offset(low))
                .context("assigning the offsets topic")?;
        }
    }
    let mut records: Vec<(i32, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    if remaining.is_empty() {
        return Ok(None);
    }
    consumer
        .assign(&assignment)
        .context("assigning the offsets topic")?;
    while !remaining.is_empty() {
        if started.elapsed() > timeout {
            bail!("reading `{topic}` to its end took longer than {timeout:?}");
        }
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.with_context(|| format!("reading `{topic}`"))?;
        if let Some(key) = message.key() {
            records.push((
                message.partition(),
                key.to_vec(),
                message.payload().map(<[u8]>::to_vec),
            ));
        }
        if remaining
            .get(&message.partition())
            .is_some_and(|high| message.offset() + 1 >= *high)
        {
            remaining.remove(&message.partition());
        }
    }
    Ok(newest_offset(
        records
            .iter()
            .map(|(_, key, value)| (key.as_slice(), value.as_deref())),
        connector,
        server,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streaming offset as MySqlOffsetContext writes it, inside a transaction.
    const IN_TRANSACTION: &str = r#"{"transaction_id":null,"ts_sec":1764700000,"file":"mysql-bin.000003","pos":1547,"gtids":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-41","row":1,"server_id":223344,"event":2}"#;

    fn gtid_only() -> BinlogPosition {
        BinlogPosition::new("", 4)
    }

    #[test]
    fn a_streaming_offset_becomes_its_transaction_boundary_with_the_gtid_set() {
        let offset = parse_offset(IN_TRANSACTION).unwrap();
        assert_eq!(offset.file.as_deref(), Some("mysql-bin.000003"));
        assert_eq!(
            (offset.pos, offset.events_to_skip, offset.rows_to_skip),
            (Some(1547), 2, 1)
        );
        let imported = checkpoint_position(&offset, Flavor::Mysql, 223344, gtid_only()).unwrap();
        assert_eq!(
            imported.position.binlog,
            BinlogPosition::new("mysql-bin.000003", 1547)
        );
        assert_eq!(
            imported.position.gtid_set.to_string(),
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-41"
        );
        assert!(
            imported
                .notes
                .iter()
                .any(|note| note.contains("2 event(s) and 1 row(s)")
                    && note.contains("a second time, with the same ids")),
            "{:?}",
            imported.notes
        );
        // Another server: GTID-only.
        let imported = checkpoint_position(&offset, Flavor::Mysql, 1, gtid_only()).unwrap();
        assert_eq!(imported.position.binlog, gtid_only());
    }

    #[test]
    fn offsets_without_gtids_or_during_a_snapshot() {
        // No GTIDs (and numbers as strings, which Connect's JSON may carry).
        let offset =
            parse_offset(r#"{"file":"binlog.000002","pos":"4567","server_id":1}"#).unwrap();
        let imported = checkpoint_position(&offset, Flavor::Mariadb, 1, gtid_only()).unwrap();
        assert_eq!(
            imported.position.binlog,
            BinlogPosition::new("binlog.000002", 4567)
        );
        assert!(imported.position.gtid_set.is_empty());
        assert!(imported.notes.is_empty());
        let error = checkpoint_position(&offset, Flavor::Mariadb, 2, gtid_only())
            .unwrap_err()
            .to_string();
        assert!(error.contains("no GTID set"), "{error}");
        let snapshot = parse_offset(r#"{"file":"binlog.000002","pos":4,"snapshot":true}"#).unwrap();
        let error = checkpoint_position(&snapshot, Flavor::Mariadb, 1, gtid_only())
            .unwrap_err()
            .to_string();
        assert!(error.contains("snapshot"), "{error}");
        let done = parse_offset(
            r#"{"file":"binlog.000002","pos":4,"snapshot":true,"snapshot_completed":true}"#,
        )
        .unwrap();
        assert!(checkpoint_position(&done, Flavor::Mariadb, 1, gtid_only()).is_ok());
        assert!(parse_offset(r#"{"ts_sec":1}"#).is_err());
        assert!(parse_offset(r#"{"file":"b.000001","pos":-3}"#).is_err());
    }

    #[test]
    fn the_newest_offset_of_the_connector_wins_and_a_reset_removes_it() {
        let key = br#"["orders",{"server":"dbserver1"}]"#.as_slice();
        let other = br#"["billing",{"server":"dbserver1"}]"#.as_slice();
        let renamed = br#"["orders",{"server":"other"}]"#.as_slice();
        let records: Vec<(&[u8], Option<&[u8]>)> = vec![
            (key, Some(br#"{"file":"b.000001","pos":100}"#.as_slice())),
            (other, Some(br#"{"file":"b.000001","pos":999}"#.as_slice())),
            (key, Some(br#"{"file":"b.000001","pos":200}"#.as_slice())),
            (
                renamed,
                Some(br#"{"file":"b.000001","pos":300}"#.as_slice()),
            ),
        ];
        assert_eq!(
            newest_offset(records.clone(), "orders", Some("dbserver1")).as_deref(),
            Some(r#"{"file":"b.000001","pos":200}"#)
        );
        assert_eq!(
            newest_offset(records.clone(), "orders", None).as_deref(),
            Some(r#"{"file":"b.000001","pos":300}"#)
        );
        let mut reset = records;
        reset.push((key, None));
        assert_eq!(newest_offset(reset, "orders", Some("dbserver1")), None);
        assert!(!key_matches(b"not json", "orders", None));
    }
}
