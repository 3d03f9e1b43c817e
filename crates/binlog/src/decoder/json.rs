//! MySQL binary JSON (a `JSON` column's bytes in a row image) written straight to text in
//! the form Debezium's MySQL connector gives it (`JsonBinary.parseAsString` of
//! mysql-binlog-connector-java with its `JsonStringFormatter`, which Debezium 3.x calls for
//! every binlog JSON value), so an outbox payload relayed from a JSON column has Debezium's
//! bytes. The rules, each checked against that library in `tests/json_debezium.rs`:
//!
//! - **Order**: object members in MySQL's storage order (MySQL sorts keys by length, then
//!   bytewise, when it stores a document), never re-sorted; no whitespace anywhere.
//! - **Strings** (values and keys): `"` and `\` escaped with a backslash, the control
//!   characters U+0008/09/0A/0C/0D as `\b \t \n \f \r`, every other one below U+0020 as
//!   `\u00XX` (upper-case hex); everything else, U+007F and non-ASCII included, as itself.
//! - **Integers** (int16/uint16/int32/uint32/int64/uint64) in decimal; a uint32 of 2^31 or
//!   more as the library reads it, as a signed 32-bit number (`4294967295` -> `-1`). The one
//!   deliberate difference: a uint32 inlined in a large container, for which the library
//!   writes nothing at all (`[1,,2]`, not JSON); here it is its value.
//! - **Doubles** as Java's `Double.toString` prints them (shortest digits, always a fraction:
//!   `1.0`, `-0.0`, `0.001`), except when that would use an exponent (`|x| < 1e-3` or
//!   `|x| >= 1e7`): then the double's exact decimal expansion, as Java's
//!   `new BigDecimal(x).toPlainString()` (`1.0E7` -> `10000000`, `1.0E-4` ->
//!   `0.000100000000000000004792...`).
//! - **Opaque DECIMAL** as a bare number with its scale (`9.00`, `-0.50`).
//! - **Opaque DATE** `"YYYY-MM-DD"`; **DATETIME/TIMESTAMP** `"YYYY-MM-DD HH:MM:SS"` with a
//!   fraction only when it is not zero, and then without trailing zeros (`.5`, `.00012`);
//!   **TIME** `"HH:MM:SS"` likewise. Negative TIMEs come out as Debezium's arithmetic prints
//!   them (`-00:00:01` as `"01:0-1:0-1"`): reproduced, not repaired, so a consumer sees the
//!   bytes it saw from Debezium.
//! - **Other opaque values** (BLOB, BIT, GEOMETRY, ...) as a JSON string of their bytes in
//!   standard Base64 with padding; an opaque type code the library does not know is an error
//!   (Debezium's task fails on it too).
//! - A value whose first byte is above 15 is not binary JSON but JSON text (what the library
//!   assumes too): it is passed on as it is.
//!
//! Corrupt input (a cut value, an offset outside its container, an unknown type code, a
//! string that is not UTF-8) is an error naming the byte position, never a panic.

use std::fmt::Write;

use super::reader::ByteReader;
use super::rows::decode_decimal;

/// Deepest container nesting accepted (MySQL's own limit is 100).
const MAX_DEPTH: usize = 150;

/// Value type codes of MySQL's binary JSON (`json_binary.h`).
mod code {
    pub(super) const SMALL_OBJECT: u8 = 0x00;
    pub(super) const LARGE_OBJECT: u8 = 0x01;
    pub(super) const SMALL_ARRAY: u8 = 0x02;
    pub(super) const LARGE_ARRAY: u8 = 0x03;
    pub(super) const LITERAL: u8 = 0x04;
    pub(super) const INT16: u8 = 0x05;
    pub(super) const UINT16: u8 = 0x06;
    pub(super) const INT32: u8 = 0x07;
    pub(super) const UINT32: u8 = 0x08;
    pub(super) const INT64: u8 = 0x09;
    pub(super) const UINT64: u8 = 0x0a;
    pub(super) const DOUBLE: u8 = 0x0b;
    pub(super) const STRING: u8 = 0x0c;
    pub(super) const OPAQUE: u8 = 0x0f;
}

/// MySQL column type codes of opaque values (`enum_field_types`).
mod column_type {
    pub(super) const DECIMAL: u8 = 0;
    pub(super) const TIMESTAMP: u8 = 7;
    pub(super) const DATE: u8 = 10;
    pub(super) const TIME: u8 = 11;
    pub(super) const DATETIME: u8 = 12;
    pub(super) const TIMESTAMP2: u8 = 17;
    pub(super) const DATETIME2: u8 = 18;
    pub(super) const TIME2: u8 = 19;
    pub(super) const NEWDECIMAL: u8 = 246;

    /// The type codes mysql-binlog-connector-java's `ColumnType` knows (0-19, VECTOR, and
    /// JSON..GEOMETRY): any other one in an opaque value fails there, so it fails here.
    pub(super) fn known(code: u8) -> bool {
        code <= 19 || code == 242 || code >= 245
    }
}

/// Writes the binary JSON `bytes` (not empty) as Debezium's text.
pub(crate) fn to_debezium_text(bytes: &[u8]) -> Result<String, String> {
    let Some(&first) = bytes.first() else {
        return Err("binary JSON is empty".to_owned());
    };
    if (16..=127).contains(&first) {
        // JSON text, not binary JSON: the library hands such bytes on as a string.
        return std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|error| format!("JSON text is not UTF-8 ({error})"));
    }
    let mut writer = Writer {
        document: bytes,
        out: String::with_capacity(bytes.len() + bytes.len() / 2),
    };
    writer.value(first, 1, 0)?;
    Ok(writer.out)
}

/// The document being written and the text so far.
struct Writer<'a> {
    /// The whole binary document (positions in errors are offsets into it).
    document: &'a [u8],
    out: String,
}

/// Where a corrupt value was found.
fn at(position: usize, what: impl std::fmt::Display) -> String {
    format!("binary JSON is corrupt at byte {position}: {what}")
}

impl<'a> Writer<'a> {
    /// `len` bytes at absolute `position`.
    fn bytes(&self, position: usize, len: usize, what: &str) -> Result<&'a [u8], String> {
        let document: &'a [u8] = self.document;
        position
            .checked_add(len)
            .and_then(|end| document.get(position..end))
            .ok_or_else(|| {
                at(
                    position,
                    format!(
                        "{what} needs {len} bytes, the document has {} after it",
                        document.len().saturating_sub(position)
                    ),
                )
            })
    }

    fn uint(&self, position: usize, len: usize, what: &str) -> Result<u64, String> {
        let bytes = self.bytes(position, len, what)?;
        let mut array = [0u8; 8];
        array[..len].copy_from_slice(bytes);
        Ok(u64::from_le_bytes(array))
    }

    /// MySQL's variable-length length: 7 bits a byte, low first, high bit = more (at most 5
    /// bytes). Returns the length and the bytes it took.
    fn variable_length(&self, position: usize) -> Result<(usize, usize), String> {
        let mut length = 0u64;
        for index in 0..5 {
            let byte = self.bytes(position + index, 1, "a length")?[0];
            length |= u64::from(byte & 0x7f) << (7 * index);
            if byte & 0x80 == 0 {
                let length = u32::try_from(length)
                    .map_err(|_| at(position, format!("length {length} exceeds 32 bits")))?;
                return Ok((length as usize, index + 1));
            }
        }
        Err(at(position, "a length runs past 5 bytes"))
    }

    /// Writes the value of type `type_code` stored at absolute `position`.
    fn value(&mut self, type_code: u8, position: usize, depth: usize) -> Result<(), String> {
        match type_code {
            code::SMALL_OBJECT | code::LARGE_OBJECT | code::SMALL_ARRAY | code::LARGE_ARRAY => {
                if depth >= MAX_DEPTH {
                    return Err(at(
                        position,
                        format!("containers nest deeper than {MAX_DEPTH}"),
                    ));
                }
                let object = matches!(type_code, code::SMALL_OBJECT | code::LARGE_OBJECT);
                let large = matches!(type_code, code::LARGE_OBJECT | code::LARGE_ARRAY);
                self.container(position, object, large, depth)
            }
            code::LITERAL => self.literal(self.bytes(position, 1, "a literal")?[0], position),
            code::INT16 => {
                let raw = self.uint(position, 2, "an int16")? as u16;
                self.integer(i64::from(raw as i16));
                Ok(())
            }
            code::UINT16 => {
                let raw = self.uint(position, 2, "a uint16")?;
                self.integer(raw);
                Ok(())
            }
            code::INT32 => {
                let raw = self.uint(position, 4, "an int32")? as u32;
                self.integer(i64::from(raw as i32));
                Ok(())
            }
            code::UINT32 => {
                let raw = self.uint(position, 4, "a uint32")?;
                self.integer(raw as u32 as i32);
                Ok(())
            }
            code::INT64 => {
                let raw = self.uint(position, 8, "an int64")?;
                self.integer(raw as i64);
                Ok(())
            }
            code::UINT64 => {
                let raw = self.uint(position, 8, "a uint64")?;
                self.integer(raw);
                Ok(())
            }
            code::DOUBLE => {
                let value = f64::from_bits(self.uint(position, 8, "a double")?);
                if !value.is_finite() {
                    return Err(at(position, format!("a double is {value}")));
                }
                write_java_double(&mut self.out, value);
                Ok(())
            }
            code::STRING => {
                let (len, len_bytes) = self.variable_length(position)?;
                let start = position + len_bytes;
                let bytes = self.bytes(start, len, "a string")?;
                let text = std::str::from_utf8(bytes)
                    .map_err(|error| at(start, format!("a string is not UTF-8 ({error})")))?;
                write_java_string(&mut self.out, text);
                Ok(())
            }
            code::OPAQUE => self.opaque(position),
            other => Err(at(
                position.saturating_sub(1),
                format!("unknown value type {other:#04x}"),
            )),
        }
    }

    fn integer(&mut self, value: impl std::fmt::Display) {
        let _ = write!(self.out, "{value}");
    }

    fn literal(&mut self, literal: u8, position: usize) -> Result<(), String> {
        self.out.push_str(match literal {
            0 => "null",
            1 => "true",
            2 => "false",
            other => return Err(at(position, format!("unknown literal {other:#04x}"))),
        });
        Ok(())
    }

    /// An object or array starting (at its element count) at absolute `start`.
    fn container(
        &mut self,
        start: usize,
        object: bool,
        large: bool,
        depth: usize,
    ) -> Result<(), String> {
        let width = if large { 4 } else { 2 };
        let what = if object { "object" } else { "array" };
        let count = self.uint(start, width, "an element count")?;
        let size = self.uint(start + width, width, "a container size")?;
        let size = usize::try_from(size).map_err(|_| at(start, "container size overflows"))?;
        // Everything the container's offsets point at lies inside its `size` bytes.
        self.bytes(start, size, what)?;
        let key_entry = if object { width + 2 } else { 0 };
        let value_entry = 1 + width;
        let fits = usize::try_from(count)
            .ok()
            .and_then(|count| count.checked_mul(key_entry + value_entry))
            .and_then(|entries| entries.checked_add(2 * width))
            .is_some_and(|header| header <= size);
        if !fits {
            return Err(at(
                start,
                format!("an {what} of {count} elements does not fit its {size} bytes"),
            ));
        }
        let count = count as usize;
        let entries = start + 2 * width;
        let values = entries + count * key_entry;
        self.out.push(if object { '{' } else { '[' });
        for index in 0..count {
            if index > 0 {
                self.out.push(',');
            }
            if object {
                let entry = entries + index * key_entry;
                let key_offset = self.uint(entry, width, "a key offset")? as usize;
                let key_len = self.uint(entry + width, 2, "a key length")? as usize;
                if key_offset.saturating_add(key_len) > size {
                    return Err(at(
                        entry,
                        format!("key {index} ({key_offset}+{key_len}) lies outside its object of {size} bytes"),
                    ));
                }
                let key = self.bytes(start + key_offset, key_len, "a key")?;
                let key = std::str::from_utf8(key).map_err(|error| {
                    at(start + key_offset, format!("a key is not UTF-8 ({error})"))
                })?;
                write_java_string(&mut self.out, key);
                self.out.push(':');
            }
            let entry = values + index * value_entry;
            let type_code = self.bytes(entry, 1, "a value type")?[0];
            let slot = entry + 1;
            match type_code {
                code::LITERAL => {
                    let literal = self.uint(slot, width, "a literal")?;
                    self.literal(u8::try_from(literal).unwrap_or(u8::MAX), slot)?;
                }
                // Inlined integers: in the low bytes of the entry's offset field.
                code::INT16 | code::UINT16 => self.value(type_code, slot, depth)?,
                code::INT32 if large => self.value(type_code, slot, depth)?,
                // The library writes nothing at all here (invalid JSON): the value instead.
                code::UINT32 if large => {
                    let raw = self.uint(slot, 4, "a uint32")?;
                    self.integer(raw);
                }
                _ => {
                    let offset = self.uint(slot, width, "a value offset")? as usize;
                    if offset >= size {
                        return Err(at(
                            slot,
                            format!("value {index} at offset {offset} lies outside its {what} of {size} bytes"),
                        ));
                    }
                    self.value(type_code, start + offset, depth + 1)?;
                }
            }
        }
        self.out.push(if object { '}' } else { ']' });
        Ok(())
    }

    /// An opaque value (after its 0x0f type byte): a column type, a length, the data.
    fn opaque(&mut self, position: usize) -> Result<(), String> {
        let type_code = self.bytes(position, 1, "an opaque type")?[0];
        let (len, len_bytes) = self.variable_length(position + 1)?;
        let data_start = position + 1 + len_bytes;
        let data = self.bytes(data_start, len, "an opaque value")?;
        match type_code {
            column_type::DECIMAL | column_type::NEWDECIMAL => {
                let [precision, scale, digits @ ..] = data else {
                    return Err(at(data_start, "a DECIMAL without precision and scale"));
                };
                if *precision == 0 || *precision > 65 || scale > precision || *scale > 30 {
                    return Err(at(
                        data_start,
                        format!("a DECIMAL({precision},{scale}) is not a valid decimal type"),
                    ));
                }
                let mut reader = ByteReader::new(digits);
                let text = decode_decimal(&mut reader, *precision, *scale)
                    .map_err(|reason| at(data_start + 2, format!("a DECIMAL: {reason}")))?;
                if !reader.rest().is_empty() {
                    return Err(at(
                        data_start + 2,
                        format!(
                            "a DECIMAL({precision},{scale}) has {} bytes left over",
                            reader.rest().len()
                        ),
                    ));
                }
                self.out.push_str(&text);
            }
            column_type::DATE
            | column_type::TIME
            | column_type::TIME2
            | column_type::DATETIME
            | column_type::DATETIME2
            | column_type::TIMESTAMP
            | column_type::TIMESTAMP2 => {
                let packed = self.uint(data_start, 8, "a packed temporal value")? as i64;
                let out = &mut self.out;
                out.push('"');
                match type_code {
                    column_type::DATE => write_java_date(out, packed),
                    column_type::TIME | column_type::TIME2 => write_java_time(out, packed),
                    _ => write_java_datetime(out, packed),
                }
                out.push('"');
            }
            other if column_type::known(other) => {
                self.out.push('"');
                base64(&mut self.out, data);
                self.out.push('"');
            }
            other => {
                return Err(at(
                    position,
                    format!("an opaque value of unknown column type {other}"),
                ))
            }
        }
        Ok(())
    }
}

/// A string as `JsonStringFormatter.appendString` escapes it (see the module docs).
fn write_java_string(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('"');
    let mut plain_from = 0;
    for (index, byte) in text.bytes().enumerate() {
        let escape = match byte {
            b'"' => Some('"'),
            b'\\' => Some('\\'),
            0x08 => Some('b'),
            0x09 => Some('t'),
            0x0a => Some('n'),
            0x0c => Some('f'),
            0x0d => Some('r'),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.push_str(&text[plain_from..index]);
        plain_from = index + 1;
        out.push('\\');
        match escape {
            Some(short) => out.push(short),
            None => {
                out.push_str("u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
        }
    }
    out.push_str(&text[plain_from..]);
    out.push('"');
}

/// A finite double as `JsonStringFormatter.value(double)` prints it: `Double.toString`, or
/// the exact expansion where that would use an exponent.
pub(crate) fn write_java_double(out: &mut String, value: f64) {
    let magnitude = value.abs();
    if magnitude == 0.0 || (1e-3..1e7).contains(&magnitude) {
        // Java's plain form: shortest round-trip digits, at least one after the point.
        let start = out.len();
        let _ = write!(out, "{value}");
        if !out[start..].contains('.') {
            out.push_str(".0");
        }
    } else {
        write_exact_decimal(out, value);
    }
}

/// The exact decimal value of a finite, non-zero double, as Java's
/// `new BigDecimal(value).toPlainString()` writes it: no exponent, no trailing zeros.
fn write_exact_decimal(out: &mut String, value: f64) {
    let bits = value.to_bits();
    let negative = bits >> 63 == 1;
    let exponent_bits = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    let (mut mantissa, mut exponent) = if exponent_bits == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1u64 << 52), exponent_bits - 1075)
    };
    // value = mantissa * 2^exponent; an odd mantissa gives the shortest exact form.
    while mantissa & 1 == 0 && mantissa != 0 {
        mantissa >>= 1;
        exponent += 1;
    }
    // Little-endian base-10^9 digits of a big integer.
    let mut number: Vec<u64> = vec![mantissa % 1_000_000_000, mantissa / 1_000_000_000];
    let multiply = |number: &mut Vec<u64>, factor: u64| {
        let mut carry = 0u64;
        for limb in number.iter_mut() {
            let product = *limb * factor + carry;
            *limb = product % 1_000_000_000;
            carry = product / 1_000_000_000;
        }
        while carry > 0 {
            number.push(carry % 1_000_000_000);
            carry /= 1_000_000_000;
        }
    };
    // 2^e for e >= 0; for e < 0, m * 2^e = m * 5^-e / 10^-e.
    let (factor, times, point) = if exponent >= 0 {
        (2u64, exponent as u32, 0usize)
    } else {
        (
            5u64,
            exponent.unsigned_abs(),
            exponent.unsigned_abs() as usize,
        )
    };
    for _ in 0..times {
        multiply(&mut number, factor);
    }
    let mut digits = String::new();
    for (index, limb) in number.iter().rev().enumerate() {
        if index == 0 {
            let _ = write!(digits, "{limb}");
        } else {
            let _ = write!(digits, "{limb:09}");
        }
    }
    let digits = digits.trim_start_matches('0');
    if negative {
        out.push('-');
    }
    if point == 0 {
        out.push_str(digits);
    } else if digits.len() > point {
        let (integer, fraction) = digits.split_at(digits.len() - point);
        out.push_str(integer);
        out.push('.');
        out.push_str(fraction);
    } else {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', point - digits.len()));
        out.push_str(digits);
    }
}

// Temporal values: MySQL's packed form (`TIME_to_longlong_*_packed`), printed with the
// library's Java arithmetic, transcribed with the same integer widths (Java's `%` truncates
// and `>>` is arithmetic, as in Rust), so out-of-range and negative values print as there.

fn write_java_date(out: &mut String, raw: i64) {
    let value = raw >> 24;
    let year_month = ((value >> 22) as i32) % (1 << 17);
    let day = ((value >> 17) as i32) % (1 << 5);
    append_date(out, year_month / 13, year_month % 13, day);
}

fn write_java_time(out: &mut String, raw: i64) {
    let value = raw >> 24;
    let negative = value < 0;
    let mut hour = ((value >> 12) as i32) % (1 << 10);
    let minute = ((value >> 6) as i32) % (1 << 6);
    let second = (value as i32) % (1 << 6);
    if negative {
        hour = hour.wrapping_neg();
    }
    let micros = (raw % (1 << 24)) as i32;
    if hour < 0 {
        out.push('-');
        hour = hour.wrapping_abs();
    }
    append_time(out, hour, minute, second, micros);
}

fn write_java_datetime(out: &mut String, raw: i64) {
    let value = raw >> 24;
    let year_month = ((value >> 22) as i32) % (1 << 17);
    let day = ((value >> 17) as i32) % (1 << 5);
    let hour = ((value >> 12) as i32) % (1 << 5);
    let minute = ((value >> 6) as i32) % (1 << 6);
    let second = (value % (1 << 6)) as i32;
    let micros = (raw % (1 << 24)) as i32;
    append_date(out, year_month / 13, year_month % 13, day);
    out.push(' ');
    append_time(out, hour, minute, second, micros);
}

fn append_two_digits(out: &mut String, value: i32) {
    if value < 10 {
        out.push('0');
    }
    let _ = write!(out, "{value}");
}

fn append_date(out: &mut String, mut year: i32, month: i32, day: i32) {
    if year < 0 {
        out.push('-');
        year = year.wrapping_abs();
    }
    let zeros = match year {
        ..=9 => "000",
        10..=99 => "00",
        100..=999 => "0",
        _ => "",
    };
    let _ = write!(out, "{zeros}{year}-");
    append_two_digits(out, month);
    out.push('-');
    append_two_digits(out, day);
}

fn append_time(out: &mut String, hour: i32, minute: i32, second: i32, micros: i32) {
    append_two_digits(out, hour);
    out.push(':');
    append_two_digits(out, minute);
    out.push(':');
    append_two_digits(out, second);
    if micros != 0 {
        out.push('.');
        let zeros = match micros {
            ..=9 => "00000",
            10..=99 => "0000",
            100..=999 => "000",
            1000..=9999 => "00",
            10000..=99999 => "0",
            _ => "",
        };
        out.push_str(zeros);
        let mut micros = micros;
        for _ in 0..6 {
            if micros % 10 == 0 {
                micros /= 10;
            }
        }
        let _ = write!(out, "{micros}");
    }
}

/// Standard Base64 with padding (`java.util.Base64.getEncoder()`).
fn base64(out: &mut String, data: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for index in 0..4 {
            if index <= chunk.len() {
                out.push(char::from(
                    ALPHABET[((n >> (18 - 6 * index)) & 63) as usize],
                ));
            } else {
                out.push('=');
            }
        }
    }
}

#[cfg(test)]
mod tests;
