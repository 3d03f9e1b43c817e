//! The binlog decoder: binlog events, in order, in; [`StreamItem`]s (rows of watched tables,
//! commits, heartbeats) out. Pure: no I/O, shared by the live source (`live.rs`) and the file
//! source (`file.rs`).
//!
//! # Contract
//! * Feed every event exactly as received, in order, with [`Decoder::push`]: the raw bytes
//!   of one whole event (the 19-byte common header, the body, and the 4-byte CRC32 when the
//!   last FORMAT_DESCRIPTION says events carry one; before any FORMAT_DESCRIPTION, e.g. the
//!   artificial ROTATE a server sends first, events are read as carrying none). A header
//!   size that is not the length given is a [`BinlogError::MalformedEvent`]. The decoder
//!   holds one event's worth of rows at a time: rows are appended to `out` as their event is
//!   decoded, never buffered until the commit.
//! * A MySQL compressed transaction is fed as its TRANSACTION_PAYLOAD event alone: the
//!   decoder decompresses it (at most 1 GiB, `payload::MAX_PAYLOAD_BYTES`) and decodes the
//!   inner events itself. They carry no checksum and no position of their own: their rows
//!   and errors are positioned at the payload event's start, the commit at its end. The
//!   payload must hold the whole transaction; nested payloads or format descriptions, and
//!   inner events cut short, are errors naming the payload event.
//! * Every event with a CRC32 is verified; a mismatch is [`BinlogError::ChecksumMismatch`].
//! * Rows events of unwatched tables are skipped after reading their table id; the values of
//!   watched tables are decoded with a plan precomputed per TABLE_MAP.
//! * When a watched table's TABLE_MAP has no column names (binlog_row_metadata=MINIMAL) and
//!   none are cached, `push` returns [`PushOutcome::NeedColumnNames`] without consuming the
//!   event; the caller looks the names (and types) up, calls
//!   [`Decoder::set_looked_up_columns`] and pushes the same event again. Names are forgotten
//!   when a DDL statement mentions the table (also inside an executable comment
//!   `/*!...*/`); every TABLE_MAP that uses looked-up names must have binlog column types
//!   that fit the looked-up types, else it is a [`BinlogError::RowImageMismatch`] (the
//!   caller also makes sure no DDL on the table lies between the event and the lookup). When the
//!   TABLE_MAP is inside a compressed transaction, the same TRANSACTION_PAYLOAD event is
//!   pushed again: the decoder kept the decompressed events and continues with the inner
//!   event that asked (the ones before it are not decoded twice). Any other event pushed
//!   instead is a [`BinlogError::BrokenTransaction`].
//!
//! # Resumption
//! [`Decoder::last_boundary`] is the position after the last transaction handed out as a
//! [`Commit`] (or a heartbeat position between transactions, or the start): a new stream
//! started there yields exactly the following transactions. Positions inside a transaction
//! are never handed out: [`Commit::position`] is the end of the XID / COMMIT / DDL event (or
//! of the TRANSACTION_PAYLOAD event), heartbeats are only yielded between transactions.
//! Artificial events (log_pos 0: the rotate and format description a server sends when a
//! dump starts) never move positions.

mod charset;
mod events;
mod json;
mod looked_up;
mod payload;
mod raw_event;
mod reader;
mod rows;
mod table_map;
mod vanished;
mod xa;

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use mysql_common::binlog::consts::{BinlogChecksumAlg, BinlogVersion};
use mysql_common::binlog::events::{FormatDescriptionEvent, GtidEvent, QueryEvent};

pub(crate) use self::events::parse_rotate;
pub(crate) use self::looked_up::LookedUpColumn;
pub(crate) use self::raw_event::{carries_checksum, EventHeader, RawEvent, HEADER_LEN};

use self::events::{code, event_name};
use self::reader::ByteReader;
use self::rows::RowsKind;
use self::table_map::TablePlan;
use crate::error::BinlogError;
use crate::gtid::Gtid;
use crate::internal_events::InternalEvent;
use crate::types::{
    BinlogPosition, ColumnNames, Commit, Flavor, Heartbeat, RowChange, RowOperation, StreamItem,
    TableFilter, TableName, XaBoundary,
};

/// What [`Decoder::push`] did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PushOutcome {
    /// The event was consumed; zero or more items were appended to `out`.
    Consumed,
    /// A TABLE_MAP of a watched table carries no column names (binlog_row_metadata=MINIMAL,
    /// MySQL 8's default) and none are cached: the caller must look them up
    /// (information_schema.COLUMNS ordered by ORDINAL_POSITION), call
    /// set_looked_up_columns, and push the SAME event again.
    NeedColumnNames(TableName),
}

/// Where the decoder is relative to transaction boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    /// Between transactions.
    Idle,
    /// After a GTID (or a MariaDB standalone GTID), before BEGIN or the single statement
    /// that forms the group: a BEGIN opens a transaction, anything else ends the group.
    AwaitingStatement,
    /// Inside BEGIN ... COMMIT/XID (MariaDB: after a non-standalone GTID).
    Open {
        /// A BEGIN query was seen (a second one is a broken stream).
        begin_seen: bool,
    },
    /// Rows events without any BEGIN: the group ends at the rows event flagged
    /// end-of-statement.
    ImplicitStatement,
}

/// A TRANSACTION_PAYLOAD whose inner events are being decoded, kept in the decoder while an
/// inner TABLE_MAP waits for column names (the caller pushes the payload event again).
struct PendingPayload {
    /// Start of the payload event: inner events are reported here (they have no position
    /// of their own), and it identifies the payload event when it is pushed again.
    start: u64,
    /// End of the payload event: the commit position of its transaction.
    end: u64,
    /// The decompressed inner events.
    bytes: Vec<u8>,
    /// Offset in `bytes` of the next inner event to decode (the one that asked for names).
    cursor: usize,
}

/// A TABLE_MAP seen in the stream, by table id.
struct MappedTable {
    /// The TABLE_MAP body, to recognise an identical map and reuse its plan.
    raw: Vec<u8>,
    /// The decoding plan; `None` for tables the filter does not watch.
    plan: Option<Arc<TablePlan>>,
    /// Column names resolved for the last TABLE_MAP of this id.
    names: Option<ColumnNames>,
}

/// Hashes a table id (a `u64` the server assigns, not attacker-chosen input) with one
/// multiplication instead of SipHash: every TABLE_MAP and rows event looks its id up, and
/// SipHash was a measurable part of the decoder's per-transaction cost (README, callgrind).
#[derive(Default)]
struct TableIdHasher {
    /// The hash of the id written last (only `write_u64` is used for `u64` keys).
    hash: u64,
}

impl Hasher for TableIdHasher {
    fn finish(&self) -> u64 {
        self.hash
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used for `u64` keys; kept correct for any other input.
        for byte in bytes {
            self.hash = (self.hash.rotate_left(5) ^ u64::from(*byte)).wrapping_mul(FX_SEED);
        }
    }

    fn write_u64(&mut self, id: u64) {
        // Fibonacci hashing: the multiplication spreads consecutive ids over the high bits
        // hashbrown uses for its control bytes as well as the low bits for the bucket.
        self.hash = (self.hash.rotate_left(5) ^ id).wrapping_mul(FX_SEED);
    }
}

/// The multiplier of `TableIdHasher` (the golden ratio in 64 bits, as FxHash uses).
const FX_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// TABLE_MAPs by table id, hashed cheaply (see `TableIdHasher`).
type TablesById = HashMap<u64, MappedTable, BuildHasherDefault<TableIdHasher>>;

/// Turns binlog events into stream items. See the module documentation for the contract.
pub(crate) struct Decoder {
    /// Which tables' rows are decoded.
    filter: TableFilter,
    /// Known once the format description event arrived.
    flavor: Option<Flavor>,
    /// The binlog file events are currently read from (ROTATE events change it).
    current_file: String,
    /// Table id width in TABLE_MAP and rows events (6, or 4 for servers before 5.1.4).
    table_id_bytes: usize,
    /// The last FORMAT_DESCRIPTION with its footer (before one, `mysql_common`'s placeholder
    /// without checksums): whether events end in a CRC32, and the post-header lengths the
    /// rare events parsed with `mysql_common` need.
    format: FormatDescriptionEvent<'static>,
    /// End of the last event pushed with a log position (at first the start position):
    /// where the next event starts, named by errors about an event too short to carry a
    /// header.
    last_event_end: u64,
    /// TABLE_MAPs by table id.
    tables: TablesById,
    /// Column names looked up by the caller (MINIMAL metadata), or positional names.
    column_names: HashMap<TableName, KnownColumns>,
    /// Name columns `@1`, `@2`, ... when a map has no names (file source: no server to ask).
    positional_names: bool,
    /// Transaction state.
    group: Group,
    /// GTID of the open group.
    gtid: Option<Gtid>,
    /// The same GTID, shared by the group's rows: made at the group's first watched row
    /// (so transactions without one pay nothing), then one `Arc` clone per row. A cell
    /// because rows are decoded through `&self`.
    row_gtid: std::cell::OnceCell<Option<Arc<Gtid>>>,
    /// Watched rows yielded in the open group.
    rows_in_group: u64,
    /// The open group is the prepared part of a two-phase XA transaction (MariaDB GTID
    /// flag `FL_PREPARED_XA`, or `XA START`): its rows say so (`RowChange::in_xa_transaction`).
    in_xa_group: bool,
    /// What the commit that ends the open group is for XA (set by the XA_PREPARE event or
    /// the `XA COMMIT`/`XA ROLLBACK` query just before that commit).
    xa_boundary: Option<XaBoundary>,
    /// The compressed transaction waiting for column names of one of its inner TABLE_MAPs.
    payload: Option<PendingPayload>,
    /// The buffer the next TRANSACTION_PAYLOAD is decompressed into, kept between payloads
    /// (up to `payload::MAX_KEPT_BUFFER`) so a compressed transaction does not allocate it.
    payload_buffer: Vec<u8>,
    /// Last boundary handed out and its GTID.
    last_boundary: (BinlogPosition, Option<Gtid>),
    /// A fresh CRC32 hasher, cloned per event: `Hasher::new` detects CPU features on every
    /// call, a clone does not.
    crc32_start: crc32fast::Hasher,
}

/// Column names of a table not named by its TABLE_MAPs, until a DDL statement mentions it.
struct KnownColumns {
    /// The names, in table order.
    names: ColumnNames,
    /// The columns as information_schema described them (`None` for positional names or
    /// names set without types): every TABLE_MAP using the names must have binlog types
    /// that fit these, or the names may belong to another definition of the table.
    looked_up: Option<Arc<[LookedUpColumn]>>,
}

/// How many table ids are remembered before the map is cleared (at a commit or rotate).
const MAX_REMEMBERED_TABLE_IDS: usize = 1024;

impl Decoder {
    /// `start_file`: the binlog file the stream starts in (rotate events update it).
    pub(crate) fn new(filter: TableFilter, start_file: String) -> Decoder {
        Decoder {
            filter,
            flavor: None,
            last_boundary: (BinlogPosition::new(start_file.clone(), 4), None),
            current_file: start_file,
            table_id_bytes: 6,
            format: FormatDescriptionEvent::new(BinlogVersion::Version4),
            last_event_end: 4,
            tables: TablesById::default(),
            column_names: HashMap::new(),
            positional_names: false,
            group: Group::Idle,
            gtid: None,
            row_gtid: std::cell::OnceCell::new(),
            rows_in_group: 0,
            in_xa_group: false,
            xa_boundary: None,
            payload: None,
            payload_buffer: Vec::new(),
            crc32_start: crc32fast::Hasher::new(),
        }
    }

    /// Sets the boundary reported by [`Decoder::last_boundary`] before the first commit
    /// (the position and GTID the stream was started from).
    pub(crate) fn with_start(mut self, position: u64, gtid: Option<Gtid>) -> Decoder {
        self.last_event_end = position;
        self.last_boundary = (
            BinlogPosition::new(self.current_file.clone(), position),
            gtid,
        );
        self
    }

    /// Names the columns of maps without names `@1`, `@2`, ... (as mysqlbinlog does)
    /// instead of returning [`PushOutcome::NeedColumnNames`]. For sources without a server.
    pub(crate) fn with_positional_column_names(mut self) -> Decoder {
        self.positional_names = true;
        self
    }

    /// Which tables' rows are decoded.
    pub(crate) fn filter(&self) -> &TableFilter {
        &self.filter
    }

    /// The flavor, once the format description event told it.
    pub(crate) fn flavor(&self) -> Option<Flavor> {
        self.flavor
    }

    /// The last transaction boundary handed out (or the start), and its GTID.
    pub(crate) fn last_boundary(&self) -> (BinlogPosition, Option<Gtid>) {
        self.last_boundary.clone()
    }

    /// True between a transaction's first event and its commit.
    pub(crate) fn in_transaction(&self) -> bool {
        self.group != Group::Idle || self.payload.is_some()
    }

    /// Whether pushing `event` may yield rows, judged from its header and table id alone
    /// (nothing decoded, no checksum computed): a rows event whose table id maps to a
    /// watched table, or to no TABLE_MAP known here (`push` then says what is wrong), or a
    /// compressed transaction (TRANSACTION_PAYLOAD). False for every other event and for
    /// rows of a table the filter does not watch. The live reader asks this before it
    /// decodes a large event, so its caller can reserve memory for the rows first.
    pub(crate) fn may_yield_rows(&self, event: &[u8]) -> bool {
        let Some(header) = EventHeader::read(event) else {
            return false;
        };
        match header.event_type_raw() {
            code::TRANSACTION_PAYLOAD => true,
            code::WRITE_ROWS_V1
            | code::UPDATE_ROWS_V1
            | code::DELETE_ROWS_V1
            | code::WRITE_ROWS
            | code::UPDATE_ROWS
            | code::DELETE_ROWS => {
                let body = event.get(HEADER_LEN..).unwrap_or_default();
                match rows::read_table_id(body, self.table_id_bytes) {
                    Ok(table_id) => !matches!(
                        self.tables.get(&table_id),
                        Some(MappedTable { plan: None, .. })
                    ),
                    // Malformed: decoding it fails and says why.
                    Err(_) => true,
                }
            }
            _ => false,
        }
    }

    /// The binlog file the decoder is currently in.
    pub(crate) fn current_file(&self) -> &str {
        &self.current_file
    }

    /// Column names of `table` in table order, without types to check them against (tests).
    #[cfg(test)]
    pub(crate) fn set_column_names(&mut self, table: &TableName, names: Vec<String>) {
        self.column_names.insert(
            table.clone(),
            KnownColumns {
                names: ColumnNames::from(names),
                looked_up: None,
            },
        );
    }

    /// Columns of `table` in table order, as looked up from the server's information_schema
    /// (names and types; TABLE_MAPs using them are checked against the types).
    pub(crate) fn set_looked_up_columns(
        &mut self,
        table: &TableName,
        columns: Vec<LookedUpColumn>,
    ) {
        self.column_names.insert(
            table.clone(),
            KnownColumns {
                names: columns.iter().map(|column| column.name.clone()).collect(),
                looked_up: Some(columns.into()),
            },
        );
    }

    /// Switches to another file without a ROTATE event (the file source opening the next
    /// file): positions of the following events are offsets in it.
    pub(crate) fn set_current_file(&mut self, name: String) {
        self.current_file = name;
    }

    fn position(&self, offset: u64) -> BinlogPosition {
        BinlogPosition::new(self.current_file.clone(), offset)
    }

    /// Feeds one event: `event` is one whole binlog event exactly as on the wire or in a
    /// file (the 19-byte common header, the body, and the 4-byte CRC32 when the stream uses
    /// checksums, as the last FORMAT_DESCRIPTION said). See the module documentation.
    pub(crate) fn push(
        &mut self,
        event: &[u8],
        out: &mut VecDeque<StreamItem>,
    ) -> Result<PushOutcome, BinlogError> {
        let Some(header) = EventHeader::read(event) else {
            return Err(self.header_too_short(event));
        };
        let event_type = header.event_type_raw();
        let log_pos = u64::from(header.log_pos());
        // Where the event starts and ends, for rows and errors (artificial events: 0).
        let (start, end) = if log_pos == 0 {
            (0, 0)
        } else {
            (
                log_pos.saturating_sub(u64::from(header.event_size())),
                log_pos,
            )
        };
        let raw = RawEvent::new(event, header, self.format.footer())
            .map_err(|reason| self.malformed(event_type, start, reason))?;
        if let Some(payload) = &self.payload {
            if event_type != code::TRANSACTION_PAYLOAD
                || payload.start != start
                || payload.end != end
            {
                return Err(self.payload_not_pushed_again(event_type, start));
            }
        }
        self.verify_checksum(&raw, start)?;
        if log_pos != 0 {
            self.last_event_end = log_pos;
        }
        self.dispatch(&raw, start, end, out)
    }

    /// Decodes one event whose checksum was verified (or an inner event of a compressed
    /// transaction, which has none) positioned at `start`..`end`.
    fn dispatch(
        &mut self,
        event: &RawEvent<'_>,
        start: u64,
        end: u64,
        out: &mut VecDeque<StreamItem>,
    ) -> Result<PushOutcome, BinlogError> {
        let header = *event.header();
        let event_type = header.event_type_raw();
        let log_pos = u64::from(header.log_pos());
        match event_type {
            code::FORMAT_DESCRIPTION => self.on_format_description(event, start)?,
            code::ROTATE => self.on_rotate(event, start, log_pos)?,
            code::QUERY => self.on_query(event, start, end, out)?,
            code::MARIADB_QUERY_COMPRESSED => {
                // The statement text is zlib-compressed; it cannot be BEGIN/COMMIT (those are
                // shorter than the compression threshold), so treat it as a statement that
                // may be DDL on any table.
                self.column_names.clear();
                if matches!(self.group, Group::Idle | Group::AwaitingStatement) {
                    self.commit(end, header.timestamp(), start, out)?;
                }
            }
            code::XID => {
                self.commit(end, header.timestamp(), start, out)?;
            }
            code::XA_PREPARE => {
                let xid = xa::parse_xa_prepare(event.data())
                    .map_err(|reason| self.malformed(event_type, start, reason))?;
                // A one-phase XA COMMIT (no XID returned) is an ordinary commit.
                self.xa_boundary = xid.map(|xid| XaBoundary::Prepare { xid });
                self.commit(end, header.timestamp(), start, out)?;
            }
            code::TABLE_MAP => return self.on_table_map(event, start),
            code::WRITE_ROWS_V1 => self.on_rows(event, RowsKind::Write, false, start, end, out)?,
            code::UPDATE_ROWS_V1 => {
                self.on_rows(event, RowsKind::Update, false, start, end, out)?
            }
            code::DELETE_ROWS_V1 => {
                self.on_rows(event, RowsKind::Delete, false, start, end, out)?
            }
            code::WRITE_ROWS => self.on_rows(event, RowsKind::Write, true, start, end, out)?,
            code::UPDATE_ROWS => self.on_rows(event, RowsKind::Update, true, start, end, out)?,
            code::DELETE_ROWS => self.on_rows(event, RowsKind::Delete, true, start, end, out)?,
            code::PARTIAL_UPDATE_ROWS => {
                let table_id = rows::read_table_id(event.data(), self.table_id_bytes)
                    .map_err(|reason| self.malformed(event_type, start, reason))?;
                if self.watched_plan(table_id, event_type, start)?.is_some() {
                    return Err(self.unsupported(
                        event_type,
                        start,
                        "partial JSON updates (binlog_row_value_options=PARTIAL_JSON) of a \
                         watched table cannot be applied; set binlog_row_value_options=''",
                    ));
                }
                self.note_rows_without_begin(event.data(), start, end, header.timestamp(), out)?;
            }
            code::GTID | code::GTID_TAGGED => {
                let gtid_event: GtidEvent = event
                    .parse(&self.format)
                    .map_err(|e| self.malformed(event_type, start, e.to_string()))?;
                let gtid = Gtid::Mysql {
                    source_uuid: events::format_uuid(&gtid_event.sid()),
                    tag: gtid_event.tag().map(|tag| tag.to_string()),
                    transaction_id: gtid_event.gno(),
                };
                self.start_group(Some(gtid), Group::AwaitingStatement, start)?;
            }
            code::ANONYMOUS_GTID => self.start_group(None, Group::AwaitingStatement, start)?,
            code::MARIADB_GTID => {
                let parsed = events::parse_mariadb_gtid(event.data(), header.server_id())
                    .map_err(|reason| self.malformed(event_type, start, reason))?;
                let group = if parsed.flags & events::MARIADB_FL_STANDALONE != 0 {
                    Group::AwaitingStatement
                } else {
                    Group::Open { begin_seen: false }
                };
                self.start_group(Some(parsed.gtid), group, start)?;
                self.in_xa_group = parsed.flags & xa::MARIADB_FL_PREPARED_XA != 0;
            }
            code::MARIADB_GTID_LIST => {
                let list = events::parse_mariadb_gtid_list(event.data())
                    .map_err(|reason| self.malformed(event_type, start, reason))?;
                tracing::debug!(file = %self.current_file, gtid_list = ?list, "binlog GTID state");
            }
            code::TRANSACTION_PAYLOAD => {
                return self.on_transaction_payload(event, start, end, out)
            }
            code::HEARTBEAT | code::HEARTBEAT_V2 => {
                let position = if event_type == code::HEARTBEAT_V2 {
                    events::parse_heartbeat_v2_position(event.data())
                        .map_err(|reason| self.malformed(event_type, start, reason))?
                        .unwrap_or(log_pos)
                } else {
                    log_pos
                };
                if !self.in_transaction() && position != 0 {
                    let position = self.position(position);
                    self.last_boundary.0 = position.clone();
                    out.push_back(StreamItem::Heartbeat(Heartbeat { position }));
                }
            }
            // Events without rows: statement-context values, ignorable and informational
            // events, MariaDB annotations and checkpoints, group replication bookkeeping.
            code::STOP
            | code::INTVAR
            | code::RAND
            | code::USER_VAR
            | code::IGNORABLE
            | code::ROWS_QUERY
            | code::PREVIOUS_GTIDS
            | code::TRANSACTION_CONTEXT
            | code::VIEW_CHANGE
            | code::MARIADB_ANNOTATE_ROWS
            | code::MARIADB_BINLOG_CHECKPOINT
            | code::MARIADB_START_ENCRYPTION => {}
            code::PRE_GA_WRITE_ROWS | code::PRE_GA_UPDATE_ROWS | code::PRE_GA_DELETE_ROWS => {
                return Err(self.unsupported(
                    event_type,
                    start,
                    "pre-GA row events of MySQL 5.1.0-5.1.15 are not supported",
                ))
            }
            code::MARIADB_WRITE_ROWS_COMPRESSED_V1
            | code::MARIADB_UPDATE_ROWS_COMPRESSED_V1
            | code::MARIADB_DELETE_ROWS_COMPRESSED_V1
            | code::MARIADB_WRITE_ROWS_COMPRESSED
            | code::MARIADB_UPDATE_ROWS_COMPRESSED
            | code::MARIADB_DELETE_ROWS_COMPRESSED => {
                return Err(self.unsupported(
                    event_type,
                    start,
                    "compressed row events are not supported; set log_bin_compress=OFF",
                ))
            }
            code::LOAD
            | code::CREATE_FILE
            | code::APPEND_BLOCK
            | code::EXEC_LOAD
            | code::DELETE_FILE
            | code::NEW_LOAD
            | code::BEGIN_LOAD_QUERY
            | code::EXECUTE_LOAD_QUERY => {
                return Err(self.unsupported(
                    event_type,
                    start,
                    "statement-based LOAD DATA changes rows without row events; the server \
                     must use binlog_format=ROW",
                ))
            }
            code::INCIDENT => {
                return Err(self.unsupported(
                    event_type,
                    start,
                    "the server recorded an incident (events may be missing from the binlog)",
                ))
            }
            code::START_V3 | code::SLAVE | code::UNKNOWN => {
                return Err(self.unsupported(
                    event_type,
                    start,
                    "binlog format version 1-3 (MySQL before 5.0) is not supported",
                ))
            }
            other => {
                return Err(BinlogError::UnknownEvent {
                    event_type: other,
                    position: self.position(start),
                })
            }
        }
        Ok(PushOutcome::Consumed)
    }

    fn malformed(&self, event_type: u8, start: u64, reason: String) -> BinlogError {
        BinlogError::MalformedEvent {
            event_name: event_name(event_type),
            position: self.position(start),
            reason,
        }
    }

    fn unsupported(&self, event_type: u8, start: u64, reason: &str) -> BinlogError {
        BinlogError::UnsupportedEvent {
            event_type,
            event_name: event_name(event_type),
            position: self.position(start),
            reason: reason.to_owned(),
        }
    }

    /// The error for bytes too short to hold an event header, positioned where the event
    /// should start (out of line).
    #[cold]
    #[inline(never)]
    fn header_too_short(&self, event: &[u8]) -> BinlogError {
        BinlogError::MalformedEvent {
            event_name: event_name(event.get(4).copied().unwrap_or(code::UNKNOWN)),
            position: self.position(self.last_event_end),
            reason: format!(
                "{} bytes are too short for the {HEADER_LEN}-byte event header",
                event.len()
            ),
        }
    }

    /// The error for an event pushed while a compressed transaction waits for column names
    /// and the same TRANSACTION_PAYLOAD event to be pushed again (out of line).
    #[cold]
    #[inline(never)]
    fn payload_not_pushed_again(&self, event_type: u8, start: u64) -> BinlogError {
        let payload_start = self.payload.as_ref().map_or(0, |payload| payload.start);
        BinlogError::BrokenTransaction {
            position: self.position(start),
            reason: format!(
                "a {} event arrived while the compressed transaction at {} waited for column \
                 names; its TRANSACTION_PAYLOAD event must be pushed again first",
                event_name(event_type),
                self.position(payload_start)
            ),
        }
    }

    fn verify_checksum(&self, event: &RawEvent<'_>, start: u64) -> Result<(), BinlogError> {
        match event.footer().get_checksum_alg() {
            Ok(Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32)) => {}
            Ok(Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_OFF)) | Ok(None) => return Ok(()),
            Err(_) => {
                return Err(self.malformed(
                    event.header().event_type_raw(),
                    start,
                    "the format description names an unknown checksum algorithm".into(),
                ))
            }
        }
        let Some(stored) = event.checksum() else {
            return Ok(());
        };
        // One call over the raw bytes before the checksum (a FORMAT_DESCRIPTION's "binlog in
        // use" flag counts as cleared: the server's rule).
        let computed = event.compute_crc32(&self.crc32_start);
        if stored != computed {
            return Err(BinlogError::ChecksumMismatch {
                position: self.position(start),
                stored,
                computed,
            });
        }
        Ok(())
    }

    fn on_format_description(
        &mut self,
        event: &RawEvent<'_>,
        start: u64,
    ) -> Result<(), BinlogError> {
        let fde = event
            .parse_format_description()
            .map_err(|e| self.malformed(code::FORMAT_DESCRIPTION, start, e.to_string()))?;
        let version = fde.server_version();
        let flavor = if version.contains("MariaDB") || version.contains("mariadb") {
            Flavor::Mariadb
        } else {
            Flavor::Mysql
        };
        self.flavor = Some(flavor);
        let table_map_post_header = fde
            .event_type_header_lengths()
            .get(usize::from(code::TABLE_MAP) - 1);
        self.table_id_bytes = if table_map_post_header == Some(&6) {
            4
        } else {
            6
        };
        tracing::debug!(server_version = %version, %flavor, "binlog format description");
        self.format = fde;
        Ok(())
    }

    /// A TRANSACTION_PAYLOAD: decompresses it, or takes back the one whose inner TABLE_MAP
    /// asked for column names (`push` checked that this is the same event), and decodes its
    /// inner events.
    fn on_transaction_payload(
        &mut self,
        event: &RawEvent<'_>,
        start: u64,
        end: u64,
        out: &mut VecDeque<StreamItem>,
    ) -> Result<PushOutcome, BinlogError> {
        let pending = match self.payload.take() {
            Some(pending) => pending,
            None => {
                if matches!(self.group, Group::Open { .. } | Group::ImplicitStatement) {
                    return Err(BinlogError::BrokenTransaction {
                        position: self.position(start),
                        reason: "a compressed transaction started inside another transaction"
                            .into(),
                    });
                }
                if end == 0 {
                    return Err(self.malformed(
                        code::TRANSACTION_PAYLOAD,
                        start,
                        "no log position".into(),
                    ));
                }
                let mut bytes = std::mem::take(&mut self.payload_buffer);
                if let Err(reason) = payload::decompress(event, &self.format, &mut bytes) {
                    self.recycle_payload_buffer(bytes);
                    return Err(self.malformed(code::TRANSACTION_PAYLOAD, start, reason));
                }
                if self.group == Group::Idle {
                    self.group = Group::AwaitingStatement;
                }
                PendingPayload {
                    start,
                    end,
                    bytes,
                    cursor: 0,
                }
            }
        };
        self.decode_payload(pending, out)
    }

    /// Decodes the inner events of a compressed transaction from its cursor on; keeps it
    /// in `self.payload` when one asks for column names.
    fn decode_payload(
        &mut self,
        mut pending: PendingPayload,
        out: &mut VecDeque<StreamItem>,
    ) -> Result<PushOutcome, BinlogError> {
        // Inner events carry no checksum (WL#3549).
        let mut inner_footer = self.format.footer();
        inner_footer.set_checksum_enabled(false);
        while let Some(rest) = pending
            .bytes
            .get(pending.cursor..)
            .filter(|rest| !rest.is_empty())
        {
            let event = payload::inner_event(rest, inner_footer).map_err(|reason| {
                self.malformed(
                    code::TRANSACTION_PAYLOAD,
                    pending.start,
                    format!(
                        "inside the compressed transaction, at inner offset {}: {reason}",
                        pending.cursor
                    ),
                )
            })?;
            let size = event.len();
            match self.dispatch(&event, pending.start, pending.end, out)? {
                PushOutcome::Consumed => pending.cursor += size,
                outcome @ PushOutcome::NeedColumnNames(_) => {
                    self.payload = Some(pending);
                    return Ok(outcome);
                }
            }
        }
        let unfinished = self.group != Group::Idle;
        let start = pending.start;
        self.recycle_payload_buffer(pending.bytes);
        if unfinished {
            return Err(BinlogError::BrokenTransaction {
                position: self.position(start),
                reason: "the compressed transaction's events end before its commit".into(),
            });
        }
        Ok(PushOutcome::Consumed)
    }

    /// Keeps a decompression buffer for the next payload unless it grew huge.
    fn recycle_payload_buffer(&mut self, mut bytes: Vec<u8>) {
        if bytes.capacity() <= payload::MAX_KEPT_BUFFER {
            bytes.clear();
            self.payload_buffer = bytes;
        }
    }

    fn on_rotate(
        &mut self,
        event: &RawEvent<'_>,
        start: u64,
        log_pos: u64,
    ) -> Result<(), BinlogError> {
        let (_, name) =
            events::parse_rotate(event.header_bytes(), event.data()).ok_or_else(|| {
                self.malformed(
                    code::ROTATE,
                    start,
                    "the rotate event names no printable file".into(),
                )
            })?;
        if self.in_transaction() && log_pos != 0 {
            tracing::warn!(from = %self.current_file, to = %name, "rotate inside a transaction");
        }
        if name != self.current_file {
            if self.tables.len() > MAX_REMEMBERED_TABLE_IDS {
                self.tables.clear();
            }
            self.current_file = name;
        }
        Ok(())
    }

    fn start_group(
        &mut self,
        gtid: Option<Gtid>,
        group: Group,
        start: u64,
    ) -> Result<(), BinlogError> {
        if self.group != Group::Idle {
            return Err(BinlogError::BrokenTransaction {
                position: self.position(start),
                reason: "a new transaction started before the previous one committed".into(),
            });
        }
        self.group = group;
        self.gtid = gtid;
        self.row_gtid = std::cell::OnceCell::new();
        self.rows_in_group = 0;
        self.in_xa_group = false;
        self.xa_boundary = None;
        Ok(())
    }

    fn commit(
        &mut self,
        end: u64,
        timestamp: u32,
        start: u64,
        out: &mut VecDeque<StreamItem>,
    ) -> Result<(), BinlogError> {
        if end == 0 {
            return Err(BinlogError::BrokenTransaction {
                position: self.position(start),
                reason: "a commit event without a log position".into(),
            });
        }
        let position = self.position(end);
        let gtid = self.gtid.take();
        // `clone_from` reuses the boundary's file-name buffer instead of allocating a new
        // one per commit.
        self.last_boundary.0.file.clone_from(&position.file);
        self.last_boundary.0.position = position.position;
        self.last_boundary.1.clone_from(&gtid);
        out.push_back(StreamItem::Commit(Commit {
            position,
            gtid,
            timestamp,
            row_count: self.rows_in_group,
            xa: self.xa_boundary.take(),
        }));
        self.group = Group::Idle;
        self.row_gtid = std::cell::OnceCell::new();
        self.rows_in_group = 0;
        self.in_xa_group = false;
        // Every transaction sends its TABLE_MAPs again, so between transactions remembered
        // maps can be dropped; this bounds memory when table ids keep changing.
        if self.tables.len() > MAX_REMEMBERED_TABLE_IDS {
            self.tables.clear();
        }
        Ok(())
    }

    fn on_query(
        &mut self,
        event: &RawEvent<'_>,
        start: u64,
        end: u64,
        out: &mut VecDeque<StreamItem>,
    ) -> Result<(), BinlogError> {
        // mysql_common validates the event; the statement is the body's tail (its last
        // field), taken from the event bytes so the parsed event need not be kept.
        let data = event.data();
        let parsed = event
            .parse::<QueryEvent<'_>>(&self.format)
            .map_err(|e| self.malformed(code::QUERY, start, e.to_string()))?;
        let query_len = parsed.query_raw().len();
        let query = data
            .get(data.len().saturating_sub(query_len)..)
            .unwrap_or_default();
        let kind = classify_query(query);
        // The default database, for unqualified names in DDL (only DDL pays the copy).
        let default_db = match kind {
            QueryKind::Statement { ddl: true } => parsed.schema().into_owned(),
            _ => String::new(),
        };
        let timestamp = event.header().timestamp();
        match xa::xa_statement(query) {
            Some(xa::XaStatement::Start) => self.in_xa_group = true,
            Some(xa::XaStatement::Prepare(xid)) => {
                self.xa_boundary = Some(XaBoundary::Prepare { xid })
            }
            Some(xa::XaStatement::Commit(xid)) => {
                self.xa_boundary = Some(XaBoundary::Commit { xid })
            }
            Some(xa::XaStatement::Rollback(xid)) => {
                self.xa_boundary = Some(XaBoundary::Rollback { xid })
            }
            Some(xa::XaStatement::Other) | None => {}
        }
        match (kind, self.group) {
            (QueryKind::Begin, Group::Idle | Group::AwaitingStatement) => {
                self.group = Group::Open { begin_seen: true };
            }
            (QueryKind::Begin, Group::Open { begin_seen: false }) => {
                self.group = Group::Open { begin_seen: true };
            }
            (QueryKind::Begin, _) => {
                return Err(BinlogError::BrokenTransaction {
                    position: self.position(start),
                    reason: "BEGIN inside an open transaction".into(),
                })
            }
            (QueryKind::Commit, _) => self.commit(end, timestamp, start, out)?,
            (QueryKind::InTransaction, Group::Open { .. } | Group::ImplicitStatement) => {}
            (QueryKind::InTransaction, Group::Idle | Group::AwaitingStatement) => {
                // XA START after a GTID (or without one) opens the XA transaction.
                self.group = Group::Open { begin_seen: true };
            }
            (QueryKind::Statement { ddl }, group) => {
                if ddl {
                    self.forget_names_mentioned_in(query);
                    self.report_vanished_watched_tables(query, &default_db, start);
                } else if self.is_statement_dml_on_watched_table(query) {
                    return Err(self.unsupported(
                        code::QUERY,
                        start,
                        "a data change of a watched table was logged as an SQL statement, not \
                         as row events; the server must use binlog_format=ROW",
                    ));
                }
                if matches!(group, Group::Idle | Group::AwaitingStatement) {
                    self.commit(end, timestamp, start, out)?;
                }
            }
        }
        Ok(())
    }

    /// True for INSERT/UPDATE/DELETE/REPLACE/LOAD statements (statement-based logging) that
    /// mention a watched table's name: their rows are not in the binlog, so reading on
    /// would silently lose them.
    fn is_statement_dml_on_watched_table(&self, query: &[u8]) -> bool {
        let text = skip_leading_noise(query);
        let is_dml = [
            b"INSERT".as_slice(),
            b"UPDATE",
            b"DELETE",
            b"REPLACE",
            b"LOAD",
        ]
        .iter()
        .any(|word| starts_with_word(text, word));
        if !is_dml {
            return false;
        }
        if self.filter == TableFilter::all() {
            return true;
        }
        let text = String::from_utf8_lossy(text).to_lowercase();
        self.filter
            .watched()
            .any(|table| text.contains(&table.table.to_lowercase()))
    }

    /// Reports every watched table the DDL statement leaves without a table of its name
    /// (`decoder/vanished.rs`); reading goes on.
    fn report_vanished_watched_tables(&self, query: &[u8], default_db: &str, start: u64) {
        let watched: Vec<&TableName> = self.filter.watched().collect();
        if watched.is_empty() {
            return;
        }
        let statement = skip_leading_noise(query);
        let gone = vanished::watched_tables_gone_after(statement, default_db, &watched);
        if gone.is_empty() {
            return;
        }
        let position = self.position(start);
        let text: String = String::from_utf8_lossy(statement)
            .chars()
            .take(200)
            .collect();
        for table in &gone {
            crate::internal_events::WatchedTableVanished {
                table,
                position: &position,
                statement: &text,
            }
            .emit();
        }
    }

    /// Forgets cached column names of every table the DDL statement mentions by name, so
    /// the next TABLE_MAP asks again (over-forgetting only costs a lookup).
    fn forget_names_mentioned_in(&mut self, query: &[u8]) {
        if self.column_names.is_empty() {
            return;
        }
        let query = String::from_utf8_lossy(query).to_lowercase();
        self.column_names
            .retain(|table, _| !query.contains(&table.table.to_lowercase()));
    }

    fn on_table_map(
        &mut self,
        event: &RawEvent<'_>,
        start: u64,
    ) -> Result<PushOutcome, BinlogError> {
        let data = event.data();
        // The table id leads the body as in rows events; the rest of the head is only read
        // for a map not seen before (an identical map parsed fine the first time).
        let table_id = rows::read_table_id(data, self.table_id_bytes)
            .map_err(|reason| self.malformed(code::TABLE_MAP, start, reason))?;
        let reuse = match self.tables.get(&table_id) {
            Some(mapped) if mapped.raw == data => {
                // The same map as before: an unwatched table stays unwatched, and names
                // from the map's own metadata cannot have changed, so nothing is left to do
                // (names looked up from the server are checked below, as a DDL statement
                // may have made them stale).
                match &mapped.plan {
                    None => return Ok(PushOutcome::Consumed),
                    Some(plan) if plan.names_from_metadata.is_some() && mapped.names.is_some() => {
                        return Ok(PushOutcome::Consumed)
                    }
                    Some(_) => true,
                }
            }
            _ => false,
        };
        if !reuse {
            let head = table_map::read_head(data, self.table_id_bytes)
                .map_err(|reason| self.malformed(code::TABLE_MAP, start, reason))?;
            let database = String::from_utf8_lossy(head.database);
            let table = String::from_utf8_lossy(head.table);
            let plan = if self.filter.matches(&database, &table) {
                let plan = table_map::build_plan(data, &head, self.flavor.unwrap_or(Flavor::Mysql))
                    .map_err(|reason| BinlogError::RowImageMismatch {
                        table: TableName::new(database.as_ref(), table.as_ref()),
                        position: self.position(start),
                        reason: format!("its TABLE_MAP cannot be decoded: {reason}"),
                    })?;
                Some(Arc::new(plan))
            } else {
                None
            };
            self.tables.insert(
                table_id,
                MappedTable {
                    raw: data.to_vec(),
                    plan,
                    names: None,
                },
            );
        }
        let Some(mapped) = self.tables.get(&table_id) else {
            return Ok(PushOutcome::Consumed);
        };
        let Some(plan) = mapped.plan.clone() else {
            return Ok(PushOutcome::Consumed);
        };
        let mut looked_up = None;
        let names = match &plan.names_from_metadata {
            Some(names) => names.clone(),
            None => match self.column_names.get(&*plan.table) {
                Some(known) => {
                    looked_up = known.looked_up.clone();
                    known.names.clone()
                }
                None if self.positional_names => {
                    let names: ColumnNames =
                        (1..=plan.columns.len()).map(|i| format!("@{i}")).collect();
                    self.column_names.insert(
                        TableName::clone(&plan.table),
                        KnownColumns {
                            names: names.clone(),
                            looked_up: None,
                        },
                    );
                    names
                }
                None => {
                    if let Some(mapped) = self.tables.get_mut(&table_id) {
                        mapped.names = None;
                    }
                    return Ok(PushOutcome::NeedColumnNames(TableName::clone(&plan.table)));
                }
            },
        };
        if names.len() != plan.columns.len() {
            return Err(BinlogError::RowImageMismatch {
                table: TableName::clone(&plan.table),
                position: self.position(start),
                reason: format!(
                    "the binlog has {} columns but {} column names are known ({}); the table \
                     was probably altered after this event was written; set \
                     binlog_row_metadata=FULL on the server so events carry their own column \
                     names",
                    plan.columns.len(),
                    names.len(),
                    names.join(", ")
                ),
            });
        }
        if let Some(reason) = looked_up
            .as_deref()
            .and_then(|columns| looked_up::type_mismatch(columns, &plan.type_codes))
        {
            return Err(BinlogError::RowImageMismatch {
                table: TableName::clone(&plan.table),
                position: self.position(start),
                reason,
            });
        }
        if let Some(mapped) = self.tables.get_mut(&table_id) {
            mapped.names = Some(names);
        }
        Ok(PushOutcome::Consumed)
    }

    /// The plan of a watched table id, `None` for unwatched; an error for an unknown id.
    fn watched_plan(
        &self,
        table_id: u64,
        event_type: u8,
        start: u64,
    ) -> Result<Option<(&Arc<TablePlan>, &ColumnNames)>, BinlogError> {
        match self.tables.get(&table_id) {
            Some(MappedTable { plan: None, .. }) => Ok(None),
            Some(MappedTable {
                plan: Some(plan),
                names: Some(names),
                ..
            }) => Ok(Some((plan, names))),
            mapped => Err(self.no_plan_error(mapped, table_id, event_type, start)),
        }
    }

    /// The error for a rows event whose table id has no usable TABLE_MAP (out of line: the
    /// lookup above runs for every rows event).
    #[cold]
    #[inline(never)]
    fn no_plan_error(
        &self,
        mapped: Option<&MappedTable>,
        table_id: u64,
        event_type: u8,
        start: u64,
    ) -> BinlogError {
        match mapped.and_then(|mapped| mapped.plan.as_ref()) {
            Some(plan) => BinlogError::RowImageMismatch {
                table: TableName::clone(&plan.table),
                position: self.position(start),
                reason: "rows arrived before the column names of their TABLE_MAP were set".into(),
            },
            None => self.malformed(
                event_type,
                start,
                format!("table id {table_id} has no preceding TABLE_MAP event"),
            ),
        }
    }

    /// Group bookkeeping for a rows event: rows outside BEGIN form a statement group that
    /// ends with the event flagged end-of-statement.
    fn note_rows_without_begin(
        &mut self,
        data: &[u8],
        start: u64,
        end: u64,
        timestamp: u32,
        out: &mut VecDeque<StreamItem>,
    ) -> Result<(), BinlogError> {
        if self.group == Group::Idle {
            self.group = Group::ImplicitStatement;
        }
        if matches!(
            self.group,
            Group::ImplicitStatement | Group::AwaitingStatement
        ) {
            let flags = ByteReader::new(data.get(self.table_id_bytes..).unwrap_or_default())
                .uint_le(2)
                .unwrap_or(0) as u16;
            if flags & rows::STMT_END_F != 0 {
                self.commit(end, timestamp, start, out)?;
            }
        }
        Ok(())
    }

    fn on_rows(
        &mut self,
        event: &RawEvent<'_>,
        kind: RowsKind,
        version2: bool,
        start: u64,
        end: u64,
        out: &mut VecDeque<StreamItem>,
    ) -> Result<(), BinlogError> {
        let data = event.data();
        let event_type = event.header().event_type_raw();
        let timestamp = event.header().timestamp();
        let table_id = rows::read_table_id(data, self.table_id_bytes)
            .map_err(|reason| self.malformed(event_type, start, reason))?;
        // Rows of an unwatched table: nothing but the group bookkeeping below.
        if let Some((plan, names)) = self.watched_plan(table_id, event_type, start)? {
            let decoded = self.decode_rows(
                data, event_type, plan, names, kind, version2, start, timestamp, out,
            )?;
            self.rows_in_group += decoded;
        }
        self.note_rows_without_begin(data, start, end, timestamp, out)
    }

    /// Decodes every row of a rows event of a watched table into `out`; returns how many.
    #[allow(clippy::too_many_arguments)]
    fn decode_rows(
        &self,
        data: &[u8],
        event_type: u8,
        plan: &TablePlan,
        names: &ColumnNames,
        kind: RowsKind,
        version2: bool,
        start: u64,
        timestamp: u32,
        out: &mut VecDeque<StreamItem>,
    ) -> Result<u64, BinlogError> {
        let mismatch = |reason: String| BinlogError::RowImageMismatch {
            table: TableName::clone(&plan.table),
            position: self.position(start),
            reason,
        };
        let head = rows::read_head(data, self.table_id_bytes, kind, version2)
            .map_err(|reason| self.malformed(event_type, start, reason))?;
        if head.column_count != plan.columns.len() {
            return Err(mismatch(format!(
                "the rows event has {} columns, its TABLE_MAP {}",
                head.column_count,
                plan.columns.len()
            )));
        }
        let before_image = head
            .before_present
            .map(|bitmap| (bitmap, rows::image_columns(bitmap, names, &plan.types)));
        let after_image = head
            .after_present
            .map(|bitmap| (bitmap, rows::image_columns(bitmap, names, &plan.types)));
        let operation = match kind {
            RowsKind::Write => RowOperation::Insert,
            RowsKind::Update => RowOperation::Update,
            RowsKind::Delete => RowOperation::Delete,
        };
        // Moved into the event's last row, cloned for the others (one file-name
        // allocation per row, none wasted).
        let mut event_position = Some(self.position(start));
        let mut reader = ByteReader::new(head.rows);
        let mut decoded = 0u64;
        while !reader.rest().is_empty() {
            let before = match &before_image {
                Some((bitmap, image)) => {
                    Some(rows::decode_image(&mut reader, plan, bitmap, image).map_err(mismatch)?)
                }
                None => None,
            };
            let after = match &after_image {
                Some((bitmap, image)) => {
                    Some(rows::decode_image(&mut reader, plan, bitmap, image).map_err(mismatch)?)
                }
                None => None,
            };
            let row_position = if reader.rest().is_empty() {
                event_position.take()
            } else {
                event_position.clone()
            };
            out.push_back(StreamItem::Row(RowChange {
                table: Arc::clone(&plan.table),
                operation,
                before,
                after,
                event_timestamp: timestamp,
                event_position: row_position.unwrap_or_else(|| self.position(start)),
                transaction_gtid: self
                    .row_gtid
                    .get_or_init(|| self.gtid.clone().map(Arc::new))
                    .clone(),
                in_xa_transaction: self.in_xa_group,
            }));
            decoded += 1;
        }
        Ok(decoded)
    }
}

/// What a QUERY event means for transaction boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueryKind {
    /// `BEGIN` / `START TRANSACTION`: opens a transaction.
    Begin,
    /// `COMMIT`, `ROLLBACK` (non-transactional changes were kept), `XA PREPARE`: ends it.
    Commit,
    /// `SAVEPOINT`, `ROLLBACK TO`, `XA START/END`: part of an open transaction.
    InTransaction,
    /// Any other statement: inside a transaction part of it, outside one a group of its
    /// own (DDL). `ddl` when it may change a table's columns.
    Statement {
        /// The statement starts with ALTER, CREATE, DROP, RENAME or TRUNCATE.
        ddl: bool,
    },
}

/// Skips leading whitespace and comments (`/* */`, `-- `, `#`) of a statement. An
/// executable comment (`/*!40000 ALTER ...*/`, MariaDB's `/*M!100100 ...*/`) is statement
/// text the server runs: its opening and version number are skipped and its text returned,
/// so `/*!ALTER TABLE t ...*/` classifies as the ALTER it is.
fn skip_leading_noise(mut query: &[u8]) -> &[u8] {
    loop {
        let trimmed = query.trim_ascii_start();
        if let Some(rest) = trimmed.strip_prefix(b"/*") {
            let executable = rest
                .strip_prefix(b"!")
                .or_else(|| rest.strip_prefix(b"M!"))
                .or_else(|| rest.strip_prefix(b"m!"));
            if let Some(inner) = executable {
                let digits = inner.iter().take_while(|b| b.is_ascii_digit()).count();
                query = &inner[digits..];
                continue;
            }
            match rest.windows(2).position(|w| w == b"*/") {
                Some(end) => query = &rest[end + 2..],
                None => return &[],
            }
        } else if trimmed.starts_with(b"#") || trimmed.starts_with(b"-- ") {
            match trimmed.iter().position(|&b| b == b'\n') {
                Some(end) => query = &trimmed[end + 1..],
                None => return &[],
            }
        } else {
            return trimmed;
        }
    }
}

/// True when `statement` (a QUERY event's text) is a DDL statement that may change the
/// columns of a table named `table` (in any database): ALTER, CREATE, DROP or RENAME, also
/// inside an executable comment, naming `table` as a whole identifier (case-insensitive:
/// over-matching only costs a stop). TRUNCATE keeps the columns and does not count. Used by
/// the live reader's forward scan (`live/ddl_scan.rs`).
pub(crate) fn is_ddl_naming_table(statement: &[u8], table: &str) -> bool {
    let text = skip_leading_noise(statement);
    if starts_with_word(text, b"TRUNCATE")
        || classify_query(statement) != (QueryKind::Statement { ddl: true })
    {
        return false;
    }
    mentions_identifier(&text.to_ascii_lowercase(), table.to_lowercase().as_bytes())
}

/// True when `name` occurs in `text` as a whole identifier: not preceded or followed by a
/// character an unquoted identifier may contain (ASCII letters, digits, `_`, `$`, and any
/// non-ASCII byte). Quotes, dots, spaces, commas and parentheses delimit.
fn mentions_identifier(text: &[u8], name: &[u8]) -> bool {
    if name.is_empty() {
        return false;
    }
    let is_identifier_byte =
        |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
    text.windows(name.len()).enumerate().any(|(at, window)| {
        window == name
            && (at == 0 || !is_identifier_byte(text[at - 1]))
            && text
                .get(at + name.len())
                .is_none_or(|&b| !is_identifier_byte(b))
    })
}

fn starts_with_word(text: &[u8], word: &[u8]) -> bool {
    text.len() >= word.len()
        && text[..word.len()].eq_ignore_ascii_case(word)
        && text
            .get(word.len())
            .is_none_or(|b| !b.is_ascii_alphanumeric() && *b != b'_')
}

fn classify_query(query: &[u8]) -> QueryKind {
    let text = skip_leading_noise(query);
    let after_word = |word: &[u8]| skip_leading_noise(&text[word.len()..]);
    if starts_with_word(text, b"BEGIN")
        || (starts_with_word(text, b"START")
            && starts_with_word(after_word(b"START"), b"TRANSACTION"))
    {
        QueryKind::Begin
    } else if starts_with_word(text, b"COMMIT") {
        QueryKind::Commit
    } else if starts_with_word(text, b"ROLLBACK") {
        if starts_with_word(after_word(b"ROLLBACK"), b"TO") {
            QueryKind::InTransaction
        } else {
            QueryKind::Commit
        }
    } else if starts_with_word(text, b"SAVEPOINT") || starts_with_word(text, b"RELEASE") {
        QueryKind::InTransaction
    } else if starts_with_word(text, b"XA") {
        let rest = after_word(b"XA");
        if starts_with_word(rest, b"PREPARE") {
            QueryKind::Commit
        } else if starts_with_word(rest, b"START")
            || starts_with_word(rest, b"BEGIN")
            || starts_with_word(rest, b"END")
        {
            QueryKind::InTransaction
        } else {
            // XA COMMIT / XA ROLLBACK of a prepared transaction: a group of its own.
            QueryKind::Statement { ddl: false }
        }
    } else {
        let ddl = [
            b"ALTER".as_slice(),
            b"CREATE",
            b"DROP",
            b"RENAME",
            b"TRUNCATE",
        ]
        .iter()
        .any(|word| starts_with_word(text, word));
        QueryKind::Statement { ddl }
    }
}

#[cfg(test)]
mod tests;
