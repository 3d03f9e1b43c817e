//! Decoder tests on synthetic events (the fixture and server tests live in `tests/`).

use mysql_common::proto::MySerialize;
use std::collections::VecDeque;

use mysql_common::binlog::consts::TransactionPayloadCompressionType;
use mysql_common::binlog::events::{BinlogEventFooter, TransactionPayloadEvent};

use super::*;

/// Builds an event from its parts (no checksum: before a format description events carry
/// none).
fn event(event_type: u8, log_pos: u32, body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&1_700_000_000u32.to_le_bytes());
    bytes.push(event_type);
    bytes.extend_from_slice(&7u32.to_le_bytes());
    bytes.extend_from_slice(&((19 + body.len()) as u32).to_le_bytes());
    bytes.extend_from_slice(&log_pos.to_le_bytes());
    bytes.extend_from_slice(&0u16.to_le_bytes());
    bytes.extend_from_slice(body);
    bytes
}

fn query_body(query: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&1u32.to_le_bytes()); // thread id
    body.extend_from_slice(&0u32.to_le_bytes()); // execution time
    body.push(4); // schema length
    body.extend_from_slice(&0u16.to_le_bytes()); // error code
    body.extend_from_slice(&0u16.to_le_bytes()); // status vars length
    body.extend_from_slice(b"shop\0");
    body.extend_from_slice(query.as_bytes());
    body
}

fn mariadb_gtid_body(sequence: u64, domain: u32, flags: u8) -> Vec<u8> {
    let mut body = sequence.to_le_bytes().to_vec();
    body.extend_from_slice(&domain.to_le_bytes());
    body.push(flags);
    body.extend_from_slice(&[0u8; 6]);
    body
}

fn push_all(decoder: &mut Decoder, events: &[Vec<u8>]) -> Result<Vec<StreamItem>, BinlogError> {
    let mut out = VecDeque::new();
    for event in events {
        assert_eq!(decoder.push(event, &mut out)?, PushOutcome::Consumed);
    }
    Ok(out.into_iter().collect())
}

#[test]
fn artificial_rotate_with_trailing_checksum_yields_the_clean_name() {
    // The first rotate of a dump arrives before the format description, so the client cannot
    // strip its CRC32: the 4 checksum bytes end up after the name (mysql_async issue #189).
    let mut body = 4u64.to_le_bytes().to_vec();
    body.extend_from_slice(b"mariadb-bin.000007");
    let mut header = Vec::new();
    header.extend_from_slice(&0u32.to_le_bytes());
    header.push(code::ROTATE);
    header.extend_from_slice(&7u32.to_le_bytes());
    header.extend_from_slice(&((19 + body.len() + 4) as u32).to_le_bytes());
    header.extend_from_slice(&0u32.to_le_bytes());
    header.extend_from_slice(&0x20u16.to_le_bytes());
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header);
    hasher.update(&body);
    let crc = hasher.finalize();
    let mut bytes = header;
    bytes.extend_from_slice(&body);
    bytes.extend_from_slice(&crc.to_le_bytes());
    let header = EventHeader::read(&bytes).unwrap();
    let view = RawEvent::new(&bytes, header, BinlogEventFooter::default()).unwrap();
    assert_eq!(
        view.data().len(),
        8 + 18 + 4,
        "the CRC is still in the data"
    );
    let rotate = bytes.clone();

    let mut decoder = Decoder::new(TableFilter::all(), String::new());
    push_all(&mut decoder, &[rotate]).unwrap();
    assert_eq!(decoder.current_file(), "mariadb-bin.000007");
    assert!(!decoder.in_transaction());

    // Garbage that is not a valid CRC is cut at the first unprintable byte.
    let mut body = 4u64.to_le_bytes().to_vec();
    body.extend_from_slice(b"binlog.000002\x00\xff\x13");
    let mut decoder = Decoder::new(TableFilter::all(), String::new());
    push_all(&mut decoder, &[event(code::ROTATE, 0, &body)]).unwrap();
    assert_eq!(decoder.current_file(), "binlog.000002");
}

#[test]
fn mariadb_groups_commit_at_their_last_event() {
    let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
    let items = push_all(
        &mut decoder,
        &[
            // Standalone DDL: GTID with FL_STANDALONE, then the statement ends the group.
            event(code::MARIADB_GTID, 400, &mariadb_gtid_body(5, 0, 1)),
            event(code::QUERY, 500, &query_body("CREATE TABLE t (a INT)")),
            // A transaction: GTID (acts as BEGIN), then XID.
            event(code::MARIADB_GTID, 600, &mariadb_gtid_body(6, 0, 0)),
            event(code::HEARTBEAT, 600, b"binlog.000001"),
            event(code::XID, 700, &9u64.to_le_bytes()),
            event(code::HEARTBEAT, 700, b"binlog.000001"),
        ],
    )
    .unwrap();
    let gtid = |sequence| Gtid::Mariadb {
        domain_id: 0,
        server_id: 7,
        sequence,
    };
    assert_eq!(
        items,
        vec![
            StreamItem::Commit(Commit {
                position: BinlogPosition::new("binlog.000001", 500),
                gtid: Some(gtid(5)),
                timestamp: 1_700_000_000,
                row_count: 0,
                xa: None,
            }),
            StreamItem::Commit(Commit {
                position: BinlogPosition::new("binlog.000001", 700),
                gtid: Some(gtid(6)),
                timestamp: 1_700_000_000,
                row_count: 0,
                xa: None,
            }),
            StreamItem::Heartbeat(Heartbeat {
                position: BinlogPosition::new("binlog.000001", 700),
            }),
        ]
    );
    assert_eq!(
        decoder.last_boundary(),
        (BinlogPosition::new("binlog.000001", 700), Some(gtid(6)))
    );
}

#[test]
fn non_transactional_begin_commit_queries_form_one_group() {
    let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
    let items = push_all(
        &mut decoder,
        &[
            event(code::QUERY, 300, &query_body("BEGIN")),
            event(code::QUERY, 350, &query_body("SAVEPOINT a")),
            event(code::QUERY, 380, &query_body("ROLLBACK TO a")),
        ],
    )
    .unwrap();
    assert!(items.is_empty());
    assert!(decoder.in_transaction());
    let items = push_all(
        &mut decoder,
        &[event(code::QUERY, 400, &query_body("COMMIT"))],
    )
    .unwrap();
    assert!(matches!(&items[..], [StreamItem::Commit(c)] if c.position.position == 400));
    assert!(!decoder.in_transaction());
}

#[test]
fn a_new_transaction_inside_an_open_one_is_an_error() {
    let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
    let error = push_all(
        &mut decoder,
        &[
            event(code::MARIADB_GTID, 400, &mariadb_gtid_body(5, 0, 0)),
            event(code::MARIADB_GTID, 500, &mariadb_gtid_body(6, 0, 0)),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(error, BinlogError::BrokenTransaction { .. }),
        "{error}"
    );
}

#[test]
fn row_carrying_events_that_cannot_be_decoded_are_errors() {
    for event_type in [
        code::MARIADB_WRITE_ROWS_COMPRESSED_V1,
        code::MARIADB_DELETE_ROWS_COMPRESSED,
        code::PRE_GA_WRITE_ROWS,
        code::EXECUTE_LOAD_QUERY,
    ] {
        let mut decoder = Decoder::new(TableFilter::all(), "binlog.000003".into());
        let error = push_all(&mut decoder, &[event(event_type, 1000, &[0u8; 12])]).unwrap_err();
        match error {
            BinlogError::UnsupportedEvent {
                event_type: reported,
                position,
                ..
            } => {
                assert_eq!(reported, event_type);
                assert_eq!(position, BinlogPosition::new("binlog.000003", 1000 - 31));
            }
            other => panic!("unexpected {other}"),
        }
    }
    let mut decoder = Decoder::new(TableFilter::all(), "binlog.000003".into());
    let error = push_all(&mut decoder, &[event(0x77, 1000, &[])]).unwrap_err();
    assert!(matches!(
        error,
        BinlogError::UnknownEvent {
            event_type: 0x77,
            ..
        }
    ));
}

#[test]
fn rows_of_unmapped_tables_are_errors_not_skips() {
    let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
    let mut body = 42u64.to_le_bytes()[..6].to_vec();
    body.extend_from_slice(&[1, 0, 1, 1, 0]);
    let error = push_all(&mut decoder, &[event(code::WRITE_ROWS_V1, 900, &body)]).unwrap_err();
    assert!(error.to_string().contains("table id 42"), "{error}");
}

#[test]
fn queries_are_classified() {
    assert_eq!(classify_query(b"BEGIN"), QueryKind::Begin);
    assert_eq!(classify_query(b"  /* x */ begin"), QueryKind::Begin);
    assert_eq!(classify_query(b"COMMIT"), QueryKind::Commit);
    assert_eq!(classify_query(b"ROLLBACK"), QueryKind::Commit);
    assert_eq!(classify_query(b"ROLLBACK TO sp1"), QueryKind::InTransaction);
    assert_eq!(classify_query(b"XA PREPARE 'x'"), QueryKind::Commit);
    assert_eq!(
        classify_query(b"# comment\nALTER TABLE t ADD c INT"),
        QueryKind::Statement { ddl: true }
    );
    assert_eq!(
        classify_query(b"BEGINNING"),
        QueryKind::Statement { ddl: false }
    );
}

/// A TABLE_MAP body for `shop.<table>` with columns INT and VARCHAR(10) utf8mb4, without
/// column names (binlog_row_metadata=MINIMAL).
fn table_map_body(table_id: u64, table: &str) -> Vec<u8> {
    let mut body = table_id.to_le_bytes()[..6].to_vec();
    body.extend_from_slice(&[0, 0]);
    body.push(4);
    body.extend_from_slice(b"shop\0");
    body.push(table.len() as u8);
    body.extend_from_slice(table.as_bytes());
    body.push(0);
    body.push(2); // columns
    body.extend_from_slice(&[3, 15]); // LONG, VARCHAR
    body.extend_from_slice(&[2, 10, 0]); // metadata: VARCHAR max length 10
    body.push(0b10); // nullable bitmap
    body.extend_from_slice(&[1, 1, 0]); // SIGNEDNESS: signed
    body.extend_from_slice(&[2, 1, 45]); // DEFAULT_CHARSET utf8mb4_general_ci
    body
}

/// A WRITE_ROWS_V1 body with one row `(id, text)`.
fn write_rows_body(table_id: u64, id: i32, text: &str) -> Vec<u8> {
    let mut body = table_id.to_le_bytes()[..6].to_vec();
    body.extend_from_slice(&1u16.to_le_bytes()); // STMT_END_F
    body.push(2);
    body.push(0b11);
    body.push(0); // NULL bitmap
    body.extend_from_slice(&id.to_le_bytes());
    body.push(text.len() as u8);
    body.extend_from_slice(text.as_bytes());
    body
}

#[test]
fn minimal_metadata_asks_for_names_and_ddl_makes_it_ask_again() {
    let outbox = TableName::new("shop", "outbox");
    let mut decoder = Decoder::new(TableFilter::tables([outbox.clone()]), "b.000001".into());
    let mut out = VecDeque::new();
    let map = event(code::TABLE_MAP, 200, &table_map_body(7, "outbox"));
    decoder
        .push(
            &event(code::MARIADB_GTID, 100, &mariadb_gtid_body(1, 0, 0)),
            &mut out,
        )
        .unwrap();
    assert_eq!(
        decoder.push(&map, &mut out).unwrap(),
        PushOutcome::NeedColumnNames(outbox.clone())
    );
    decoder.set_column_names(&outbox, vec!["id".into(), "body".into()]);
    assert_eq!(decoder.push(&map, &mut out).unwrap(), PushOutcome::Consumed);
    let rows = event(code::WRITE_ROWS_V1, 260, &write_rows_body(7, -5, "héllo"));
    decoder.push(&rows, &mut out).unwrap();
    decoder
        .push(&event(code::XID, 300, &1u64.to_le_bytes()), &mut out)
        .unwrap();
    match out.pop_front() {
        Some(StreamItem::Row(change)) => {
            let after = change.after.unwrap();
            assert_eq!(after.get("id"), Some(&crate::Value::Int(-5)));
            assert_eq!(after.get("body"), Some(&crate::Value::Text("héllo".into())));
            assert_eq!(
                change.event_position,
                BinlogPosition::new("b.000001", 260 - 41)
            );
        }
        other => panic!("expected a row, got {other:?}"),
    }
    assert!(matches!(out.pop_front(), Some(StreamItem::Commit(c)) if c.row_count == 1));

    // DDL on the table: the cached names are forgotten and looked up again.
    decoder
        .push(
            &event(
                code::QUERY,
                400,
                &query_body("ALTER TABLE `outbox` ADD x INT"),
            ),
            &mut out,
        )
        .unwrap();
    assert!(matches!(out.pop_front(), Some(StreamItem::Commit(c)) if c.position.position == 400));
    decoder
        .push(
            &event(code::MARIADB_GTID, 450, &mariadb_gtid_body(3, 0, 0)),
            &mut out,
        )
        .unwrap();
    let map = event(code::TABLE_MAP, 550, &table_map_body(7, "outbox"));
    assert_eq!(
        decoder.push(&map, &mut out).unwrap(),
        PushOutcome::NeedColumnNames(outbox.clone())
    );
    // Names that do not match the binlog's column count are a definite error.
    decoder.set_column_names(&outbox, vec!["id".into(), "body".into(), "x".into()]);
    let error = decoder.push(&map, &mut out).unwrap_err();
    assert!(
        matches!(error, BinlogError::RowImageMismatch { .. }),
        "{error}"
    );
}

#[test]
fn rows_of_unwatched_tables_are_skipped_without_decoding() {
    let mut decoder = Decoder::new(
        TableFilter::tables([TableName::new("shop", "outbox")]),
        "b.000001".into(),
    );
    let mut body = write_rows_body(9, 1, "x");
    body.truncate(body.len() - 3); // a row image that would not decode
    let items = push_all(
        &mut decoder,
        &[
            event(code::MARIADB_GTID, 100, &mariadb_gtid_body(1, 0, 0)),
            event(code::TABLE_MAP, 200, &table_map_body(9, "orders")),
            event(code::WRITE_ROWS_V1, 260, &body),
            event(code::XID, 300, &1u64.to_le_bytes()),
        ],
    )
    .unwrap();
    assert!(matches!(&items[..], [StreamItem::Commit(c)] if c.row_count == 0));
}

/// An inner event of a compressed transaction: no checksum, no log position.
fn inner_event(event_type: u8, body: &[u8]) -> Vec<u8> {
    event(event_type, 0, body)
}

/// A TRANSACTION_PAYLOAD event ending at `log_pos` that holds `inner` (the inner events'
/// bytes, concatenated) uncompressed: the same framing and inner decoding as a zstd payload
/// without a zstd encoder in the unit tests (the fixture tests read a real zstd one).
fn payload_event(log_pos: u32, inner: &[u8]) -> Vec<u8> {
    let payload = TransactionPayloadEvent::new(
        inner.len() as u64,
        TransactionPayloadCompressionType::NONE,
        inner.len() as u64,
        inner,
    );
    let mut body = Vec::new();
    payload.serialize(&mut body);
    event(code::TRANSACTION_PAYLOAD, log_pos, &body)
}

#[test]
fn compressed_transactions_commit_at_the_payload_end_and_must_be_complete() {
    let mut decoder = Decoder::new(TableFilter::all(), "b.000001".into());
    let inner = [
        inner_event(code::QUERY, &query_body("BEGIN")),
        inner_event(code::XID, &1u64.to_le_bytes()),
    ]
    .concat();
    let items = push_all(
        &mut decoder,
        &[
            event(code::ANONYMOUS_GTID, 200, &[0u8; 42]),
            payload_event(500, &inner),
        ],
    )
    .unwrap();
    assert!(
        matches!(&items[..], [StreamItem::Commit(c)] if c.position.position == 500),
        "{items:?}"
    );
    assert!(!decoder.in_transaction());

    // A payload without its commit: an error naming the payload, not a skip.
    let mut decoder = Decoder::new(TableFilter::all(), "b.000001".into());
    let payload = payload_event(500, &inner_event(code::QUERY, &query_body("BEGIN")));
    let payload_start = 500 - payload.len() as u64;
    let error = push_all(
        &mut decoder,
        &[event(code::ANONYMOUS_GTID, 200, &[0u8; 42]), payload],
    )
    .unwrap_err();
    match error {
        BinlogError::BrokenTransaction { position, .. } => {
            assert_eq!(position, BinlogPosition::new("b.000001", payload_start))
        }
        other => panic!("unexpected {other}"),
    }

    // An inner event cut short, and a nested payload: malformed, at the payload's start.
    for inner in [
        inner[..inner.len() - 3].to_vec(),
        inner[..10].to_vec(),
        inner_event(code::TRANSACTION_PAYLOAD, &[0u8; 4]),
        inner_event(code::FORMAT_DESCRIPTION, &[0u8; 60]),
    ] {
        let mut decoder = Decoder::new(TableFilter::all(), "b.000001".into());
        let payload = payload_event(900, &inner);
        let payload_start = 900 - payload.len() as u64;
        let error = push_all(&mut decoder, &[payload]).unwrap_err();
        match error {
            BinlogError::MalformedEvent {
                event_name: "TRANSACTION_PAYLOAD",
                position,
                reason,
            } => {
                assert_eq!(position, BinlogPosition::new("b.000001", payload_start));
                assert!(
                    reason.contains("inside the compressed transaction"),
                    "{reason}"
                );
            }
            other => panic!("unexpected {other}"),
        }
    }

    // A payload inside an open transaction.
    let mut decoder = Decoder::new(TableFilter::all(), "b.000001".into());
    let error = push_all(
        &mut decoder,
        &[
            event(code::QUERY, 300, &query_body("BEGIN")),
            payload_event(500, &inner),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(error, BinlogError::BrokenTransaction { .. }),
        "{error}"
    );
}

#[test]
fn an_inner_table_map_that_needs_names_resumes_at_that_inner_event() {
    let outbox = TableName::new("shop", "outbox");
    let orders = TableName::new("shop", "orders");
    let mut decoder = Decoder::new(
        TableFilter::tables([outbox.clone(), orders.clone()]),
        "b.000001".into(),
    );
    let inner = [
        inner_event(code::QUERY, &query_body("BEGIN")),
        inner_event(code::TABLE_MAP, &table_map_body(7, "outbox")),
        inner_event(code::WRITE_ROWS_V1, &write_rows_body(7, 1, "first")),
        inner_event(code::TABLE_MAP, &table_map_body(8, "orders")),
        inner_event(code::WRITE_ROWS_V1, &write_rows_body(8, 2, "second")),
        inner_event(code::XID, &1u64.to_le_bytes()),
    ]
    .concat();
    let payload = payload_event(1000, &inner);
    let payload_start = 1000 - payload.len() as u64;
    let mut out = VecDeque::new();
    decoder
        .push(&event(code::ANONYMOUS_GTID, 300, &[0u8; 42]), &mut out)
        .unwrap();
    assert_eq!(
        decoder.push(&payload, &mut out).unwrap(),
        PushOutcome::NeedColumnNames(outbox.clone())
    );
    assert!(out.is_empty());
    assert!(decoder.in_transaction());
    // Any other event while the payload waits is a broken stream.
    let mut copy = Decoder::new(TableFilter::tables([outbox.clone()]), "b.000001".into());
    copy.push(&event(code::ANONYMOUS_GTID, 300, &[0u8; 42]), &mut out)
        .unwrap();
    assert!(matches!(
        copy.push(&payload, &mut out),
        Ok(PushOutcome::NeedColumnNames(_))
    ));
    let error = copy
        .push(&event(code::XID, 1100, &1u64.to_le_bytes()), &mut out)
        .unwrap_err();
    assert!(
        matches!(error, BinlogError::BrokenTransaction { .. }),
        "{error}"
    );

    decoder.set_column_names(&outbox, vec!["id".into(), "body".into()]);
    // The same event again: the outbox row, then the second map asks.
    assert_eq!(
        decoder.push(&payload, &mut out).unwrap(),
        PushOutcome::NeedColumnNames(orders.clone())
    );
    assert_eq!(out.len(), 1, "{out:?}");
    decoder.set_column_names(&orders, vec!["id".into(), "note".into()]);
    assert_eq!(
        decoder.push(&payload, &mut out).unwrap(),
        PushOutcome::Consumed
    );
    assert!(!decoder.in_transaction());
    let items: Vec<StreamItem> = out.into_iter().collect();
    match &items[..] {
        [StreamItem::Row(first), StreamItem::Row(second), StreamItem::Commit(commit)] => {
            assert_eq!(*first.table, outbox);
            assert_eq!(
                first.after.as_ref().unwrap().get("body"),
                Some(&crate::Value::Text("first".into()))
            );
            assert_eq!(*second.table, orders);
            assert_eq!(
                second.after.as_ref().unwrap().get("note"),
                Some(&crate::Value::Text("second".into()))
            );
            assert_eq!(
                first.event_position,
                BinlogPosition::new("b.000001", payload_start)
            );
            assert_eq!(commit.position, BinlogPosition::new("b.000001", 1000));
            assert_eq!(commit.row_count, 2);
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// A FORMAT_DESCRIPTION of a MySQL 8 server with CRC32 checksums, checksummed, ending at
/// `log_pos`.
fn crc32_format_description(log_pos: u32) -> Vec<u8> {
    let mut lengths = vec![0u8; 41];
    lengths[usize::from(code::TABLE_MAP) - 1] = 8;
    let fde = FormatDescriptionEvent::new(BinlogVersion::Version4)
        .with_server_version(&b"8.0.36"[..])
        .with_event_type_header_lengths(lengths);
    let mut body = Vec::new();
    fde.serialize(&mut body);
    body.push(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32 as u8);
    with_crc32(event(code::FORMAT_DESCRIPTION, log_pos, &body))
}

/// Appends the CRC32 of `bytes` (whose size field is grown by the 4 bytes).
fn with_crc32(mut bytes: Vec<u8>) -> Vec<u8> {
    let size = bytes.len() as u32 + 4;
    bytes[9..13].copy_from_slice(&size.to_le_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

#[test]
fn checksums_are_verified_over_the_raw_bytes() {
    let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
    let fde = crc32_format_description(120);
    let begin = with_crc32(event(code::QUERY, 200, &query_body("BEGIN")));
    let xid = with_crc32(event(code::XID, 231, &1u64.to_le_bytes()));
    let items = push_all(&mut decoder, &[fde.clone(), begin.clone(), xid.clone()]).unwrap();
    assert!(matches!(&items[..], [StreamItem::Commit(c)] if c.position.position == 231));
    assert_eq!(decoder.flavor(), Some(Flavor::Mysql));

    // One flipped bit anywhere but the checksum itself: a mismatch at the event's start.
    for index in 0..xid.len() - 4 {
        if (9..17).contains(&index) {
            continue; // size and log_pos: framing errors or another position
        }
        let mut damaged = xid.clone();
        damaged[index] ^= 0x10;
        let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
        let error = push_all(&mut decoder, &[fde.clone(), begin.clone(), damaged]).unwrap_err();
        match error {
            BinlogError::ChecksumMismatch { position, .. } => {
                assert_eq!(position, BinlogPosition::new("binlog.000001", 231 - 31))
            }
            other => panic!("byte {index}: unexpected {other}"),
        }
    }

    // The format description's own CRC ignores the "binlog in use" flag but covers the rest.
    let mut in_use = fde.clone();
    in_use[17] |= 0x01;
    let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
    push_all(&mut decoder, &[in_use]).unwrap();
    let mut damaged = fde.clone();
    damaged[30] ^= 0x01;
    let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
    let error = push_all(&mut decoder, &[damaged]).unwrap_err();
    assert!(
        matches!(error, BinlogError::ChecksumMismatch { .. }),
        "{error}"
    );

    // After a CRC32 format description, an event too short for its checksum is malformed.
    let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
    let error = push_all(&mut decoder, &[fde, event(code::STOP, 300, &[])]).unwrap_err();
    assert!(
        matches!(error, BinlogError::MalformedEvent { .. }),
        "{error}"
    );
}

#[test]
fn truncated_or_oversized_events_are_malformed_not_panics() {
    let xid = event(code::XID, 231, &1u64.to_le_bytes());
    // Cut short (inside the header too), one byte too many, a size below the header.
    let mut longer = xid.clone();
    longer.push(0);
    let mut tiny_size = xid.clone();
    tiny_size[9..13].copy_from_slice(&3u32.to_le_bytes());
    let mut cases: Vec<Vec<u8>> = (0..xid.len()).map(|cut| xid[..cut].to_vec()).collect();
    cases.extend([longer, tiny_size]);
    for bytes in cases {
        let mut decoder =
            Decoder::new(TableFilter::all(), "binlog.000001".into()).with_start(200, None);
        let mut out = VecDeque::new();
        match decoder.push(&bytes, &mut out) {
            Err(BinlogError::MalformedEvent { position, .. }) => {
                // Where the event starts: from its header, or without one where the last
                // event ended.
                let expected = match EventHeader::read(&bytes) {
                    Some(header) => 231 - u64::from(header.event_size()),
                    None => 200,
                };
                assert_eq!(position, BinlogPosition::new("binlog.000001", expected));
            }
            other => panic!("{} bytes: unexpected {other:?}", bytes.len()),
        }
        assert!(out.is_empty());
    }
    // Every prefix of a checksummed stream, and random garbage: errors, never panics.
    let fde = crc32_format_description(120);
    let begin = with_crc32(event(code::QUERY, 200, &query_body("BEGIN")));
    let mut state = 0x2545_f491_u32;
    for len in 0..200 {
        let garbage: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state as u8
            })
            .collect();
        for stream in [&fde, &begin] {
            let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
            let mut out = VecDeque::new();
            let _ = decoder.push(stream, &mut out);
            let _ = decoder.push(&garbage, &mut out);
            for cut in 0..stream.len() {
                let _ = decoder.push(&stream[..cut], &mut out);
            }
        }
        // Garbage inside a payload too.
        let mut decoder = Decoder::new(TableFilter::all(), "binlog.000001".into());
        let mut out = VecDeque::new();
        let _ = decoder.push(&payload_event(5000, &garbage), &mut out);
        let _ = decoder.push(&event(code::TRANSACTION_PAYLOAD, 5000, &garbage), &mut out);
    }
}

#[test]
fn mysql_gtids_plain_and_tagged_commit_with_their_transaction() {
    use mysql_common::binlog::events::GtidEvent;
    use mysql_common::packets::Tag;
    use mysql_common::proto::MySerialize;
    let sid = [
        0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95,
        0x62,
    ];
    let mut plain = Vec::new();
    GtidEvent::new(sid, 41).serialize(&mut plain);
    let mut tagged = Vec::new();
    GtidEvent::new_tagged(sid, Tag::new("blue").unwrap(), 42).serialize(&mut tagged);

    let mut decoder = Decoder::new(TableFilter::all(), "binlog.000009".into());
    let items = push_all(
        &mut decoder,
        &[
            event(code::GTID, 200, &plain),
            event(code::QUERY, 300, &query_body("BEGIN")),
            event(code::XID, 400, &1u64.to_le_bytes()),
            event(code::GTID_TAGGED, 500, &tagged),
            event(code::QUERY, 600, &query_body("CREATE TABLE t (a INT)")),
        ],
    )
    .unwrap();
    let gtids: Vec<(u64, String)> = items
        .iter()
        .map(|item| match item {
            StreamItem::Commit(c) => (c.position.position, c.gtid.as_ref().unwrap().to_string()),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        gtids,
        vec![
            (400, "3e11fa47-71ca-11e1-9e33-c80aa9429562:41".to_owned()),
            (
                600,
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:blue:42".to_owned()
            ),
        ]
    );
}

#[test]
fn statement_based_changes_of_watched_tables_are_errors() {
    let outbox = TableName::new("shop", "outbox");
    let mut decoder = Decoder::new(TableFilter::tables([outbox]), "b.000001".into());
    // Statements on other tables (MIXED format) pass; they carry no watched rows.
    let items = push_all(
        &mut decoder,
        &[
            event(code::QUERY, 100, &query_body("BEGIN")),
            event(
                code::QUERY,
                200,
                &query_body("INSERT INTO shop.orders VALUES (1)"),
            ),
            event(code::XID, 300, &1u64.to_le_bytes()),
        ],
    )
    .unwrap();
    assert!(matches!(&items[..], [StreamItem::Commit(c)] if c.row_count == 0));
    let error = push_all(
        &mut decoder,
        &[
            event(code::QUERY, 400, &query_body("BEGIN")),
            event(
                code::QUERY,
                500,
                &query_body("/* app */ insert into `outbox` (id) values (2)"),
            ),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(
            error,
            BinlogError::UnsupportedEvent {
                event_type: code::QUERY,
                ..
            }
        ),
        "{error}"
    );
}

/// A MySQL 9 TABLE_MAP body for `shop.vectors (id INT, label VARCHAR(10), v VECTOR(3))`
/// with full metadata as MySQL 9 writes it: the VECTOR column counts among the character
/// columns (binary charset 63 in DEFAULT_CHARSET), and its dimensions come in
/// VECTOR_DIMENSIONALITY (field 13). `vector_type` replaces the VECTOR type code.
fn vector_table_map_body(table_id: u64, vector_type: u8) -> Vec<u8> {
    let mut body = table_id.to_le_bytes()[..6].to_vec();
    body.extend_from_slice(&[0, 0]);
    body.push(4);
    body.extend_from_slice(b"shop\0");
    body.push(7);
    body.extend_from_slice(b"vectors\0");
    body.push(3); // columns
    body.extend_from_slice(&[3, 15, vector_type]); // LONG, VARCHAR, VECTOR (242)
    body.extend_from_slice(&[3, 10, 0, 4]); // metadata: VARCHAR(10); VECTOR length size 4
    body.push(0b110); // nullable bitmap
    body.extend_from_slice(&[1, 1, 0]); // SIGNEDNESS: signed
    body.extend_from_slice(&[2, 3, 45, 1, 63]); // DEFAULT_CHARSET 45; character column 1: 63
    let mut names = Vec::new();
    for name in ["id", "label", "v"] {
        names.push(name.len() as u8);
        names.extend_from_slice(name.as_bytes());
    }
    body.push(4); // COLUMN_NAME
    body.push(names.len() as u8);
    body.extend_from_slice(&names);
    body.extend_from_slice(&[13, 1, 3]); // VECTOR_DIMENSIONALITY: 3
    body
}

#[test]
fn mysql9_vector_columns_decode_to_their_floats() {
    let table = TableName::new("shop", "vectors");
    let mut decoder = Decoder::new(TableFilter::tables([table.clone()]), "b.000001".into());
    let floats = [1.5f32, -0.25, 3.0e38];
    let mut rows = 9u64.to_le_bytes()[..6].to_vec();
    rows.extend_from_slice(&1u16.to_le_bytes()); // STMT_END_F
    rows.extend_from_slice(&2u16.to_le_bytes()); // v2 extra data: none
    rows.push(3);
    rows.push(0b111);
    rows.push(0); // NULL bitmap
    rows.extend_from_slice(&7i32.to_le_bytes());
    rows.push(2);
    rows.extend_from_slice(b"ab");
    rows.extend_from_slice(&12u32.to_le_bytes());
    for float in floats {
        rows.extend_from_slice(&float.to_le_bytes());
    }
    let items = push_all(
        &mut decoder,
        &[
            event(code::ANONYMOUS_GTID, 100, &[0u8; 42]),
            event(code::QUERY, 150, &query_body("BEGIN")),
            event(code::TABLE_MAP, 250, &vector_table_map_body(9, 242)),
            event(code::WRITE_ROWS, 300, &rows),
            event(code::XID, 331, &1u64.to_le_bytes()),
        ],
    )
    .unwrap();
    let StreamItem::Row(change) = &items[0] else {
        panic!("expected a row, got {items:?}");
    };
    let after = change.after.as_ref().unwrap();
    assert_eq!(after.get("id"), Some(&crate::Value::Int(7)));
    assert_eq!(after.get("label"), Some(&crate::Value::Text("ab".into())));
    assert_eq!(after.get("v"), Some(&crate::Value::Vector(floats.to_vec())));
    // The stored bytes come back exactly, and `inspect` (serde) prints a float array.
    assert_eq!(
        crate::Value::vector_bytes(&floats),
        rows[rows.len() - 12..].to_vec()
    );
    assert_eq!(
        serde_json::to_value(after.get("v").unwrap()).unwrap(),
        serde_json::json!({"Vector": [1.5, -0.25, 3.0e38]})
    );
}

#[test]
fn an_unknown_column_type_names_code_table_and_column() {
    let table = TableName::new("shop", "vectors");
    let mut decoder = Decoder::new(TableFilter::tables([table.clone()]), "b.000001".into());
    let error = push_all(
        &mut decoder,
        &[
            event(code::ANONYMOUS_GTID, 100, &[0u8; 42]),
            event(code::QUERY, 150, &query_body("BEGIN")),
            event(code::TABLE_MAP, 250, &vector_table_map_body(9, 243)),
        ],
    )
    .unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(&error, BinlogError::RowImageMismatch { table: t, .. } if *t == table),
        "{text}"
    );
    assert!(text.contains("type code 243"), "{text}");
    assert!(text.contains("column 3 `v`"), "{text}");
    assert!(text.contains("shop.vectors"), "{text}");
}

#[test]
fn ddl_inside_executable_comments_is_ddl() {
    assert_eq!(
        classify_query(b"/*!40000 ALTER TABLE `outbox` DISABLE KEYS */"),
        QueryKind::Statement { ddl: true }
    );
    assert_eq!(
        classify_query(b"/*!ALTER TABLE outbox MODIFY a INT AFTER b*/"),
        QueryKind::Statement { ddl: true }
    );
    assert_eq!(
        classify_query(b"/*M!100100 RENAME TABLE a TO b */"),
        QueryKind::Statement { ddl: true }
    );
    assert_eq!(
        classify_query(b"/* plain */ /*!50003 CREATE*/ /*!50017 DEFINER=`x`@`%`*/ TRIGGER t"),
        QueryKind::Statement { ddl: true }
    );
    assert_eq!(
        classify_query(b"/*!40101 SET NAMES utf8 */"),
        QueryKind::Statement { ddl: false }
    );
}

#[test]
fn the_forward_scan_recognises_ddl_naming_a_table() {
    for ddl in [
        "ALTER TABLE outbox MODIFY a VARCHAR(20) AFTER b",
        "alter table `shop`.`Outbox` add x int",
        "/*!40000 ALTER TABLE `outbox` ADD y INT */",
        "RENAME TABLE outbox TO outbox_old, outbox_new TO outbox",
        "DROP TABLE IF EXISTS outbox",
        "CREATE TABLE outbox (id INT)",
    ] {
        assert!(is_ddl_naming_table(ddl.as_bytes(), "outbox"), "{ddl}");
    }
    for other in [
        "ALTER TABLE outbox_archive ADD x INT",
        "DROP TABLE outbox_old",
        "TRUNCATE TABLE outbox",
        "INSERT INTO outbox VALUES (1)",
        "BEGIN",
        "ALTER TABLE my_outbox ADD x INT",
    ] {
        assert!(!is_ddl_naming_table(other.as_bytes(), "outbox"), "{other}");
    }
}

#[test]
fn looked_up_names_are_refused_when_the_binlog_types_do_not_fit() {
    let outbox = TableName::new("shop", "outbox");
    let mut decoder = Decoder::new(TableFilter::tables([outbox.clone()]), "b.000001".into());
    let mut out = VecDeque::new();
    decoder
        .push(
            &event(code::MARIADB_GTID, 100, &mariadb_gtid_body(1, 0, 0)),
            &mut out,
        )
        .unwrap();
    let map = event(code::TABLE_MAP, 200, &table_map_body(7, "outbox"));
    assert_eq!(
        decoder.push(&map, &mut out).unwrap(),
        PushOutcome::NeedColumnNames(outbox.clone())
    );
    // The map logs (INT, VARCHAR); information_schema now says (VARCHAR, INT).
    decoder.set_looked_up_columns(
        &outbox,
        vec![
            LookedUpColumn::new("body".into(), "varchar".into()),
            LookedUpColumn::new("id".into(), "int".into()),
        ],
    );
    let error = decoder.push(&map, &mut out).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, BinlogError::RowImageMismatch { .. }),
        "{text}"
    );
    assert!(text.contains("shop.outbox"), "{text}");
    assert!(text.contains("binlog_row_metadata=FULL"), "{text}");

    // Types that fit are accepted.
    let mut decoder = Decoder::new(TableFilter::tables([outbox.clone()]), "b.000001".into());
    decoder
        .push(
            &event(code::MARIADB_GTID, 100, &mariadb_gtid_body(1, 0, 0)),
            &mut out,
        )
        .unwrap();
    assert!(matches!(
        decoder.push(&map, &mut out).unwrap(),
        PushOutcome::NeedColumnNames(_)
    ));
    decoder.set_looked_up_columns(
        &outbox,
        vec![
            LookedUpColumn::new("id".into(), "int".into()),
            LookedUpColumn::new("body".into(), "varchar".into()),
        ],
    );
    assert_eq!(decoder.push(&map, &mut out).unwrap(), PushOutcome::Consumed);
}

/// `outbox_binlog_watched_table_vanished_total` as registered for the relay.
fn vanished_counter() -> f64 {
    let registry = prometheus::Registry::new();
    crate::internal_events::register_metrics(&registry).unwrap();
    registry
        .gather()
        .iter()
        .find(|family| family.name() == "outbox_binlog_watched_table_vanished_total")
        .map(|family| family.get_metric()[0].get_counter().get_value())
        .expect("the counter is registered")
}

#[test]
fn a_ddl_that_makes_a_watched_table_vanish_is_counted_and_reading_goes_on() {
    let outbox = TableName::new("shop", "outbox");
    let mut decoder = Decoder::new(TableFilter::tables([outbox.clone()]), "b.000001".into());
    let before = vanished_counter();
    // The rename swap keeps the table: not counted, the transactions commit.
    let items = push_all(
        &mut decoder,
        &[
            event(code::MARIADB_GTID, 100, &mariadb_gtid_body(1, 0, 1)),
            event(
                code::QUERY,
                200,
                &query_body("RENAME TABLE outbox TO outbox_old, outbox_new TO outbox"),
            ),
        ],
    )
    .unwrap();
    assert!(matches!(&items[..], [StreamItem::Commit(_)]), "{items:?}");
    let after_swap = vanished_counter();
    assert_eq!(after_swap, before, "the swap is not counted");
    // A drop is counted (no other test of this crate drops a watched table).
    let items = push_all(
        &mut decoder,
        &[
            event(code::MARIADB_GTID, 300, &mariadb_gtid_body(2, 0, 1)),
            event(
                code::QUERY,
                400,
                &query_body("/*!40000 DROP TABLE `outbox` */"),
            ),
            event(code::MARIADB_GTID, 500, &mariadb_gtid_body(3, 0, 1)),
            event(
                code::QUERY,
                600,
                &query_body("CREATE TABLE outbox (id INT)"),
            ),
        ],
    )
    .unwrap();
    assert_eq!(items.len(), 2, "both statements commit: {items:?}");
    assert_eq!(vanished_counter(), after_swap + 1.0);
}

/// `shop.docs`: `id INT`, `doc JSON` (nullable), `strict JSON NOT NULL`, with FULL metadata.
fn json_table_map_body(table_id: u64) -> Vec<u8> {
    let mut body = table_id.to_le_bytes()[..6].to_vec();
    body.extend_from_slice(&[0, 0]);
    body.push(4);
    body.extend_from_slice(b"shop\0");
    body.push(4);
    body.extend_from_slice(b"docs\0");
    body.push(3); // columns
    body.extend_from_slice(&[3, 245, 245]); // LONG, JSON, JSON
    body.extend_from_slice(&[2, 4, 4]); // metadata: both JSON length sizes 4
    body.push(0b010); // nullable bitmap: doc only
    body.extend_from_slice(&[1, 1, 0]); // SIGNEDNESS: signed
    let mut names = Vec::new();
    for name in ["id", "doc", "strict"] {
        names.push(name.len() as u8);
        names.extend_from_slice(name.as_bytes());
    }
    body.push(4); // COLUMN_NAME
    body.push(names.len() as u8);
    body.extend_from_slice(&names);
    body
}

fn json_rows_body(table_id: u64, doc: &[u8], strict: &[u8]) -> Vec<u8> {
    let mut rows = table_id.to_le_bytes()[..6].to_vec();
    rows.extend_from_slice(&1u16.to_le_bytes()); // STMT_END_F
    rows.extend_from_slice(&2u16.to_le_bytes()); // v2 extra data: none
    rows.push(3);
    rows.push(0b111);
    rows.push(0); // NULL bitmap
    rows.extend_from_slice(&7i32.to_le_bytes());
    for value in [doc, strict] {
        rows.extend_from_slice(&(value.len() as u32).to_le_bytes());
        rows.extend_from_slice(value);
    }
    rows
}

#[test]
fn mysql_json_columns_are_debezium_text_and_corrupt_ones_name_table_column_and_byte() {
    let table = TableName::new("shop", "docs");
    // {"b":1,"a":"x"}: MySQL's binary JSON with the members in this (storage) order.
    let fixed: &[u8] = &[
        0x00, 2, 0, 22, 0, 18, 0, 1, 0, 19, 0, 1, 0, 0x05, 1, 0, 0x0c, 20, 0, b'b', b'a', 1, b'x',
    ];
    let read = |doc: &[u8], strict: &[u8]| {
        let mut decoder = Decoder::new(TableFilter::tables([table.clone()]), "b.000001".into());
        push_all(
            &mut decoder,
            &[
                event(code::ANONYMOUS_GTID, 100, &[0u8; 42]),
                event(code::QUERY, 150, &query_body("BEGIN")),
                event(code::TABLE_MAP, 250, &json_table_map_body(9)),
                event(code::WRITE_ROWS, 400, &json_rows_body(9, doc, strict)),
                event(code::XID, 431, &1u64.to_le_bytes()),
            ],
        )
    };
    let items = read(fixed, &[]).unwrap();
    let StreamItem::Row(change) = &items[0] else {
        panic!("expected a row, got {items:?}");
    };
    let after = change.after.as_ref().unwrap();
    assert_eq!(
        after.get("doc"),
        Some(&crate::Value::Json(crate::JsonText::new(
            r#"{"b":1,"a":"x"}"#
        )))
    );
    // An empty value: `{}` in a NOT NULL column (Debezium's rule).
    assert_eq!(
        after.get("strict"),
        Some(&crate::Value::Json(crate::JsonText::new("{}")))
    );
    // ... and null in a nullable one.
    let items = read(&[], fixed).unwrap();
    let StreamItem::Row(change) = &items[0] else {
        panic!("expected a row, got {items:?}");
    };
    assert_eq!(
        change.after.as_ref().unwrap().get("doc"),
        Some(&crate::Value::Null)
    );
    // A value offset beyond its container: an error naming table, column and byte.
    let mut corrupt = fixed.to_vec();
    corrupt[17] = 200;
    let error = read(&corrupt, fixed).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(&error, BinlogError::RowImageMismatch { table: t, .. } if *t == table),
        "{text}"
    );
    assert!(text.contains("shop.docs"), "{text}");
    assert!(text.contains("`doc`"), "{text}");
    assert!(text.contains("binary JSON is corrupt at byte 17"), "{text}");
}
