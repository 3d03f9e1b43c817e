//! Key and value bytes as Kafka Connect's `JsonConverter` writes them for Debezium's Outbox
//! Event Router, so a consumer of a Debezium pipeline sees the same bytes from the relay.
//!
//! # What is reproduced (Kafka 4.x `JsonConverter`, Jackson 2.x, Debezium 3.x)
//! * `schemas.enable=false` ([`RecordFormat::Json`]): the Connect value as JSON: a string
//!   column as a JSON string literal, an integer as a number, binary as base64, NULL as
//!   `null`.
//! * `schemas.enable=true` ([`RecordFormat::JsonWithSchema`]): `{"schema":S,"payload":V}`,
//!   the schema's keys in `JsonConverter.asJsonSchema`'s order: `type`, `fields` or
//!   `items`, `optional`, `name`, `version`, then `field` for a struct's field.
//! * Jackson's output: compact, non-ASCII as UTF-8, `"` `\` escaped, `\b \t \n \f \r`
//!   short, other control characters `\u00XX` (uppercase hex), characters beyond the BMP
//!   as an escaped surrogate pair (`\uD83D\uDE00`), doubles as Java's
//!   `Double.toString` prints them (`12.5`, `100.0`, `1.0E7`, `1.0E-4`).
//! * `table.expand.json.payload=true` ([`expand_payload`]): Debezium's `JsonSchemaData`:
//!   the payload text, when it starts with `{` or `[`, parsed as Jackson does (source key
//!   order, a repeated key keeps its first place and its last value, integers as int32 /
//!   int64, other numbers as double, text after the document ignored); an object becomes a
//!   struct named `payload` (nested ones `payload.a.b`), every field optional; `null`
//!   fields and empty arrays are left out (`table.json.payload.null.behavior=ignore`) or
//!   become optional bytes (`optional_bytes`); arrays take the schema of their first
//!   non-null element. Whatever Debezium cannot expand (text that is not an object, a
//!   parse error, a mixed array, an array of nulls or of empty arrays, a top-level
//!   array) stays the string.
//!
//! # Deliberate differences
//! * Debezium unions the fields of differing objects in one array in the iteration order
//!   of a Java `HashSet`; here in first-seen order (identical objects give the same result).
//! * Where Debezium's task would fail (an integer beyond 64 bits, a non-empty top-level
//!   array under a JSON converter, a value whose type contradicts the array's union schema)
//!   the row is a routing error ([`RoutingErrorKind::PayloadNotExpandable`]) or, for the
//!   top-level array, keeps the string.

use std::fmt::Write as _;

use crate::config::{ConnectSchemaType, JsonNullBehavior, RecordFormat};
use crate::error::RoutingErrorKind;
use crate::java_decimal::JavaDecimal;

/// Debezium's logical name for JSON columns (`io.debezium.data.Json`, schema version 1).
pub const DEBEZIUM_JSON_SCHEMA_NAME: &str = "io.debezium.data.Json";

/// A Kafka Connect schema (the subset Debezium's outbox records use).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Schema {
    /// The Connect type and, for arrays and structs, what they hold.
    pub kind: Kind,
    /// `optional`: whether `null` is allowed.
    pub optional: bool,
    /// The logical or struct name, when the schema has one.
    pub name: Option<String>,
    /// The schema version, when set (`io.debezium.data.Json` has 1).
    pub version: Option<i32>,
    /// The schema's parameters in their order (a decimal's scale and precision).
    pub parameters: Vec<(&'static str, String)>,
    /// The default value (a column's `DEFAULT`), written after the parameters.
    pub default: Option<Box<Data>>,
}

/// A Connect schema type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// `boolean`.
    Boolean,
    /// `int16` (TINYINT, SMALLINT columns).
    Int16,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `float` (FLOAT32: a FLOAT column).
    Float32,
    /// `double` (FLOAT64).
    Float64,
    /// `string`.
    String,
    /// `bytes` (base64 in JSON).
    Bytes,
    /// `array` of the element schema.
    Array(Box<Schema>),
    /// `struct` with its fields in order.
    Struct(Vec<(String, Schema)>),
}

impl Schema {
    /// An unnamed schema of `kind`.
    fn plain(kind: Kind, optional: bool) -> Schema {
        Schema {
            kind,
            optional,
            name: None,
            version: None,
            parameters: Vec::new(),
            default: None,
        }
    }
}

/// A Connect value; a struct's values line up with its schema's fields.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Data {
    /// `null`.
    Null,
    /// A boolean.
    Boolean(bool),
    /// An integer (int32 or int64 per the schema).
    Integer(i64),
    /// A float (a FLOAT column).
    Float32(f32),
    /// A double.
    Float64(f64),
    /// Text.
    String(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A decimal (a `bytes` schema named `org.apache.kafka.connect.data.Decimal`).
    Decimal(JavaDecimal),
    /// Array elements.
    Array(Vec<Data>),
    /// Struct values, one per schema field.
    Struct(Vec<Data>),
}

/// The converter output for `schema` and `data` in `format` (never [`RecordFormat::Raw`]).
pub(crate) fn converter_bytes(
    format: RecordFormat,
    schema: &Schema,
    data: &Data,
) -> Result<Vec<u8>, RoutingErrorKind> {
    let mut out = String::new();
    if format == RecordFormat::JsonWithSchema {
        out.push_str("{\"schema\":");
        push_schema(&mut out, schema, None);
        out.push_str(",\"payload\":");
        push_data(&mut out, schema, data)?;
        out.push('}');
    } else {
        push_data(&mut out, schema, data)?;
    }
    Ok(out.into_bytes())
}

/// The schema a configured [`ConnectSchemaType`] stands for.
pub(crate) fn configured_schema(kind: ConnectSchemaType, optional: bool) -> Schema {
    match kind {
        ConnectSchemaType::String => Schema::plain(Kind::String, optional),
        ConnectSchemaType::Int32 => Schema::plain(Kind::Int32, optional),
        ConnectSchemaType::Int64 => Schema::plain(Kind::Int64, optional),
        ConnectSchemaType::Bytes => Schema::plain(Kind::Bytes, optional),
        ConnectSchemaType::Json => Schema {
            kind: Kind::String,
            optional,
            name: Some(DEBEZIUM_JSON_SCHEMA_NAME.to_string()),
            version: Some(1),
            parameters: Vec::new(),
            default: None,
        },
    }
}

/// Appends `JsonConverter.asJsonSchema(schema)` (plus `"field":NAME` for a struct field).
/// A default that does not fit the schema's type is left out (the router checks defaults
/// against their column's type before it builds a schema).
fn push_schema(out: &mut String, schema: &Schema, field: Option<&str>) {
    let type_name = match &schema.kind {
        Kind::Boolean => "boolean",
        Kind::Int16 => "int16",
        Kind::Int32 => "int32",
        Kind::Int64 => "int64",
        Kind::Float32 => "float",
        Kind::Float64 => "double",
        Kind::String => "string",
        Kind::Bytes => "bytes",
        Kind::Array(_) => "array",
        Kind::Struct(_) => "struct",
    };
    out.push_str("{\"type\":\"");
    out.push_str(type_name);
    out.push('"');
    match &schema.kind {
        Kind::Array(items) => {
            out.push_str(",\"items\":");
            push_schema(out, items, None);
        }
        Kind::Struct(fields) => {
            out.push_str(",\"fields\":[");
            for (index, (name, field_schema)) in fields.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_schema(out, field_schema, Some(name));
            }
            out.push(']');
        }
        _ => {}
    }
    out.push_str(",\"optional\":");
    out.push_str(if schema.optional { "true" } else { "false" });
    if let Some(name) = &schema.name {
        out.push_str(",\"name\":");
        push_json_string(out, name);
    }
    if let Some(version) = schema.version {
        let _ = write!(out, ",\"version\":{version}");
    }
    if !schema.parameters.is_empty() {
        out.push_str(",\"parameters\":{");
        for (index, (key, value)) in schema.parameters.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            push_json_string(out, key);
            out.push(':');
            push_json_string(out, value);
        }
        out.push('}');
    }
    if let Some(default) = &schema.default {
        let mut value = String::new();
        if push_data(&mut value, schema, default).is_ok() {
            out.push_str(",\"default\":");
            out.push_str(&value);
        }
    }
    if let Some(field) = field {
        out.push_str(",\"field\":");
        push_json_string(out, field);
    }
    out.push('}');
}

/// Appends `JsonConverter.convertToJson(schema, data)`.
fn push_data(out: &mut String, schema: &Schema, data: &Data) -> Result<(), RoutingErrorKind> {
    let mismatch = || RoutingErrorKind::PayloadNotExpandable {
        reason: format!("a value does not fit its schema type {:?}", schema.kind),
    };
    match (&schema.kind, data) {
        (_, Data::Null) => out.push_str("null"),
        (Kind::Boolean, Data::Boolean(value)) => {
            out.push_str(if *value { "true" } else { "false" })
        }
        (Kind::Int16, Data::Integer(value)) if i16::try_from(*value).is_ok() => {
            let _ = write!(out, "{value}");
        }
        (Kind::Int32, Data::Integer(value)) if i32::try_from(*value).is_ok() => {
            let _ = write!(out, "{value}");
        }
        (Kind::Int64, Data::Integer(value)) => {
            let _ = write!(out, "{value}");
        }
        (Kind::Float64, Data::Float64(value)) => push_java_double(out, *value)?,
        (Kind::Float32, Data::Float32(value)) => push_java_float(out, *value)?,
        (Kind::String, Data::String(text)) => push_json_string(out, text),
        (Kind::Bytes, Data::Bytes(bytes)) => {
            out.push('"');
            out.push_str(&base64(bytes));
            out.push('"');
        }
        // `decimal.format = BASE64`, JsonConverter's default.
        (Kind::Bytes, Data::Decimal(decimal)) => {
            out.push('"');
            out.push_str(&base64(&decimal.unscaled_bytes()));
            out.push('"');
        }
        (Kind::Array(items), Data::Array(elements)) => {
            out.push('[');
            for (index, element) in elements.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_data(out, items, element)?;
            }
            out.push(']');
        }
        (Kind::Struct(fields), Data::Struct(values)) if fields.len() == values.len() => {
            out.push('{');
            for (index, ((name, field_schema), value)) in fields.iter().zip(values).enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_json_string(out, name);
                out.push(':');
                push_data(out, field_schema, value)?;
            }
            out.push('}');
        }
        _ => return Err(mismatch()),
    }
    Ok(())
}

/// Appends `text` as a JSON string literal the way Jackson writes it.
pub(crate) fn push_json_string(out: &mut String, text: &str) {
    const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";
    out.push('"');
    for character in text.chars() {
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{0c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            control if u32::from(control) < 0x20 => {
                let code = u32::from(control) as usize;
                out.push_str("\\u00");
                out.push(HEX_UPPER[code >> 4] as char);
                out.push(HEX_UPPER[code & 0xf] as char);
            }
            // Jackson 2.21 writes a character beyond the BMP as its UTF-16 surrogate pair,
            // each escaped (`COMBINE_UNICODE_SURROGATES_IN_UTF8` is off by default).
            beyond_bmp if u32::from(beyond_bmp) > 0xffff => {
                let mut units = [0u16; 2];
                for unit in beyond_bmp.encode_utf16(&mut units) {
                    let code = usize::from(*unit);
                    out.push_str("\\u");
                    for shift in [12, 8, 4, 0] {
                        out.push(HEX_UPPER[(code >> shift) & 0xf] as char);
                    }
                }
            }
            other => out.push(other),
        }
    }
    out.push('"');
}

/// Appends a finite double as Java's `Double.toString` prints it (shortest round-trip
/// digits; plain notation for 10^-3 <= |x| < 10^7, else `d.dddE±n`).
pub(crate) fn push_java_double(out: &mut String, value: f64) -> Result<(), RoutingErrorKind> {
    if !value.is_finite() {
        return Err(RoutingErrorKind::PayloadNotExpandable {
            reason: format!("the number {value} is out of the double range"),
        });
    }
    push_java_floating(
        out,
        value.is_sign_negative(),
        value.abs(),
        &format!("{:e}", value.abs()),
    );
    Ok(())
}

/// Appends a finite float as Java's `Float.toString` prints it: the digits that tell it
/// from every other float, in `Double.toString`'s notation.
pub(crate) fn push_java_float(out: &mut String, value: f32) -> Result<(), RoutingErrorKind> {
    if !value.is_finite() {
        return Err(RoutingErrorKind::UnsupportedType {
            value_type: "FLOAT (infinite or NaN)",
            usage: "a Connect float32",
        });
    }
    push_java_floating(
        out,
        value.is_sign_negative(),
        f64::from(value.abs()),
        &format!("{:e}", value.abs()),
    );
    Ok(())
}

/// The notation of [`push_java_double`] for a finite number of `magnitude` whose shortest
/// digits are `scientific` (Rust's `{:e}` of it).
fn push_java_floating(out: &mut String, negative: bool, magnitude: f64, scientific: &str) {
    if negative {
        out.push('-');
    }
    if magnitude == 0.0 {
        out.push_str("0.0");
        return;
    }
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (1e-3..1e7).contains(&magnitude) {
        if exponent >= 0 {
            let integer_length = (exponent + 1) as usize;
            if digits.len() <= integer_length {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', integer_length - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..integer_length]);
                out.push('.');
                out.push_str(&digits[integer_length..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exponent - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        out.push('.');
        out.push_str(if digits.len() > 1 { &digits[1..] } else { "0" });
        let _ = write!(out, "E{exponent}");
    }
}

/// Standard base64 with padding (Jackson's default variant for binary values).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let triple = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for position in 0..4 {
            if position <= chunk.len() {
                text.push(ALPHABET[((triple >> (18 - 6 * position)) & 0x3f) as usize] as char);
            } else {
                text.push('=');
            }
        }
    }
    text
}

/// A parsed JSON document as Jackson's tree model holds it.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// `null`.
    Null,
    /// `true` / `false`.
    Boolean(bool),
    /// An integer literal that fits 32 bits (Jackson `IntNode`).
    Int(i32),
    /// An integer literal that fits 64 bits (Jackson `LongNode`).
    Long(i64),
    /// An integer literal beyond 64 bits (Jackson `BigIntegerNode`).
    BigInteger(String),
    /// A literal with a fraction or exponent (Jackson `DoubleNode`).
    Double(f64),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Node>),
    /// An object, keys in first-seen order.
    Object(Vec<(String, Node)>),
}

impl Node {
    /// Jackson's `JsonNodeType`, for the homogeneity check of arrays.
    fn type_rank(&self) -> u8 {
        match self {
            Node::Null => 0,
            Node::Boolean(_) => 1,
            Node::Int(_) | Node::Long(_) | Node::BigInteger(_) | Node::Double(_) => 2,
            Node::String(_) => 3,
            Node::Array(_) => 4,
            Node::Object(_) => 5,
        }
    }
}

/// A strict JSON parser (RFC 8259, as Jackson's defaults accept it) keeping key order.
struct Parser<'a> {
    /// The text.
    bytes: &'a [u8],
    /// Read position.
    at: usize,
}

/// Nesting deeper than this is refused (Jackson's default limit is 1000).
const MAX_DEPTH: usize = 1000;

impl Parser<'_> {
    fn skip_whitespace(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_whitespace();
        (self.bytes.get(self.at) == Some(&byte)).then(|| self.at += 1)
    }

    fn value(&mut self, depth: usize) -> Option<Node> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_whitespace();
        match *self.bytes.get(self.at)? {
            b'{' => {
                self.at += 1;
                let mut fields: Vec<(String, Node)> = Vec::new();
                self.skip_whitespace();
                if self.bytes.get(self.at) == Some(&b'}') {
                    self.at += 1;
                    return Some(Node::Object(fields));
                }
                loop {
                    self.skip_whitespace();
                    let key = self.string()?;
                    self.expect(b':')?;
                    let value = self.value(depth + 1)?;
                    match fields.iter_mut().find(|(name, _)| *name == key) {
                        Some(existing) => existing.1 = value,
                        None => fields.push((key, value)),
                    }
                    self.skip_whitespace();
                    match *self.bytes.get(self.at)? {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            return Some(Node::Object(fields));
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.at += 1;
                let mut elements = Vec::new();
                self.skip_whitespace();
                if self.bytes.get(self.at) == Some(&b']') {
                    self.at += 1;
                    return Some(Node::Array(elements));
                }
                loop {
                    elements.push(self.value(depth + 1)?);
                    self.skip_whitespace();
                    match *self.bytes.get(self.at)? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Some(Node::Array(elements));
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => self.string().map(Node::String),
            b't' => self.literal(b"true", Node::Boolean(true)),
            b'f' => self.literal(b"false", Node::Boolean(false)),
            b'n' => self.literal(b"null", Node::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8], node: Node) -> Option<Node> {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            Some(node)
        } else {
            None
        }
    }

    fn number(&mut self) -> Option<Node> {
        let start = self.at;
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let digits = |parser: &mut Self| {
            let from = parser.at;
            while parser.bytes.get(parser.at).is_some_and(u8::is_ascii_digit) {
                parser.at += 1;
            }
            parser.at - from
        };
        let integer_start = self.at;
        let integer_digits = digits(self);
        if integer_digits == 0 || (integer_digits > 1 && self.bytes[integer_start] == b'0') {
            return None;
        }
        let mut is_float = false;
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return None;
            }
            is_float = true;
        }
        if matches!(self.bytes.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.bytes.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return None;
            }
            is_float = true;
        }
        let text = std::str::from_utf8(&self.bytes[start..self.at]).ok()?;
        if is_float {
            return text.parse::<f64>().ok().map(Node::Double);
        }
        if let Ok(small) = text.parse::<i32>() {
            return Some(Node::Int(small));
        }
        if let Ok(large) = text.parse::<i64>() {
            return Some(Node::Long(large));
        }
        Some(Node::BigInteger(text.to_string()))
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        let code = u32::from_str_radix(text, 16).ok()?;
        self.at += 4;
        Some(code)
    }

    fn string(&mut self) -> Option<String> {
        if self.bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at += 1;
        let mut text = String::new();
        loop {
            let start = self.at;
            while let Some(&byte) = self.bytes.get(self.at) {
                if byte == b'"' || byte == b'\\' || byte < 0x20 {
                    break;
                }
                self.at += 1;
            }
            text.push_str(std::str::from_utf8(&self.bytes[start..self.at]).ok()?);
            match *self.bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(text);
                }
                b'\\' => {
                    self.at += 1;
                    let escape = *self.bytes.get(self.at)?;
                    self.at += 1;
                    match escape {
                        b'"' => text.push('"'),
                        b'\\' => text.push('\\'),
                        b'/' => text.push('/'),
                        b'b' => text.push('\u{08}'),
                        b'f' => text.push('\u{0c}'),
                        b'n' => text.push('\n'),
                        b'r' => text.push('\r'),
                        b't' => text.push('\t'),
                        b'u' => {
                            let high = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&high) {
                                if self.bytes.get(self.at..self.at + 2) != Some(b"\\u") {
                                    return None;
                                }
                                self.at += 2;
                                let low = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&low) {
                                    return None;
                                }
                                0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00)
                            } else {
                                high
                            };
                            text.push(char::from_u32(code)?);
                        }
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
    }
}

/// Parses `text` as Jackson's `ObjectMapper.readTree` does (content after the first
/// document is ignored); `None` when Jackson would throw.
fn parse_tree(text: &str) -> Option<Node> {
    Parser {
        bytes: text.as_bytes(),
        at: 0,
    }
    .value(0)
}

/// Why an expansion falls back to the string (Debezium logs `JSON expansion failed`).
struct Fallback;

/// Debezium's `JsonSchemaData.toConnectSchema(key, node)`: `Ok(None)` leaves the field out.
fn schema_of(
    key: Option<&str>,
    node: &Node,
    nulls: JsonNullBehavior,
) -> Result<Option<Schema>, Fallback> {
    Ok(Some(match node {
        Node::String(_) => Schema::plain(Kind::String, true),
        Node::Boolean(_) => Schema::plain(Kind::Boolean, true),
        Node::Int(_) => Schema::plain(Kind::Int32, true),
        Node::Long(_) => Schema::plain(Kind::Int64, true),
        Node::BigInteger(_) | Node::Double(_) => Schema::plain(Kind::Float64, true),
        Node::Array(elements) if elements.is_empty() => return Ok(None),
        Node::Array(elements) => {
            let items = array_member_schema(key, elements, nulls)?;
            Schema::plain(Kind::Array(Box::new(items)), true)
        }
        Node::Object(fields) => {
            let mut schema_fields: Vec<(String, Schema)> = Vec::new();
            for (name, value) in fields {
                let field_key = match key {
                    Some(key) if !key.trim().is_empty() => format!("{key}.{name}"),
                    _ => name.clone(),
                };
                if let Some(field_schema) = schema_of(Some(&field_key), value, nulls)? {
                    if !schema_fields.iter().any(|(taken, _)| taken == name) {
                        schema_fields.push((name.clone(), field_schema));
                    }
                }
            }
            Schema {
                kind: Kind::Struct(schema_fields),
                optional: true,
                name: key.map(str::to_string),
                version: None,
                parameters: Vec::new(),
                default: None,
            }
        }
        Node::Null => match nulls {
            JsonNullBehavior::OptionalBytes => Schema::plain(Kind::Bytes, true),
            JsonNullBehavior::Ignore => return Ok(None),
        },
    }))
}

/// Debezium's `toConnectSchemaWithCycles`: the schema of a non-empty array's elements.
fn array_member_schema(
    key: Option<&str>,
    elements: &[Node],
    nulls: JsonNullBehavior,
) -> Result<Schema, Fallback> {
    let mut sample: Option<&Node> = None;
    let mut sample_schema: Option<Option<Schema>> = None;
    for element in elements.iter().filter(|element| **element != Node::Null) {
        let reference = *sample.get_or_insert(element);
        if element.type_rank() != reference.type_rank() {
            return Err(Fallback);
        }
        if reference.type_rank() == 2 {
            let reference_schema = match &sample_schema {
                Some(schema) => schema.clone(),
                None => {
                    let schema = schema_of(None, reference, nulls)?;
                    sample_schema = Some(schema.clone());
                    schema
                }
            };
            if schema_of(None, element, nulls)? != reference_schema {
                return Err(Fallback);
            }
        }
    }
    match sample {
        Some(Node::Object(_)) => {
            let mut merged: Option<Schema> = None;
            let mut seen: Vec<Schema> = Vec::new();
            for element in elements {
                if let Node::Object(_) = element {
                    if let Some(schema) = schema_of(key, element, nulls)? {
                        if !seen.contains(&schema) {
                            seen.push(schema.clone());
                            merged = Some(match merged {
                                None => schema,
                                Some(left) => merge_struct_schemas(left, schema),
                            });
                        }
                    }
                }
            }
            merged.ok_or(Fallback)
        }
        Some(other) => schema_of(None, other, nulls)?.ok_or(Fallback),
        None => schema_of(None, &Node::Null, nulls)?.ok_or(Fallback),
    }
}

/// Debezium's `mergeSchema`: the left struct's fields, then the right's new ones; a field
/// both have keeps the left schema unless that one is bytes (a null) and the right is not.
fn merge_struct_schemas(left: Schema, right: Schema) -> Schema {
    let (Kind::Struct(mut fields), Kind::Struct(right_fields)) = (left.kind.clone(), right.kind)
    else {
        return left;
    };
    for (name, schema) in right_fields {
        match fields.iter_mut().find(|(taken, _)| *taken == name) {
            None => fields.push((name, schema)),
            Some(existing) => {
                if existing.1 != schema
                    && existing.1.kind == Kind::Bytes
                    && schema.kind != Kind::Bytes
                {
                    existing.1 = schema;
                }
            }
        }
    }
    Schema {
        kind: Kind::Struct(fields),
        ..left
    }
}

/// Debezium's `JsonSchemaData.toConnectData`: the struct value of `node` under `schema`.
fn data_of(node: &Node, schema: &Schema) -> Result<Data, RoutingErrorKind> {
    let mismatch = |what: &str| RoutingErrorKind::PayloadNotExpandable {
        reason: format!(
            "{what} does not fit the schema Debezium derives ({:?}); Debezium's task would fail",
            schema.kind
        ),
    };
    Ok(match (node, &schema.kind) {
        (Node::Null, _) => Data::Null,
        (Node::String(text), Kind::String) => Data::String(text.clone()),
        (Node::Boolean(value), Kind::Boolean) => Data::Boolean(*value),
        (Node::Int(value), Kind::Int32 | Kind::Int64) => Data::Integer(i64::from(*value)),
        (Node::Long(value), Kind::Int64) => Data::Integer(*value),
        (Node::Double(value), Kind::Float64) => Data::Float64(*value),
        (Node::BigInteger(text), _) => return Err(mismatch(&format!("the integer {text}"))),
        (Node::Array(elements), Kind::Array(items)) => Data::Array(
            elements
                .iter()
                .map(|element| data_of(element, items))
                .collect::<Result<_, _>>()?,
        ),
        (Node::Object(fields), Kind::Struct(schema_fields)) => Data::Struct(
            schema_fields
                .iter()
                .map(
                    |(name, field_schema)| match fields.iter().find(|(key, _)| key == name) {
                        Some((_, value)) => data_of(value, field_schema),
                        None => Ok(Data::Null),
                    },
                )
                .collect::<Result<_, _>>()?,
        ),
        (Node::Int(_), _) => return Err(mismatch("an int32 value")),
        _ => return Err(mismatch("a value")),
    })
}

/// `table.expand.json.payload=true`: the expanded schema and value of a payload string,
/// or `Ok(None)` when Debezium keeps the string (see the module docs).
pub(crate) fn expand_payload(
    payload: &str,
    nulls: JsonNullBehavior,
) -> Result<Option<(Schema, Data)>, RoutingErrorKind> {
    if !(payload.starts_with('{') || payload.starts_with('[')) {
        return Ok(None);
    }
    let Some(tree) = parse_tree(payload) else {
        return Ok(None);
    };
    if !matches!(tree, Node::Object(_)) {
        // A top-level array: Debezium's struct conversion throws and the string stays.
        return Ok(None);
    }
    let schema = match schema_of(Some("payload"), &tree, nulls) {
        Ok(Some(schema)) => schema,
        Ok(None) | Err(Fallback) => return Ok(None),
    };
    let data = data_of(&tree, &schema)?;
    Ok(Some((schema, data)))
}

/// The JSON-string form of plain `text` under `format` with schema `schema`.
pub(crate) fn string_record(
    format: RecordFormat,
    schema: &Schema,
    text: Option<&str>,
) -> Result<Vec<u8>, RoutingErrorKind> {
    let data = text.map_or(Data::Null, |text| Data::String(text.to_string()));
    converter_bytes(format, schema, &data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn java_double(value: f64) -> String {
        let mut out = String::new();
        push_java_double(&mut out, value).unwrap();
        out
    }

    #[test]
    fn doubles_print_like_java() {
        for (value, text) in [
            (12.5, "12.5"),
            (100.0, "100.0"),
            (0.001, "0.001"),
            (0.0001, "1.0E-4"),
            (1e7, "1.0E7"),
            (9_999_999.5, "9999999.5"),
            (1.25e-10, "1.25E-10"),
            (-3.0, "-3.0"),
            (0.1, "0.1"),
            (123_456.789, "123456.789"),
            (1e21, "1.0E21"),
        ] {
            assert_eq!(java_double(value), text, "{value}");
        }
    }

    #[test]
    fn strings_escape_like_jackson() {
        let mut out = String::new();
        push_json_string(
            &mut out,
            "caf\u{e9} \u{2603} \"q\" \\ \n\t\r\u{8}\u{c}\u{1}\u{1f}/\u{1F600}",
        );
        assert_eq!(
            out,
            "\"caf\u{e9} \u{2603} \\\"q\\\" \\\\ \\n\\t\\r\\b\\f\\u0001\\u001F/\\uD83D\\uDE00\""
        );
    }

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(&[0xff, 0xfe, 0x00, 0x01]), "//4AAQ==");
    }

    fn expanded(payload: &str, format: RecordFormat) -> String {
        let (schema, data) = expand_payload(payload, JsonNullBehavior::Ignore)
            .unwrap()
            .expect("expands");
        String::from_utf8(converter_bytes(format, &schema, &data).unwrap()).unwrap()
    }

    #[test]
    fn expansion_keeps_source_order_and_drops_nulls_and_empty_arrays() {
        let payload = r#"{"z": 1, "a": {"n": null, "d": 12.50, "big": 3000000000}, "e": [], "t": ["x"], "b": true, "z": 2}"#;
        assert_eq!(
            expanded(payload, RecordFormat::Json),
            r#"{"z":2,"a":{"d":12.5,"big":3000000000},"t":["x"],"b":true}"#
        );
        assert_eq!(
            expanded(r#"{"a":{"x":1}}"#, RecordFormat::JsonWithSchema),
            "{\"schema\":{\"type\":\"struct\",\"fields\":[{\"type\":\"struct\",\"fields\":[{\"type\":\"int32\",\"optional\":true,\"field\":\"x\"}],\"optional\":true,\"name\":\"payload.a\",\"field\":\"a\"}],\"optional\":true,\"name\":\"payload\"},\"payload\":{\"a\":{\"x\":1}}}"
        );
    }

    #[test]
    fn unexpandable_payloads_stay_strings() {
        for payload in [
            "plain text",
            " {\"leading\": \"space\"}",
            "[1, 2]",
            "{\"mixed\": [1, \"a\"]}",
            "{\"widths\": [1, 3000000000]}",
            "{\"nulls\": [null]}",
            "{broken",
        ] {
            assert_eq!(
                expand_payload(payload, JsonNullBehavior::Ignore),
                Ok(None),
                "{payload}"
            );
        }
        assert!(expand_payload(
            "{\"huge\": 123456789012345678901234}",
            JsonNullBehavior::Ignore
        )
        .is_err());
    }

    #[test]
    fn arrays_of_objects_union_their_fields() {
        assert_eq!(
            expanded(
                r#"{"items": [{"a": 1}, {"a": 2, "b": "x"}, null]}"#,
                RecordFormat::Json
            ),
            r#"{"items":[{"a":1,"b":null},{"a":2,"b":"x"},null]}"#
        );
    }

    #[test]
    fn optional_bytes_keeps_nulls() {
        let (schema, data) = expand_payload(r#"{"n": null}"#, JsonNullBehavior::OptionalBytes)
            .unwrap()
            .unwrap();
        assert_eq!(
            String::from_utf8(converter_bytes(RecordFormat::JsonWithSchema, &schema, &data).unwrap())
                .unwrap(),
            "{\"schema\":{\"type\":\"struct\",\"fields\":[{\"type\":\"bytes\",\"optional\":true,\"field\":\"n\"}],\"optional\":true,\"name\":\"payload\"},\"payload\":{\"n\":null}}"
        );
    }
}
