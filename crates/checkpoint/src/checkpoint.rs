//! The checkpoint itself: which source it belongs to, where in that source's binlog the
//! relay has delivered everything before, and its readable JSON form.
//!
//! # JSON format
//! A checkpoint is stored as one JSON object (pretty-printed, so an operator can read it):
//!
//! ```json
//! {
//!   "format": 1,
//!   "writer_version": "0.1.0",
//!   "source": { "flavor": "mariadb", "server_id": 1, "server_uuid": null },
//!   "binlog_file": "binlog.000003",
//!   "binlog_position": 1234,
//!   "gtid": "0-1-17",
//!   "gtid_set": "0-1-17",
//!   "timestamp": 1764496800,
//!   "sent_through": { "binlog_file": "binlog.000003", "binlog_position": 2048 }
//! }
//! ```
//!
//! `sent_through` is optional (see [`Checkpoint::sent_through`]): a document without it
//! reads as "unknown". A relay built before the field existed refuses a document that has
//! it (unknown field): to roll back to such a build, store its checkpoint with its own
//! `outbox-relay checkpoint set`.
//!
//! `format` is 1 or 2. Format 2 is format 1 plus `"leader_epoch": N`, the leadership term of
//! the relay that wrote it under `[ha]` (standby failover; the stores refuse a commit of an
//! older term, see [`crate::CheckpointStoreError::StaleLeader`]). A checkpoint without a
//! leader epoch is written as format 1, so a relay without `[ha]` keeps writing what older
//! relays read; only a checkpoint that carries an epoch needs a reader of format 2.
//! [`CHECKPOINT_FORMAT_VERSION`] is the newest format. A reader refuses a document with a
//! newer format ([`CheckpointFormatError::NewerFormat`]) instead of guessing: an older relay
//! must not silently misread (or drop the epoch of) a newer relay's checkpoint. GTIDs and GTID sets are written in
//! the server's own syntax (`gtid_executed` for MySQL, `gtid_slave_pos` for MariaDB).

use std::cmp::Ordering;

use outbox_binlog::{BinlogPosition, Commit, Flavor, Gtid, GtidSet, Heartbeat};

/// The newest JSON format version this crate writes and reads (2: with `leader_epoch`;
/// checkpoints without an epoch are still written as format 1, see the module docs).
pub const CHECKPOINT_FORMAT_VERSION: u32 = 2;

/// The format of a checkpoint without a leader epoch (what relays before format 2 read).
const FORMAT_WITHOUT_LEADER_EPOCH: u32 = 1;

/// The version of this crate, written into every checkpoint as `writer_version` so an
/// operator can tell which relay build wrote a checkpoint.
pub const WRITER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Which server a checkpoint's binlog coordinates belong to.
///
/// A binlog file name and offset only mean something on the server that wrote them; GTID
/// sets survive a failover. The identity lets the relay notice that it is now connected to a
/// different server than the checkpoint was taken on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SourceIdentity {
    /// Server family: decides the GTID syntax of the stored set.
    pub flavor: Flavor,
    /// The source's `@@server_id`: identifies MariaDB servers (which have no UUID) and is
    /// shown to operators.
    pub server_id: u32,
    /// The source's `@@server_uuid` (MySQL only; `None` for MariaDB): MySQL's stable
    /// identity, also the key of its own GTIDs.
    pub server_uuid: Option<String>,
}

/// A safe place to resume: the end of a fully delivered transaction (or a heartbeat
/// position between transactions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointPosition {
    /// File and offset just after the last fully delivered transaction: where a
    /// file+position resume starts.
    pub binlog: BinlogPosition,
    /// The GTID of the last delivered transaction, when the server assigned one (for
    /// diagnostics: that transaction is easy to find in the server's binlog by it). Heartbeat
    /// positions carry none; the tracker then keeps the previous transaction's GTID.
    pub gtid: Option<Gtid>,
    /// Every transaction at or before `binlog` that has a GTID, in the server's syntax:
    /// where a GTID resume starts, which survives a failover to another server.
    ///
    /// In positions handed to [`crate::AckTracker::end_transaction`] this field is ignored:
    /// the tracker accumulates the set itself (see the tracker's docs).
    pub gtid_set: GtidSet,
    /// Event timestamp (seconds since the epoch, source server clock) of that transaction,
    /// so operators and metrics can see how far behind the checkpoint is.
    pub timestamp: u32,
}

impl CheckpointPosition {
    /// A position with only file+offset known (no GTID, empty set, timestamp 0), e.g. for a
    /// fresh start at a known binlog position.
    pub fn at(binlog: BinlogPosition) -> Self {
        Self {
            binlog,
            gtid: None,
            gtid_set: GtidSet::Empty,
            timestamp: 0,
        }
    }

    /// The position just after a committed transaction, as the reader reports it. The GTID
    /// set is left empty: [`crate::AckTracker`] accumulates it.
    pub fn after_commit(commit: &Commit) -> Self {
        Self {
            binlog: commit.position.clone(),
            gtid: commit.gtid.clone(),
            gtid_set: GtidSet::Empty,
            timestamp: commit.timestamp,
        }
    }

    /// A heartbeat position (no transaction, no GTID). Its timestamp is 0, which the tracker
    /// reads as "keep the previous event timestamp".
    pub fn at_heartbeat(heartbeat: &Heartbeat) -> Self {
        Self::at(heartbeat.position.clone())
    }
}

/// Orders two binlog positions of the **same** server: by file sequence number (the numeric
/// suffix of `name.000123`, so `.999999` < `.1000000`), then by offset.
///
/// Returns `None` when the positions are not comparable: different base names (the server's
/// `log_bin` name changed, or another server) or a file name without a numeric suffix.
pub fn compare_binlog_positions(a: &BinlogPosition, b: &BinlogPosition) -> Option<Ordering> {
    if a.file == b.file {
        return Some(a.position.cmp(&b.position));
    }
    let (base_a, number_a) = split_binlog_file_name(&a.file)?;
    let (base_b, number_b) = split_binlog_file_name(&b.file)?;
    if base_a != base_b {
        return None;
    }
    Some(number_a.cmp(&number_b).then(a.position.cmp(&b.position)))
}

fn split_binlog_file_name(file: &str) -> Option<(&str, u64)> {
    let (base, number) = file.rsplit_once('.')?;
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((base, number.parse().ok()?))
}

/// A stored checkpoint: the position plus what is needed to trust it later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The server whose binlog `position` refers to.
    pub source: SourceIdentity,
    /// Where everything before has been delivered.
    pub position: CheckpointPosition,
    /// Version of the relay that wrote it ([`WRITER_VERSION`] for new checkpoints), for
    /// operators and for future format migrations.
    pub writer_version: String,
    /// The leadership term of the relay that wrote it, under `[ha]` (standby failover): a
    /// number that grows with every leadership change, fenced by Kafka's group coordinator.
    /// The stores refuse a commit whose epoch is older than the stored one, so a paused old
    /// leader (a zombie) cannot move the checkpoint after a new leader took over. `None`:
    /// written without `[ha]` (or by `checkpoint set`).
    pub leader_epoch: Option<u64>,
    /// The newest transaction end (on `source`) whose records the writing relay had handed
    /// on for sending when it stored this checkpoint; at or after `position`. After a crash
    /// the records between `position` and this position are read and sent again although
    /// the crashed run had already sent them: the restart counts them as replays
    /// (`outbox_relay_replayed_records_total`). `None`: not known (an older relay, a
    /// checkpoint set by hand, or GTID-only after a failover).
    pub sent_through: Option<BinlogPosition>,
}

/// Why a checkpoint document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointFormatError {
    /// The document was written by a newer relay in a format this one does not know.
    #[error("checkpoint format {found} is newer than the newest this relay reads ({supported}); upgrade the relay")]
    NewerFormat {
        /// The document's `format`.
        found: u64,
        /// [`CHECKPOINT_FORMAT_VERSION`].
        supported: u32,
    },
    /// The document is not a valid checkpoint (not JSON, truncated, a field missing or
    /// malformed).
    #[error("not a valid checkpoint document: {reason}")]
    Invalid {
        /// What is wrong, for the operator.
        reason: String,
    },
}

/// The on-disk shape of formats 1 and 2; private so the public type can change
/// independently.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckpointDocument {
    /// 1 or 2 (see the module docs): lets readers refuse formats they do not know.
    format: u32,
    /// [`Checkpoint::writer_version`].
    writer_version: String,
    /// [`Checkpoint::source`].
    source: SourceIdentity,
    /// [`BinlogPosition::file`] of [`CheckpointPosition::binlog`], flat for readability.
    binlog_file: String,
    /// [`BinlogPosition::position`] of [`CheckpointPosition::binlog`].
    binlog_position: u64,
    /// [`CheckpointPosition::gtid`] in the server's syntax (absent or null: none).
    #[serde(default)]
    gtid: Option<String>,
    /// [`CheckpointPosition::gtid_set`] in the server's syntax (`""`: empty).
    gtid_set: String,
    /// [`CheckpointPosition::timestamp`].
    timestamp: u32,
    /// [`Checkpoint::leader_epoch`]; format 2 only (absent in format 1, and not written when
    /// `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    leader_epoch: Option<u64>,
    /// [`Checkpoint::sent_through`] (absent: unknown; older relays never write it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sent_through: Option<SentThroughDocument>,
}

/// [`Checkpoint::sent_through`] on disk, named like the checkpoint's own position.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SentThroughDocument {
    /// [`BinlogPosition::file`].
    binlog_file: String,
    /// [`BinlogPosition::position`].
    binlog_position: u64,
}

impl Checkpoint {
    /// A checkpoint written by this build ([`WRITER_VERSION`]).
    pub fn new(source: SourceIdentity, position: CheckpointPosition) -> Self {
        Self {
            source,
            position,
            writer_version: WRITER_VERSION.to_owned(),
            leader_epoch: None,
            sent_through: None,
        }
    }

    /// The same checkpoint stamped with the leadership term `epoch` (see
    /// [`Checkpoint::leader_epoch`]).
    pub fn with_leader_epoch(mut self, epoch: Option<u64>) -> Self {
        self.leader_epoch = epoch;
        self
    }

    /// The same checkpoint recording how far its writer had sent
    /// ([`Checkpoint::sent_through`]).
    pub fn with_sent_through(mut self, sent_through: Option<BinlogPosition>) -> Self {
        self.sent_through = sent_through;
        self
    }

    /// The readable JSON document (pretty-printed; format 2 with a leader epoch, else 1).
    pub fn to_json(&self) -> String {
        let format = match self.leader_epoch {
            Some(_) => CHECKPOINT_FORMAT_VERSION,
            None => FORMAT_WITHOUT_LEADER_EPOCH,
        };
        let document = CheckpointDocument {
            format,
            writer_version: self.writer_version.clone(),
            source: self.source.clone(),
            binlog_file: self.position.binlog.file.clone(),
            binlog_position: self.position.binlog.position,
            gtid: self.position.gtid.as_ref().map(ToString::to_string),
            gtid_set: self.position.gtid_set.to_string(),
            timestamp: self.position.timestamp,
            leader_epoch: self.leader_epoch,
            sent_through: self
                .sent_through
                .as_ref()
                .map(|position| SentThroughDocument {
                    binlog_file: position.file.clone(),
                    binlog_position: position.position,
                }),
        };
        // Serializing plain strings and integers into a String cannot fail; fall back to the
        // compact writer's error text rather than panicking if serde_json ever disagrees.
        serde_json::to_string_pretty(&document)
            .unwrap_or_else(|error| format!("{{\"format\":0,\"error\":{:?}}}", error.to_string()))
    }

    /// Parses a JSON document written by [`Checkpoint::to_json`] (of this or an older format).
    pub fn from_json(text: &str) -> Result<Self, CheckpointFormatError> {
        let invalid = |reason: String| CheckpointFormatError::Invalid { reason };
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|error| invalid(error.to_string()))?;
        let format = value
            .get("format")
            .ok_or_else(|| invalid("the `format` field is missing".to_owned()))?;
        let format = format
            .as_u64()
            .ok_or_else(|| invalid(format!("`format` is {format}, not a version number")))?;
        if format > u64::from(CHECKPOINT_FORMAT_VERSION) {
            return Err(CheckpointFormatError::NewerFormat {
                found: format,
                supported: CHECKPOINT_FORMAT_VERSION,
            });
        }
        if format != 1 && format != 2 {
            return Err(invalid(format!("unknown format {format}")));
        }
        let document: CheckpointDocument =
            serde_json::from_value(value).map_err(|error| invalid(error.to_string()))?;
        if format == u64::from(FORMAT_WITHOUT_LEADER_EPOCH) && document.leader_epoch.is_some() {
            return Err(invalid(
                "format 1 has no `leader_epoch` (a leader epoch needs format 2)".to_owned(),
            ));
        }
        let flavor = document.source.flavor;
        let gtid_set = GtidSet::parse(flavor, &document.gtid_set)
            .map_err(|error| invalid(format!("`gtid_set`: {error}")))?;
        let gtid = match document.gtid.as_deref() {
            None => None,
            Some(text) => Some(
                parse_single_gtid(flavor, text)
                    .map_err(|reason| invalid(format!("`gtid`: {reason}")))?,
            ),
        };
        Ok(Checkpoint {
            source: document.source,
            position: CheckpointPosition {
                binlog: BinlogPosition::new(document.binlog_file, document.binlog_position),
                gtid,
                gtid_set,
                timestamp: document.timestamp,
            },
            writer_version: document.writer_version,
            leader_epoch: document.leader_epoch,
            sent_through: document
                .sent_through
                .map(|sent| BinlogPosition::new(sent.binlog_file, sent.binlog_position)),
        })
    }
}

/// Parses one GTID in the flavor's syntax by parsing it as a one-element set.
fn parse_single_gtid(flavor: Flavor, text: &str) -> Result<Gtid, String> {
    let set = GtidSet::parse(flavor, text).map_err(|error| error.to_string())?;
    match set {
        GtidSet::Mariadb(map) if map.len() == 1 => {
            let (domain_id, (server_id, sequence)) = map
                .into_iter()
                .next()
                .ok_or_else(|| format!("`{text}` is not one GTID"))?;
            Ok(Gtid::Mariadb {
                domain_id,
                server_id,
                sequence,
            })
        }
        GtidSet::Mysql(map) if map.len() == 1 => {
            let ((source_uuid, tag), intervals) = map
                .into_iter()
                .next()
                .ok_or_else(|| format!("`{text}` is not one GTID"))?;
            match intervals.as_slice() {
                [(first, last)] if first == last => Ok(Gtid::Mysql {
                    source_uuid,
                    tag,
                    transaction_id: *first,
                }),
                _ => Err(format!("`{text}` is not one GTID")),
            }
        }
        _ => Err(format!("`{text}` is not one GTID")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mariadb_checkpoint() -> Checkpoint {
        Checkpoint::new(
            SourceIdentity {
                flavor: Flavor::Mariadb,
                server_id: 7,
                server_uuid: None,
            },
            CheckpointPosition {
                binlog: BinlogPosition::new("binlog.000003", 1234),
                gtid: Some(Gtid::Mariadb {
                    domain_id: 0,
                    server_id: 7,
                    sequence: 17,
                }),
                gtid_set: GtidSet::parse(Flavor::Mariadb, "0-7-17,1-2-5").unwrap(),
                timestamp: 1_764_496_800,
            },
        )
    }

    #[test]
    fn json_round_trips_and_is_readable() {
        let checkpoint = mariadb_checkpoint();
        let json = checkpoint.to_json();
        assert!(json.contains("\"format\": 1"), "{json}");
        assert!(json.contains("\"gtid_set\": \"0-7-17,1-2-5\""), "{json}");
        assert!(
            json.contains("\"binlog_file\": \"binlog.000003\""),
            "{json}"
        );
        assert_eq!(Checkpoint::from_json(&json).unwrap(), checkpoint);
    }

    #[test]
    fn sent_through_round_trips_and_is_optional() {
        let checkpoint =
            mariadb_checkpoint().with_sent_through(Some(BinlogPosition::new("binlog.000004", 99)));
        let json = checkpoint.to_json();
        assert!(json.contains("\"sent_through\""), "{json}");
        assert_eq!(Checkpoint::from_json(&json).unwrap(), checkpoint);
        // Without it (an older relay's document): read as unknown, and not written.
        let json = mariadb_checkpoint().to_json();
        assert!(!json.contains("sent_through"), "{json}");
        assert_eq!(Checkpoint::from_json(&json).unwrap().sent_through, None);
    }

    #[test]
    fn mysql_json_round_trips() {
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let checkpoint = Checkpoint::new(
            SourceIdentity {
                flavor: Flavor::Mysql,
                server_id: 1,
                server_uuid: Some(uuid.to_owned()),
            },
            CheckpointPosition {
                binlog: BinlogPosition::new("mysql-bin.000001", 4),
                gtid: Some(Gtid::Mysql {
                    source_uuid: uuid.to_owned(),
                    tag: Some("blue".to_owned()),
                    transaction_id: 9,
                }),
                gtid_set: GtidSet::parse(Flavor::Mysql, &format!("{uuid}:1-9")).unwrap(),
                timestamp: 5,
            },
        );
        assert_eq!(
            Checkpoint::from_json(&checkpoint.to_json()).unwrap(),
            checkpoint
        );
    }

    #[test]
    fn a_leader_epoch_round_trips_as_format_2_and_none_stays_format_1() {
        let without = mariadb_checkpoint();
        assert!(without.to_json().contains("\"format\": 1"));
        assert!(!without.to_json().contains("leader_epoch"));
        let with = mariadb_checkpoint().with_leader_epoch(Some(7));
        let json = with.to_json();
        assert!(json.contains("\"format\": 2"), "{json}");
        assert!(json.contains("\"leader_epoch\": 7"), "{json}");
        assert_eq!(Checkpoint::from_json(&json).unwrap(), with);
        // A format-1 document (what relays before [ha] wrote) loads, without an epoch.
        let old = r#"{"format": 1, "writer_version": "0.1.0",
            "source": {"flavor": "mariadb", "server_id": 7, "server_uuid": null},
            "binlog_file": "binlog.000003", "binlog_position": 1234,
            "gtid": "0-7-17", "gtid_set": "0-7-17,1-2-5", "timestamp": 1764496800}"#;
        let loaded = Checkpoint::from_json(old).unwrap();
        assert_eq!(loaded.leader_epoch, None);
        assert_eq!(loaded.position, without.position);
        // An epoch in a format-1 document is not guessed at.
        let mislabelled = json.replace("\"format\": 2", "\"format\": 1");
        assert!(matches!(
            Checkpoint::from_json(&mislabelled),
            Err(CheckpointFormatError::Invalid { .. })
        ));
    }

    #[test]
    fn newer_format_is_rejected_with_a_clear_error() {
        let json = mariadb_checkpoint()
            .to_json()
            .replace("\"format\": 1", "\"format\": 3");
        let error = Checkpoint::from_json(&json).unwrap_err();
        assert_eq!(
            error,
            CheckpointFormatError::NewerFormat {
                found: 3,
                supported: 2
            }
        );
        assert!(error.to_string().contains("upgrade the relay"));
    }

    #[test]
    fn broken_documents_are_invalid() {
        let json = mariadb_checkpoint().to_json();
        for broken in [
            "",
            "{",
            &json[..json.len() / 2],
            "{\"binlog_file\": \"x\"}",
            "{\"format\": \"one\"}",
            &json.replace("\"0-7-17,1-2-5\"", "\"zzz\""),
        ] {
            assert!(
                matches!(
                    Checkpoint::from_json(broken),
                    Err(CheckpointFormatError::Invalid { .. })
                ),
                "{broken}"
            );
        }
    }

    #[test]
    fn binlog_positions_compare_by_file_number() {
        let p = BinlogPosition::new;
        assert_eq!(
            compare_binlog_positions(&p("b.999999", 9000), &p("b.1000000", 4)),
            Some(Ordering::Less)
        );
        assert_eq!(
            compare_binlog_positions(&p("b.000002", 10), &p("b.000002", 4)),
            Some(Ordering::Greater)
        );
        assert_eq!(
            compare_binlog_positions(&p("a.000001", 4), &p("b.000002", 4)),
            None
        );
        assert_eq!(
            compare_binlog_positions(&p("a", 4), &p("a.000002", 4)),
            None
        );
    }
}
