//! Event type codes of both flavors, their names, and the small events this crate parses
//! itself because `mysql_common` does not (MariaDB GTID and GTID_LIST, ROTATE names).

use super::reader::ByteReader;
use crate::gtid::Gtid;

/// Raw event type codes (MySQL `Log_event_type` plus MariaDB's 0xa0-0xab).
pub(crate) mod code {
    pub(crate) const UNKNOWN: u8 = 0x00;
    pub(crate) const START_V3: u8 = 0x01;
    pub(crate) const QUERY: u8 = 0x02;
    pub(crate) const STOP: u8 = 0x03;
    pub(crate) const ROTATE: u8 = 0x04;
    pub(crate) const INTVAR: u8 = 0x05;
    pub(crate) const LOAD: u8 = 0x06;
    pub(crate) const SLAVE: u8 = 0x07;
    pub(crate) const CREATE_FILE: u8 = 0x08;
    pub(crate) const APPEND_BLOCK: u8 = 0x09;
    pub(crate) const EXEC_LOAD: u8 = 0x0a;
    pub(crate) const DELETE_FILE: u8 = 0x0b;
    pub(crate) const NEW_LOAD: u8 = 0x0c;
    pub(crate) const RAND: u8 = 0x0d;
    pub(crate) const USER_VAR: u8 = 0x0e;
    pub(crate) const FORMAT_DESCRIPTION: u8 = 0x0f;
    pub(crate) const XID: u8 = 0x10;
    pub(crate) const BEGIN_LOAD_QUERY: u8 = 0x11;
    pub(crate) const EXECUTE_LOAD_QUERY: u8 = 0x12;
    pub(crate) const TABLE_MAP: u8 = 0x13;
    pub(crate) const PRE_GA_WRITE_ROWS: u8 = 0x14;
    pub(crate) const PRE_GA_UPDATE_ROWS: u8 = 0x15;
    pub(crate) const PRE_GA_DELETE_ROWS: u8 = 0x16;
    pub(crate) const WRITE_ROWS_V1: u8 = 0x17;
    pub(crate) const UPDATE_ROWS_V1: u8 = 0x18;
    pub(crate) const DELETE_ROWS_V1: u8 = 0x19;
    pub(crate) const INCIDENT: u8 = 0x1a;
    pub(crate) const HEARTBEAT: u8 = 0x1b;
    pub(crate) const IGNORABLE: u8 = 0x1c;
    pub(crate) const ROWS_QUERY: u8 = 0x1d;
    pub(crate) const WRITE_ROWS: u8 = 0x1e;
    pub(crate) const UPDATE_ROWS: u8 = 0x1f;
    pub(crate) const DELETE_ROWS: u8 = 0x20;
    pub(crate) const GTID: u8 = 0x21;
    pub(crate) const ANONYMOUS_GTID: u8 = 0x22;
    pub(crate) const PREVIOUS_GTIDS: u8 = 0x23;
    pub(crate) const TRANSACTION_CONTEXT: u8 = 0x24;
    pub(crate) const VIEW_CHANGE: u8 = 0x25;
    pub(crate) const XA_PREPARE: u8 = 0x26;
    pub(crate) const PARTIAL_UPDATE_ROWS: u8 = 0x27;
    pub(crate) const TRANSACTION_PAYLOAD: u8 = 0x28;
    pub(crate) const HEARTBEAT_V2: u8 = 0x29;
    pub(crate) const GTID_TAGGED: u8 = 0x2a;
    pub(crate) const MARIADB_ANNOTATE_ROWS: u8 = 0xa0;
    pub(crate) const MARIADB_BINLOG_CHECKPOINT: u8 = 0xa1;
    pub(crate) const MARIADB_GTID: u8 = 0xa2;
    pub(crate) const MARIADB_GTID_LIST: u8 = 0xa3;
    pub(crate) const MARIADB_START_ENCRYPTION: u8 = 0xa4;
    pub(crate) const MARIADB_QUERY_COMPRESSED: u8 = 0xa5;
    pub(crate) const MARIADB_WRITE_ROWS_COMPRESSED_V1: u8 = 0xa6;
    pub(crate) const MARIADB_UPDATE_ROWS_COMPRESSED_V1: u8 = 0xa7;
    pub(crate) const MARIADB_DELETE_ROWS_COMPRESSED_V1: u8 = 0xa8;
    pub(crate) const MARIADB_WRITE_ROWS_COMPRESSED: u8 = 0xa9;
    pub(crate) const MARIADB_UPDATE_ROWS_COMPRESSED: u8 = 0xaa;
    pub(crate) const MARIADB_DELETE_ROWS_COMPRESSED: u8 = 0xab;
}

/// A readable name of an event type code, for errors and logs.
pub(crate) fn event_name(event_type: u8) -> &'static str {
    match event_type {
        code::UNKNOWN => "UNKNOWN",
        code::START_V3 => "START_EVENT_V3",
        code::QUERY => "QUERY",
        code::STOP => "STOP",
        code::ROTATE => "ROTATE",
        code::INTVAR => "INTVAR",
        code::LOAD => "LOAD",
        code::SLAVE => "SLAVE",
        code::CREATE_FILE => "CREATE_FILE",
        code::APPEND_BLOCK => "APPEND_BLOCK",
        code::EXEC_LOAD => "EXEC_LOAD",
        code::DELETE_FILE => "DELETE_FILE",
        code::NEW_LOAD => "NEW_LOAD",
        code::RAND => "RAND",
        code::USER_VAR => "USER_VAR",
        code::FORMAT_DESCRIPTION => "FORMAT_DESCRIPTION",
        code::XID => "XID",
        code::BEGIN_LOAD_QUERY => "BEGIN_LOAD_QUERY",
        code::EXECUTE_LOAD_QUERY => "EXECUTE_LOAD_QUERY",
        code::TABLE_MAP => "TABLE_MAP",
        code::PRE_GA_WRITE_ROWS => "PRE_GA_WRITE_ROWS",
        code::PRE_GA_UPDATE_ROWS => "PRE_GA_UPDATE_ROWS",
        code::PRE_GA_DELETE_ROWS => "PRE_GA_DELETE_ROWS",
        code::WRITE_ROWS_V1 => "WRITE_ROWS_V1",
        code::UPDATE_ROWS_V1 => "UPDATE_ROWS_V1",
        code::DELETE_ROWS_V1 => "DELETE_ROWS_V1",
        code::INCIDENT => "INCIDENT",
        code::HEARTBEAT => "HEARTBEAT",
        code::IGNORABLE => "IGNORABLE",
        code::ROWS_QUERY => "ROWS_QUERY",
        code::WRITE_ROWS => "WRITE_ROWS",
        code::UPDATE_ROWS => "UPDATE_ROWS",
        code::DELETE_ROWS => "DELETE_ROWS",
        code::GTID => "GTID",
        code::ANONYMOUS_GTID => "ANONYMOUS_GTID",
        code::PREVIOUS_GTIDS => "PREVIOUS_GTIDS",
        code::TRANSACTION_CONTEXT => "TRANSACTION_CONTEXT",
        code::VIEW_CHANGE => "VIEW_CHANGE",
        code::XA_PREPARE => "XA_PREPARE",
        code::PARTIAL_UPDATE_ROWS => "PARTIAL_UPDATE_ROWS",
        code::TRANSACTION_PAYLOAD => "TRANSACTION_PAYLOAD",
        code::HEARTBEAT_V2 => "HEARTBEAT_V2",
        code::GTID_TAGGED => "GTID_TAGGED",
        code::MARIADB_ANNOTATE_ROWS => "ANNOTATE_ROWS",
        code::MARIADB_BINLOG_CHECKPOINT => "BINLOG_CHECKPOINT",
        code::MARIADB_GTID => "MARIADB_GTID",
        code::MARIADB_GTID_LIST => "GTID_LIST",
        code::MARIADB_START_ENCRYPTION => "START_ENCRYPTION",
        code::MARIADB_QUERY_COMPRESSED => "QUERY_COMPRESSED",
        code::MARIADB_WRITE_ROWS_COMPRESSED_V1 => "WRITE_ROWS_COMPRESSED_V1",
        code::MARIADB_UPDATE_ROWS_COMPRESSED_V1 => "UPDATE_ROWS_COMPRESSED_V1",
        code::MARIADB_DELETE_ROWS_COMPRESSED_V1 => "DELETE_ROWS_COMPRESSED_V1",
        code::MARIADB_WRITE_ROWS_COMPRESSED => "WRITE_ROWS_COMPRESSED",
        code::MARIADB_UPDATE_ROWS_COMPRESSED => "UPDATE_ROWS_COMPRESSED",
        code::MARIADB_DELETE_ROWS_COMPRESSED => "DELETE_ROWS_COMPRESSED",
        _ => "unknown",
    }
}

/// MariaDB GTID flag: the group is one statement without BEGIN/COMMIT (DDL).
pub(crate) const MARIADB_FL_STANDALONE: u8 = 1;

/// A parsed MariaDB GTID event (0xa2): `seq_no:u64 domain_id:u32 flags2:u8 ...`.
pub(crate) struct MariadbGtid {
    /// The transaction's GTID (server id from the event header).
    pub(crate) gtid: Gtid,
    /// `flags2`; see [`MARIADB_FL_STANDALONE`].
    pub(crate) flags: u8,
}

/// Parses a MariaDB GTID event body.
pub(crate) fn parse_mariadb_gtid(data: &[u8], server_id: u32) -> Result<MariadbGtid, String> {
    let mut reader = ByteReader::new(data);
    let sequence = reader.uint_le(8)?;
    let domain_id = reader.uint_le(4)? as u32;
    let flags = reader.u8()?;
    Ok(MariadbGtid {
        gtid: Gtid::Mariadb {
            domain_id,
            server_id,
            sequence,
        },
        flags,
    })
}

/// Parses a MariaDB GTID_LIST event body (`count:u32` with flags in the top 4 bits, then
/// `domain:u32 server:u32 seq_no:u64` per entry): the binlog state at the start of a file.
pub(crate) fn parse_mariadb_gtid_list(data: &[u8]) -> Result<Vec<Gtid>, String> {
    let mut reader = ByteReader::new(data);
    let count = (reader.uint_le(4)? & 0x0fff_ffff) as usize;
    if count > data.len() / 16 {
        return Err(format!(
            "GTID_LIST claims {count} entries in {} bytes",
            data.len()
        ));
    }
    let mut list = Vec::with_capacity(count);
    for _ in 0..count {
        let domain_id = reader.uint_le(4)? as u32;
        let server_id = reader.uint_le(4)? as u32;
        let sequence = reader.uint_le(8)?;
        list.push(Gtid::Mariadb {
            domain_id,
            server_id,
            sequence,
        });
    }
    Ok(list)
}

/// The log position a MySQL HEARTBEAT_LOG_EVENT_V2 (0x29) carries in its body: fields of
/// `type:lenenc length:lenenc value`, ended by type 0; type 1 is the file name, type 2 the
/// position (itself a lenenc integer). V2 exists because a 4-byte header `log_pos` cannot
/// hold positions beyond 4 GiB. `None` when the body has no position field.
pub(crate) fn parse_heartbeat_v2_position(data: &[u8]) -> Result<Option<u64>, String> {
    let mut reader = ByteReader::new(data);
    let mut position = None;
    while !reader.rest().is_empty() {
        let field = reader.lenenc()?;
        if field == 0 {
            break;
        }
        let len = usize::try_from(reader.lenenc()?).map_err(|_| "field length overflows")?;
        let value = reader.bytes(len)?;
        if field == 2 {
            position = Some(ByteReader::new(value).lenenc()?);
        }
    }
    Ok(position)
}

/// Formats a 16-byte server UUID in its canonical lower-case text form.
pub(crate) fn format_uuid(sid: &[u8; 16]) -> String {
    let mut text = String::with_capacity(36);
    for (index, byte) in sid.iter().enumerate() {
        if matches!(index, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

/// Parses a ROTATE event body (`position:u64 name`) and cleans the name: drops a trailing
/// CRC32 that was not stripped (the artificial rotate a server sends before the format
/// description, when the client cannot yet know that events carry checksums: mysql_async
/// issue #189), then keeps only the leading printable-ASCII part, since binlog file names
/// are printable ASCII. `header` is the serialized 19-byte event header the CRC covers.
/// Returns `None` when no name is left.
pub(crate) fn parse_rotate(header: &[u8], body: &[u8]) -> Option<(u64, String)> {
    let mut reader = ByteReader::new(body);
    let position = reader.uint_le(8).ok()?;
    let mut name = reader.rest();
    if name.len() > 4 {
        let (without_crc, crc) = body.split_at(body.len() - 4);
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(header);
        hasher.update(without_crc);
        if hasher.finalize() == u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            name = &name[..name.len() - 4];
        }
    }
    let printable: Vec<u8> = name
        .iter()
        .copied()
        .take_while(|b| (0x21..=0x7e).contains(b))
        .collect();
    if printable.is_empty() {
        return None;
    }
    String::from_utf8(printable)
        .ok()
        .map(|name| (position, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_is_canonical() {
        let sid = [
            0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
            0x95, 0x62,
        ];
        assert_eq!(format_uuid(&sid), "3e11fa47-71ca-11e1-9e33-c80aa9429562");
    }

    #[test]
    fn heartbeat_v2_position_parses() {
        let mut body = vec![1, 13];
        body.extend_from_slice(b"binlog.000041");
        body.extend_from_slice(&[2, 4, 0xfd, 0x15, 0xcd, 0x5b]);
        body.push(0);
        assert_eq!(parse_heartbeat_v2_position(&body).unwrap(), Some(0x5bcd15));
        assert_eq!(parse_heartbeat_v2_position(&[0]).unwrap(), None);
        assert!(parse_heartbeat_v2_position(&[2, 9, 1]).is_err());
    }

    #[test]
    fn mariadb_gtid_parses() {
        let mut data = 42u64.to_le_bytes().to_vec();
        data.extend_from_slice(&7u32.to_le_bytes());
        data.push(MARIADB_FL_STANDALONE);
        let parsed = parse_mariadb_gtid(&data, 3).unwrap();
        assert_eq!(parsed.gtid.to_string(), "7-3-42");
        assert_eq!(parsed.flags, MARIADB_FL_STANDALONE);
        assert!(parse_mariadb_gtid(&data[..10], 3).is_err());
    }
}
