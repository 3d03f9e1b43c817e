//! MySQL compressed transactions (TRANSACTION_PAYLOAD, `binlog_transaction_compression=ON`):
//! the payload event holds a whole transaction's events, zstd-compressed, without
//! checksums. The one implementation of decompressing and framing them, for the live and the
//! file source alike.

use std::io::Read;

use mysql_common::binlog::consts::TransactionPayloadCompressionType;
use mysql_common::binlog::events::{
    BinlogEventFooter, FormatDescriptionEvent, TransactionPayloadEvent,
};

use super::events::{code, event_name};
use super::raw_event::{EventHeader, RawEvent, HEADER_LEN};
use super::reader::ByteReader;

/// Largest decompressed transaction payload accepted (MySQL's own limit is 1 GiB): a larger
/// declared size is refused before anything is allocated.
pub(crate) const MAX_PAYLOAD_BYTES: u64 = 1 << 30;

/// Decompressed buffers up to this capacity are kept for the next payload; a larger one (a
/// rare huge transaction) is freed so its memory is not held for good.
pub(crate) const MAX_KEPT_BUFFER: usize = 4 << 20;

/// Parses a TRANSACTION_PAYLOAD event and decompresses its inner events into `into`
/// (cleared first). The error is the reason; the caller names the position.
pub(crate) fn decompress(
    event: &RawEvent<'_>,
    fde: &FormatDescriptionEvent<'_>,
    into: &mut Vec<u8>,
) -> Result<(), String> {
    check_header_fields(event.data())
        .map_err(|reason| format!("TRANSACTION_PAYLOAD does not parse: {reason}"))?;
    let payload: TransactionPayloadEvent<'_> = event
        .parse(fde)
        .map_err(|e| format!("TRANSACTION_PAYLOAD does not parse: {e}"))?;
    // Without compression the header states no uncompressed size (MySQL and mysql_common
    // write it only for compressed payloads): the payload is the inner events.
    let declared = if payload.algorithm() == TransactionPayloadCompressionType::NONE {
        payload.payload_size()
    } else {
        payload.uncompressed_size()
    };
    if declared > MAX_PAYLOAD_BYTES {
        return Err(format!(
            "the compressed transaction claims {declared} bytes uncompressed, more than the \
             {MAX_PAYLOAD_BYTES} accepted"
        ));
    }
    into.clear();
    // The declared size is not trusted with memory before anything decompressed: reserve
    // at most 16 times the compressed bytes (zstd on row events), `read_to_end` grows the
    // rest; the exact size is checked below.
    let plausible = event.data().len().saturating_mul(16).max(64 * 1024);
    into.reserve(usize::try_from(declared).unwrap_or(0).min(plausible));
    payload
        .decompressed()
        .map_err(|e| format!("cannot decompress the transaction: {e}"))?
        .take(MAX_PAYLOAD_BYTES + 1)
        .read_to_end(into)
        .map_err(|e| format!("cannot decompress the transaction: {e}"))?;
    if into.len() as u64 != declared {
        return Err(format!(
            "the transaction decompressed to {} bytes, its header says {declared}",
            into.len()
        ));
    }
    Ok(())
}

/// Walks the payload event's header fields (`type length value`, lenenc integers, up to the
/// end mark) the way `mysql_common`'s parser does, and refuses what that parser would panic
/// on: a field cut short, an unknown field longer than the bytes left, an unknown
/// compression type.
fn check_header_fields(data: &[u8]) -> Result<(), String> {
    /// The end-of-header mark: the compressed bytes follow.
    const END_MARK: u64 = 0;
    /// The compressed size (read by `mysql_common` as `length value`, as the next two).
    const PAYLOAD_SIZE: u64 = 1;
    /// The compression algorithm: 0 zstd, 255 none.
    const COMPRESSION_TYPE: u64 = 2;
    /// The uncompressed size.
    const UNCOMPRESSED_SIZE: u64 = 3;
    let mut reader = ByteReader::new(data);
    while !reader.rest().is_empty() {
        match reader.lenenc()? {
            END_MARK => break,
            field @ (PAYLOAD_SIZE | COMPRESSION_TYPE | UNCOMPRESSED_SIZE) => {
                reader.lenenc()?;
                let value = reader.lenenc()?;
                let known = [
                    TransactionPayloadCompressionType::ZSTD as u64,
                    TransactionPayloadCompressionType::NONE as u64,
                ];
                if field == COMPRESSION_TYPE && !known.contains(&value) {
                    return Err(format!("unknown compression type {value}"));
                }
            }
            _ => {
                let length = usize::try_from(reader.lenenc()?)
                    .map_err(|_| "a header field length overflows".to_owned())?;
                reader.skip(length)?;
            }
        }
    }
    Ok(())
}

/// The inner event at the start of `rest` (the decompressed bytes not decoded yet), framed
/// by its header's size; `footer` is the stream's with checksums disabled. Nested payloads
/// and format descriptions are refused. The error is the reason; the caller names the
/// payload's position.
pub(crate) fn inner_event(rest: &[u8], footer: BinlogEventFooter) -> Result<RawEvent<'_>, String> {
    let Some(header) = EventHeader::read(rest) else {
        return Err(format!(
            "{} bytes left, less than an event header",
            rest.len()
        ));
    };
    let size = header.event_size() as usize;
    let Some(bytes) = rest.get(..size).filter(|_| size >= HEADER_LEN) else {
        return Err(format!(
            "a {} event claims {size} bytes, {} are left",
            event_name(header.event_type_raw()),
            rest.len()
        ));
    };
    if matches!(
        header.event_type_raw(),
        code::TRANSACTION_PAYLOAD | code::FORMAT_DESCRIPTION
    ) {
        return Err(format!(
            "a {} event cannot be nested in a compressed transaction",
            event_name(header.event_type_raw())
        ));
    }
    RawEvent::new(bytes, header, footer)
}
