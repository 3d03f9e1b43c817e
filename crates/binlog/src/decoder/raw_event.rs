//! A borrowed view of one binlog event as raw bytes (19-byte common header, body, optional
//! CRC32), split the way `mysql_common`'s `Event::read` splits it, without copying the body
//! or cloning a format description: the decoder's hot path reads every event through it.

use std::io;

use mysql_common::binlog::consts::BinlogChecksumAlg;
use mysql_common::binlog::events::{BinlogEventFooter, FormatDescriptionEvent};
use mysql_common::binlog::{BinlogCtx, BinlogEvent};
use mysql_common::io::ParseBuf;

use super::events::code;

/// Length of the common event header (timestamp, type, server id, size, log_pos, flags).
pub(crate) const HEADER_LEN: usize = 19;

/// Length of the CRC32 that ends an event when the stream uses checksums.
pub(crate) const CHECKSUM_LEN: usize = BinlogEventFooter::BINLOG_CHECKSUM_LEN;

/// The "binlog in use" header flag: set in a file's FORMAT_DESCRIPTION while the server
/// writes the file, cleared when it closes it, and left out of that event's checksum.
const LOG_EVENT_BINLOG_IN_USE_F: u16 = 0x1;

/// The common header of an event (binlog format v4), parsed with fixed-size reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventHeader {
    /// Seconds since the epoch when the statement began: the commit timestamp reported.
    timestamp: u32,
    /// The raw event type code: which event this is.
    event_type: u8,
    /// The server that wrote the event: part of a MariaDB GTID.
    server_id: u32,
    /// Length of the whole event (header, body, checksum): checked against the bytes given.
    event_size: u32,
    /// Position of the next event in the binlog file (0 for artificial events).
    log_pos: u32,
    /// Event flags (kept for the FORMAT_DESCRIPTION checksum, which ignores one of them).
    flags: u16,
}

impl EventHeader {
    /// The header at the start of `bytes`; `None` when fewer than 19 bytes are given.
    #[inline]
    pub(crate) fn read(bytes: &[u8]) -> Option<EventHeader> {
        let header: &[u8; HEADER_LEN] = bytes.first_chunk()?;
        let [t0, t1, t2, t3, event_type, s0, s1, s2, s3, z0, z1, z2, z3, p0, p1, p2, p3, f0, f1] =
            *header;
        Some(EventHeader {
            timestamp: u32::from_le_bytes([t0, t1, t2, t3]),
            event_type,
            server_id: u32::from_le_bytes([s0, s1, s2, s3]),
            event_size: u32::from_le_bytes([z0, z1, z2, z3]),
            log_pos: u32::from_le_bytes([p0, p1, p2, p3]),
            flags: u16::from_le_bytes([f0, f1]),
        })
    }

    /// Seconds since the epoch.
    #[inline]
    pub(crate) fn timestamp(&self) -> u32 {
        self.timestamp
    }

    /// The raw event type code.
    #[inline]
    pub(crate) fn event_type_raw(&self) -> u8 {
        self.event_type
    }

    /// The id of the server that wrote the event.
    #[inline]
    pub(crate) fn server_id(&self) -> u32 {
        self.server_id
    }

    /// Length of the whole event as the header states it.
    #[inline]
    pub(crate) fn event_size(&self) -> u32 {
        self.event_size
    }

    /// Position of the next event (0 for artificial events).
    #[inline]
    pub(crate) fn log_pos(&self) -> u32 {
        self.log_pos
    }

    /// The raw flags (unknown bits kept).
    #[inline]
    pub(crate) fn flags_raw(&self) -> u16 {
        self.flags
    }
}

/// True when events read under `footer` (a stream's current FORMAT_DESCRIPTION footer) end in
/// a 4-byte checksum: exactly `mysql_common`'s rule for events other than the format
/// description (an unknown algorithm also reserves the 4 bytes; verifying it then fails).
#[inline]
pub(crate) fn carries_checksum(footer: &BinlogEventFooter) -> bool {
    footer.get_checksum_enabled()
        && !matches!(
            footer.get_checksum_alg(),
            Ok(None) | Ok(Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_OFF))
        )
}

/// One whole event as bytes, split into header, body and checksum. Borrows the bytes; no
/// allocation, nothing copied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawEvent<'a> {
    /// The parsed common header.
    header: EventHeader,
    /// The whole event, header to checksum: what the CRC32 is computed over.
    bytes: &'a [u8],
    /// End of the body in `bytes`: the event length less the checksum (and, for a
    /// FORMAT_DESCRIPTION, less its checksum-algorithm byte), as `Event::read` truncates.
    data_end: usize,
    /// The checksum footer in force for this event: the event's own for a
    /// FORMAT_DESCRIPTION, the stream's (with checksums disabled inside a compressed
    /// transaction) for any other.
    footer: BinlogEventFooter,
    /// Whether the last 4 bytes of `bytes` are a checksum.
    has_checksum: bool,
}

impl<'a> RawEvent<'a> {
    /// Splits `bytes`, whose header is `header` (read from the same bytes), under the
    /// stream's `footer` (see [`carries_checksum`]). Fails, never panics, when the header's
    /// size is not the length given or leaves no room for the checksum; the error is the
    /// reason, the caller names the position.
    #[inline]
    pub(crate) fn new(
        bytes: &'a [u8],
        header: EventHeader,
        footer: BinlogEventFooter,
    ) -> Result<RawEvent<'a>, String> {
        let size = header.event_size as usize;
        if size != bytes.len() {
            return Err(size_mismatch(size, bytes.len()));
        }
        if size < HEADER_LEN {
            return Err(format!(
                "event size {size} is smaller than the {HEADER_LEN}-byte header"
            ));
        }
        if header.event_type == code::FORMAT_DESCRIPTION {
            return Self::format_description(bytes, header);
        }
        let has_checksum = carries_checksum(&footer);
        let data_end = if has_checksum {
            body_end(size, CHECKSUM_LEN)?
        } else {
            size
        };
        Ok(RawEvent {
            header,
            bytes,
            data_end,
            footer,
            has_checksum,
        })
    }

    /// A FORMAT_DESCRIPTION carries its own footer: from MySQL 5.6.1 on it ends in the
    /// checksum-algorithm byte and a checksum (also when the algorithm is OFF), both cut
    /// from the body (`BinlogEventFooter::read` decides, as in `Event::read`).
    #[cold]
    fn format_description(bytes: &'a [u8], header: EventHeader) -> Result<RawEvent<'a>, String> {
        let body = &bytes[HEADER_LEN..];
        let footer = BinlogEventFooter::read(body)
            .map_err(|e| format!("its checksum footer does not parse: {e}"))?;
        let trailer = BinlogEventFooter::BINLOG_CHECKSUM_ALG_DESC_LEN + CHECKSUM_LEN;
        let (data_end, has_checksum) = match footer.get_checksum_alg() {
            Ok(None) => (bytes.len(), false),
            _ => (body_end(bytes.len(), trailer)?, true),
        };
        Ok(RawEvent {
            header,
            bytes,
            data_end,
            footer,
            has_checksum,
        })
    }

    /// The common header.
    #[inline]
    pub(crate) fn header(&self) -> &EventHeader {
        &self.header
    }

    /// The 19 header bytes as they arrived (the CRC of a ROTATE's trailing checksum
    /// covers them).
    #[inline]
    pub(crate) fn header_bytes(&self) -> &'a [u8] {
        &self.bytes[..HEADER_LEN]
    }

    /// Length of the whole event.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The body without checksum (and without a FORMAT_DESCRIPTION's algorithm byte).
    #[inline]
    pub(crate) fn data(&self) -> &'a [u8] {
        &self.bytes[HEADER_LEN..self.data_end]
    }

    /// The checksum footer in force for this event.
    #[inline]
    pub(crate) fn footer(&self) -> BinlogEventFooter {
        self.footer
    }

    /// The stored checksum, when the event carries one.
    #[inline]
    pub(crate) fn checksum(&self) -> Option<u32> {
        if !self.has_checksum {
            return None;
        }
        let (_, tail) = self.bytes.split_last_chunk::<CHECKSUM_LEN>()?;
        Some(u32::from_le_bytes(*tail))
    }

    /// The CRC32 of the event as the server computes it: every byte before the checksum,
    /// except that a FORMAT_DESCRIPTION's "binlog in use" flag counts as cleared. `start` is
    /// a fresh hasher to clone (`Hasher::new` detects CPU features on every call).
    #[inline]
    pub(crate) fn compute_crc32(&self, start: &crc32fast::Hasher) -> u32 {
        let covered = &self.bytes[..self.bytes.len().saturating_sub(CHECKSUM_LEN)];
        let mut hasher = start.clone();
        let flags = self.header.flags_raw();
        if self.header.event_type == code::FORMAT_DESCRIPTION
            && flags & LOG_EVENT_BINLOG_IN_USE_F != 0
        {
            let (header, rest) = covered.split_at(HEADER_LEN.min(covered.len()));
            let mut header_bytes = [0u8; HEADER_LEN];
            header_bytes[..header.len()].copy_from_slice(header);
            header_bytes[17..19]
                .copy_from_slice(&(flags & !LOG_EVENT_BINLOG_IN_USE_F).to_le_bytes());
            hasher.update(&header_bytes);
            hasher.update(rest);
        } else {
            hasher.update(covered);
        }
        hasher.finalize()
    }

    /// Parses the body as a `mysql_common` event struct, as `Event::read_event` does (the
    /// context's event size is the header plus the body without checksum), failing when
    /// bytes remain. For rare events only: the hot path reads bodies itself.
    pub(crate) fn parse<'b, T>(&self, fde: &'b FormatDescriptionEvent<'b>) -> io::Result<T>
    where
        'a: 'b,
        T: BinlogEvent<'b>,
    {
        let data = self.data();
        let mut buf = ParseBuf(data);
        let ctx = BinlogCtx::new(HEADER_LEN + data.len(), fde, self.header.event_type);
        let event: T = buf.parse(ctx)?;
        if !buf.is_empty() {
            return Err(io::Error::other(format!(
                "{} bytes remain after the {}",
                buf.len(),
                std::any::type_name::<T>()
            )));
        }
        Ok(event)
    }

    /// Parses a FORMAT_DESCRIPTION event into an owned one carrying its footer (which
    /// tells whether the following events carry checksums).
    pub(crate) fn parse_format_description(&self) -> io::Result<FormatDescriptionEvent<'static>> {
        // The format description's own body does not depend on the one before it.
        let placeholder =
            FormatDescriptionEvent::new(mysql_common::binlog::consts::BinlogVersion::Version4);
        let parsed: FormatDescriptionEvent<'_> = self.parse(&placeholder)?;
        Ok(parsed.into_owned().with_footer(self.footer))
    }
}

/// The error for an event whose header size is not its length (out of line).
#[cold]
#[inline(never)]
fn size_mismatch(size: usize, len: usize) -> String {
    format!("its header says {size} bytes but the event has {len}")
}

/// The error for an event too short to end in a checksum (out of line).
#[cold]
#[inline(never)]
fn no_room_for_checksum(size: usize) -> String {
    format!("event size {size} leaves no room for its checksum")
}

/// Where the body of a `size`-byte event ends when `trailer` bytes (checksum, and for a
/// FORMAT_DESCRIPTION its algorithm byte) follow it; an error when they do not fit after the
/// header.
fn body_end(size: usize, trailer: usize) -> Result<usize, String> {
    size.checked_sub(trailer)
        .filter(|end| *end >= HEADER_LEN)
        .ok_or_else(|| no_room_for_checksum(size))
}

#[cfg(test)]
mod tests {
    use mysql_common::binlog::consts::BinlogVersion;
    use mysql_common::binlog::events::Event;

    use super::*;

    fn event_bytes(event_type: u8, body: &[u8], crc: bool) -> Vec<u8> {
        let size = HEADER_LEN + body.len() + if crc { 4 } else { 0 };
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&1_700_000_000u32.to_le_bytes());
        bytes.push(event_type);
        bytes.extend_from_slice(&7u32.to_le_bytes());
        bytes.extend_from_slice(&(size as u32).to_le_bytes());
        bytes.extend_from_slice(&500u32.to_le_bytes());
        bytes.extend_from_slice(&0x8u16.to_le_bytes());
        bytes.extend_from_slice(body);
        if crc {
            let crc = crc32fast::hash(&bytes);
            bytes.extend_from_slice(&crc.to_le_bytes());
        }
        bytes
    }

    #[test]
    fn the_view_splits_like_mysql_common() {
        let crc_footer = BinlogEventFooter::new(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32);
        let fde = FormatDescriptionEvent::new(BinlogVersion::Version4).with_footer(crc_footer);
        let bytes = event_bytes(code::XID, &9u64.to_le_bytes(), true);
        let event = Event::read(&fde, &bytes[..]).unwrap();
        let header = EventHeader::read(&bytes).unwrap();
        let raw = RawEvent::new(&bytes, header, crc_footer).unwrap();
        assert_eq!(raw.data(), event.data());
        assert_eq!(raw.checksum(), event.checksum().map(u32::from_le_bytes));
        assert_eq!(raw.header().timestamp(), event.header().timestamp());
        assert_eq!(
            raw.header().event_type_raw(),
            event.header().event_type_raw()
        );
        assert_eq!(raw.header().server_id(), event.header().server_id());
        assert_eq!(raw.header().event_size(), event.header().event_size());
        assert_eq!(raw.header().log_pos(), event.header().log_pos());
        assert_eq!(raw.header().flags_raw(), event.header().flags_raw());
        let start = crc32fast::Hasher::new();
        assert_eq!(raw.checksum(), Some(raw.compute_crc32(&start)));

        // Without checksums the whole body is data.
        let plain = event_bytes(code::XID, &9u64.to_le_bytes(), false);
        let header = EventHeader::read(&plain).unwrap();
        let raw = RawEvent::new(&plain, header, BinlogEventFooter::default()).unwrap();
        assert_eq!(raw.data(), &9u64.to_le_bytes());
        assert_eq!(raw.checksum(), None);
    }

    #[test]
    fn format_description_footer_and_checksum_follow_mysql_common() {
        let crc_footer = BinlogEventFooter::new(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32);
        let fde = FormatDescriptionEvent::new(BinlogVersion::Version4)
            .with_server_version(&b"8.0.36"[..])
            .with_event_type_header_lengths(vec![0u8; 41])
            .with_footer(crc_footer);
        // Serialised by mysql_common with the in-use flag set: its CRC ignores the flag.
        let mut body = Vec::new();
        mysql_common::proto::MySerialize::serialize(&fde, &mut body);
        let size = (HEADER_LEN + body.len() + 5) as u32;
        let event_header = mysql_common::binlog::events::BinlogEventHeader::new(
            0,
            mysql_common::binlog::consts::EventType::FORMAT_DESCRIPTION_EVENT,
            1,
            size,
            120,
            mysql_common::binlog::consts::EventFlags::LOG_EVENT_BINLOG_IN_USE_F,
        );
        let mut serialized = Vec::new();
        mysql_common::proto::MySerialize::serialize(&event_header, &mut serialized);
        serialized.extend_from_slice(&body);
        serialized.push(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32 as u8);
        serialized.extend_from_slice(&[0; 4]);
        let event = Event::read(&fde, &serialized[..]).unwrap();
        let crc = event.calc_checksum(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32);
        let len = serialized.len();
        serialized[len - 4..].copy_from_slice(&crc.to_le_bytes());

        let header = EventHeader::read(&serialized).unwrap();
        let raw = RawEvent::new(&serialized, header, BinlogEventFooter::default()).unwrap();
        assert_eq!(raw.data(), event.data());
        assert_eq!(raw.footer(), event.footer());
        assert_eq!(raw.checksum(), Some(crc));
        assert_eq!(raw.compute_crc32(&crc32fast::Hasher::new()), crc);
        let parsed = raw.parse_format_description().unwrap();
        assert_eq!(parsed.footer(), crc_footer);
        assert_eq!(parsed.server_version().trim_end_matches('\0'), "8.0.36");
    }

    #[test]
    fn short_and_inconsistent_events_are_errors_not_panics() {
        assert_eq!(EventHeader::read(&[0u8; 18]), None);
        let crc_footer = BinlogEventFooter::new(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32);
        let bytes = event_bytes(code::XID, &9u64.to_le_bytes(), false);
        let header = EventHeader::read(&bytes).unwrap();
        // Cut short, and with bytes to spare.
        assert!(RawEvent::new(&bytes[..20], header, crc_footer).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(RawEvent::new(&longer, header, crc_footer).is_err());
        // A 19-byte event with checksums on has no room for one.
        let empty = event_bytes(code::XID, &[], false);
        let header = EventHeader::read(&empty).unwrap();
        assert!(RawEvent::new(&empty, header, crc_footer).is_err());
        assert!(RawEvent::new(&empty, header, BinlogEventFooter::default()).is_ok());
        // A size below the header length.
        let mut tiny = empty.clone();
        tiny[9..13].copy_from_slice(&3u32.to_le_bytes());
        let header = EventHeader::read(&tiny).unwrap();
        assert!(RawEvent::new(&tiny, header, crc_footer).is_err());
        // Every prefix and every size of a format description: no panic.
        for cut in 0..bytes.len() {
            if let Some(header) = EventHeader::read(&bytes[..cut]) {
                let _ = RawEvent::new(&bytes[..cut], header, crc_footer);
            }
        }
        for size in 0..120usize {
            let mut fde = event_bytes(code::FORMAT_DESCRIPTION, &vec![b'8'; size], false);
            fde[9..13].copy_from_slice(&((HEADER_LEN + size) as u32).to_le_bytes());
            let header = EventHeader::read(&fde).unwrap();
            if let Ok(raw) = RawEvent::new(&fde, header, crc_footer) {
                let _ = raw.checksum();
                let _ = raw.compute_crc32(&crc32fast::Hasher::new());
                let _ = raw.parse_format_description();
            }
        }
    }
}
