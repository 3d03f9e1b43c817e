//! Writes rows of every column type the router may meet into a scratch MariaDB, flushes the
//! binary log, and reads the written binlog files back with `BinlogFileReader`, asserting
//! every decoded value (integers of both signs, DECIMAL, FLOAT/DOUBLE, utf8mb4 with a 4-byte
//! emoji, latin1, BLOB/BINARY, MariaDB JSON (LONGTEXT), ENUM/SET, BIT, YEAR, DATE, TIME(6),
//! DATETIME(6), TIMESTAMP(6), GEOMETRY, NULLs), updates, deletes and table filtering.

use std::path::PathBuf;

use outbox_binlog::{
    BinlogFileReader, DateTime, Flavor, Gtid, Row, RowOperation, StreamItem, TableFilter,
    TableName, Value,
};
use outbox_testkit::{ScratchMariadb, ScratchOptions};

const CREATE_TABLE: &str = "CREATE TABLE shop.types (
    id INT PRIMARY KEY,
    t_tiny TINYINT,
    t_year YEAR,
    t_utiny TINYINT UNSIGNED,
    t_small SMALLINT,
    t_usmall SMALLINT UNSIGNED,
    t_medium MEDIUMINT,
    t_umedium MEDIUMINT UNSIGNED,
    t_int INT,
    t_uint INT UNSIGNED,
    t_big BIGINT,
    t_ubig BIGINT UNSIGNED,
    t_dec DECIMAL(12,4),
    t_dec_wide DECIMAL(30,10),
    t_float FLOAT,
    t_double DOUBLE,
    t_vc VARCHAR(100) CHARACTER SET utf8mb4,
    t_geo POINT,
    t_latin TEXT CHARACTER SET latin1,
    t_char CHAR(10) CHARACTER SET utf8mb4,
    t_blob BLOB,
    t_binary BINARY(4),
    t_varbinary VARBINARY(300),
    t_json JSON,
    t_enum ENUM('small','medium','large'),
    t_set SET('a','b','c','d'),
    t_bit BIT(12),
    t_date DATE,
    t_time TIME(6),
    t_time_neg TIME,
    t_dt DATETIME(6),
    t_ts TIMESTAMP(6) NULL,
    t_text MEDIUMTEXT CHARACTER SET utf8mb4,
    t_null_int INT NULL
) ENGINE=InnoDB";

const COLUMNS: [&str; 34] = [
    "id",
    "t_tiny",
    "t_year",
    "t_utiny",
    "t_small",
    "t_usmall",
    "t_medium",
    "t_umedium",
    "t_int",
    "t_uint",
    "t_big",
    "t_ubig",
    "t_dec",
    "t_dec_wide",
    "t_float",
    "t_double",
    "t_vc",
    "t_geo",
    "t_latin",
    "t_char",
    "t_blob",
    "t_binary",
    "t_varbinary",
    "t_json",
    "t_enum",
    "t_set",
    "t_bit",
    "t_date",
    "t_time",
    "t_time_neg",
    "t_dt",
    "t_ts",
    "t_text",
    "t_null_int",
];

fn insert_full_row() -> String {
    format!(
        "INSERT INTO shop.types VALUES (1, -128, 2155, 255, -32768, 65535, -8388608, 16777215, \
         -2147483648, 4294967295, -9223372036854775808, 18446744073709551615, \
         -12345678.1234, 12345678901234567890.0000000001, 1.5, 3.141592653589793, \
         'héllo 🎉 wörld', ST_GeomFromText('POINT(1 2)'), 'café €', 'abc', x'00ff10', x'0102', \
         x'{}', '{{\"k\": [1, \"two\", null]}}', 'medium', 'a,c', b'101010101010', '2024-02-29', \
         '838:59:58.999999', '-01:02:03', '9999-12-31 23:59:59.000001', \
         '2024-02-29 12:34:56.789012', CONCAT(REPEAT('x', 70000), 'ü'), NULL)",
        varbinary_value()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

fn varbinary_value() -> Vec<u8> {
    (0..300u32).map(|i| (i % 256) as u8).collect()
}

fn text(value: &str) -> Value {
    Value::Text(value.to_owned())
}

fn expected_full_values() -> Vec<Value> {
    let mut point = vec![0u8, 0, 0, 0, 1, 1, 0, 0, 0];
    point.extend_from_slice(&1f64.to_le_bytes());
    point.extend_from_slice(&2f64.to_le_bytes());
    vec![
        Value::Int(1),
        Value::Int(-128),
        Value::Int(2155),
        Value::UInt(255),
        Value::Int(-32768),
        Value::UInt(65535),
        Value::Int(-8_388_608),
        Value::UInt(16_777_215),
        Value::Int(-2_147_483_648),
        Value::UInt(4_294_967_295),
        Value::Int(i64::MIN),
        Value::UInt(u64::MAX),
        Value::Decimal("-12345678.1234".into()),
        Value::Decimal("12345678901234567890.0000000001".into()),
        Value::Float(1.5),
        Value::Double(std::f64::consts::PI),
        text("héllo 🎉 wörld"),
        Value::Bytes(point),
        text("café €"),
        text("abc"),
        Value::Bytes(vec![0x00, 0xff, 0x10]),
        Value::Bytes(vec![1, 2, 0, 0]),
        Value::Bytes(varbinary_value()),
        text(r#"{"k": [1, "two", null]}"#),
        text("medium"),
        text("a,c"),
        Value::UInt(0b1010_1010_1010),
        Value::Date(DateTime {
            year: 2024,
            month: 2,
            day: 29,
            hour: 0,
            minute: 0,
            second: 0,
            micros: 0,
        }),
        Value::Time {
            negative: false,
            hours: 838,
            minutes: 59,
            seconds: 58,
            micros: 999_999,
        },
        Value::Time {
            negative: true,
            hours: 1,
            minutes: 2,
            seconds: 3,
            micros: 0,
        },
        Value::DateTime(DateTime {
            year: 9999,
            month: 12,
            day: 31,
            hour: 23,
            minute: 59,
            second: 59,
            micros: 1,
        }),
        Value::Timestamp {
            unix_seconds: 1_709_210_096,
            micros: 789_012,
        },
        text(&format!("{}ü", "x".repeat(70_000))),
        Value::Null,
    ]
}

/// The binlog files of a scratch server, in order (after FLUSH BINARY LOGS all are closed
/// but the new, empty last one).
fn binlog_files(server: &ScratchMariadb) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(server.datadir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("binlog.") && !n.ends_with(".index"))
        })
        .collect();
    files.sort();
    files
}

fn read_everything(files: Vec<PathBuf>, filter: TableFilter) -> (Vec<StreamItem>, Option<Flavor>) {
    let mut reader = BinlogFileReader::open(files, filter).unwrap();
    let mut items = Vec::new();
    while let Some(item) = reader.next_item().unwrap() {
        items.push(item);
    }
    (items, reader.flavor())
}

async fn write_rows(server: &ScratchMariadb) {
    let insert = insert_full_row();
    server
        .exec(&[
            "SET time_zone = '+00:00'",
            "CREATE DATABASE shop",
            CREATE_TABLE,
            "CREATE TABLE shop.other (id INT PRIMARY KEY, note VARCHAR(20)) ENGINE=InnoDB",
            &insert,
            // All nullable columns NULL, plus an unwatched row in the same transaction.
            "BEGIN",
            "INSERT INTO shop.types (id) VALUES (2)",
            "INSERT INTO shop.other VALUES (1, 'not watched')",
            "COMMIT",
            "UPDATE shop.types SET t_vc = 'changed', t_null_int = -7 WHERE id = 1",
            "DELETE FROM shop.types WHERE id = 2",
            "FLUSH BINARY LOGS",
        ])
        .await
        .unwrap();
}

fn rows_of(items: &[StreamItem]) -> Vec<&outbox_binlog::RowChange> {
    items
        .iter()
        .filter_map(|item| match item {
            StreamItem::Row(row) => Some(row),
            _ => None,
        })
        .collect()
}

/// Compares column by column, printing at most a few hundred characters per value (one
/// value is 70 000 characters long).
fn assert_values(got: &[Value], want: &[Value]) {
    assert_eq!(got.len(), want.len(), "column count");
    for ((name, got), want) in COLUMNS.iter().zip(got).zip(want) {
        if got != want {
            let short = |v: &Value| format!("{v:?}").chars().take(300).collect::<String>();
            panic!("column {name}: got {} want {}", short(got), short(want));
        }
    }
}

fn columns_of(row: &Row) -> Vec<&str> {
    row.columns.iter().map(String::as_str).collect()
}

#[tokio::test]
async fn every_column_type_decodes_from_mariadb_binlog_files() {
    let server = ScratchMariadb::start().await.unwrap();
    write_rows(&server).await;
    let files = binlog_files(&server);
    assert!(!files.is_empty());

    let types = TableName::new("shop", "types");
    let (items, flavor) = read_everything(files.clone(), TableFilter::tables([types.clone()]));
    assert_eq!(flavor, Some(Flavor::Mariadb));
    let rows = rows_of(&items);
    assert_eq!(rows.len(), 4, "insert, insert, update, delete: {rows:#?}");
    for row in &rows {
        assert_eq!(row.table.as_ref(), &types);
    }

    let full = expected_full_values();
    let inserted = rows[0].after.as_ref().unwrap();
    assert_eq!(columns_of(inserted), COLUMNS);
    assert_values(&inserted.values, &full);
    assert_eq!(rows[0].operation, RowOperation::Insert);

    let nulls = rows[1].after.as_ref().unwrap();
    assert_eq!(nulls.values[0], Value::Int(2));
    assert!(
        nulls.values[1..].iter().all(|v| *v == Value::Null),
        "{:?}",
        nulls.values
    );

    assert_eq!(rows[2].operation, RowOperation::Update);
    assert_values(&rows[2].before.as_ref().unwrap().values, &full);
    let updated = rows[2].after.as_ref().unwrap();
    assert_eq!(updated.get("t_vc"), Some(&text("changed")));
    assert_eq!(updated.get("t_null_int"), Some(&Value::Int(-7)));
    assert_eq!(updated.get("t_dec"), Some(&full[12]));

    assert_eq!(rows[3].operation, RowOperation::Delete);
    assert_eq!(rows[3].before.as_ref().unwrap().values[0], Value::Int(2));
    assert!(rows[3].after.is_none());

    // Every transaction (DDL included) commits with a MariaDB GTID at increasing positions,
    // and the commit of the two-table transaction counts only the watched row.
    let commits: Vec<_> = items
        .iter()
        .filter_map(|item| match item {
            StreamItem::Commit(commit) => Some(commit),
            _ => None,
        })
        .collect();
    let sequences: Vec<u64> = commits
        .iter()
        .map(|c| match &c.gtid {
            Some(Gtid::Mariadb {
                domain_id: 0,
                server_id: 1,
                sequence,
            }) => *sequence,
            other => panic!("unexpected GTID {other:?}"),
        })
        .collect();
    assert!(
        sequences.windows(2).all(|w| w[1] == w[0] + 1),
        "{sequences:?}"
    );
    let row_counts: Vec<u64> = commits.iter().map(|c| c.row_count).collect();
    assert_eq!(row_counts.iter().sum::<u64>(), 4);
    assert!(row_counts.ends_with(&[1, 1, 1, 1]), "{row_counts:?}");
    assert!(commits
        .windows(2)
        .all(|w| (&w[0].position.file, w[0].position.position)
            < (&w[1].position.file, w[1].position.position)));

    // Nothing of the unwatched table is decoded.
    let (all_items, _) = read_everything(files, TableFilter::all());
    let other_rows: Vec<_> = rows_of(&all_items)
        .into_iter()
        .filter(|row| row.table.table == "other")
        .collect();
    assert_eq!(other_rows.len(), 1);
    assert_eq!(
        other_rows[0].after.as_ref().unwrap().values,
        vec![Value::Int(1), text("not watched")]
    );
}

#[tokio::test]
async fn minimal_row_metadata_keeps_types_and_charsets_and_names_columns_by_position() {
    let server = ScratchMariadb::start_with(ScratchOptions {
        binlog_row_metadata: "MINIMAL",
        ..ScratchOptions::default()
    })
    .await
    .unwrap();
    write_rows(&server).await;
    let (items, _) = read_everything(
        binlog_files(&server),
        TableFilter::tables([TableName::new("shop", "types")]),
    );
    let rows = rows_of(&items);
    let inserted = rows[0].after.as_ref().unwrap();
    let positional: Vec<String> = (1..=COLUMNS.len()).map(|i| format!("@{i}")).collect();
    assert_eq!(inserted.columns.to_vec(), positional);
    // Without ENUM/SET member names in MINIMAL metadata, ENUM is its index and SET its
    // bitmask; everything else decodes as with FULL metadata.
    let mut expected = expected_full_values();
    expected[24] = Value::UInt(2);
    expected[25] = Value::UInt(0b101);
    assert_values(&inserted.values, &expected);
}
