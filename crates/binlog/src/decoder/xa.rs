//! Two-phase XA in the binlog: which statements and events begin, prepare and end an XA
//! transaction, and the transaction's XID in one canonical text form, so the `XA PREPARE`
//! of a transaction and its later `XA COMMIT` / `XA ROLLBACK` can be matched.
//!
//! How the servers log it (MariaDB 10.11, seen with `SHOW BINLOG EVENTS`; MySQL 8 the same
//! apart from the first event):
//! * the prepared part: a GTID event flagged `FL_PREPARED_XA` (MariaDB) or a GTID then the
//!   query `XA START X'..',X'..',n` (MySQL), the rows, the query `XA END ...`, and an
//!   XA_PREPARE event (0x26: `one_phase:u8 format_id:u32 gtrid_length:u32 bqual_length:u32
//!   data`). With `one_phase` set it is `XA COMMIT ... ONE PHASE`: an ordinary commit.
//! * the outcome, later and as a group of its own: a GTID, then the query
//!   `XA COMMIT X'..',X'..',n` or `XA ROLLBACK X'..',X'..',n`.
//!
//! The canonical XID is `X'<gtrid hex>',X'<bqual hex>',<format id>` with lower-case hex,
//! as the servers print it.

use super::reader::ByteReader;

/// MariaDB GTID flag: the group is the prepared part of an XA transaction.
pub(crate) const MARIADB_FL_PREPARED_XA: u8 = 0x40;

/// An XA statement logged as a QUERY event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum XaStatement {
    /// `XA START` / `XA BEGIN`: the rows until the prepare belong to an XA transaction.
    Start,
    /// `XA PREPARE xid` (when logged as a query rather than an XA_PREPARE event).
    Prepare(String),
    /// `XA COMMIT xid` of a prepared transaction.
    Commit(String),
    /// `XA ROLLBACK xid` of a prepared transaction.
    Rollback(String),
    /// `XA END` and anything else.
    Other,
}

/// What an XA query says, when it is one (`None` for every other statement).
pub(crate) fn xa_statement(query: &[u8]) -> Option<XaStatement> {
    // Cheap refusal first: most queries (BEGIN, DDL) are not XA.
    let trimmed = query.trim_ascii_start();
    if trimmed.len() < 3 || !trimmed[..2].eq_ignore_ascii_case(b"XA") {
        return None;
    }
    let text = std::str::from_utf8(trimmed).ok()?;
    let (first, rest) = split_word(text);
    if !first.eq_ignore_ascii_case("XA") {
        return None;
    }
    let (verb, rest) = split_word(rest);
    let xid = || canonical_xid(rest);
    Some(match verb.to_ascii_uppercase().as_str() {
        "START" | "BEGIN" => XaStatement::Start,
        "PREPARE" => XaStatement::Prepare(xid()),
        "COMMIT" if !rest.to_ascii_uppercase().contains("ONE PHASE") => XaStatement::Commit(xid()),
        "ROLLBACK" => XaStatement::Rollback(xid()),
        _ => XaStatement::Other,
    })
}

fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.find(|c: char| c.is_ascii_whitespace()) {
        Some(end) => (&text[..end], text[end..].trim_start()),
        None => (text, ""),
    }
}

/// The XID of an XA_PREPARE event body (0x26), `None` when it is a one-phase commit.
pub(crate) fn parse_xa_prepare(data: &[u8]) -> Result<Option<String>, String> {
    let mut reader = ByteReader::new(data);
    let one_phase = reader.u8()? != 0;
    let format_id = reader.uint_le(4)? as u32 as i32;
    let gtrid_length = usize::try_from(reader.uint_le(4)?).map_err(|_| "gtrid length")?;
    let bqual_length = usize::try_from(reader.uint_le(4)?).map_err(|_| "bqual length")?;
    if gtrid_length > 64 || bqual_length > 64 {
        return Err(format!(
            "XID lengths {gtrid_length}+{bqual_length} exceed the 64-byte XA limits"
        ));
    }
    let gtrid = reader.bytes(gtrid_length)?;
    let bqual = reader.bytes(bqual_length)?;
    if one_phase {
        return Ok(None);
    }
    Ok(Some(format_xid(gtrid, bqual, i64::from(format_id))))
}

fn format_xid(gtrid: &[u8], bqual: &[u8], format_id: i64) -> String {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("X'{}',X'{}',{format_id}", hex(gtrid), hex(bqual))
}

/// The canonical form of an XID as a statement prints it (`X'7831',X'',1`, or a quoted
/// string `'x1'` with optional bqual and format id); text in no known form is kept, trimmed.
fn canonical_xid(text: &str) -> String {
    parse_xid_text(text).unwrap_or_else(|| text.trim().to_owned())
}

fn parse_xid_text(text: &str) -> Option<String> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let mut rest = text.trim();
    // gtrid, then optional bqual, then optional format id, separated by commas.
    for index in 0..3 {
        rest = rest.trim_start();
        if index == 2 {
            let digits: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            let number: i64 = digits.parse().ok()?;
            return Some(format_xid(parts.first()?, parts.get(1)?, number));
        }
        let (bytes, after) = parse_xid_part(rest)?;
        parts.push(bytes);
        rest = after.trim_start();
        match rest.strip_prefix(',') {
            Some(after_comma) => rest = after_comma,
            None => {
                let bqual: &[u8] = parts.get(1).map_or(&[][..], Vec::as_slice);
                return Some(format_xid(&parts[0], bqual, 1));
            }
        }
    }
    None
}

/// One `X'hex'` or `'text'` part of an XID and the text after it.
fn parse_xid_part(text: &str) -> Option<(Vec<u8>, &str)> {
    if let Some(hex) = text.strip_prefix("X'").or_else(|| text.strip_prefix("x'")) {
        let end = hex.find('\'')?;
        let digits = &hex[..end];
        if digits.len() % 2 != 0 {
            return None;
        }
        let bytes = (0..digits.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        return Some((bytes, &hex[end + 1..]));
    }
    let quoted = text.strip_prefix('\'')?;
    let end = quoted.find('\'')?;
    Some((quoted.as_bytes()[..end].to_vec(), &quoted[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xa_queries_name_their_xid_canonically() {
        assert_eq!(
            xa_statement(b"XA START X'7831',X'',1"),
            Some(XaStatement::Start)
        );
        assert_eq!(
            xa_statement(b"XA END X'7831',X'',1"),
            Some(XaStatement::Other)
        );
        assert_eq!(
            xa_statement(b"XA COMMIT X'7831',X'',1"),
            Some(XaStatement::Commit("X'7831',X'',1".into()))
        );
        assert_eq!(
            xa_statement(b"xa rollback 'x1'"),
            Some(XaStatement::Rollback("X'7831',X'',1".into()))
        );
        assert_eq!(
            xa_statement(b"XA PREPARE X'AB',X'01',7"),
            Some(XaStatement::Prepare("X'ab',X'01',7".into()))
        );
        assert_eq!(
            xa_statement(b"XA COMMIT 'x1' ONE PHASE"),
            Some(XaStatement::Other)
        );
        assert_eq!(xa_statement(b"INSERT INTO xa VALUES (1)"), None);
    }

    #[test]
    fn xa_prepare_events_give_the_same_xid_as_the_statements() {
        // MariaDB 10.11's XA_PREPARE body for `XA PREPARE 'x1'`.
        let mut body = vec![0u8];
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(b"x1");
        assert_eq!(
            parse_xa_prepare(&body).unwrap(),
            Some("X'7831',X'',1".to_owned())
        );
        body[0] = 1;
        assert_eq!(parse_xa_prepare(&body).unwrap(), None, "one phase");
        assert!(parse_xa_prepare(&body[..6]).is_err());
    }
}
