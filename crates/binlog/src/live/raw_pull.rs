//! The benchmark's raw pull through the reader's own replication connection: the same
//! session and framing as [`crate::BinlogReader`], nothing decoded. Not part of the API
//! (`#[doc(hidden)]`): it exists so `benches/reader.rs` can measure what decoding adds on
//! top of the connection itself, next to the `mysql_async` raw pull.

use std::time::Duration;

use super::replication_connection::{
    DumpStart, EventBatch, ReadFailure, ReplicationConnection, StreamEnd,
};
use super::ServerEndpoint;
use crate::BinlogError;

/// The pull fails when the server sends nothing for this long.
const RAW_PULL_IDLE_LIMIT: Duration = Duration::from_secs(60);

/// Event type code of ROTATE.
const ROTATE: u8 = 0x04;

/// Streams from `first_file`:4 until an event ends at or after `end_file`:`end_position`
/// and returns how many events arrived. The server must log with `binlog_checksum=CRC32`
/// (its default): rotate events are read as name + checksum.
#[doc(hidden)]
pub async fn pull_raw_events(
    url: &str,
    server_id: u32,
    first_file: &str,
    end_file: &str,
    end_position: u64,
) -> Result<u64, BinlogError> {
    let endpoint = ServerEndpoint::from_url(url)?;
    let failed = |error| endpoint.connect_error(error, first_file);
    let mut connection = ReplicationConnection::open(&endpoint.opts)
        .await
        .map_err(failed)?;
    for statement in [
        "SET @master_binlog_checksum='ALL'",
        "SET @mariadb_slave_capability=4",
    ] {
        connection.execute(statement).await.map_err(failed)?;
    }
    connection
        .request_dump(
            server_id,
            DumpStart::Position {
                file: first_file,
                position: 4,
            },
        )
        .await
        .map_err(failed)?;
    let mut batch = EventBatch::default();
    let mut file = first_file.to_owned();
    let mut events = 0_u64;
    loop {
        let end = match connection.read_batch(&mut batch, RAW_PULL_IDLE_LIMIT).await {
            Ok(end) => end,
            Err(ReadFailure::Connection(error)) => return Err(failed(error)),
            Err(ReadFailure::Idle) => {
                return Err(BinlogError::IdleTimeout {
                    server: endpoint.address.clone(),
                    position: file,
                    waited: RAW_PULL_IDLE_LIMIT,
                })
            }
        };
        for index in 0..batch.len() {
            let Some(event) = batch.get(index) else {
                break;
            };
            events += 1;
            let (Some(&event_type), Some(log_pos)) = (event.get(4), event.get(13..17)) else {
                continue;
            };
            if event_type == ROTATE {
                // Body: 8-byte position, then the name, then the 4-byte checksum.
                let name = event.get(27..event.len().saturating_sub(4)).unwrap_or(&[]);
                file = String::from_utf8_lossy(name)
                    .chars()
                    .take_while(char::is_ascii_graphic)
                    .collect();
            }
            let log_pos = u64::from(u32::from_le_bytes([
                log_pos[0], log_pos[1], log_pos[2], log_pos[3],
            ]));
            if file == end_file && log_pos >= end_position {
                return Ok(events);
            }
        }
        match end {
            None => {}
            Some(StreamEnd::Ended) => {
                return Err(BinlogError::StreamLost {
                    server: endpoint.address.clone(),
                    position: file,
                    message: "the server ended the stream before the end position".into(),
                })
            }
            Some(StreamEnd::Failed(error)) => return Err(failed(error)),
        }
    }
}
