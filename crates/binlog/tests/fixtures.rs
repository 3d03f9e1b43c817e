//! Reads the real binlog files of `shared/fixtures/binlogs` (MySQL's and MariaDB's test
//! suites, gathered by mysql_common) with `BinlogFileReader` and checks the decoded
//! transactions value by value; damaged copies must fail with the file and offset.

use std::path::{Path, PathBuf};

use outbox_binlog::{
    BinlogError, BinlogFileReader, BinlogPosition, ColumnType, Commit, Gtid, Row, RowChange,
    RowOperation, SqlType, StreamItem, TableFilter, TableName, Value,
};

fn fixtures_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/binlogs"
    ));
    assert!(
        dir.is_dir(),
        "binlog fixtures not found at {}: the repository must be checked out next to a copy \
         of `shared/` (shared/fixtures/binlogs)",
        dir.display()
    );
    dir
}

fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name)
}

/// Reads a file to its end or first error, with a bound on the number of items so a reader
/// that loops fails the test instead of hanging it.
fn read_all(path: &Path, filter: TableFilter) -> (Vec<StreamItem>, Option<BinlogError>) {
    let mut reader = match BinlogFileReader::open(vec![path.to_path_buf()], filter) {
        Ok(reader) => reader,
        Err(error) => return (Vec::new(), Some(error)),
    };
    let mut items = Vec::new();
    for _ in 0..1_000_000 {
        match reader.next_item() {
            Ok(Some(item)) => items.push(item),
            Ok(None) => return (items, None),
            Err(error) => return (items, Some(error)),
        }
    }
    panic!(
        "{} yields more than a million items: a loop?",
        path.display()
    );
}

fn read_ok(name: &str, filter: TableFilter) -> Vec<StreamItem> {
    let (items, error) = read_all(&fixture(name), filter);
    if let Some(error) = error {
        panic!("{name}: {error}");
    }
    items
}

fn rows(items: &[StreamItem]) -> Vec<&RowChange> {
    items
        .iter()
        .filter_map(|item| match item {
            StreamItem::Row(row) => Some(row),
            _ => None,
        })
        .collect()
}

fn commits(items: &[StreamItem]) -> Vec<&Commit> {
    items
        .iter()
        .filter_map(|item| match item {
            StreamItem::Commit(commit) => Some(commit),
            _ => None,
        })
        .collect()
}

fn names(row: &Row) -> Vec<&str> {
    row.columns.iter().map(String::as_str).collect()
}

fn text(value: &str) -> Value {
    Value::Text(value.to_owned())
}

/// Names of the fixture files that end in an error (each error must name its file).
fn failures_of(filter: &TableFilter) -> Vec<String> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_none_or(|ext| ext != "md"))
        .collect();
    entries.sort();
    assert!(entries.len() >= 30, "expected the full fixture set");
    let mut failures = Vec::new();
    for path in &entries {
        let (_, error) = read_all(path, filter.clone());
        if let Some(error) = error {
            let message = error.to_string();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                message.contains(&name),
                "error does not name the file: {message}"
            );
            failures.push(name);
        }
    }
    failures
}

#[test]
fn every_fixture_reads_to_its_end_or_a_clear_error() {
    // Exactly the files that are damaged or use formats the reader rejects on purpose
    // (incident, statement-based LOAD DATA, pre-GA rows, a corrupt relay log).
    let damaged_or_unsupported = vec![
        "binlog_truncated_event.000001",
        "binlog_truncated_prev_gtid_event.000001",
        "bug40482-bin.000001",
        "corrupt-relay-bin.000624",
        "ver_5_1-wl2325_r.001",
        "ver_5_1-wl2325_s.001",
        "ver_5_1_23.001",
        "ver_trunk_row_v2.001",
    ];
    let unrelated = TableFilter::tables([TableName::new("nowhere", "nothing")]);
    assert_eq!(failures_of(&unrelated), damaged_or_unsupported);

    // Watching every table, statement-based data changes (MySQL 5.x files logged with
    // binlog_format=STATEMENT) are errors too: their rows are not in the binlog.
    let mut with_statements = damaged_or_unsupported.clone();
    with_statements.extend([
        "binlog_56_gtid_reserved_word.000001",
        "binlog_savepoint.000001",
        "binlog_transaction.000001",
        "binlog_transaction_with_GTID.000001",
        "binlog_transaction_with_anonymous_GTID.000001",
        "bug11747887-bin.000003",
        "bug16266.000001",
        "bug33029-slave-relay-bin.000001",
        "rpl_cross_version_default_utf8mb4_collation.000001",
    ]);
    with_statements.sort();
    assert_eq!(failures_of(&TableFilter::all()), with_statements);
}

#[test]
fn mariadb_outbox_file_decodes_every_value_gtid_and_position() {
    let outbox = TableName::new("toddy_test", "outbox");
    let items = read_ok("mariadb-bin.000001", TableFilter::tables([outbox.clone()]));
    let gtid = |sequence| {
        Some(Gtid::Mariadb {
            domain_id: 0,
            server_id: 1,
            sequence,
        })
    };
    let expected_row = |id: i64, created: i64, position: u64, sequence: u64| {
        StreamItem::Row(RowChange {
            table: outbox.clone().into(),
            operation: RowOperation::Insert,
            before: None,
            after: Some(Row {
                columns: ["id", "topic", "event_type", "event", "created"]
                    .map(String::from)
                    .into(),
                values: vec![
                    Value::Int(id),
                    text("foo"),
                    text("JSON"),
                    // `event` is a binary column (collation 63): bytes, not text.
                    Value::Bytes(br#"{"foo":1}"#.to_vec()),
                    Value::Timestamp {
                        unix_seconds: created,
                        micros: 0,
                    },
                ],
                // As the TABLE_MAP describes them (and its null bitmap: `event_type` may be
                // NULL).
                types: Some(
                    [
                        (
                            SqlType::Integer {
                                bytes: 4,
                                unsigned: false,
                            },
                            false,
                        ),
                        (SqlType::Text, false),
                        (SqlType::Text, true),
                        (SqlType::Binary, false),
                        (SqlType::Timestamp { fsp: 0 }, false),
                    ]
                    .map(|(sql_type, nullable)| ColumnType { sql_type, nullable })
                    .into(),
                ),
            }),
            event_timestamp: created as u32,
            event_position: BinlogPosition::new("mariadb-bin.000001", position),
            transaction_gtid: gtid(sequence).map(std::sync::Arc::new),
            in_xa_transaction: false,
        })
    };
    assert_eq!(
        items,
        vec![
            expected_row(62, 1_650_493_084, 612, 1),
            StreamItem::Commit(Commit {
                position: BinlogPosition::new("mariadb-bin.000001", 702),
                gtid: gtid(1),
                timestamp: 1_650_493_084,
                row_count: 1,
                xa: None,
            }),
            expected_row(63, 1_650_493_195, 984, 2),
            StreamItem::Commit(Commit {
                position: BinlogPosition::new("mariadb-bin.000001", 1074),
                gtid: gtid(2),
                timestamp: 1_650_493_195,
                row_count: 1,
                xa: None,
            }),
        ]
    );

    // Unwatched: the same transactions, without rows.
    let items = read_ok(
        "mariadb-bin.000001",
        TableFilter::tables([TableName::new("toddy_test", "other")]),
    );
    assert_eq!(rows(&items).len(), 0);
    let commits = commits(&items);
    assert_eq!(
        commits
            .iter()
            .map(|c| (c.position.position, c.row_count))
            .collect::<Vec<_>>(),
        vec![(702, 0), (1074, 0)]
    );
}

/// MySQL 9's binary JSON from the fixture, written as Debezium's MySQL connector writes it
/// (`decoder/json.rs`; `decoder/json/tests.rs` checks the same bytes against the library
/// Debezium uses). The rule behind each expected text is named beside it.
#[test]
fn mysql9_binary_json_decodes_to_debezium_text() {
    let items = read_ok("json-opaque.binlog", TableFilter::all());
    let commits = commits(&items);
    // Two DDL statements, then one transaction with eight inserts.
    assert_eq!(
        commits
            .iter()
            .map(|c| (c.position.position, c.row_count, c.gtid.is_none()))
            .collect::<Vec<_>>(),
        vec![(340, 0, true), (529, 0, true), (1635, 8, true)]
    );
    let texts: Vec<String> = rows(&items)
        .iter()
        .map(|row| {
            let after = row.after.as_ref().unwrap();
            assert_eq!(names(after), ["a"]);
            match &after.values[0] {
                Value::Json(text) => text.as_str().to_owned(),
                other => panic!("not JSON: {other:?}"),
            }
        })
        .collect();
    assert_eq!(
        texts,
        [
            // An opaque VARCHAR (type 15) holding "U": other opaque values are Base64.
            r#"{"a":"VQ=="}"#,
            // Opaque DATE: "YYYY-MM-DD".
            r#"{"b":"2012-03-18"}"#,
            // Opaque DATETIME with a zero fraction: no fraction at all.
            r#"{"c":"2012-03-18 11:30:45"}"#,
            // Opaque TIME with microseconds: the fraction, trailing zeros trimmed (none here).
            r#"{"c":"87:31:46.654321"}"#,
            // Opaque DECIMALs: bare numbers with their scale (BigDecimal.toPlainString).
            r#"{"d":123.456}"#,
            r#"{"e":9.00}"#,
            // An array of inlined int16s and literals, in order.
            r#"{"e":[0,1,true,false]}"#,
            // An inlined null literal.
            r#"{"e":null}"#,
        ]
    );
    assert_eq!(
        rows(&items)[0].table.as_ref(),
        &TableName::new("foo", "test")
    );
}

#[test]
fn compressed_transaction_is_decompressed_and_commits_at_the_payload_end() {
    let items = read_ok("transaction_compression.000001", TableFilter::all());
    assert_eq!(
        items,
        vec![
            StreamItem::Row(RowChange {
                table: TableName::new("test", "tb1").into(),
                operation: RowOperation::Insert,
                before: None,
                // binlog_row_metadata=MINIMAL: columns are named by position.
                after: Some(Row {
                    columns: ["@1".to_owned()].into(),
                    values: vec![Value::Int(1)],
                    types: Some(
                        [ColumnType {
                            sql_type: SqlType::Integer {
                                bytes: 4,
                                unsigned: false,
                            },
                            nullable: true,
                        }]
                        .into(),
                    ),
                }),
                event_timestamp: 1_695_159_109,
                event_position: BinlogPosition::new("transaction_compression.000001", 274),
                transaction_gtid: None,
                in_xa_transaction: false,
            }),
            StreamItem::Commit(Commit {
                position: BinlogPosition::new("transaction_compression.000001", 431),
                gtid: None,
                timestamp: 1_695_159_109,
                row_count: 1,
                xa: None,
            }),
        ]
    );
}

#[test]
fn enum_set_and_strings_decode_by_name() {
    let items = read_ok("mysql-enum-string-set.000001", TableFilter::all());
    let hundred = "0123456789".repeat(10);
    let chunk = format!("{}012345678", "0123456789".repeat(12));
    let long = format!("{chunk}{chunk}{}", "0123456789".repeat(4));
    let first = vec![
        text(&hundred),
        text(&long),
        text("var1"),
        text("one,three"),
        text("0123456789"),
    ];
    let second = vec![
        text("field1"),
        text("field_2"),
        text("variant2"),
        text("two,four"),
        text(&long),
    ];
    let rows = rows(&items);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].operation, RowOperation::Insert);
    let inserted = rows[0].after.as_ref().unwrap();
    assert_eq!(names(inserted), ["f1", "f2", "f3", "f4", "f5"]);
    assert_eq!(inserted.values, first);
    assert_eq!(rows[1].operation, RowOperation::Update);
    assert_eq!(rows[1].before.as_ref().unwrap().values, first);
    assert_eq!(rows[1].after.as_ref().unwrap().values, second);
    assert_eq!(rows[2].operation, RowOperation::Delete);
    assert_eq!(rows[2].before.as_ref().unwrap().values, second);
    assert!(rows[2].after.is_none());
    let commits = commits(&items);
    assert_eq!(commits.len(), 5);
    assert_eq!(
        commits[4].gtid,
        Some(Gtid::Mysql {
            source_uuid: "93e95066-a2f4-11ec-9b69-9657f0ae95e2".into(),
            tag: None,
            transaction_id: 5
        })
    );
    assert_eq!(commits[4].position.position, 3331);
}

#[test]
fn bit_columns_decode_as_unsigned_integers() {
    let items = read_ok("mysql_type_bit.000001", TableFilter::all());
    let rows = rows(&items);
    assert_eq!(rows.len(), 1);
    let after = rows[0].after.as_ref().unwrap();
    assert_eq!(names(after), ["a", "b", "c"]);
    assert_eq!(
        after.values,
        vec![Value::UInt(0b100), text("foo"), Value::UInt(0b10_0000)]
    );
    assert_eq!(after.get("c"), Some(&Value::UInt(32)));
}

#[test]
fn minimal_metadata_and_minimal_image_use_positional_names_of_present_columns() {
    let items = read_ok("minimal_row_metadata.000001", TableFilter::all());
    let rows = rows(&items);
    assert_eq!(rows.len(), 1);
    let after = rows[0].after.as_ref().unwrap();
    // binlog_row_image=MINIMAL: only columns 1, 3 and 5 are in the image. Column 5 is an
    // unsigned INT (SIGNEDNESS metadata), column 3 a CHAR in utf8mb4_0900_ai_ci.
    assert_eq!(names(after), ["@1", "@3", "@5"]);
    assert_eq!(
        after.values,
        vec![Value::Int(1), text("a"), Value::UInt(3_230_202_323)]
    );
    assert_eq!(commits(&items)[0].position.position, 451);
}

#[test]
fn negative_time_over_24_hours_decodes() {
    let items = read_ok("time_issue.000001", TableFilter::all());
    let rows = rows(&items);
    assert_eq!(
        rows[0].after.as_ref().unwrap().values,
        vec![Value::Time {
            negative: true,
            hours: 21 * 24 + 3,
            minutes: 48,
            seconds: 27,
            micros: 0
        }]
    );
}

#[test]
fn truncated_fixture_names_the_file() {
    let path = fixture("binlog_truncated_event.000001");
    let (items, error) = read_all(&path, TableFilter::all());
    assert!(items.is_empty());
    match error {
        Some(BinlogError::FileCorrupt {
            path: reported,
            offset,
            ..
        }) => {
            assert_eq!(reported, path);
            assert_eq!(offset, 4);
        }
        other => panic!("expected FileCorrupt, got {other:?}"),
    }
}

#[test]
fn a_copy_cut_inside_an_event_fails_at_that_event_after_the_complete_ones() {
    let original = std::fs::read(fixture("mariadb-bin.000001")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mariadb-bin.000001");
    // The second transaction's WRITE_ROWS event spans bytes 984..1043.
    std::fs::write(&path, &original[..1000]).unwrap();
    let (items, error) = read_all(&path, TableFilter::all());
    // The first transaction is complete; the second one's rows never appear.
    assert_eq!(commits(&items).len(), 1);
    assert_eq!(rows(&items).len(), 1);
    match error {
        Some(BinlogError::FileCorrupt {
            path: reported,
            offset,
            reason,
        }) => {
            assert_eq!(reported, path);
            assert_eq!(offset, 984, "{reason}");
        }
        other => panic!("expected FileCorrupt, got {other:?}"),
    }
    // Cut exactly between events, inside the transaction: the missing commit is an error.
    std::fs::write(&path, &original[..1043]).unwrap();
    let (items, error) = read_all(&path, TableFilter::all());
    assert_eq!(rows(&items).len(), 2);
    assert_eq!(commits(&items).len(), 1);
    assert!(
        matches!(error, Some(BinlogError::FileCorrupt { offset: 1043, .. })),
        "{error:?}"
    );
}

#[test]
fn a_flipped_byte_inside_an_event_is_a_checksum_error() {
    let mut bytes = std::fs::read(fixture("mariadb-bin.000001")).unwrap();
    // A byte in the body of the second WRITE_ROWS event (984..1043): a row value.
    bytes[1030] ^= 0x01;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mariadb-bin.000001");
    std::fs::write(&path, &bytes).unwrap();
    let (items, error) = read_all(&path, TableFilter::all());
    assert_eq!(commits(&items).len(), 1, "the first transaction is intact");
    match error {
        Some(BinlogError::InFile {
            path: reported,
            source,
        }) => {
            assert_eq!(reported, path);
            match *source {
                BinlogError::ChecksumMismatch { position, .. } => {
                    assert_eq!(position, BinlogPosition::new("mariadb-bin.000001", 984));
                }
                other => panic!("expected ChecksumMismatch, got {other}"),
            }
        }
        other => panic!("expected a checksum error, got {other:?}"),
    }
}

#[test]
fn several_files_are_read_in_order() {
    let items_one = read_ok("mysql_type_bit.000001", TableFilter::all());
    let items_two = read_ok("mariadb-bin.000001", TableFilter::all());
    let mut reader = BinlogFileReader::open(
        vec![
            fixture("mysql_type_bit.000001"),
            fixture("mariadb-bin.000001"),
        ],
        TableFilter::all(),
    )
    .unwrap();
    let mut items = Vec::new();
    while let Some(item) = reader.next_item().unwrap() {
        items.push(item);
    }
    assert_eq!(items.len(), items_one.len() + items_two.len());
    assert_eq!(items.last(), items_two.last());
}

/// `bytes_read` (what `recover` and `inspect` show as progress) grows with every item and
/// ends at the files' total size.
#[test]
fn bytes_read_grows_to_the_total_size_of_the_files() {
    let files = vec![
        fixture("mysql_type_bit.000001"),
        fixture("mariadb-bin.000001"),
    ];
    let total: u64 = files
        .iter()
        .map(|file| std::fs::metadata(file).unwrap().len())
        .sum();
    let mut reader = BinlogFileReader::open(files, TableFilter::all()).unwrap();
    let mut previous = reader.bytes_read();
    assert!(previous <= 4, "{previous}");
    let mut grew = 0;
    while reader.next_item().unwrap().is_some() {
        let now = reader.bytes_read();
        assert!(now >= previous, "{now} < {previous}");
        if now > previous {
            grew += 1;
        }
        previous = now;
    }
    assert!(grew > 1, "bytes_read moved only {grew} times");
    assert_eq!(reader.bytes_read(), total);
}

/// Prefixes and single-bit flips of several fixtures (every third offset, to stay fast) read
/// to an end or an error: never a panic, never a loop (`read_all` bounds the item count).
#[test]
fn every_cut_and_every_flipped_bit_ends_in_ok_or_an_error() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "mariadb-bin.000001",
        "transaction_compression.000001",
        "update-full-row.binlog",
    ] {
        let original = std::fs::read(fixture(name)).unwrap();
        let path = dir.path().join(name);
        let mut cut_errors = 0;
        for cut in (0..original.len()).step_by(3) {
            std::fs::write(&path, &original[..cut]).unwrap();
            let (_, error) = read_all(&path, TableFilter::all());
            if error.is_some() {
                cut_errors += 1;
            }
        }
        // Only cuts exactly at the end of a complete transaction can be read cleanly.
        assert!(
            cut_errors > original.len() / 3 * 9 / 10,
            "{name}: {cut_errors}"
        );
        for index in (1..original.len()).step_by(3) {
            let mut damaged = original.clone();
            damaged[index] ^= 1 << (index % 8);
            std::fs::write(&path, &damaged).unwrap();
            let _ = read_all(&path, TableFilter::all());
        }
    }
}

/// With checksums on, every flipped bit after the magic bytes is detected: no damaged file
/// yields the same items as the intact one.
#[test]
fn every_flipped_bit_of_a_checksummed_file_is_detected() {
    let original = std::fs::read(fixture("mariadb-bin.000001")).unwrap();
    let (intact, _) = read_all(&fixture("mariadb-bin.000001"), TableFilter::all());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mariadb-bin.000001");
    for index in 4..original.len() {
        let mut damaged = original.clone();
        damaged[index] ^= 1 << (index % 8);
        std::fs::write(&path, &damaged).unwrap();
        let (items, error) = read_all(&path, TableFilter::all());
        assert!(
            error.is_some(),
            "flipping byte {index} went unnoticed: {items:?}"
        );
        assert!(items.len() < intact.len() || items != intact);
    }
}

/// Damage inside a compressed transaction that its CRC32 does not catch (the CRC is
/// recomputed): the decoder's error names the file and the payload event's offset.
#[test]
fn an_error_inside_a_compressed_transaction_names_the_file_and_the_payload() {
    let original = std::fs::read(fixture("transaction_compression.000001")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("transaction_compression.000001");
    // The TRANSACTION_PAYLOAD event spans bytes 274..431, its CRC32 the last 4.
    let (payload_start, payload_end) = (274, 431);
    for index in [payload_start + 19 + 2, payload_end - 12, payload_end - 5] {
        let mut bytes = original.clone();
        bytes[index] ^= 0x5a;
        let crc = crc32fast::hash(&bytes[payload_start..payload_end - 4]);
        bytes[payload_end - 4..payload_end].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let (items, error) = read_all(&path, TableFilter::all());
        assert!(items.is_empty(), "byte {index}: {items:?}");
        match error {
            Some(BinlogError::InFile {
                path: reported,
                source,
            }) => {
                assert_eq!(reported, path);
                let position = match *source {
                    BinlogError::MalformedEvent { position, .. }
                    | BinlogError::BrokenTransaction { position, .. }
                    | BinlogError::RowImageMismatch { position, .. } => position,
                    other => panic!("byte {index}: unexpected {other}"),
                };
                assert_eq!(
                    position,
                    BinlogPosition::new("transaction_compression.000001", payload_start as u64),
                    "byte {index}"
                );
            }
            other => panic!("byte {index}: expected an error in the file, got {other:?}"),
        }
    }
}

/// Every row carries its columns' SQL types and nullability as the TABLE_MAP describes
/// them (what Debezium derives schemas from), aligned with the columns even when the row
/// image holds only some of them (binlog_row_image=MINIMAL).
#[test]
fn rows_carry_their_columns_types_from_the_table_map() {
    let column = |sql_type, nullable| ColumnType { sql_type, nullable };
    let int = |unsigned| SqlType::Integer { bytes: 4, unsigned };
    for (name, expected) in [
        // The fixture's `CREATE TABLE foo(a BIT(3), b TEXT, c BIT(8))`.
        (
            "mysql_type_bit.000001",
            vec![
                column(SqlType::Bit { length: 3 }, true),
                column(SqlType::Text, true),
                column(SqlType::Bit { length: 8 }, true),
            ],
        ),
        // ENUM, SET, VARCHAR and TEXT are all text to Debezium.
        (
            "mysql-enum-string-set.000001",
            vec![column(SqlType::Text, true); 5],
        ),
        (
            "time_issue.000001",
            vec![column(SqlType::Time { fsp: 0 }, true)],
        ),
        ("json-opaque.binlog", vec![column(SqlType::Json, true)]),
        // Columns 1, 3 and 5 of the table only: their types, not the first three.
        (
            "minimal_row_metadata.000001",
            vec![
                column(int(false), false),
                column(SqlType::Text, true),
                column(int(true), true),
            ],
        ),
    ] {
        let items = read_ok(name, TableFilter::all());
        let first = rows(&items)[0];
        let image = first.after.as_ref().or(first.before.as_ref()).unwrap();
        assert_eq!(image.types.as_deref(), Some(&expected[..]), "{name}");
        assert_eq!(image.columns.len(), expected.len(), "{name}");
        assert_eq!(image.column_type(0), Some(expected[0]), "{name}");
    }
}
