//! Column character sets: which collation ids mean which text encoding, and decoding of
//! column bytes to UTF-8.
//!
//! The binlog's optional metadata gives every character column a *collation id*. Ids up to
//! 323 are shared by MySQL and MariaDB; MariaDB adds its own above 512 (e.g. the
//! `*_uca1400_*` collations at 2048-2503). The table below was generated from
//! `information_schema.COLLATION_CHARACTER_SET_APPLICABILITY` of MariaDB 10.11 for the
//! charsets we decode; other ids fall back to `mysql_common`'s MySQL collation table.

use mysql_common::collations::{Collation, CollationId};

use crate::types::Value;

/// How the bytes of a text column are turned into a [`Value`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TextEncoding {
    /// utf8mb4, utf8mb3, ascii: the bytes must be valid UTF-8.
    Utf8,
    /// latin1, which MySQL defines as cp1252 with the five undefined bytes mapped to the
    /// C1 control characters: every byte sequence decodes.
    Latin1,
    /// The `binary` charset (collation 63): the value is bytes, not text.
    Binary,
    /// A charset this reader does not decode; values become [`Value::UndecodableText`]
    /// named with this label (e.g. `collation 28 (gbk)`).
    Other(String),
    /// No charset is known (a server that writes no optional metadata): valid UTF-8 becomes
    /// text, anything else [`Value::UndecodableText`] with charset `unknown`.
    Unknown,
}

/// Inclusive id ranges of the collations we decode, `(first, last, charset)`.
const COLLATION_RANGES: &[(u16, u16, &str)] = &[
    (5, 5, "latin1"),
    (8, 8, "latin1"),
    (11, 11, "ascii"),
    (15, 15, "latin1"),
    (31, 31, "latin1"),
    (33, 33, "utf8mb3"),
    (45, 46, "utf8mb4"),
    (47, 49, "latin1"),
    (63, 63, "binary"),
    (65, 65, "ascii"),
    (76, 76, "utf8mb3"),
    (83, 83, "utf8mb3"),
    (94, 94, "latin1"),
    (192, 215, "utf8mb3"),
    (223, 223, "utf8mb3"),
    (224, 247, "utf8mb4"),
    (255, 323, "utf8mb4"),
    (576, 578, "utf8mb3"),
    (608, 610, "utf8mb4"),
    (1032, 1032, "latin1"),
    (1035, 1035, "ascii"),
    (1057, 1057, "utf8mb3"),
    (1069, 1070, "utf8mb4"),
    (1071, 1071, "latin1"),
    (1089, 1089, "ascii"),
    (1107, 1107, "utf8mb3"),
    (1216, 1216, "utf8mb3"),
    (1238, 1238, "utf8mb3"),
    (1248, 1248, "utf8mb4"),
    (1270, 1270, "utf8mb4"),
    (2048, 2215, "utf8mb3"),
    (2232, 2247, "utf8mb3"),
    (2304, 2471, "utf8mb4"),
    (2488, 2503, "utf8mb4"),
];

/// The encoding of a column with collation `id`.
pub(crate) fn encoding_of_collation(id: u16) -> TextEncoding {
    let charset = COLLATION_RANGES
        .iter()
        .find(|(first, last, _)| (*first..=*last).contains(&id))
        .map(|(_, _, charset)| *charset);
    let charset = match charset {
        Some(charset) => charset.to_owned(),
        None => Collation::resolve(CollationId::from(id))
            .charset()
            .to_owned(),
    };
    match charset.as_str() {
        "utf8mb4" | "utf8mb3" | "utf8" | "ascii" => TextEncoding::Utf8,
        "latin1" => TextEncoding::Latin1,
        "binary" => TextEncoding::Binary,
        "" | "unknown" => TextEncoding::Other(format!("collation {id}")),
        other => TextEncoding::Other(format!("collation {id} ({other})")),
    }
}

/// cp1252 code points of bytes 0x80-0x9F as MySQL's latin1 defines them.
const LATIN1_HIGH_CONTROL: [char; 32] = [
    '\u{20AC}', '\u{0081}', '\u{201A}', '\u{0192}', '\u{201E}', '\u{2026}', '\u{2020}', '\u{2021}',
    '\u{02C6}', '\u{2030}', '\u{0160}', '\u{2039}', '\u{0152}', '\u{008D}', '\u{017D}', '\u{008F}',
    '\u{0090}', '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2022}', '\u{2013}', '\u{2014}',
    '\u{02DC}', '\u{2122}', '\u{0161}', '\u{203A}', '\u{0153}', '\u{009D}', '\u{017E}', '\u{0178}',
];

/// Decodes MySQL latin1 (cp1252 variant) to a string; never fails.
pub(crate) fn decode_latin1(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for &byte in bytes {
        let character = match byte {
            0x80..=0x9F => LATIN1_HIGH_CONTROL[usize::from(byte - 0x80)],
            _ => char::from(byte),
        };
        text.push(character);
    }
    text
}

/// The value of utf8mb3/utf8mb4/ascii column bytes that are not valid UTF-8.
#[cold]
pub(crate) fn undecodable_utf8(bytes: &[u8]) -> Value {
    Value::UndecodableText {
        bytes: bytes.to_vec(),
        charset: "utf8".to_owned(),
    }
}

/// Turns the bytes of a text column into a value according to its encoding.
pub(crate) fn decode_text(bytes: &[u8], encoding: &TextEncoding) -> Value {
    match encoding {
        TextEncoding::Utf8 => match std::str::from_utf8(bytes) {
            Ok(text) => Value::Text(text.to_owned()),
            Err(_) => undecodable_utf8(bytes),
        },
        TextEncoding::Latin1 => {
            if bytes.is_ascii() {
                // Fast path: ASCII is the same in every charset we know.
                Value::Text(String::from_utf8_lossy(bytes).into_owned())
            } else {
                Value::Text(decode_latin1(bytes))
            }
        }
        TextEncoding::Binary => Value::Bytes(bytes.to_vec()),
        TextEncoding::Other(label) => Value::UndecodableText {
            bytes: bytes.to_vec(),
            charset: label.clone(),
        },
        TextEncoding::Unknown => match std::str::from_utf8(bytes) {
            Ok(text) => Value::Text(text.to_owned()),
            Err(_) => Value::UndecodableText {
                bytes: bytes.to_vec(),
                charset: "unknown".to_owned(),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collations_map_to_encodings() {
        assert_eq!(encoding_of_collation(45), TextEncoding::Utf8);
        assert_eq!(encoding_of_collation(255), TextEncoding::Utf8);
        assert_eq!(encoding_of_collation(2304), TextEncoding::Utf8);
        assert_eq!(encoding_of_collation(8), TextEncoding::Latin1);
        assert_eq!(encoding_of_collation(63), TextEncoding::Binary);
        assert!(matches!(encoding_of_collation(28), TextEncoding::Other(l) if l.contains("gbk")));
    }

    #[test]
    fn latin1_is_cp1252_with_c1_gaps() {
        assert_eq!(decode_latin1(b"caf\xe9 \x80 \x81"), "café € \u{81}");
        assert_eq!(
            decode_text(b"\xff\xfe", &TextEncoding::Utf8),
            Value::UndecodableText {
                bytes: vec![0xff, 0xfe],
                charset: "utf8".into()
            }
        );
    }
}
