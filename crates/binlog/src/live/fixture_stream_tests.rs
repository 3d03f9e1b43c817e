//! MySQL's side of the live path, without a MySQL server: a fake server that speaks MySQL
//! 8's handshake (`caching_sha2_password`, fast path), takes the session's `SET`s,
//! COM_REGISTER_SLAVE and a COM_BINLOG_DUMP_GTID, then streams the events of a real MySQL
//! binlog file from `shared/fixtures/binlogs` as dump packets, after the artificial ROTATE a
//! server sends first. The replication connection and the decoder must yield exactly what
//! the file reader yields for the same file (compressed transactions, GTIDs, JSON, ENUM/SET).

use std::collections::VecDeque;
use std::path::PathBuf;

use super::fake_server::{fake_server, OK};
use super::replication_connection::{
    ConnectSecurity, DumpStart, EventBatch, ReplicationConnection, StreamEnd,
};
use super::start::mysql_sids;
use crate::decoder::{Decoder, PushOutcome};
use crate::{BinlogFileReader, Flavor, GtidSet, StreamItem, TableFilter};

/// COM_QUERY, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID.
const COM_QUERY: u8 = 0x03;
const COM_REGISTER_SLAVE: u8 = 0x15;
const COM_BINLOG_DUMP_GTID: u8 = 0x1e;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/binlogs"
    ))
    .join(name)
}

/// The file's events (after the 4 magic bytes), each as its bytes.
fn events_of(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut events = Vec::new();
    let mut offset = 4;
    while offset + 19 <= bytes.len() {
        let size = u32::from_le_bytes(bytes[offset + 9..offset + 13].try_into().unwrap()) as usize;
        events.push(bytes[offset..offset + size].to_vec());
        offset += size;
    }
    assert_eq!(offset, bytes.len(), "the fixture ends at an event boundary");
    events
}

/// The artificial ROTATE a server sends before anything else (log_pos 0), with a CRC32.
fn artificial_rotate(file: &str) -> Vec<u8> {
    let size = 19 + 8 + file.len() + 4;
    let mut event = Vec::with_capacity(size);
    event.extend_from_slice(&0_u32.to_le_bytes()); // timestamp
    event.push(0x04); // ROTATE
    event.extend_from_slice(&1_u32.to_le_bytes()); // server id
    event.extend_from_slice(&(size as u32).to_le_bytes());
    event.extend_from_slice(&0_u32.to_le_bytes()); // log_pos: artificial
    event.extend_from_slice(&0x20_u16.to_le_bytes()); // LOG_EVENT_ARTIFICIAL_F
    event.extend_from_slice(&4_u64.to_le_bytes());
    event.extend_from_slice(file.as_bytes());
    let crc = crc32fast::hash(&event);
    event.extend_from_slice(&crc.to_le_bytes());
    event
}

/// Streams `name` through a fake MySQL 8 server and the live path; returns the items.
async fn stream_through_fake_mysql(name: &str, events: Vec<Vec<u8>>) -> Vec<StreamItem> {
    let file = name.to_owned();
    let (url, server) = fake_server(move |mut server| async move {
        server.greet("8.0.32", "caching_sha2_password").await;
        let _response = server.receive(1).await;
        server.send(2, &[0x01, 0x03]).await; // fast authentication succeeded
        server.send(3, OK).await;
        let mut command = server.receive(0).await;
        while command[0] == COM_QUERY {
            server.send(1, OK).await;
            command = server.receive(0).await;
        }
        assert_eq!(command[0], COM_REGISTER_SLAVE);
        assert_eq!(&command[1..5], &4242_u32.to_le_bytes(), "our server_id");
        server.send(1, OK).await;
        let dump = server.receive(0).await;
        assert_eq!(dump[0], COM_BINLOG_DUMP_GTID);
        // The SID's 16 UUID bytes are in the request.
        let uuid = [
            0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
            0x95, 0x62,
        ];
        assert!(dump.windows(16).any(|window| window == uuid), "{dump:?}");
        let mut sequence = 1_u8;
        let mut stream = vec![artificial_rotate(&file)];
        stream.extend(events);
        for event in stream {
            let mut payload = vec![0x00];
            payload.extend_from_slice(&event);
            server.send(sequence, &payload).await;
            sequence = sequence.wrapping_add(1);
        }
        server.send(sequence, &[0xFE, 0, 0, 2, 0]).await; // EOF: end of the stream
    })
    .await;

    let opts = mysql_async::Opts::from_url(&url).unwrap();
    let mut connection = ReplicationConnection::open(&opts, &ConnectSecurity::default())
        .await
        .unwrap();
    connection
        .execute("SET @master_binlog_checksum='ALL'")
        .await
        .unwrap();
    let set = GtidSet::parse(Flavor::Mysql, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5").unwrap();
    connection
        .request_dump(4242, DumpStart::MysqlGtid(mysql_sids(&set).unwrap()))
        .await
        .unwrap();
    let mut decoder =
        Decoder::new(TableFilter::all(), String::new()).with_positional_column_names();
    let mut items = VecDeque::new();
    let mut batch = EventBatch::default();
    loop {
        let end = connection
            .read_batch(&mut batch, std::time::Duration::from_secs(10))
            .await
            .unwrap();
        for index in 0..batch.len() {
            let event = batch.get(index).unwrap();
            assert_eq!(
                decoder.push(event, &mut items).unwrap(),
                PushOutcome::Consumed
            );
        }
        match end {
            None => {}
            Some(StreamEnd::Ended) => break,
            Some(StreamEnd::Failed(error)) => panic!("{error}"),
        }
    }
    server.await.unwrap();
    items.into()
}

#[tokio::test]
async fn mysql_fixtures_streamed_through_the_replication_connection_decode_like_the_file() {
    for name in [
        "transaction_compression.000001",
        "mysql-enum-string-set.000001",
        "json-opaque.binlog",
        "minimal_row_metadata.000001",
    ] {
        let path = fixture(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (shared/ next to the repository?)", path.display())
        });
        let mut from_file = Vec::new();
        let mut reader = BinlogFileReader::open(vec![path], TableFilter::all()).unwrap();
        while let Some(item) = reader.next_item().unwrap() {
            from_file.push(item);
        }
        let live = stream_through_fake_mysql(name, events_of(&bytes)).await;
        assert!(
            from_file
                .iter()
                .any(|item| matches!(item, StreamItem::Commit(_))),
            "{name}: the file holds a transaction"
        );
        assert_eq!(
            format!("{live:#?}"),
            format!("{from_file:#?}"),
            "{name}: the live path yields what the file reader yields"
        );
    }
}
