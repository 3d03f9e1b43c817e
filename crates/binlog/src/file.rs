//! Binlog files on disk as a stream of [`StreamItem`]s: archived binlogs, recovery, the
//! `inspect` command.
//!
//! Events are read with explicit length checks (19-byte header, `event_size`), so a file cut
//! inside an event or with an impossible header is a [`BinlogError::FileCorrupt`] naming the
//! path and byte offset, never a panic or a loop. Each exact event slice is then parsed by
//! `mysql_common` and fed to the same decoder the live source uses, so checksums are
//! verified, compressed transactions (TRANSACTION_PAYLOAD) are decompressed and decoded, and
//! positions and GTIDs are those a live stream would report.
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

use mysql_common::binlog::consts::{BinlogChecksumAlg, BinlogVersion};
use mysql_common::binlog::events::{Event, FormatDescriptionEvent, TransactionPayloadEvent};

use crate::decoder::{Decoder, PushOutcome};
use crate::error::BinlogError;
use crate::types::{Flavor, StreamItem, TableFilter};

/// Bytes every binlog file starts with.
const BINLOG_MAGIC: [u8; 4] = [0xfe, b'b', b'i', b'n'];
/// Length of an event header (binlog format v4).
const EVENT_HEADER_LEN: usize = 19;
/// Event type code of FORMAT_DESCRIPTION.
const FORMAT_DESCRIPTION_EVENT: u8 = 0x0f;
/// Event type code of TRANSACTION_PAYLOAD.
const TRANSACTION_PAYLOAD_EVENT: u8 = 0x28;
/// Event type code of MariaDB's START_ENCRYPTION.
const START_ENCRYPTION_EVENT: u8 = 0xa4;
/// Largest decompressed transaction payload accepted (MySQL's own limit is 1 GiB).
const MAX_PAYLOAD_BYTES: u64 = 1 << 30;

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
    /// The file's format description, once read (needed to parse every other event).
    format: Option<FormatDescriptionEvent<'static>>,
    /// Event bytes, reused from event to event to avoid an allocation per event.
    buffer: Vec<u8>,
}

/// The decompressed events of a TRANSACTION_PAYLOAD still to be fed.
struct PendingPayload {
    /// The decompressed inner events.
    bytes: Vec<u8>,
    /// Offset of the next inner event in `bytes`.
    cursor: usize,
    /// The format description with checksums switched off (inner events carry none).
    format: FormatDescriptionEvent<'static>,
    /// File offset of the payload event, for errors.
    payload_offset: u64,
}

/// Reads binlog files in order and yields the transactions in them.
pub struct BinlogFileReader {
    /// Files not opened yet, in reading order.
    remaining: VecDeque<PathBuf>,
    /// The file being read.
    current: Option<OpenFile>,
    /// Inner events of a compressed transaction being fed.
    payload: Option<PendingPayload>,
    /// The shared event decoder.
    decoder: Decoder,
    /// Items decoded but not handed out yet (at most one event's worth).
    pending: VecDeque<StreamItem>,
    /// Set after an error: reading does not continue past a problem.
    failed: Option<String>,
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
            payload: None,
            decoder: Decoder::new(filter, first_name).with_positional_column_names(),
            pending: VecDeque::new(),
            failed: None,
        };
        reader.open_next()?;
        Ok(reader)
    }

    /// The flavor once known.
    pub fn flavor(&self) -> Option<Flavor> {
        self.decoder.flavor()
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
        let Some(path) = self.remaining.pop_front() else {
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
        if self.payload.is_some() {
            return self.step_payload().map(|_| true);
        }
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
        let (event, event_type) = read_event(current)?;
        let path = current.path.clone();
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
        current.offset += u64::from(event.header().event_size());
        if event_type == FORMAT_DESCRIPTION_EVENT {
            let format: FormatDescriptionEvent<'_> =
                event.read_event().map_err(|e| BinlogError::FileCorrupt {
                    path: path.clone(),
                    offset: event_offset,
                    reason: format!("FORMAT_DESCRIPTION does not parse: {e}"),
                })?;
            if format.binlog_version() != BinlogVersion::Version4 {
                return Err(BinlogError::FileCorrupt {
                    path,
                    offset: event_offset,
                    reason: "binlog format versions before 4 (MySQL before 5.0) are not \
                             supported"
                        .into(),
                });
            }
            current.format = Some(format.into_owned().with_footer(event.footer()));
        }
        self.push(&event, &path)?;
        if event_type == TRANSACTION_PAYLOAD_EVENT {
            self.start_payload(&event, &path, event_offset)?;
        }
        Ok(true)
    }

    fn push(&mut self, event: &Event, path: &std::path::Path) -> Result<(), BinlogError> {
        match self.decoder.push(event, &mut self.pending) {
            Ok(PushOutcome::Consumed) => Ok(()),
            Ok(PushOutcome::NeedColumnNames(table)) => Err(BinlogError::FileCorrupt {
                path: path.to_path_buf(),
                offset: u64::from(event.header().log_pos()),
                reason: format!("no column names for {table}"),
            }),
            Err(error) => Err(BinlogError::InFile {
                path: path.to_path_buf(),
                source: Box::new(error),
            }),
        }
    }

    fn start_payload(
        &mut self,
        event: &Event,
        path: &std::path::Path,
        payload_offset: u64,
    ) -> Result<(), BinlogError> {
        let corrupt = |reason: String| BinlogError::FileCorrupt {
            path: path.to_path_buf(),
            offset: payload_offset,
            reason,
        };
        let payload: TransactionPayloadEvent<'_> = event
            .read_event()
            .map_err(|e| corrupt(format!("TRANSACTION_PAYLOAD does not parse: {e}")))?;
        let declared = payload.uncompressed_size();
        if declared > MAX_PAYLOAD_BYTES {
            return Err(corrupt(format!(
                "the compressed transaction claims {declared} bytes uncompressed"
            )));
        }
        let mut bytes = Vec::with_capacity(declared as usize);
        payload
            .decompressed()
            .map_err(|e| corrupt(format!("cannot decompress the transaction: {e}")))?
            .take(MAX_PAYLOAD_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| corrupt(format!("cannot decompress the transaction: {e}")))?;
        if bytes.len() as u64 != declared {
            return Err(corrupt(format!(
                "the transaction decompressed to {} bytes, its header says {declared}",
                bytes.len()
            )));
        }
        let format = self
            .current
            .as_ref()
            .and_then(|c| c.format.clone())
            .ok_or_else(|| corrupt("a TRANSACTION_PAYLOAD before the FORMAT_DESCRIPTION".into()))?;
        let mut footer = format.footer();
        footer.set_checksum_enabled(false);
        self.payload = Some(PendingPayload {
            bytes,
            cursor: 0,
            format: format.with_footer(footer),
            payload_offset,
        });
        Ok(())
    }

    /// Feeds the next inner event of the pending compressed transaction.
    fn step_payload(&mut self) -> Result<(), BinlogError> {
        let Some(payload) = self.payload.as_mut() else {
            return Ok(());
        };
        let path = self
            .current
            .as_ref()
            .map(|c| c.path.clone())
            .unwrap_or_default();
        if payload.cursor == payload.bytes.len() {
            self.payload = None;
            return Ok(());
        }
        let corrupt = |reason: String| BinlogError::FileCorrupt {
            path: path.clone(),
            offset: payload.payload_offset,
            reason: format!("inside the compressed transaction: {reason}"),
        };
        let rest = &payload.bytes[payload.cursor..];
        if rest.len() < EVENT_HEADER_LEN {
            return Err(corrupt(format!(
                "{} bytes left, less than an event header",
                rest.len()
            )));
        }
        let size = u32::from_le_bytes([rest[9], rest[10], rest[11], rest[12]]) as usize;
        if size < EVENT_HEADER_LEN || size > rest.len() {
            return Err(corrupt(format!(
                "event at inner offset {} claims {size} bytes, {} are left",
                payload.cursor,
                rest.len()
            )));
        }
        if rest[4] == TRANSACTION_PAYLOAD_EVENT || rest[4] == FORMAT_DESCRIPTION_EVENT {
            return Err(corrupt(format!(
                "event type {:#04x} cannot be nested",
                rest[4]
            )));
        }
        let event = Event::read(&payload.format, &rest[..size])
            .map_err(|e| corrupt(format!("event does not parse: {e}")))?;
        payload.cursor += size;
        self.push(&event, &path)
    }
}

/// True when events read with `format` end in a 4-byte checksum `Event::read` strips.
fn events_carry_checksum(format: &FormatDescriptionEvent<'_>) -> bool {
    !matches!(
        format.footer().get_checksum_alg(),
        Ok(None) | Ok(Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_OFF))
    )
}

/// Reads the event at the file's offset with length checks, without consuming the offset.
fn read_event(current: &mut OpenFile) -> Result<(Event, u8), BinlogError> {
    let corrupt = |reason: String| BinlogError::FileCorrupt {
        path: current.path.clone(),
        offset: current.offset,
        reason,
    };
    let left = current.length - current.offset;
    if left < EVENT_HEADER_LEN as u64 {
        return Err(corrupt(format!(
            "the file is cut inside an event header ({left} of {EVENT_HEADER_LEN} bytes)"
        )));
    }
    // One buffer per file, reused for every event (Event::read copies what it keeps).
    let mut bytes = std::mem::take(&mut current.buffer);
    bytes.clear();
    bytes.resize(EVENT_HEADER_LEN, 0);
    current
        .reader
        .read_exact(&mut bytes)
        .map_err(|e| corrupt(format!("read failed: {e}")))?;
    let event_type = bytes[4];
    let size = u64::from(u32::from_le_bytes([
        bytes[9], bytes[10], bytes[11], bytes[12],
    ]));
    if size < EVENT_HEADER_LEN as u64 {
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
        Some(format) if !is_format_description && events_carry_checksum(format) && size < 23 => {
            return Err(corrupt(format!(
                "event size {size} leaves no room for its checksum"
            )));
        }
        _ => {}
    }
    bytes.resize(size as usize, 0);
    current
        .reader
        .read_exact(&mut bytes[EVENT_HEADER_LEN..])
        .map_err(|e| corrupt(format!("read failed: {e}")))?;
    let placeholder;
    let format = match &current.format {
        Some(format) => format,
        None => {
            placeholder = FormatDescriptionEvent::new(BinlogVersion::Version4);
            &placeholder
        }
    };
    let event = Event::read(format, &bytes[..]);
    current.buffer = bytes;
    let event = event.map_err(|e| corrupt(format!("event does not parse: {e}")))?;
    Ok((event, event_type))
}
