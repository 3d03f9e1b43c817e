//! Command-line interface (clap derive). `main.rs` parses [`Cli`] and hands it to
//! [`crate::commands::execute`].

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// outbox-relay: relays transactional-outbox rows from a MySQL/MariaDB binlog to Kafka,
/// at least once.
#[derive(Debug, Parser)]
#[command(name = "outbox-relay", version, about, long_about = None)]
pub struct Cli {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the relay until SIGINT/SIGTERM (graceful: in-flight records are acked and the
    /// checkpoint committed; a second signal exits at once).
    Run {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check server settings and grants, broker reachability and the checkpoint; prints one
    /// line per item and exits non-zero if any failed.
    Check {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
        /// Only validate the config (keys, ranges, routes, librdkafka properties) without
        /// connecting to anything: for CI and for rendered deployment configs.
        #[arg(long)]
        config_only: bool,
    },
    /// Show the stored checkpoint and its age, the binlog bytes behind and the purge horizon
    /// on the source, and the running relay's readiness, lag and oldest unacked event (from
    /// its `[metrics] listen` endpoint). Exit 0 when the running relay reports ready.
    Status {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
        /// One JSON object instead of lines for a person.
        #[arg(long)]
        json: bool,
    },
    /// Show, set or reset the stored checkpoint (run only while the relay is stopped).
    Checkpoint {
        /// show, set or reset.
        #[command(subcommand)]
        action: CheckpointAction,
    },
    /// Print the transactions of binlog files as JSON lines (row changes, or with --config
    /// the Kafka records they route to).
    Inspect {
        /// Binlog files, in order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Route the rows with this config's [[outbox]]/[route] sections.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Compare the outbox rows of a time window with the records in their topics (by the
    /// `id` header): prints a JSON line per row with no record (`missing`), record that
    /// differs from its row (`differs`), record whose row is gone (`no_row`) and row the
    /// router cannot route (`unroutable`), then a summary line. Exit 0 only when nothing is
    /// missing (with `--fill`: once every missing row was published and acknowledged).
    Audit {
        /// The TOML config file ([source], [[outbox]], [route], [kafka] are used).
        #[arg(long, short)]
        config: PathBuf,
        /// The window's start, by the tables' timestamp column, UTC
        /// `YYYY-MM-DD HH:MM:SS[.ffffff]` (default: from the first row).
        #[arg(long)]
        since: Option<String>,
        /// The window's end (exclusive), UTC `YYYY-MM-DD HH:MM:SS[.ffffff]` (default: a
        /// minute ago, so events the relay is publishing now are not reported missing).
        #[arg(long)]
        until: Option<String>,
        /// Publish every missing row (same id, key, topic, headers and payload as the relay
        /// makes them) and wait for Kafka's acknowledgements; never touches the checkpoint.
        #[arg(long)]
        fill: bool,
        /// Rows per statement of the table walk.
        #[arg(long, default_value_t = 5000)]
        page_rows: u32,
        /// Read the topics from this many seconds before `--since` (a record's timestamp
        /// may be older than its row's column: another clock or time zone).
        #[arg(long, default_value_t = 3600)]
        kafka_margin_s: u64,
        /// Also write the summary as Prometheus metrics to this file (for node_exporter's
        /// textfile collector: name it `*.prom`), for the alerts on a scheduled audit.
        #[arg(long)]
        metrics_file: Option<PathBuf>,
    },
    /// Publish the outbox events of archived binlog files with the same ids (after the server
    /// purged files the checkpoint still needed); prints one JSON summary line, exit 0 once
    /// Kafka acknowledged them all. Does not touch the checkpoint.
    Recover {
        /// The TOML config file ([[outbox]], [route], [kafka], [dead_letter] are used).
        #[arg(long, short)]
        config: PathBuf,
        /// Publish only what comes after this transaction boundary, `FILE:POS` (usually the
        /// stored checkpoint's position).
        #[arg(long)]
        after: Option<String>,
        /// Binlog files, in order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Work with configuration files.
    Config {
        /// from-debezium.
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// List or replay dead letters (events that failed permanently; see `[dead_letter]`).
    Dlq {
        /// list or replay.
        #[command(subcommand)]
        action: DlqAction,
    },
    /// Poll mode (`[source] mode = "poll"`): the outbox rows' delivery states.
    Poll {
        /// ddl, status or replay.
        #[command(subcommand)]
        action: PollAction,
    },
    /// Start a scratch MariaDB and an in-process Kafka, write sample orders with outbox
    /// rows, relay them and print what arrived plus the stored checkpoint.
    Demo {
        /// How many sample orders to write.
        #[arg(long, default_value_t = 3)]
        orders: u32,
    },
}

/// `config` actions.
#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Print the relay config equivalent to a Debezium MySQL/MariaDB connector with the
    /// Outbox Event Router (Kafka Connect JSON or .properties); every option without an
    /// equivalent is named with why.
    FromDebezium {
        /// The connector config: `{"name":..,"config":{..}}` JSON, a flat JSON object, or
        /// a .properties file.
        file: PathBuf,
        /// Read the outbox tables' columns from the connector's database server and write
        /// the column types the binlog will not describe as Debezium's DDL does (password:
        /// OUTBOX_RELAY_SOURCE_PASSWORD, else the connector's database.password).
        #[arg(long)]
        probe: bool,
    },
}

/// `dlq` actions.
#[derive(Debug, Subcommand)]
pub enum DlqAction {
    /// Print every dead letter as one JSON line: id, original topic, error, time.
    List {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Republish dead letters to their original topic (or `--topic`) with the same key,
    /// payload and `id`; prints one JSON line per selected dead letter.
    Replay {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
        /// Replay the dead letter(s) with this event id.
        #[arg(long, group = "selection")]
        id: Option<String>,
        /// Replay every dead letter.
        #[arg(long, group = "selection")]
        all: bool,
        /// Replay dead letters whose last failure is at or after this time, in
        /// milliseconds since the epoch.
        #[arg(long, group = "selection")]
        since: Option<i64>,
        /// Publish to this topic instead of the original one (needed when the original is
        /// unknown: routing errors).
        #[arg(long)]
        topic: Option<String>,
    },
}

/// `poll` actions.
#[derive(Debug, Subcommand)]
pub enum PollAction {
    /// Print the `ALTER TABLE` that readies each `[[outbox]]` table for poll mode: the
    /// state columns (named as `[source.poll.columns]` says) and the claim's indexes. Run
    /// it once, before the relay starts polling; it reads no database.
    Ddl {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Print each outbox table's PENDING, PROCESSING and DEAD row counts and the oldest due
    /// row's wait, one JSON line per table.
    Status {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Put DEAD rows back to PENDING (same event id, attempts from zero, due now): the
    /// relay publishes them again. Prints one JSON line per table with the count.
    Replay {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
        /// The DEAD row with this event id.
        #[arg(long, group = "selection")]
        id: Option<String>,
        /// Every DEAD row.
        #[arg(long, group = "selection")]
        all: bool,
        /// DEAD rows whose last attempt was due at or after this UTC time,
        /// `YYYY-MM-DD HH:MM:SS`.
        #[arg(long, group = "selection")]
        since: Option<String>,
    },
}

/// `checkpoint` actions.
#[derive(Debug, Subcommand)]
pub enum CheckpointAction {
    /// Print the stored checkpoint as JSON (`null` when there is none).
    Show {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Store a checkpoint by hand (backwards too). Needs the source server reachable to
    /// record its identity.
    Set {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
        /// Binlog position `FILE:POS`, e.g. `binlog.000003:4`.
        #[arg(long, conflicts_with = "gtid", required_unless_present = "gtid")]
        position: Option<String>,
        /// GTID set in the server's syntax, e.g. `0-1-42`.
        #[arg(long)]
        gtid: Option<String>,
    },
    /// Store the checkpoint equivalent to a Debezium MySQL connector's committed offset
    /// (a cutover: stop Debezium first). The offset comes from Kafka Connect's offsets topic
    /// (`--offsets-topic` and `--connector`), from a standalone worker's offsets file
    /// (`--offsets-file` and `--connector`) or is given as JSON (`--offset`). Needs the
    /// source server reachable to record its identity.
    ImportDebezium {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
        /// The offset value JSON, e.g. `{"file":"binlog.000003","pos":1547,"gtids":"..."}`.
        #[arg(
            long,
            conflicts_with_all = ["offsets_topic", "offsets_file"],
            required_unless_present_any = ["offsets_topic", "offsets_file"]
        )]
        offset: Option<String>,
        /// Kafka Connect's offsets topic (`offset.storage.topic`), read with `[kafka]`.
        #[arg(long, requires = "connector", conflicts_with = "offsets_file")]
        offsets_topic: Option<String>,
        /// A standalone Kafka Connect worker's offsets file
        /// (`offset.storage.file.filename`); stop the worker first, it writes the file on
        /// shutdown.
        #[arg(long, requires = "connector")]
        offsets_file: Option<PathBuf>,
        /// The connector's name (the first element of its offset key).
        #[arg(long)]
        connector: Option<String>,
        /// The connector's `topic.prefix` (its offset key's `server`), when a name was reused.
        #[arg(long)]
        server: Option<String>,
    },
    /// Remove the stored checkpoint: the next run starts at `source.start`.
    Reset {
        /// The TOML config file.
        #[arg(long, short)]
        config: PathBuf,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_subcommand() {
        let cli = Cli::parse_from([
            "outbox-relay",
            "run",
            "--config",
            "a.toml",
            "--log-format",
            "json",
        ]);
        assert_eq!(cli.log_format, LogFormat::Json);
        assert!(
            matches!(cli.command, Command::Run { ref config } if config == &PathBuf::from("a.toml"))
        );
        let cli = Cli::parse_from([
            "outbox-relay",
            "checkpoint",
            "set",
            "--config",
            "a.toml",
            "--position",
            "binlog.000001:4",
        ]);
        assert!(matches!(
            cli.command,
            Command::Checkpoint { action: CheckpointAction::Set { position: Some(ref p), gtid: None, .. } } if p == "binlog.000001:4"
        ));
        let cli = Cli::parse_from(["outbox-relay", "inspect", "x.000001", "y.000002"]);
        assert!(
            matches!(cli.command, Command::Inspect { ref files, config: None } if files.len() == 2)
        );
        assert!(
            Cli::try_parse_from(["outbox-relay", "checkpoint", "set", "--config", "a.toml"])
                .is_err()
        );
        assert!(Cli::try_parse_from([
            "outbox-relay",
            "checkpoint",
            "set",
            "--config",
            "a",
            "--position",
            "f:4",
            "--gtid",
            "0-1-2"
        ])
        .is_err());
        assert!(Cli::try_parse_from(["outbox-relay", "inspect"]).is_err());
    }

    #[test]
    fn dlq_replay_takes_exactly_one_selection() {
        let cli = Cli::parse_from([
            "outbox-relay",
            "dlq",
            "replay",
            "--config",
            "a.toml",
            "--id",
            "e-1",
            "--topic",
            "t",
        ]);
        assert!(matches!(
            cli.command,
            Command::Dlq { action: DlqAction::Replay { ref id, all: false, since: None, ref topic, .. } }
                if id.as_deref() == Some("e-1") && topic.as_deref() == Some("t")
        ));
        assert!(Cli::try_parse_from([
            "outbox-relay",
            "dlq",
            "replay",
            "--config",
            "a.toml",
            "--id",
            "e-1",
            "--all",
        ])
        .is_err());
        assert!(Cli::try_parse_from(["outbox-relay", "dlq", "list", "--config", "a.toml"]).is_ok());
    }

    #[test]
    fn import_debezium_takes_one_offset_source() {
        let base = [
            "outbox-relay",
            "checkpoint",
            "import-debezium",
            "--config",
            "a.toml",
        ];
        let parse = |extra: &[&str]| Cli::try_parse_from(base.iter().chain(extra).copied());
        let cli = parse(&["--offsets-file", "/tmp/connect.offsets", "--connector", "c"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Checkpoint { action: CheckpointAction::ImportDebezium { ref offsets_file, offsets_topic: None, offset: None, .. } }
                if offsets_file.as_deref() == Some(std::path::Path::new("/tmp/connect.offsets"))
        ));
        // The file needs the connector, and excludes the other two sources.
        assert!(parse(&["--offsets-file", "f"]).is_err());
        assert!(parse(&["--offsets-file", "f", "--connector", "c", "--offset", "{}"]).is_err());
        assert!(parse(&[
            "--offsets-file",
            "f",
            "--connector",
            "c",
            "--offsets-topic",
            "t"
        ])
        .is_err());
        assert!(parse(&[]).is_err());
        assert!(parse(&["--offset", "{}"]).is_ok());
    }
}
