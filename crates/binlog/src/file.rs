//! Binlog files on disk as a stream of [`StreamItem`]s: archived binlogs, recovery, the
//! `inspect` command.
//!
//! Events are read with explicit length checks (19-byte header, `event_size`), so a file cut
//! inside an event or with an impossible header is a [`BinlogError::FileCorrupt`] naming the
//! path and byte offset, never a panic or a loop. Each exact event slice is then fed as raw
//! bytes to the same decoder the live source uses, so checksums are verified, compressed
//! transactions (TRANSACTION_PAYLOAD) are decompressed and decoded (by the decoder: an error
//! inside one names the file and the payload event's offset), and positions and GTIDs are
//! those a live stream would report.
//!
//! # Column names
//! With `binlog_row_metadata=MINIMAL` (or servers before MySQL 8.0.1 / MariaDB 10.5) a
//! TABLE_MAP carries no column names, and a file has no server to ask: columns are then named
//! by position, `@1`, `@2`, ..., as `mysqlbinlog` prints them.
//!
//! # Resumption
//! [`Commit::position`](crate::Commit::position) values are `(file name, byte offset)` pairs
//! of the files read, identical to what a live stream of the same server would report, so a
//! live reader can continue where a file reader stopped. A file that ends inside a
//! transaction (a crash, a copy taken while the server wrote) is an error after the rows of
//! that transaction, never a commit.
//!
//! Files older than MySQL 5.0 (binlog format v1-v3) and pre-GA row events of 5.1.0-5.1.15
//! are rejected with [`BinlogError::UnsupportedEvent`].

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::PathBuf;

use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::events::{BinlogEventFooter, FormatDescriptionEvent};

use crate::decoder::{carries_checksum, Decoder, EventHeader, PushOutcome, RawEvent, HEADER_LEN};
use crate::error::BinlogError;
use crate::types::{Flavor, StreamItem, TableFilter};

/// Bytes every binlog file starts with.
const BINLOG_MAGIC: [u8; 4] = [0xfe, b'b', b'i', b'n'];
/// Event type code of FORMAT_DESCRIPTION.
const FORMAT_DESCRIPTION_EVENT: u8 = 0x0f;
/// Event type code of MariaDB's START_ENCRYPTION.
const START_ENCRYPTION_EVENT: u8 = 0xa4;
/// Length of a CRC32 at the end of an event.
const CHECKSUM_LEN: u64 = 4;

/// The file being read.
struct OpenFile {
    /// Path, for errors.
    path: PathBuf,
    /// Buffered reader positioned at `offset`.
    reader: BufReader<File>,
    /// Byte offset of the next event.
    offset: u64,
    /// File length when opened.
    length: u64,
    /// The file's format description, once read (whether events carry checksums, for the
    /// length checks; its absence means the next event must be one).
    format: Option<FormatDescriptionEvent<'static>>,
    /// The current event's bytes, reused from event to event to avoid an allocation per
    /// event.
    buffer: Vec<u8>,
}

/// Reads binlog files in order and yields the transactions in them.
pub struct BinlogFileReader {
    /// Files not opened yet, in reading order.
    remaining: VecDeque<PathBuf>,
    /// The file being read.
    current: Option<OpenFile>,
    /// The shared event decoder.
    decoder: Decoder,
    /// Items decoded but not handed out yet (at most one event's worth).
    pending: VecDeque<StreamItem>,
    /// Set after an error: reading does not continue past a problem.
    failed: Option<String>,
    /// Bytes of the files read to their end, for progress reports ([`Self::bytes_read`]).
    finished_files_bytes: u64,
}

impl std::fmt::Debug for BinlogFileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BinlogFileReader")
            .field("remaining", &self.remaining)
            .field(
                "current",
                &self.current.as_ref().map(|c| (&c.path, c.offset)),
            )
            .finish_non_exhaustive()
    }
}

fn file_name_of(path: &std::path::Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

impl BinlogFileReader {
    /// Opens binlog files to be read in the given order (each must start with the magic
    /// bytes \xfebin and a FORMAT_DESCRIPTION event).
    pub fn open(paths: Vec<PathBuf>, filter: TableFilter) -> Result<Self, BinlogError> {
        let first_name = paths.first().map(|p| file_name_of(p)).unwrap_or_default();
        let mut reader = BinlogFileReader {
            remaining: paths.into(),
            current: None,
            decoder: Decoder::new(filter, first_name).with_positional_column_names(),
            pending: VecDeque::new(),
            failed: None,
            finished_files_bytes: 0,
        };
        reader.open_next()?;
        Ok(reader)
    }

    /// The flavor once known.
    pub fn flavor(&self) -> Option<Flavor> {
        self.decoder.flavor()
    }

    /// Bytes read so far over all files (the files read to their end plus the offset in the
    /// current one): with the files' sizes, how far a long read has come.
    pub fn bytes_read(&self) -> u64 {
        self.finished_files_bytes + self.current.as_ref().map_or(0, |current| current.offset)
    }

    /// The next item, or Ok(None) after the last file's end.
    pub fn next_item(&mut self) -> Result<Option<StreamItem>, BinlogError> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Ok(Some(item));
            }
            if let Some(reason) = &self.failed {
                return Err(BinlogError::FileCorrupt {
                    path: self
                        .current
                        .as_ref()
                        .map(|c| c.path.clone())
                        .unwrap_or_default(),
                    offset: self.current.as_ref().map(|c| c.offset).unwrap_or_default(),
                    reason: format!("reading stopped after an earlier error: {reason}"),
                });
            }
            match self.step() {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(error) => {
                    self.failed = Some(error.to_string());
                    return Err(error);
                }
            }
        }
    }

    /// Opens the next file, if any. Returns false when there is none.
    fn open_next(&mut self) -> Result<bool, BinlogError> {
        // Counted once the reader leaves the file (an error opening the next keeps it).
        let finished = self.current.as_ref().map_or(0, |current| current.offset);
        let Some(path) = self.remaining.pop_front() else {
            self.finished_files_bytes += finished;
            self.current = None;
            return Ok(false);
        };
        let io_error = |source| BinlogError::FileIo {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(io_error)?;
        let length = file.metadata().map_err(io_error)?.len();
        let mut reader = BufReader::with_capacity(256 * 1024, file);
        let mut magic = [0u8; 4];
        if length < 4 {
            return Err(BinlogError::FileCorrupt {
                path,
                offset: 0,
                reason: format!("{length} bytes is too short for a binlog file"),
            });
        }
        reader.read_exact(&mut magic).map_err(io_error)?;
        if magic != BINLOG_MAGIC {
            return Err(BinlogError::FileCorrupt {
                path,
                offset: 0,
                reason: format!("does not start with the binlog magic bytes (found {magic:02x?})"),
            });
        }
        self.decoder.set_current_file(file_name_of(&path));
        self.finished_files_bytes += finished;
        self.current = Some(OpenFile {
            path,
            reader,
            offset: 4,
            length,
            format: None,
            buffer: Vec::new(),
        });
        Ok(true)
    }

    /// Reads and decodes one event. Returns false after the last file.
    fn step(&mut self) -> Result<bool, BinlogError> {
        let Some(current) = self.current.as_mut() else {
            return Ok(false);
        };
        if current.offset == current.length {
            if self.decoder.in_transaction() {
                return Err(BinlogError::FileCorrupt {
                    path: current.path.clone(),
                    offset: current.offset,
                    reason: "the file ends inside a transaction (its commit is missing)".into(),
                });
            }
            if current.format.is_none() {
                return Err(BinlogError::FileCorrupt {
                    path: current.path.clone(),
                    offset: current.offset,
                    reason: "the file holds no FORMAT_DESCRIPTION event".into(),
                });
            }
            return self.open_next();
        }
        let event_type = read_event(current)?;
        let event_offset = current.offset;
        if event_type == START_ENCRYPTION_EVENT {
            return Err(BinlogError::UnsupportedEvent {
                event_type,
                event_name: "START_ENCRYPTION",
                position: crate::types::BinlogPosition::new(
                    self.decoder.current_file(),
                    event_offset,
                ),
                reason: "the rest of this file is encrypted; read it through the server".into(),
            });
        }
        current.offset += current.buffer.len() as u64;
        if event_type == FORMAT_DESCRIPTION_EVENT {
            let corrupt = |reason: String| BinlogError::FileCorrupt {
                path: current.path.clone(),
                offset: event_offset,
                reason,
            };
            let format = parse_format_description(&current.buffer)
                .map_err(|e| corrupt(format!("FORMAT_DESCRIPTION does not parse: {e}")))?;
            if format.binlog_version() != BinlogVersion::Version4 {
                return Err(corrupt(
                    "binlog format versions before 4 (MySQL before 5.0) are not supported".into(),
                ));
            }
            current.format = Some(format);
        }
        match self.decoder.push(&current.buffer, &mut self.pending) {
            Ok(PushOutcome::Consumed) => Ok(true),
            Ok(PushOutcome::NeedColumnNames(table)) => Err(BinlogError::FileCorrupt {
                path: current.path.clone(),
                offset: event_offset,
                reason: format!("no column names for {table}"),
            }),
            Err(error) => Err(BinlogError::InFile {
                path: current.path.clone(),
                source: Box::new(error),
            }),
        }
    }
}

/// Parses a FORMAT_DESCRIPTION event (its exact bytes, length-checked) into an owned one
/// with its footer.
fn parse_format_description(bytes: &[u8]) -> Result<FormatDescriptionEvent<'static>, String> {
    let header = EventHeader::read(bytes).ok_or("shorter than an event header")?;
    // The format description reads its own footer; the stream's is not used.
    let event = RawEvent::new(bytes, header, BinlogEventFooter::default())?;
    event.parse_format_description().map_err(|e| e.to_string())
}

/// Reads the event at the file's offset into the file's buffer (exactly its bytes) with
/// length checks, without consuming the offset; returns its type.
fn read_event(current: &mut OpenFile) -> Result<u8, BinlogError> {
    let corrupt = |reason: String| BinlogError::FileCorrupt {
        path: current.path.clone(),
        offset: current.offset,
        reason,
    };
    let left = current.length - current.offset;
    if left < HEADER_LEN as u64 {
        return Err(corrupt(format!(
            "the file is cut inside an event header ({left} of {HEADER_LEN} bytes)"
        )));
    }
    let bytes = &mut current.buffer;
    bytes.clear();
    bytes.resize(HEADER_LEN, 0);
    current
        .reader
        .read_exact(bytes)
        .map_err(|e| corrupt(format!("read failed: {e}")))?;
    let Some(header) = EventHeader::read(bytes) else {
        return Err(corrupt("the event header could not be read".into()));
    };
    let event_type = header.event_type_raw();
    let size = u64::from(header.event_size());
    if size < HEADER_LEN as u64 {
        return Err(corrupt(format!(
            "event size {size} is smaller than its header"
        )));
    }
    if size > left {
        return Err(corrupt(format!(
            "the file is cut inside an event: it claims {size} bytes, {left} are left"
        )));
    }
    let is_format_description = event_type == FORMAT_DESCRIPTION_EVENT;
    match &current.format {
        None if !is_format_description => {
            return Err(corrupt(format!(
                "the first event has type {event_type:#04x}, not FORMAT_DESCRIPTION \
                 (binlog format before v4, MySQL before 5.0?)"
            )))
        }
        Some(format)
            if !is_format_description
                && carries_checksum(&format.footer())
                && size < HEADER_LEN as u64 + CHECKSUM_LEN =>
        {
            return Err(corrupt(format!(
                "event size {size} leaves no room for its checksum"
            )));
        }
        _ => {}
    }
    bytes.resize(size as usize, 0);
    current
        .reader
        .read_exact(&mut bytes[HEADER_LEN..])
        .map_err(|e| corrupt(format!("read failed: {e}")))?;
    Ok(event_type)
}
