//! Who the source server is and how positions are described: the identity a checkpoint
//! records, the GTID-only binlog position, and the log texts of start positions.

use outbox_binlog::{BinlogPosition, BinlogReader, GtidSet, StartPosition};
use outbox_checkpoint::{CheckpointPosition, SourceIdentity};

/// The binlog position of a checkpoint that only has a GTID set (written by
/// `outbox-relay checkpoint set --gtid`): an empty file name, which no server uses. Such a
/// checkpoint resumes by GTID set.
pub fn gtid_only_binlog_position() -> BinlogPosition {
    BinlogPosition::new("", 4)
}

/// The identity a checkpoint records, from a server check.
pub(crate) fn identity_of(report: &outbox_binlog::ServerReport) -> SourceIdentity {
    SourceIdentity {
        flavor: report.identity.flavor,
        server_id: report.identity.server_id,
        server_uuid: report.identity.server_uuid.clone(),
    }
}

/// The identity a checkpoint records for the server `reader` is connected to.
pub(super) fn source_identity(reader: &BinlogReader) -> SourceIdentity {
    let server = reader.server();
    SourceIdentity {
        flavor: server.flavor,
        server_id: server.server_id,
        server_uuid: server.server_uuid.clone(),
    }
}

/// An identity for logs and errors: flavor, `server_id` and, on MySQL, the UUID.
pub(crate) fn describe_identity(identity: &SourceIdentity) -> String {
    match &identity.server_uuid {
        Some(uuid) => format!(
            "{} server_id {} uuid {uuid}",
            identity.flavor, identity.server_id
        ),
        None => format!("{} server_id {}", identity.flavor, identity.server_id),
    }
}

/// A start position for logs and the `SourceConnected` event (`file:...`, `gtid:...`).
pub(super) fn describe_start(start: &StartPosition) -> String {
    match start {
        StartPosition::Earliest => "earliest".into(),
        StartPosition::Latest => "latest".into(),
        StartPosition::Position(position) => format!("file:{position}"),
        StartPosition::Gtid(set) => format!("gtid:{set}"),
    }
}

/// The tracker's starting point for a first run. It is never committed as such (the tracker
/// only reports positions it moved to), so an unknown file is harmless.
pub(super) fn initial_position(start: &StartPosition) -> CheckpointPosition {
    match start {
        StartPosition::Position(position) => CheckpointPosition::at(position.clone()),
        StartPosition::Gtid(set) => CheckpointPosition {
            gtid_set: set.clone(),
            ..CheckpointPosition::at(gtid_only_binlog_position())
        },
        StartPosition::Earliest | StartPosition::Latest => CheckpointPosition {
            gtid_set: GtidSet::Empty,
            ..CheckpointPosition::at(gtid_only_binlog_position())
        },
    }
}
