//! The benchmark's raw pull through the reader's own replication connection: the same
//! session and framing as [`crate::BinlogReader`], nothing decoded. Not part of the API
//! (`#[doc(hidden)]`): it exists so `benches/reader.rs` can measure what decoding adds on
//! top of the connection itself, next to the `mysql_async` raw pull.

use std::time::Duration;

use super::replication_connection::{DumpStart, EventBatch, ReadFailure, StreamEnd};
use super::ServerEndpoint;
use crate::decoder::{parse_rotate, EventHeader, HEADER_LEN};
use crate::BinlogError;

/// The pull fails when the server sends nothing for this long.
const RAW_PULL_IDLE_LIMIT: Duration = Duration::from_secs(60);

/// Event type code of ROTATE.
const ROTATE: u8 = 0x04;

/// Streams from `first_file`:4 until an event ends at or after `end_file`:`end_position`
/// and returns how many events arrived.
#[doc(hidden)]
pub async fn pull_raw_events(
    url: &str,
    server_id: u32,
    first_file: &str,
    end_file: &str,
    end_position: u64,
) -> Result<u64, BinlogError> {
    let endpoint = ServerEndpoint::new(url, &crate::TlsOptions::default())?;
    let failed = |error| endpoint.connect_error(error, first_file);
    let mut connection = endpoint.open_replication(first_file).await?;
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
            // The decoder's header and rotate parsers (the rotate's trailing CRC32 is
            // stripped only when it verifies).
            let Some(header) = EventHeader::read(event) else {
                continue;
            };
            if header.event_type_raw() == ROTATE {
                if let Some((_, name)) = parse_rotate(&event[..HEADER_LEN], &event[HEADER_LEN..]) {
                    file = name;
                }
            }
            let log_pos = u64::from(header.log_pos());
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
