//! Binary JSON -> Debezium's text: one test per value type with the rule that gives the
//! expected text, corrupt input, and a cross-check of every case (plus generated documents
//! and the fixture's documents) against mysql-binlog-connector-java itself, the library
//! Debezium's MySQL connector calls.

use super::*;

/// A document to encode as MySQL does (`json_binary.cc`): literals and 16-bit integers
/// inlined in their entry, 32-bit ones too in large containers; keys in the given order
/// (MySQL stores them sorted by length, then bytes; the writer must keep whatever order
/// the bytes have).
#[derive(Debug, Clone)]
enum Doc {
    Null,
    Bool(bool),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Opaque(u8, Vec<u8>),
    Object(Vec<(String, Doc)>, bool),
    Array(Vec<Doc>, bool),
}

fn variable_length(mut len: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

impl Doc {
    fn type_code(&self) -> u8 {
        match self {
            Doc::Object(_, false) => code::SMALL_OBJECT,
            Doc::Object(_, true) => code::LARGE_OBJECT,
            Doc::Array(_, false) => code::SMALL_ARRAY,
            Doc::Array(_, true) => code::LARGE_ARRAY,
            Doc::Null | Doc::Bool(_) => code::LITERAL,
            Doc::I16(_) => code::INT16,
            Doc::U16(_) => code::UINT16,
            Doc::I32(_) => code::INT32,
            Doc::U32(_) => code::UINT32,
            Doc::I64(_) => code::INT64,
            Doc::U64(_) => code::UINT64,
            Doc::F64(_) => code::DOUBLE,
            Doc::Str(_) => code::STRING,
            Doc::Opaque(..) => code::OPAQUE,
        }
    }

    /// The value's bytes without its type code.
    fn payload(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Doc::Null => out.push(0),
            Doc::Bool(true) => out.push(1),
            Doc::Bool(false) => out.push(2),
            Doc::I16(v) => out.extend(v.to_le_bytes()),
            Doc::U16(v) => out.extend(v.to_le_bytes()),
            Doc::I32(v) => out.extend(v.to_le_bytes()),
            Doc::U32(v) => out.extend(v.to_le_bytes()),
            Doc::I64(v) => out.extend(v.to_le_bytes()),
            Doc::U64(v) => out.extend(v.to_le_bytes()),
            Doc::F64(v) => out.extend(v.to_le_bytes()),
            Doc::Str(text) => {
                variable_length(text.len(), &mut out);
                out.extend(text.as_bytes());
            }
            Doc::Opaque(type_code, data) => {
                out.push(*type_code);
                variable_length(data.len(), &mut out);
                out.extend(data);
            }
            Doc::Object(members, large) => {
                let items: Vec<(Option<&str>, &Doc)> =
                    members.iter().map(|(k, v)| (Some(k.as_str()), v)).collect();
                return container(&items, *large, true);
            }
            Doc::Array(elements, large) => {
                let items: Vec<(Option<&str>, &Doc)> = elements.iter().map(|v| (None, v)).collect();
                return container(&items, *large, false);
            }
        }
        out
    }

    /// The whole column value: type code, then the value.
    fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.type_code()];
        out.extend(self.payload());
        out
    }
}

fn container(items: &[(Option<&str>, &Doc)], large: bool, object: bool) -> Vec<u8> {
    let width = if large { 4 } else { 2 };
    let put = |out: &mut Vec<u8>, at: usize, value: usize| {
        out[at..at + width].copy_from_slice(&(value as u32).to_le_bytes()[..width]);
    };
    let key_entry = if object { width + 2 } else { 0 };
    let header = 2 * width + items.len() * (key_entry + 1 + width);
    let mut out = vec![0u8; header];
    put(&mut out, 0, items.len());
    for (index, (key, _)) in items.iter().enumerate() {
        if let Some(key) = key {
            let entry = 2 * width + index * key_entry;
            let offset = out.len();
            put(&mut out, entry, offset);
            out[entry + width..entry + width + 2]
                .copy_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend(key.as_bytes());
        }
    }
    for (index, (_, value)) in items.iter().enumerate() {
        let entry = 2 * width + items.len() * key_entry + index * (1 + width);
        out[entry] = value.type_code();
        let inline = match value {
            Doc::Null | Doc::Bool(_) | Doc::I16(_) | Doc::U16(_) => true,
            Doc::I32(_) | Doc::U32(_) => large,
            _ => false,
        };
        if inline {
            let payload = value.payload();
            out[entry + 1..entry + 1 + payload.len()].copy_from_slice(&payload);
        } else {
            let offset = out.len();
            put(&mut out, entry + 1, offset);
            out.extend(value.payload());
        }
    }
    let size = out.len();
    put(&mut out, width, size);
    out
}

fn text(doc: &Doc) -> String {
    to_debezium_text(&doc.encode()).unwrap()
}

fn obj(members: &[(&str, Doc)]) -> Doc {
    Doc::Object(
        members
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
        false,
    )
}

/// MySQL's packed DATETIME (`TIME_to_longlong_datetime_packed`), little-endian.
fn packed_datetime(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> Vec<u8> {
    let ymd = ((y * 13 + mo) << 5) | d;
    let hms = (h << 12) | (mi << 6) | s;
    ((((ymd << 17) | hms) << 24) + us).to_le_bytes().to_vec()
}

/// MySQL's packed TIME (`TIME_to_longlong_time_packed`), little-endian.
fn packed_time(negative: bool, h: i64, mi: i64, s: i64, us: i64) -> Vec<u8> {
    let value = (((h << 12) | (mi << 6) | s) << 24) + us;
    (if negative { -value } else { value })
        .to_le_bytes()
        .to_vec()
}

/// Every case of the unit tests: the document and the text Debezium's rules give.
fn cases() -> Vec<(&'static str, Doc, String)> {
    let s = |t: &str| Doc::Str(t.to_owned());
    let decimal = |precision: u8, scale: u8, bin: &[u8]| {
        let mut data = vec![precision, scale];
        data.extend(bin);
        Doc::Opaque(column_type::NEWDECIMAL, data)
    };
    let long_text = "x".repeat(70_000);
    let many: Vec<(String, Doc)> = (0..300)
        .map(|i| (format!("k{i:03}"), Doc::I32(i * 1000)))
        .collect();
    let many_text = format!(
        "{{{}}}",
        (0..300)
            .map(|i| format!("\"k{i:03}\":{}", i * 1000))
            .collect::<Vec<_>>()
            .join(",")
    );
    vec![
        // Literals: null/true/false.
        ("null", Doc::Null, "null".into()),
        ("true", Doc::Bool(true), "true".into()),
        ("false", Doc::Bool(false), "false".into()),
        // Integers in decimal, each width and sign.
        ("int16", Doc::I16(-32768), "-32768".into()),
        ("uint16", Doc::U16(65535), "65535".into()),
        ("int32", Doc::I32(i32::MIN), "-2147483648".into()),
        ("uint32", Doc::U32(65536), "65536".into()),
        // Above 2^31-1 as the library reads it: a signed 32-bit number.
        ("uint32 high", Doc::U32(u32::MAX), "-1".into()),
        ("int64", Doc::I64(i64::MIN), "-9223372036854775808".into()),
        ("uint64", Doc::U64(u64::MAX), "18446744073709551615".into()),
        // Doubles: Double.toString in [1e-3, 1e7), always with a fraction.
        ("double 1", Doc::F64(1.0), "1.0".into()),
        ("double -0", Doc::F64(-0.0), "-0.0".into()),
        ("double 0", Doc::F64(0.0), "0.0".into()),
        ("double 0.1", Doc::F64(0.1), "0.1".into()),
        ("double 0.001", Doc::F64(0.001), "0.001".into()),
        ("double 123.456", Doc::F64(-123.456), "-123.456".into()),
        (
            "double below 1e7",
            Doc::F64(9_999_999.999),
            "9999999.999".into(),
        ),
        // ... and the exact expansion where Double.toString would use an exponent.
        ("double 1e7", Doc::F64(1e7), "10000000".into()),
        (
            "double 1e20",
            Doc::F64(1e20),
            "100000000000000000000".into(),
        ),
        ("double 1.5e300", Doc::F64(-1.5e300), {
            "-1500000000000000078757140382806630373056702871662238732373781173267703686983362293679557062620671796065556665749325817265413784853040645863467188277180060474272580801389863705606745350692182135089053429852456199917621678558451461320111979114170213741868888183230085264257173504208294580298189100810240".into()
        }),
        (
            "double 1e-4",
            Doc::F64(1e-4),
            "0.000100000000000000004792173602385929598312941379845142364501953125".into(),
        ),
        (
            "double 2^-20",
            Doc::F64(2f64.powi(-20)),
            "0.00000095367431640625".into(),
        ),
        // Strings: JSON escapes for " \ and control characters, unicode as itself.
        ("string", s("hello"), r#""hello""#.into()),
        (
            "string escapes",
            s("q\"b\\s/\u{8}\u{9}\n\u{c}\r\u{1}\u{1f}\u{7f}"),
            "\"q\\\"b\\\\s/\\b\\t\\n\\f\\r\\u0001\\u001F\u{7f}\"".into(),
        ),
        (
            "string unicode",
            s("Grüße € 😀 \u{2028}"),
            "\"Grüße € 😀 \u{2028}\"".into(),
        ),
        ("string empty", s(""), r#""""#.into()),
        ("string long", s(&long_text), format!("\"{long_text}\"")),
        // Objects keep the stored member order; nesting; escaped keys.
        (
            "object order",
            obj(&[("b", Doc::I16(1)), ("a", s("x")), ("aa", Doc::Null)]),
            r#"{"b":1,"a":"x","aa":null}"#.into(),
        ),
        (
            "object nested",
            obj(&[
                (
                    "o",
                    obj(&[(
                        "k\"",
                        Doc::Array(vec![Doc::Bool(true), Doc::I32(-70000), obj(&[])], false),
                    )]),
                ),
                ("e", Doc::Array(vec![], false)),
            ]),
            r#"{"o":{"k\"":[true,-70000,{}]},"e":[]}"#.into(),
        ),
        ("large object", Doc::Object(many, true), many_text),
        (
            "large array inlines",
            Doc::Array(
                vec![
                    Doc::I16(-5),
                    Doc::U16(7),
                    Doc::I32(-70000),
                    Doc::U32(70000),
                    Doc::Null,
                    Doc::Bool(false),
                    Doc::I64(1 << 40),
                    s("z"),
                ],
                true,
            ),
            r#"[-5,7,-70000,70000,null,false,1099511627776,"z"]"#.into(),
        ),
        (
            "small array",
            Doc::Array(vec![Doc::I16(-5), Doc::U32(70000), Doc::F64(2.5)], false),
            "[-5,70000,2.5]".into(),
        ),
        // Opaque DECIMAL: a bare number with its scale.
        (
            "decimal",
            decimal(6, 3, &[0x80, 0x7b, 0x01, 0xc8]),
            "123.456".into(),
        ),
        (
            "decimal scale",
            decimal(5, 2, &[0x80, 0x09, 0x00]),
            "9.00".into(),
        ),
        (
            "decimal negative",
            decimal(4, 2, &[0x7f, 0xcd]),
            "-0.50".into(),
        ),
        // Opaque DATE, DATETIME, TIMESTAMP, TIME: strings; a fraction only when not zero,
        // without trailing zeros.
        (
            "date",
            Doc::Opaque(column_type::DATE, packed_datetime(2012, 3, 18, 0, 0, 0, 0)),
            r#""2012-03-18""#.into(),
        ),
        (
            "datetime",
            Doc::Opaque(
                column_type::DATETIME,
                packed_datetime(2012, 3, 18, 11, 30, 45, 0),
            ),
            r#""2012-03-18 11:30:45""#.into(),
        ),
        (
            "datetime fraction",
            Doc::Opaque(
                column_type::DATETIME,
                packed_datetime(2012, 3, 18, 11, 30, 45, 500_000),
            ),
            r#""2012-03-18 11:30:45.5""#.into(),
        ),
        (
            "datetime small fraction",
            Doc::Opaque(
                column_type::DATETIME,
                packed_datetime(999, 1, 2, 3, 4, 5, 120),
            ),
            r#""0999-01-02 03:04:05.00012""#.into(),
        ),
        (
            "timestamp",
            Doc::Opaque(
                column_type::TIMESTAMP,
                packed_datetime(1999, 12, 31, 23, 59, 59, 100_000),
            ),
            r#""1999-12-31 23:59:59.1""#.into(),
        ),
        (
            "timestamp2",
            Doc::Opaque(
                column_type::TIMESTAMP2,
                packed_datetime(2024, 2, 29, 0, 0, 0, 1),
            ),
            r#""2024-02-29 00:00:00.000001""#.into(),
        ),
        (
            "time",
            Doc::Opaque(column_type::TIME, packed_time(false, 87, 31, 46, 654_321)),
            r#""87:31:46.654321""#.into(),
        ),
        (
            "time zero",
            Doc::Opaque(column_type::TIME, packed_time(false, 0, 0, 0, 0)),
            r#""00:00:00""#.into(),
        ),
        // Negative TIMEs as Debezium's arithmetic prints them (not MySQL's "-00:00:01").
        (
            "time negative",
            Doc::Opaque(column_type::TIME, packed_time(true, 0, 0, 1, 0)),
            r#""01:0-1:0-1""#.into(),
        ),
        (
            "time negative fraction",
            Doc::Opaque(column_type::TIME, packed_time(true, 1, 2, 3, 500_000)),
            r#""02:0-3:0-4.00000-5""#.into(),
        ),
        // Other opaque values: Base64 strings of their bytes.
        (
            "opaque blob",
            Doc::Opaque(252, vec![1, 2, 0xff]),
            r#""AQL/""#.into(),
        ),
        (
            "opaque varchar",
            Doc::Opaque(15, b"xyz".to_vec()),
            r#""eHl6""#.into(),
        ),
        ("opaque bit", Doc::Opaque(16, vec![5]), r#""BQ==""#.into()),
        ("opaque empty", Doc::Opaque(255, vec![]), r#""""#.into()),
    ]
}

#[test]
fn every_json_type_is_written_in_debeziums_form() {
    for (name, doc, expected) in cases() {
        assert_eq!(text(&doc), expected, "{name}");
    }
}

#[test]
fn inlined_uint32_in_a_large_container_is_its_value() {
    // Deliberate difference: mysql-binlog-connector-java 0.41.0 writes `[1,,2]` here.
    let doc = Doc::Array(vec![Doc::I32(1), Doc::U32(u32::MAX), Doc::I32(2)], true);
    assert_eq!(text(&doc), "[1,4294967295,2]");
}

#[test]
fn json_text_is_passed_on() {
    // A first byte above 15 is JSON text, not binary JSON (the library's own test).
    assert_eq!(to_debezium_text(br#"{"a": 1}"#).unwrap(), r#"{"a": 1}"#);
}

#[test]
fn corrupt_binary_json_is_an_error_naming_the_position() {
    let good = obj(&[("name", Doc::Str("value".into())), ("n", Doc::F64(1.5))]).encode();
    // Every cut of a valid document is an error (or, for a cut inside a value the
    // container's size does not cover, still no panic).
    for len in 1..good.len() {
        let result = to_debezium_text(&good[..len]);
        let error = result.expect_err(&format!("cut at {len}"));
        assert!(error.contains("at byte"), "{error}");
    }
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0x0d, 0], "at byte 0: unknown value type 0x0d"),
        (vec![0x04, 7], "unknown literal 0x07"),
        (vec![0x0c, 2, 0xc3, 0x28], "not UTF-8"),
        (
            vec![0x0c, 0xff, 0xff, 0xff, 0xff, 0xff],
            "runs past 5 bytes",
        ),
        (vec![0x0f, 20, 2, b'a', b'b'], "unknown column type 20"),
        (vec![0x0f, 246, 3, 70, 2, 0], "DECIMAL(70,2)"),
        (vec![0x0f, 246, 3, 5, 2, 0x80], "DECIMAL"),
        (vec![0x0f, 12, 2, 0, 0], "packed temporal value"),
        // An array claiming 1000 elements in 10 bytes.
        (
            vec![0x02, 0xe8, 0x03, 10, 0, 0, 0, 0, 0, 0, 0],
            "does not fit",
        ),
        // An offset beyond the container.
        (vec![0x02, 1, 0, 7, 0, 0x0c, 0x40, 0], "outside"),
        (
            f64::NAN.to_le_bytes().iter().fold(vec![0x0b], |mut v, b| {
                v.push(*b);
                v
            }),
            "a double is NaN",
        ),
    ];
    for (bytes, wanted) in cases {
        let error = to_debezium_text(&bytes).expect_err(wanted);
        assert!(error.contains(wanted), "{error:?} lacks {wanted:?}");
        assert!(
            error.contains("at byte") || error.contains("not UTF-8"),
            "{error}"
        );
    }
    // Deep nesting is refused, not a stack overflow.
    let mut deep = Doc::Array(vec![], false);
    for _ in 0..200 {
        deep = Doc::Array(vec![deep], false);
    }
    assert!(to_debezium_text(&deep.encode())
        .unwrap_err()
        .contains("nest deeper"));
}

proptest::proptest! {
    /// Arbitrary bytes never panic the writer.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 1..200)) {
        let _ = to_debezium_text(&bytes);
    }
}

/// The binary JSON of the eight documents in `../shared/fixtures/binlogs/json-opaque.binlog`
/// (MySQL 9.0.1), taken from its WRITE_ROWS events, with the texts `tests/fixtures.rs`
/// expects.
const FIXTURE_DOCUMENTS: [(&str, &str); 8] = [
    ("0001000f000b0001000f0c00610f0155", r#"{"a":"VQ=="}"#),
    (
        "00010016000b0001000f0c00620a080000000000e48b19",
        r#"{"b":"2012-03-18"}"#,
    ),
    (
        "00010016000b0001000f0c00630c08000000adb7e48b19",
        r#"{"c":"2012-03-18 11:30:45"}"#,
    ),
    (
        "00010016000b0001000f0c00630b08f1fb09ee77050000",
        r#"{"c":"87:31:46.654321"}"#,
    ),
    (
        "00010014000b0001000f0c0064f6060603807b01c8",
        r#"{"d":123.456}"#,
    ),
    (
        "00010015000b0001000f0c0065f6070b028000000900",
        r#"{"e":9.00}"#,
    ),
    (
        "0001001c000b000100020c006504001000050000050100040100040200",
        r#"{"e":[0,1,true,false]}"#,
    ),
    ("0001000c000b00010004000065", r#"{"e":null}"#),
];

fn from_hex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn fixture_documents_are_written_in_debeziums_form() {
    for (hex, expected) in FIXTURE_DOCUMENTS {
        assert_eq!(to_debezium_text(&from_hex(hex)).unwrap(), expected);
    }
}

/// A small deterministic generator (xorshift) of documents for the cross-check.
struct Generator(u64);

impl Generator {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn double(&mut self) -> f64 {
        match self.next() % 4 {
            // Any finite bit pattern (every exponent).
            0 => loop {
                let value = f64::from_bits(self.next());
                if value.is_finite() {
                    break value;
                }
            },
            // Decimal-looking values like payloads hold.
            1 => (self.next() % 10_000_000) as f64 / 100.0,
            2 => (self.next() % 1000) as f64 / 1e6,
            _ => (self.next() % 1_000_000) as f64 * 1e3,
        }
    }

    fn string(&mut self) -> String {
        const PIECES: [&str; 10] = ["a", "Z", "\"", "\\", "\n", "\u{1}", "é", "€", "😀", "k"];
        let len = (self.next() % 8) as usize;
        (0..len)
            .map(|_| PIECES[(self.next() % PIECES.len() as u64) as usize])
            .collect()
    }

    fn doc(&mut self, depth: u32) -> Doc {
        let pick = self.next() % if depth > 3 { 10 } else { 13 };
        match pick {
            0 => Doc::Null,
            1 => Doc::Bool(self.next().is_multiple_of(2)),
            2 => Doc::I16(self.next() as i16),
            3 => Doc::U16(self.next() as u16),
            4 => Doc::I32(self.next() as i32),
            5 => Doc::U32(self.next() as u32 & 0x7fff_ffff),
            6 => Doc::I64(self.next() as i64),
            7 => Doc::U64(self.next()),
            8 => Doc::F64(self.double()),
            9 => Doc::Str(self.string()),
            10 => {
                let large = self.next().is_multiple_of(4);
                let len = self.next() % 5;
                let members = (0..len)
                    .map(|i| (format!("{}{i}", self.string()), self.doc(depth + 1)))
                    .collect();
                Doc::Object(members, large)
            }
            11 => {
                let large = self.next().is_multiple_of(4);
                let len = self.next() % 5;
                Doc::Array((0..len).map(|_| self.doc(depth + 1)).collect(), large)
            }
            _ => {
                let micros = (self.next() % 1_000_000) as i64;
                let micros = if self.next().is_multiple_of(3) {
                    0
                } else {
                    micros
                };
                let second = (self.next() % 60) as i64;
                match self.next() % 5 {
                    0 => Doc::Opaque(
                        column_type::DATETIME,
                        packed_datetime(
                            2000 + (self.next() % 30) as i64,
                            1 + (self.next() % 12) as i64,
                            1 + (self.next() % 28) as i64,
                            (self.next() % 24) as i64,
                            7,
                            second,
                            micros,
                        ),
                    ),
                    1 => Doc::Opaque(
                        column_type::DATE,
                        packed_datetime(
                            1970 + (self.next() % 60) as i64,
                            1 + (self.next() % 12) as i64,
                            1 + (self.next() % 28) as i64,
                            0,
                            0,
                            0,
                            0,
                        ),
                    ),
                    2 => Doc::Opaque(
                        column_type::TIME,
                        packed_time(false, (self.next() % 839) as i64, 59, second, micros),
                    ),
                    3 => {
                        let data: Vec<u8> =
                            (0..self.next() % 7).map(|_| self.next() as u8).collect();
                        Doc::Opaque(252, data)
                    }
                    _ => Doc::Opaque(
                        column_type::NEWDECIMAL,
                        vec![
                            5,
                            2,
                            0x80,
                            (self.next() % 100) as u8,
                            (self.next() % 100) as u8,
                        ],
                    ),
                }
            }
        }
    }
}

/// Runs mysql-binlog-connector-java's `JsonBinary.parseAsString` (the jar from Debezium's
/// plugin folder) on each document, through a one-file Java program.
fn debezium_texts(documents: &[Vec<u8>]) -> Vec<String> {
    use std::io::Write as _;
    let folders = outbox_testkit::process::jar_folders().expect("the jar folders");
    let jar = std::fs::read_dir(&folders.debezium)
        .expect("Debezium's plugin folder")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("mysql-binlog-connector-java"))
        })
        .expect("mysql-binlog-connector-java in Debezium's plugin folder");
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("ParseAsString.java");
    std::fs::write(
        &source,
        r#"
import com.github.shyiko.mysql.binlog.event.deserialization.json.JsonBinary;
import java.io.*;
public class ParseAsString {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
    String line;
    while ((line = in.readLine()) != null) {
      byte[] b = new byte[line.length() / 2];
      for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(line.substring(2 * i, 2 * i + 2), 16);
      String text;
      try { text = "OK " + JsonBinary.parseAsString(b); } catch (Exception e) { text = "ERR " + e; }
      // One line per document: the text's own line breaks are escaped in JSON already.
      out.println(text);
    }
  }
}
"#,
    )
    .unwrap();
    let java = std::env::var_os("JAVA_HOME")
        .map(|home| std::path::PathBuf::from(home).join("bin/java"))
        .filter(|java| java.is_file())
        .unwrap_or_else(|| "java".into());
    let mut child = std::process::Command::new(java)
        .args([
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
        ])
        .arg(&jar)
        .arg(&source)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("java runs");
    let mut stdin = child.stdin.take().unwrap();
    let input: String = documents.iter().map(|d| to_hex(d) + "\n").collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(output.status.success(), "java failed");
    let stdout = String::from_utf8(output.stdout).unwrap();
    stdout.lines().map(str::to_owned).collect()
}

/// The differential check: every unit case, the fixture's documents and 3000 generated
/// documents give exactly the library's text. Deliberate differences are listed here.
#[test]
fn texts_match_the_library_debezium_uses() {
    let mut documents: Vec<Vec<u8>> = cases().iter().map(|(_, doc, _)| doc.encode()).collect();
    documents.extend(FIXTURE_DOCUMENTS.iter().map(|(hex, _)| from_hex(hex)));
    let mut generator = Generator(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3000 {
        documents.push(generator.doc(0).encode());
    }
    let theirs = debezium_texts(&documents);
    assert_eq!(theirs.len(), documents.len());
    let (mut compared, mut not_json) = (0, 0);
    for (bytes, theirs) in documents.iter().zip(&theirs) {
        let ours = to_debezium_text(bytes).unwrap();
        let their_text = theirs.strip_prefix("OK ").unwrap_or(theirs);
        if serde_json::from_str::<serde::de::IgnoredAny>(their_text).is_err() {
            // The deliberate difference (an inlined uint32 in a large container, which the
            // library leaves out): ours is JSON, with the same text around the gap.
            assert!(
                their_text.contains(",,")
                    || their_text.contains("[,")
                    || their_text.contains(":,")
                    || their_text.contains(":}")
                    || their_text.contains(",]"),
                "{their_text}"
            );
            serde_json::from_str::<serde::de::IgnoredAny>(&ours).expect("our text is JSON");
            not_json += 1;
            continue;
        }
        assert_eq!(
            Some(ours.as_str()),
            theirs.strip_prefix("OK "),
            "document {}",
            to_hex(bytes)
        );
        compared += 1;
    }
    println!(
        "{compared} documents written exactly as mysql-binlog-connector-java writes them; \
         {not_json} where its text is not JSON (inlined uint32 in a large container)"
    );
    assert!(compared > 2900, "{compared}");
}
