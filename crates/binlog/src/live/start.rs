//! Where a stream starts: resolving `StartPosition::Earliest` / `StartPosition::Latest`
//! to a concrete file and offset, building the dump request, and explaining error 1236
//! (purged position, duplicate `server_id`) with what the server still has.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use crate::checks::version_numbers;
use crate::live::connection::ServerEndpoint;
use crate::{BinlogError, BinlogPosition, Flavor, Gtid, GtidSet};

/// `SHOW BINARY LOGS` with sizes: every binlog file the server still has, oldest first.
pub(crate) async fn binary_log_files_with_sizes(
    conn: &mut Conn,
) -> Result<Vec<(String, u64)>, mysql_async::Error> {
    let rows: Vec<Row> = conn.query("SHOW BINARY LOGS").await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let name = row.get_opt::<String, usize>(0)?.ok()?;
            let size = row.get_opt::<u64, usize>(1)?.ok()?;
            Some((name, size))
        })
        .collect())
}

/// Where a file position lies against the binlog files a server has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PositionOnServer {
    /// The server has it.
    Available,
    /// Before the server's oldest file: purged.
    Purged,
    /// Not in the server's binlog, and not because of a purge (after its newest file or
    /// past a file's end, a file it never had, another naming): `why` says which.
    NotOnServer {
        /// One clause for the operator, e.g. `binlog.000009 is after the newest file,
        /// binlog.000003 (1633 bytes)`.
        why: String,
    },
}

/// What of `set` the binlog of the server `conn` is connected to never had (see
/// [`GtidSet::not_within`]), against MariaDB's `@@GLOBAL.gtid_binlog_pos` or MySQL's
/// `@@GLOBAL.gtid_executed`; `None` when it has all of it (or its state cannot be parsed:
/// nothing is claimed then).
pub async fn gtid_set_not_on_server(
    conn: &mut Conn,
    flavor: Flavor,
    set: &GtidSet,
) -> Result<Option<String>, mysql_async::Error> {
    let query = match flavor {
        Flavor::Mariadb => "SELECT @@GLOBAL.gtid_binlog_pos",
        Flavor::Mysql => "SELECT @@GLOBAL.gtid_executed",
    };
    let state: Option<Option<String>> = conn.query_first(query).await?;
    let state = state.flatten().unwrap_or_default().replace('\n', "");
    Ok(GtidSet::parse(flavor, &state)
        .ok()
        .and_then(|server| set.not_within(&server)))
}

/// Where `position` lies against the binlog files of the server `conn` is connected to.
pub async fn locate_position_on_server(
    conn: &mut Conn,
    position: &BinlogPosition,
) -> Result<PositionOnServer, mysql_async::Error> {
    Ok(locate_position(
        &binary_log_files_with_sizes(conn).await?,
        position,
    ))
}

/// Where `position` lies against `files` (`SHOW BINARY LOGS`: name and size, oldest first).
pub fn locate_position(files: &[(String, u64)], position: &BinlogPosition) -> PositionOnServer {
    let (Some((first, _)), Some((last, last_size))) = (files.first(), files.last()) else {
        return PositionOnServer::NotOnServer {
            why: "the server has no binlog files".to_owned(),
        };
    };
    if let Some((_, size)) = files.iter().find(|(name, _)| *name == position.file) {
        return if position.position <= *size {
            PositionOnServer::Available
        } else {
            PositionOnServer::NotOnServer {
                why: format!(
                    "offset {} is past the end of {} ({size} bytes)",
                    position.position, position.file
                ),
            }
        };
    }
    let split = |name: &str| {
        name.rsplit_once('.')
            .and_then(|(base, number)| Some((base.to_owned(), number.parse::<u64>().ok()?)))
    };
    match (split(&position.file), split(first), split(last)) {
        (Some((base, number)), Some((first_base, first_number)), Some((_, last_number)))
            if base == first_base =>
        {
            if number < first_number {
                PositionOnServer::Purged
            } else if number > last_number {
                PositionOnServer::NotOnServer {
                    why: format!(
                        "{} is after the server's newest file, {last} ({last_size} bytes)",
                        position.file
                    ),
                }
            } else {
                PositionOnServer::NotOnServer {
                    why: format!(
                        "the server never had {} (its files run from {first} to {last} without it)",
                        position.file
                    ),
                }
            }
        }
        _ => PositionOnServer::NotOnServer {
            why: format!(
                "the server's binlog files are named like {first}, not like {}",
                position.file
            ),
        },
    }
}

/// `SHOW BINARY LOGS`: every binlog file the server still has, oldest first.
pub(crate) async fn binary_log_files(conn: &mut Conn) -> Result<Vec<String>, mysql_async::Error> {
    let rows: Vec<Row> = conn.query("SHOW BINARY LOGS").await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| row.get_opt::<String, usize>(0).and_then(Result::ok))
        .collect())
}

/// The current end of the binlog: `SHOW BINARY LOG STATUS` on MySQL 8.2+ (8.4 removed the old
/// name), `SHOW MASTER STATUS` elsewhere. `None` when binary logging is off. On MySQL also
/// the `Executed_Gtid_Set` of the same row: the server's GTID history at exactly that end.
pub(crate) async fn current_end(
    conn: &mut Conn,
    flavor: Flavor,
    version: &str,
) -> Result<Option<(BinlogPosition, Option<String>)>, mysql_async::Error> {
    let query = if flavor == Flavor::Mysql && version_numbers(version) >= (8, 2, 0) {
        "SHOW BINARY LOG STATUS"
    } else {
        "SHOW MASTER STATUS"
    };
    let row: Option<Row> = conn.query_first(query).await?;
    Ok(row.and_then(|row| {
        let file = row.get_opt::<String, usize>(0)?.ok()?;
        let position = row.get_opt::<u64, usize>(1)?.ok()?;
        let executed = match flavor {
            Flavor::Mysql => row
                .get_opt::<Option<String>, usize>(4)
                .and_then(Result::ok)
                .flatten(),
            Flavor::Mariadb => None,
        };
        Some((BinlogPosition::new(file, position), executed))
    }))
}

/// Events read per `SHOW BINLOG EVENTS` page when scanning a MySQL file for its GTIDs.
const GTID_SCAN_PAGE: usize = 2000;

/// The server's GTID history at `position` (every transaction with a GTID before it), so a
/// stream started by file+position still knows the set a GTID resume needs.
/// * MariaDB: `BINLOG_GTID_POS(file, pos)`, one GTID per replication domain (every domain,
///   also those not written since the file started).
/// * MySQL: the file's `Previous_gtids` event plus every `Gtid` event before `position`,
///   from `SHOW BINLOG EVENTS` in pages.
///
/// `None` when the server cannot tell (MariaDB answers NULL for a position that is not an
/// event boundary or a file it no longer has; MySQL without GTIDs has no `Previous_gtids`
/// set worth keeping).
pub(crate) async fn gtid_state_at(
    conn: &mut Conn,
    flavor: Flavor,
    position: &BinlogPosition,
) -> Result<Option<GtidSet>, mysql_async::Error> {
    match flavor {
        Flavor::Mariadb => {
            let state: Option<Option<String>> = conn
                .exec_first(
                    "SELECT BINLOG_GTID_POS(?, ?)",
                    (position.file.as_str(), position.position),
                )
                .await?;
            Ok(state
                .flatten()
                .and_then(|text| GtidSet::parse(Flavor::Mariadb, &text).ok()))
        }
        Flavor::Mysql => {
            let mut set: Option<GtidSet> = None;
            let mut offset = 0usize;
            loop {
                let query = format!(
                    "SHOW BINLOG EVENTS IN '{}' LIMIT {offset}, {GTID_SCAN_PAGE}",
                    position.file.replace('\\', "\\\\").replace('\'', "\\'")
                );
                let rows: Vec<Row> = conn.query(query).await?;
                let page_len = rows.len();
                for row in rows {
                    let event = (
                        row.get_opt::<u64, usize>(1).and_then(Result::ok),
                        row.get_opt::<String, usize>(2).and_then(Result::ok),
                        row.get_opt::<String, usize>(5).and_then(Result::ok),
                    );
                    let (Some(start), Some(event_type), Some(info)) = event else {
                        continue;
                    };
                    if start >= position.position {
                        return Ok(set);
                    }
                    fold_mysql_gtid_event(&mut set, &event_type, &info);
                }
                if page_len < GTID_SCAN_PAGE {
                    return Ok(set);
                }
                offset += page_len;
            }
        }
    }
}

/// Folds one `SHOW BINLOG EVENTS` row of a MySQL file into `set`: `Previous_gtids` (info:
/// the set before the file) starts it, `Gtid` events (info:
/// `SET @@SESSION.GTID_NEXT= 'uuid[:tag]:n'`) add their transaction. Other events, anonymous
/// GTIDs and unreadable info change nothing.
fn fold_mysql_gtid_event(set: &mut Option<GtidSet>, event_type: &str, info: &str) {
    if event_type.eq_ignore_ascii_case("Previous_gtids") {
        if let Ok(previous) = GtidSet::parse(Flavor::Mysql, info) {
            *set = Some(previous);
        }
        return;
    }
    if !event_type.to_ascii_lowercase().starts_with("gtid") {
        return;
    }
    let Some(quoted) = info.split('\'').nth(1) else {
        return;
    };
    let Ok(GtidSet::Mysql(single)) = GtidSet::parse(Flavor::Mysql, quoted) else {
        return;
    };
    let set = set.get_or_insert(GtidSet::Empty);
    for ((source_uuid, tag), intervals) in single {
        for (first, last) in intervals {
            for transaction_id in first..=last {
                set.add(&Gtid::Mysql {
                    source_uuid: source_uuid.clone(),
                    tag: tag.clone(),
                    transaction_id,
                });
            }
        }
    }
}

/// ER_MASTER_FATAL_ERROR_READING_BINLOG: the dump thread stopped (purged position,
/// duplicate server_id on MySQL, corrupt binlog, ...); the message says which.
const MYSQL_FATAL_BINLOG_READ: u16 = 1236;

/// ER_SLAVE_SAME_ID (MariaDB 10.6+): sent to the *older* dump connection when a replica with
/// the same server_id connects; the newer one takes over.
const MARIADB_SLAVE_SAME_ID: u16 = 4052;

/// What kind of error 1236 ("fatal error reading binlog") the server sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FatalReadKind {
    /// The start file/position/GTID is not (or no longer) in the binlog.
    PositionUnavailable,
    /// Another replica with our `server_id` (MySQL: or `server_uuid`) is connected.
    DuplicateServerId,
    /// Anything else (corrupt binlog, event too large, ...).
    Other,
}

/// Sorts a 1236 message of either flavor into a [`FatalReadKind`].
pub(crate) fn classify_fatal_read(message: &str) -> FatalReadKind {
    let lower = message.to_ascii_lowercase();
    let duplicate = ["same server_uuid", "same server_id", "same server id"];
    let unavailable = [
        "could not find first log file name",
        "purged",
        "not in the master's binlog",
        "not in the source's binlog",
        "could not find gtid state",
        "impossible position",
        "could not find target log",
    ];
    if duplicate.iter().any(|needle| lower.contains(needle)) {
        FatalReadKind::DuplicateServerId
    } else if unavailable.iter().any(|needle| lower.contains(needle)) {
        FatalReadKind::PositionUnavailable
    } else {
        FatalReadKind::Other
    }
}

/// Describes the oldest start the server can still serve, for [`BinlogError::PositionPurged`]:
/// the first file of `SHOW BINARY LOGS`, plus on MariaDB the GTID state at its start (the
/// `Gtid_list` event) and on MySQL `@@gtid_purged`.
pub(crate) async fn oldest_available(conn: &mut Conn, flavor: Flavor) -> String {
    let files = match binary_log_files(conn).await {
        Ok(files) => files,
        Err(error) => return format!("unknown (SHOW BINARY LOGS failed: {error})"),
    };
    let Some(first) = files.first() else {
        return "nothing (SHOW BINARY LOGS is empty)".to_owned();
    };
    let mut description = format!("{first}:4");
    match flavor {
        Flavor::Mariadb => {
            let query = format!(
                "SHOW BINLOG EVENTS IN '{}' LIMIT 5",
                first.replace('\\', "\\\\").replace('\'', "\\'")
            );
            if let Ok(rows) = conn.query::<Row, _>(query).await {
                let gtid_list = rows.into_iter().find_map(|row| {
                    let event_type = row.get_opt::<String, usize>(2)?.ok()?;
                    let info = row.get_opt::<String, usize>(5)?.ok()?;
                    (event_type == "Gtid_list").then_some(info)
                });
                if let Some(info) = gtid_list {
                    let state = info.trim().trim_start_matches('[').trim_end_matches(']');
                    description.push_str(&format!(
                        " (GTID state before its first transaction: `{state}`)"
                    ));
                }
            }
        }
        Flavor::Mysql => {
            if let Ok(Some(Some(purged))) = conn
                .query_first::<Option<String>, _>("SELECT @@GLOBAL.gtid_purged")
                .await
            {
                description.push_str(&format!(
                    " (gtid_purged, no longer available: `{}`)",
                    purged.replace('\n', "")
                ));
            }
        }
    }
    description
}

/// Turns a stream error into the most specific [`BinlogError`]. Errors 1236 and 4052 are
/// sorted by their message; for an unavailable start this asks the server (on `side`, a
/// normal connection, opened if needed) what it still has.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn explain_stream_error(
    endpoint: &ServerEndpoint,
    side: &mut Option<Conn>,
    connect_timeout: std::time::Duration,
    flavor: Flavor,
    our_server_id: u32,
    error: mysql_async::Error,
    position: &str,
    start: &crate::StartPosition,
) -> BinlogError {
    let mapped = endpoint.stream_error(error, position);
    let BinlogError::Server {
        code: code @ (MYSQL_FATAL_BINLOG_READ | MARIADB_SLAVE_SAME_ID),
        message,
        server,
        position,
    } = mapped
    else {
        return mapped;
    };
    match classify_fatal_read(&message) {
        FatalReadKind::DuplicateServerId => BinlogError::DuplicateServerId {
            server,
            server_id: our_server_id,
            position,
            message,
        },
        FatalReadKind::PositionUnavailable => {
            // A side connection idle for long may have been closed by the server; one that
            // went half-open must not hang the explanation: each step is bounded.
            if let Some(conn) = side.as_mut() {
                let pinged = tokio::time::timeout(connect_timeout, conn.ping()).await;
                if !matches!(pinged, Ok(Ok(()))) {
                    *side = None;
                }
            }
            if side.is_none() {
                *side = endpoint.connect(connect_timeout, &position).await.ok();
            }
            if let Some(why) = not_on_server(side, connect_timeout, start, &message).await {
                return BinlogError::PositionNotOnServer {
                    server,
                    position,
                    why,
                    message,
                };
            }
            let oldest_available = match side.as_mut() {
                Some(conn) => {
                    match tokio::time::timeout(connect_timeout, oldest_available(conn, flavor))
                        .await
                    {
                        Ok(description) => description,
                        Err(_) => {
                            *side = None;
                            format!("unknown (SHOW BINARY LOGS got no answer within {connect_timeout:?})")
                        }
                    }
                }
                None => "unknown (the side connection for SHOW BINARY LOGS failed)".to_owned(),
            };
            BinlogError::PositionPurged {
                server,
                position,
                oldest_available,
                message,
            }
        }
        FatalReadKind::Other => BinlogError::Server {
            server,
            position,
            code,
            message,
        },
    }
}

/// Why an unavailable start is not a purge, if it is not: a file position after the end of
/// the binlog, in a file the server never had, or named like another server's files
/// ([`locate_position`]); a GTID set the server says is not in its binlog, with no word of
/// a purge (it holds transactions the server never had). `None`: a purge, or unknown.
async fn not_on_server(
    side: &mut Option<Conn>,
    connect_timeout: std::time::Duration,
    start: &crate::StartPosition,
    message: &str,
) -> Option<String> {
    match start {
        crate::StartPosition::Position(position) => {
            let conn = side.as_mut()?;
            let files = tokio::time::timeout(connect_timeout, binary_log_files_with_sizes(conn))
                .await
                .ok()?
                .ok()?;
            match locate_position(&files, position) {
                PositionOnServer::NotOnServer { why } => Some(why),
                PositionOnServer::Purged | PositionOnServer::Available => None,
            }
        }
        crate::StartPosition::Gtid(_) => {
            let lower = message.to_ascii_lowercase();
            let not_in_binlog = lower.contains("not in the master's binlog")
                || lower.contains("not in the source's binlog");
            (not_in_binlog && !lower.contains("purged")).then(|| {
                "the GTID set holds transactions this server's binlog never had (it is ahead \
                 of the server, or from another server)"
                    .to_owned()
            })
        }
        crate::StartPosition::Earliest | crate::StartPosition::Latest => None,
    }
}

/// The `SET` statements that prepare a connection for a MariaDB dump by GTID:
/// start after `set`, never skip a missing GTID (strict mode), never drop duplicates.
pub(crate) fn mariadb_gtid_setup(set: &GtidSet) -> Vec<String> {
    vec![
        format!("SET @slave_connect_state='{set}'"),
        "SET @slave_gtid_strict_mode=1".to_owned(),
        "SET @slave_gtid_ignore_duplicates=0".to_owned(),
    ]
}

/// MySQL GTID set as the `Sid`s of COM_BINLOG_DUMP_GTID.
pub(crate) fn mysql_sids(
    set: &GtidSet,
) -> Result<Vec<mysql_common::packets::Sid<'static>>, String> {
    let GtidSet::Mysql(map) = set else {
        return Ok(Vec::new());
    };
    map.iter()
        .map(|((uuid, tag), intervals)| {
            let mut text = uuid.clone();
            if let Some(tag) = tag {
                text.push(':');
                text.push_str(tag);
            }
            for (first, last) in intervals {
                text.push_str(&format!(":{first}-{last}"));
            }
            text.parse::<mysql_common::packets::Sid<'static>>()
                .map_err(|error| format!("`{text}`: {error}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_read_messages_of_both_flavors_are_recognised() {
        use FatalReadKind::*;
        let cases = [
            ("Could not find first log file name in binary log index file", PositionUnavailable),
            ("Error: connecting slave requested to start from GTID 0-1-500, which is not in the master's binlog", PositionUnavailable),
            ("Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.", PositionUnavailable),
            ("Cannot replicate because the source purged required binary logs.", PositionUnavailable),
            ("A slave with the same server_uuid/server_id as this slave has connected to the master; the first event 'binlog.000001' at 4", DuplicateServerId),
            ("A replica with the same server_uuid/server_id as this replica has connected to the source", DuplicateServerId),
            ("A slave with the same server_uuid/server_id is already connected; the first event 'binlog.000001' at 624", DuplicateServerId),
            ("binlog truncated in the middle of event; consider out of disk space on master", Other),
        ];
        for (message, expected) in cases {
            assert_eq!(classify_fatal_read(message), expected, "{message}");
        }
    }

    #[test]
    fn mysql_gtid_sets_become_sids() {
        let set = GtidSet::parse(
            Flavor::Mysql,
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7, 4e11fa47-71ca-11e1-9e33-c80aa9429562:3",
        )
        .unwrap();
        let sids = mysql_sids(&set).unwrap();
        let rendered: Vec<String> = sids.iter().map(|sid| sid.to_string()).collect();
        assert_eq!(
            rendered,
            vec![
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7",
                "4e11fa47-71ca-11e1-9e33-c80aa9429562:3"
            ]
        );
        assert!(mysql_sids(&GtidSet::Empty).unwrap().is_empty());
    }

    #[test]
    fn mysql_binlog_events_fold_into_the_gtid_history() {
        const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mut set = None;
        // As MySQL 8.4 lists them in SHOW BINLOG EVENTS.
        fold_mysql_gtid_event(&mut set, "Format_desc", "Server ver: 8.4.3, Binlog ver: 4");
        fold_mysql_gtid_event(&mut set, "Previous_gtids", &format!("{A}:1-41"));
        fold_mysql_gtid_event(
            &mut set,
            "Gtid",
            &format!("SET @@SESSION.GTID_NEXT= '{A}:42'"),
        );
        fold_mysql_gtid_event(&mut set, "Query", "BEGIN");
        fold_mysql_gtid_event(
            &mut set,
            "Anonymous_Gtid",
            "SET @@SESSION.GTID_NEXT= 'ANONYMOUS'",
        );
        fold_mysql_gtid_event(
            &mut set,
            "Gtid_tagged",
            &format!("SET @@SESSION.GTID_NEXT= '{A}:blue:7'"),
        );
        assert_eq!(
            set.map(|set| set.to_string()),
            Some(format!("{A}:1-42,{A}:blue:7"))
        );
        let mut empty_history = None;
        fold_mysql_gtid_event(&mut empty_history, "Previous_gtids", "");
        assert_eq!(empty_history, Some(GtidSet::Empty));
    }

    #[test]
    fn mariadb_gtid_setup_is_strict() {
        let set = GtidSet::parse(Flavor::Mariadb, "0-1-42,7-2-3").unwrap();
        let statements = mariadb_gtid_setup(&set);
        assert_eq!(statements[0], "SET @slave_connect_state='0-1-42,7-2-3'");
        assert!(statements.contains(&"SET @slave_gtid_strict_mode=1".to_owned()));
    }

    #[test]
    fn a_position_is_purged_only_before_the_oldest_file() {
        let files = vec![
            ("binlog.000003".to_owned(), 900),
            ("binlog.000004".to_owned(), 1633),
            ("binlog.000006".to_owned(), 256),
        ];
        let at = |file: &str, offset| locate_position(&files, &BinlogPosition::new(file, offset));
        assert_eq!(at("binlog.000004", 1633), PositionOnServer::Available);
        assert_eq!(at("binlog.000002", 4), PositionOnServer::Purged);
        let why = |located: PositionOnServer| match located {
            PositionOnServer::NotOnServer { why } => why,
            other => panic!("{other:?}"),
        };
        assert!(why(at("binlog.000009", 4))
            .contains("after the server's newest file, binlog.000006 (256 bytes)"));
        assert!(
            why(at("binlog.000004", 1634)).contains("offset 1634 is past the end of binlog.000004")
        );
        assert!(why(at("binlog.000005", 4)).contains("never had binlog.000005"));
        assert!(why(at("mysql-bin.000004", 4)).contains("named like binlog.000003"));
        assert!(why(locate_position(
            &[],
            &BinlogPosition::new("binlog.000001", 4)
        ))
        .contains("no binlog files"));
    }
}
