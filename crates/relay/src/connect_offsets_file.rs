//! A reader for a Kafka Connect *standalone* worker's offsets file
//! (`offset.storage.file.filename`), for `checkpoint import-debezium --offsets-file`.
//!
//! # The format
//! Kafka's `FileOffsetBackingStore.save()` copies its `Map<ByteBuffer, ByteBuffer>` into a
//! `java.util.HashMap<byte[], byte[]>` and writes it with `ObjectOutputStream.writeObject`:
//! Java serialization (stream magic `AC ED 00 05`), one `TC_OBJECT` with the HashMap class
//! descriptor (fields `loadFactor: float`, `threshold: int`), those field values, then
//! HashMap's `writeObject` block data (capacity and size, two ints) and `size` key/value
//! pairs, each a `byte[]` (`TC_ARRAY` of class `[B`: the first one carries the class
//! descriptor, the later ones a `TC_REFERENCE` to it) or `TC_NULL` (a value reset), and a
//! closing `TC_ENDBLOCKDATA`. Keys are the JSON offset keys
//! (`["<connector>",{"server":"<prefix>"}]`), values the offset JSON.
//!
//! The reader accepts exactly this shape and nothing else: anything unexpected is a
//! [`FormatError`] naming the byte offset, never a panic, and no length read from the file
//! allocates more than the bytes that remain.

use std::path::Path;

use anyhow::{bail, Context};

/// `java.util.HashMap`'s fixed `serialVersionUID`.
const HASHMAP_UID: u64 = 362_498_820_763_181_265;
/// `byte[]`'s `serialVersionUID` (computed by the JVM; the same on every JVM).
const BYTE_ARRAY_UID: u64 = 0xACF3_17F8_0608_54E0;
/// Java serialization's first handle (`baseWireHandle`).
const BASE_HANDLE: u32 = 0x007E_0000;

const TC_NULL: u8 = 0x70;
const TC_REFERENCE: u8 = 0x71;
const TC_CLASSDESC: u8 = 0x72;
const TC_OBJECT: u8 = 0x73;
const TC_ARRAY: u8 = 0x75;
const TC_BLOCKDATA: u8 = 0x77;
const TC_ENDBLOCKDATA: u8 = 0x78;

/// Why the bytes are not a standalone offsets file, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {at}")]
pub struct FormatError {
    /// The byte offset of the first byte that does not fit (or of the end, when cut short).
    pub at: usize,
    /// What was expected there.
    pub what: String,
}

/// One entry of the offsets map: a key and its value (`None`: a reset offset).
pub type Entry = (Vec<u8>, Option<Vec<u8>>);

/// What a handle (an object the stream may refer back to) stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handle {
    /// The HashMap class descriptor or the map itself: never a valid key or value.
    Other,
    /// The `[B` class descriptor.
    ByteArrayClass,
    /// A byte array read earlier: the index into `Reader::arrays`.
    Array(usize),
}

/// A cursor over the file's bytes with the stream's handle table.
struct Reader<'a> {
    /// The whole file.
    bytes: &'a [u8],
    /// The next byte to read.
    at: usize,
    /// Handles in the order the stream assigned them (from `BASE_HANDLE`).
    handles: Vec<Handle>,
    /// Byte arrays read so far, for a `TC_REFERENCE` to one of them.
    arrays: Vec<Vec<u8>>,
}

impl<'a> Reader<'a> {
    fn error<T>(&self, at: usize, what: impl Into<String>) -> Result<T, FormatError> {
        Err(FormatError {
            at,
            what: what.into(),
        })
    }

    fn take(&mut self, count: usize, what: &str) -> Result<&'a [u8], FormatError> {
        let end = self
            .at
            .checked_add(count)
            .filter(|end| *end <= self.bytes.len());
        let Some(end) = end else {
            return self.error(
                self.bytes.len(),
                format!(
                    "the file ends inside {what} ({count} byte(s) needed, {} left)",
                    self.bytes.len() - self.at
                ),
            );
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn u8(&mut self, what: &str) -> Result<u8, FormatError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, FormatError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, FormatError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, FormatError> {
        let b = self.take(8, what)?;
        let mut word = [0u8; 8];
        word.copy_from_slice(b);
        Ok(u64::from_be_bytes(word))
    }

    fn expect_byte(&mut self, expected: u8, what: &str) -> Result<(), FormatError> {
        let at = self.at;
        let byte = self.u8(what)?;
        if byte != expected {
            return self.error(
                at,
                format!("expected {what} (0x{expected:02X}), found 0x{byte:02X}"),
            );
        }
        Ok(())
    }

    /// A modified-UTF-8 string with a u16 length; only the ASCII names this format uses.
    fn utf(&mut self, what: &str) -> Result<&'a [u8], FormatError> {
        let length = self.u16(what)?;
        self.take(usize::from(length), what)
    }

    fn expect_utf(&mut self, expected: &str, what: &str) -> Result<(), FormatError> {
        let at = self.at;
        let text = self.utf(what)?;
        if text != expected.as_bytes() {
            return self.error(
                at,
                format!(
                    "expected {what} `{expected}`, found `{}`",
                    String::from_utf8_lossy(text)
                ),
            );
        }
        Ok(())
    }

    fn new_handle(&mut self, handle: Handle) {
        self.handles.push(handle);
    }

    /// The HashMap's class descriptor after `TC_CLASSDESC`.
    fn hashmap_class(&mut self) -> Result<(), FormatError> {
        self.expect_utf("java.util.HashMap", "the class name")?;
        let at = self.at;
        if self.u64("the serialVersionUID")? != HASHMAP_UID {
            return self.error(at, "an unexpected serialVersionUID for java.util.HashMap");
        }
        self.new_handle(Handle::Other);
        // SC_SERIALIZABLE | SC_WRITE_METHOD: HashMap has its own writeObject.
        self.expect_byte(0x03, "the class flags SC_SERIALIZABLE|SC_WRITE_METHOD")?;
        let at = self.at;
        if self.u16("the field count")? != 2 {
            return self.error(at, "java.util.HashMap should have 2 serialized fields");
        }
        self.expect_byte(b'F', "the type code of a float field")?;
        self.expect_utf("loadFactor", "the field name")?;
        self.expect_byte(b'I', "the type code of an int field")?;
        self.expect_utf("threshold", "the field name")?;
        self.expect_byte(
            TC_ENDBLOCKDATA,
            "TC_ENDBLOCKDATA after the class annotations",
        )?;
        self.expect_byte(
            TC_NULL,
            "TC_NULL (java.util.HashMap has no serializable superclass)",
        )
    }

    /// The `[B` class descriptor after `TC_CLASSDESC`.
    fn byte_array_class(&mut self) -> Result<(), FormatError> {
        self.expect_utf("[B", "the array class name")?;
        let at = self.at;
        if self.u64("the serialVersionUID")? != BYTE_ARRAY_UID {
            return self.error(at, "an unexpected serialVersionUID for byte[]");
        }
        self.new_handle(Handle::ByteArrayClass);
        self.expect_byte(0x02, "the class flags SC_SERIALIZABLE")?;
        self.expect_byte(0, "the field count 0 (high byte)")?;
        self.expect_byte(0, "the field count 0 (low byte)")?;
        self.expect_byte(
            TC_ENDBLOCKDATA,
            "TC_ENDBLOCKDATA after the class annotations",
        )?;
        self.expect_byte(TC_NULL, "TC_NULL (arrays have no superclass descriptor)")
    }

    fn reference(&mut self) -> Result<Handle, FormatError> {
        let at = self.at;
        let wire = self.u32("a handle")?;
        let handle = wire
            .checked_sub(BASE_HANDLE)
            .and_then(|index| self.handles.get(index as usize).copied());
        match handle {
            Some(handle) => Ok(handle),
            None => self.error(
                at,
                format!("a reference to the unknown handle 0x{wire:08X}"),
            ),
        }
    }

    /// A key or value: `TC_NULL`, a `TC_ARRAY` of `[B`, or a reference to an earlier array.
    fn byte_array(&mut self, what: &str) -> Result<Option<Vec<u8>>, FormatError> {
        let at = self.at;
        match self.u8(what)? {
            TC_NULL => Ok(None),
            TC_ARRAY => {
                let class_at = self.at;
                match self.u8("the array's class descriptor")? {
                    TC_CLASSDESC => self.byte_array_class()?,
                    TC_REFERENCE => {
                        if self.reference()? != Handle::ByteArrayClass {
                            return self
                                .error(class_at + 1, "a reference to something other than [B");
                        }
                    }
                    other => {
                        return self.error(
                            class_at,
                            format!("expected a class descriptor for [B, found 0x{other:02X}"),
                        )
                    }
                }
                let length_at = self.at;
                let length = self.u32("the array length")?;
                let Ok(length) = usize::try_from(length) else {
                    return self.error(length_at, "an array length beyond this machine");
                };
                if i32::try_from(length).is_err() {
                    return self.error(length_at, "a negative array length");
                }
                // `take` refuses a length beyond the remaining bytes before anything is
                // allocated.
                let data = self.take(length, "a byte array")?.to_vec();
                self.new_handle(Handle::Array(self.arrays.len()));
                self.arrays.push(data.clone());
                Ok(Some(data))
            }
            TC_REFERENCE => match self.reference()? {
                Handle::Array(index) => Ok(self.arrays.get(index).cloned()),
                _ => self.error(
                    at + 1,
                    format!("{what}: a reference to something other than a byte[]"),
                ),
            },
            other => self.error(
                at,
                format!("expected {what} (a byte[] or null), found type code 0x{other:02X}"),
            ),
        }
    }
}

/// Parses the bytes of a standalone offsets file into its entries, in file order.
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry>, FormatError> {
    let mut reader = Reader {
        bytes,
        at: 0,
        handles: Vec::new(),
        arrays: Vec::new(),
    };
    let at = reader.at;
    if reader.take(4, "the stream header")? != [0xAC, 0xED, 0x00, 0x05] {
        return reader.error(at, "expected the Java serialization header AC ED 00 05");
    }
    reader.expect_byte(TC_OBJECT, "TC_OBJECT")?;
    reader.expect_byte(TC_CLASSDESC, "TC_CLASSDESC")?;
    reader.hashmap_class()?;
    reader.new_handle(Handle::Other); // the map object itself
    reader.take(4, "the field loadFactor")?;
    reader.take(4, "the field threshold")?;
    reader.expect_byte(TC_BLOCKDATA, "TC_BLOCKDATA (HashMap's capacity and size)")?;
    reader.expect_byte(8, "a block data length of 8")?;
    reader.u32("the capacity")?;
    let size_at = reader.at;
    let size = reader.u32("the size")?;
    // Each entry takes at least two bytes (two TC_NULL): a size the rest cannot hold is
    // refused before reserving anything.
    let remaining = bytes.len() - reader.at;
    if i32::try_from(size).is_err() || (size as usize).saturating_mul(2) > remaining {
        return reader.error(
            size_at,
            format!("a map size of {size} that the {remaining} remaining byte(s) cannot hold"),
        );
    }
    let mut entries = Vec::with_capacity(size as usize);
    for _ in 0..size {
        let key_at = reader.at;
        let Some(key) = reader.byte_array("a key")? else {
            return reader.error(key_at, "a null key");
        };
        let value = reader.byte_array("a value")?;
        entries.push((key, value));
    }
    reader.expect_byte(TC_ENDBLOCKDATA, "TC_ENDBLOCKDATA after the last entry")?;
    if reader.at != bytes.len() {
        return reader.error(reader.at, "bytes after the end of the map");
    }
    Ok(entries)
}

/// Reads the standalone offsets file at `path` and returns the offset of `connector`
/// (`server`: its `topic.prefix`), `None` when the file holds none (or it was reset).
pub fn read_offsets_file(
    path: &Path,
    connector: &str,
    server: Option<&str>,
) -> anyhow::Result<Option<String>> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("reading the offsets file {}", path.display()))?;
    let entries = parse(&bytes).map_err(|error| {
        anyhow::anyhow!(
            "not a Kafka Connect standalone offsets file: {}: {error}",
            path.display()
        )
    })?;
    let matching: Vec<&Entry> = entries
        .iter()
        .filter(|(key, _)| crate::import_debezium::key_matches(key, connector, server))
        .collect();
    if matching.len() > 1 {
        let keys: Vec<String> = matching
            .iter()
            .map(|(key, _)| String::from_utf8_lossy(key).into_owned())
            .collect();
        bail!(
            "{} holds {} offsets of connector `{connector}` ({}): give --server (its topic.prefix)",
            path.display(),
            matching.len(),
            keys.join(", ")
        );
    }
    Ok(crate::import_debezium::newest_offset(
        matching
            .iter()
            .map(|(key, value)| (key.as_slice(), value.as_deref())),
        connector,
        server,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by `tests/data/WriteConnectOffsets.java` (what FileOffsetBackingStore.save
    /// does) on Java 17: three entries, one of them with a null value.
    const FIXTURE: &[u8] = include_bytes!("../tests/data/connect-offsets.dat");

    /// The same program's second file: connector `orders` under prefixes `a` and `b`.
    const TWO_PREFIXES: &[u8] = include_bytes!("../tests/data/connect-offsets-two-prefixes.dat");

    /// Writes `bytes` to a file of its own under the temp dir (per process and name).
    fn scratch_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("connect-offsets-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn lookup<'a>(entries: &'a [Entry], key: &str) -> Option<&'a Option<Vec<u8>>> {
        entries
            .iter()
            .find(|(k, _)| k == key.as_bytes())
            .map(|(_, v)| v)
    }

    #[test]
    fn the_file_java_wrote_is_read_whole() {
        let entries = parse(FIXTURE).unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(
            lookup(&entries, r#"["orders",{"server":"dbserver1"}]"#),
            Some(&Some(
                br#"{"ts_sec":1764700000,"file":"binlog.000002","pos":1547,"gtids":"0-1-41","server_id":1}"#
                    .to_vec()
            ))
        );
        assert_eq!(
            lookup(&entries, r#"["billing",{"server":"dbserver1"}]"#),
            Some(&Some(br#"{"file":"binlog.000001","pos":999}"#.to_vec()))
        );
        // A null value (a reset offset).
        assert_eq!(
            lookup(&entries, r#"["reset",{"server":"dbserver1"}]"#),
            Some(&None)
        );
    }

    #[test]
    fn the_connector_offset_is_found_in_the_file() {
        let path = scratch_file("connect.offsets", FIXTURE);
        let offset = read_offsets_file(&path, "orders", Some("dbserver1"))
            .unwrap()
            .unwrap();
        let parsed = crate::import_debezium::parse_offset(&offset).unwrap();
        assert_eq!(
            (parsed.file.as_deref(), parsed.pos),
            (Some("binlog.000002"), Some(1547))
        );
        assert_eq!(
            read_offsets_file(&path, "orders", Some("other")).unwrap(),
            None
        );
        assert_eq!(read_offsets_file(&path, "reset", None).unwrap(), None);
        assert_eq!(read_offsets_file(&path, "nobody", None).unwrap(), None);
    }

    #[test]
    fn every_truncation_is_an_error_with_a_byte_offset() {
        for length in 0..FIXTURE.len() {
            let error = parse(&FIXTURE[..length]).unwrap_err();
            assert!(
                error.at <= length,
                "cut at {length}: error at {} ({})",
                error.at,
                error.what
            );
        }
        let mut longer = FIXTURE.to_vec();
        longer.push(0);
        let error = parse(&longer).unwrap_err();
        assert_eq!(error.at, FIXTURE.len());
    }

    #[test]
    fn every_corrupted_byte_is_an_error_or_a_different_map_never_a_panic() {
        let original = parse(FIXTURE).unwrap();
        let mut changed_content = 0;
        for index in 0..FIXTURE.len() {
            for flip in [0x01u8, 0x80, 0xFF] {
                let mut bytes = FIXTURE.to_vec();
                bytes[index] ^= flip;
                match parse(&bytes) {
                    Err(error) => assert!(error.at <= bytes.len()),
                    // Bytes inside a key or value, and the loadFactor/threshold/capacity
                    // numbers, carry no structure.
                    Ok(entries) => {
                        assert_eq!(entries.len(), original.len(), "byte {index}");
                        if entries != original {
                            changed_content += 1;
                        }
                    }
                }
            }
        }
        assert!(changed_content > 0);
    }

    #[test]
    fn specific_corruptions_name_what_and_where() {
        let error = parse(b"PK\x03\x04 a zip file").unwrap_err();
        assert_eq!(error.at, 0);
        assert!(error.what.contains("AC ED 00 05"), "{error}");
        // A huge array length: refused, nothing allocated. The first key's length is at
        // 0x64 (after the [B descriptor).
        let mut bytes = FIXTURE.to_vec();
        bytes[0x64..0x68].copy_from_slice(&0x7FFF_FFF0u32.to_be_bytes());
        let error = parse(&bytes).unwrap_err();
        assert!(error.what.contains("ends inside a byte array"), "{error}");
        // A huge map size (at 0x4D).
        let mut bytes = FIXTURE.to_vec();
        bytes[0x4D..0x51].copy_from_slice(&0x7FFF_FFFFu32.to_be_bytes());
        let error = parse(&bytes).unwrap_err();
        assert_eq!(error.at, 0x4D);
        assert!(error.what.contains("map size"), "{error}");
        // Another class than HashMap (same name length).
        let mut bytes = FIXTURE.to_vec();
        bytes[0x08..0x19].copy_from_slice(b"java.util.TreeMap");
        let error = parse(&bytes).unwrap_err();
        assert_eq!(error.at, 0x06);
        assert!(error.what.contains("java.util.HashMap"), "{error}");
        // A reference to a handle that does not exist (the second key's class).
        let mut bytes = FIXTURE.to_vec();
        let reference = bytes
            .windows(5)
            .position(|w| w == [TC_ARRAY, TC_REFERENCE, 0x00, 0x7E, 0x00])
            .unwrap();
        bytes[reference + 5] = 0x40;
        let error = parse(&bytes).unwrap_err();
        assert_eq!(error.at, reference + 2);
        assert!(error.what.contains("unknown handle"), "{error}");
        // The file error names the file.
        let path = scratch_file("bad.offsets", &FIXTURE[..40]);
        let error = read_offsets_file(&path, "orders", None)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("not a Kafka Connect standalone offsets file")
                && error.contains("bad.offsets")
                && error.contains("at byte 40"),
            "{error}"
        );
    }

    #[test]
    fn an_ambiguous_connector_name_asks_for_the_server() {
        let path = scratch_file("two-prefixes.offsets", TWO_PREFIXES);
        let error = read_offsets_file(&path, "orders", None)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("2 offsets of connector `orders`") && error.contains("--server"),
            "{error}"
        );
        let offset = read_offsets_file(&path, "orders", Some("b")).unwrap();
        assert_eq!(
            offset.as_deref(),
            Some(r#"{"file":"binlog.000001","pos":8}"#)
        );
    }
}
