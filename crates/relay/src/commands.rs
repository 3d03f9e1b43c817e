//! The CLI subcommands. This is binary-level code: it uses `anyhow` with context for
//! operator-facing errors, and returns the process exit code.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use outbox_binlog::{BinlogFileReader, Commit, GtidSet, Row, RowChange, StreamItem, TableFilter};
use outbox_checkpoint::{Checkpoint, CheckpointPosition};
use outbox_router::{RouteOutcome, Router};

use crate::cli::{CheckpointAction, Cli, Command, DlqAction, LogFormat};
use crate::config::{parse_file_position, RelayConfig};
use crate::internal_events::{InternalEvent, SoleRelayStarted};
use crate::pipeline::{run_relay, RelayHandles};
use crate::shutdown::install_signal_handlers;
use crate::stores::open_checkpoint_store;

/// Sets up logging: human lines by default, JSON with `--log-format json`; the level comes
/// from `RUST_LOG` (default `info`). Logs go to stderr so stdout stays for command output.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Runs one parsed command line; returns the process exit code.
pub async fn execute(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Run { config } => run_command(&config).await,
        Command::Check {
            config,
            config_only: true,
        } => check_config_only(&config, &mut std::io::stdout().lock()),
        Command::Check {
            config,
            config_only: false,
        } => check_command(&config, &mut std::io::stdout().lock()).await,
        Command::Status { config, json } => {
            crate::status::status_command(&config, json, &mut std::io::stdout().lock()).await
        }
        Command::Checkpoint { action } => {
            checkpoint_command(action, &mut std::io::stdout().lock()).await
        }
        Command::Inspect { files, config } => inspect_command(
            &files,
            config.as_deref(),
            &mut std::io::stdout().lock(),
            &mut std::io::stderr().lock(),
        ),
        Command::Config {
            action: crate::cli::ConfigAction::FromDebezium { file, probe },
        } => {
            crate::from_debezium::from_debezium_command(&file, probe, &mut std::io::stdout().lock())
                .await
        }
        Command::Dlq { action } => dlq_command(action, &mut std::io::stdout().lock()).await,
        Command::Poll { action } => {
            crate::poll_commands::poll_command(action, &mut std::io::stdout().lock()).await
        }
        Command::Audit {
            config,
            since,
            until,
            fill,
            page_rows,
            kafka_margin_s,
            metrics_file,
        } => {
            let options = crate::audit_command::AuditOptions {
                since,
                until,
                fill,
                page_rows,
                kafka_margin: std::time::Duration::from_secs(kafka_margin_s),
                metrics_file,
            };
            crate::audit_command::audit_command(&config, &options, &mut std::io::stdout().lock())
                .await
        }
        Command::Recover {
            config,
            after,
            files,
        } => {
            crate::recover::recover_command(
                &config,
                after.as_deref(),
                &files,
                &mut std::io::stdout().lock(),
            )
            .await
        }
        Command::Demo { orders } => crate::demo::demo_command(orders).await,
    }
}

/// A config whose checkpoint the `checkpoint` commands read or write: poll mode has none.
fn load_checkpoint_config(path: &Path) -> anyhow::Result<RelayConfig> {
    let config = load_config(path)?;
    if config.source.mode == crate::poll_config::SourceMode::Poll {
        bail!(
            "{}: [source] mode = \"poll\" stores no checkpoint (each event's state is in the outbox table); see `outbox-relay poll status` and `poll replay`",
            path.display()
        );
    }
    Ok(config)
}

fn load_config(path: &Path) -> anyhow::Result<RelayConfig> {
    RelayConfig::load(path).map_err(anyhow::Error::from)
}

async fn run_command(path: &Path) -> anyhow::Result<i32> {
    // First: from here on SIGTERM means "stop gracefully", never the default kill.
    let handles = RelayHandles::default();
    install_signal_handlers(handles.shutdown.clone());
    let config = load_config(path)?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        config = %path.display(),
        source = %config.source.redacted_url(),
        brokers = %config.kafka.brokers,
        "outbox-relay starting"
    );
    let summary = if config.ha.enabled {
        crate::ha::run_standby(config, handles).await?
    } else {
        SoleRelayStarted.emit(&handles.metrics);
        run_relay(config, handles).await?
    };
    tracing::info!(delivered = summary.delivered, "outbox-relay stopped");
    Ok(0)
}

/// How long `dlq list`/`dlq replay` may take to read the dead-letter topic to its end.
const DEAD_LETTER_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The config at `path` and every dead letter on its `dead_letter.topic`.
async fn load_dead_letters(
    path: &Path,
) -> anyhow::Result<(RelayConfig, Vec<crate::dead_letter::DeadLetter>)> {
    let config = load_config(path)?;
    let letters = crate::dead_letter::read_dead_letters(
        &config.kafka,
        &config.dead_letter.topic,
        DEAD_LETTER_READ_TIMEOUT,
    )
    .await
    .with_context(|| format!("reading dead-letter topic `{}`", config.dead_letter.topic))?;
    Ok((config, letters))
}

/// `dlq list` and `dlq replay`: one JSON line per dead letter; exit code 1 when a selected
/// dead letter could not be replayed (or `--id` matched none).
pub async fn dlq_command(action: DlqAction, out: &mut dyn Write) -> anyhow::Result<i32> {
    use crate::dead_letter::{replay_dead_letters, ReplayOutcome, ReplaySelection};
    let lossy = |bytes: &Option<Vec<u8>>| {
        bytes
            .as_deref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    match action {
        DlqAction::List { config } => {
            let (_, letters) = load_dead_letters(&config).await?;
            for letter in &letters {
                let line = serde_json::json!({
                    "id": letter.id,
                    "original_topic": letter.original_topic,
                    "error_class": letter.error_class,
                    "error": letter.error_message,
                    "last_failure_ms": letter.last_failure_ms,
                    "key": lossy(&letter.key),
                    "partition": letter.partition,
                    "offset": letter.offset,
                });
                writeln!(out, "{line}")?;
            }
            Ok(0)
        }
        DlqAction::Replay {
            config,
            id,
            all,
            since,
            topic,
        } => {
            let selection = match (id, all, since) {
                (Some(id), _, _) => ReplaySelection::Id(id),
                (None, true, _) => ReplaySelection::All,
                (None, false, Some(since)) => ReplaySelection::Since(since),
                (None, false, None) => {
                    bail!("say which dead letters to replay: --id ID, --all or --since MS")
                }
            };
            let (config, letters) = load_dead_letters(&config).await?;
            let report = replay_dead_letters(&letters, &selection, topic.as_deref(), &config.kafka)
                .await
                .context("replaying dead letters")?;
            let mut failed = report.is_empty() && matches!(selection, ReplaySelection::Id(_));
            for (letter, outcome) in &report {
                let line = match outcome {
                    ReplayOutcome::Published {
                        topic,
                        partition,
                        offset,
                    } => serde_json::json!({
                        "id": letter.id, "replayed": true, "topic": topic, "partition": partition, "offset": offset,
                    }),
                    ReplayOutcome::Skipped(reason) => {
                        failed = true;
                        serde_json::json!({ "id": letter.id, "replayed": false, "reason": reason })
                    }
                };
                writeln!(out, "{line}")?;
            }
            if report.is_empty() {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({ "replayed": 0, "reason": "no dead letter matched" })
                )?;
            }
            Ok(if failed { 1 } else { 0 })
        }
    }
}

/// One line of the `check` report.
struct CheckLine {
    /// Passed or not.
    ok: bool,
    /// What was checked.
    item: String,
    /// The result.
    detail: String,
}

/// `check --config-only`: the config loads and validates (keys, ranges, librdkafka
/// properties) and its routes build; nothing is connected to. Errors go through the normal
/// error path (exit 1, secrets masked).
pub fn check_config_only(path: &Path, out: &mut dyn Write) -> anyhow::Result<i32> {
    let config = load_config(path)?;
    outbox_router::Router::new(&config.outbox, &config.route)
        .map_err(|error| anyhow::anyhow!("invalid [[outbox]]/[route] configuration: {error}"))?;
    writeln!(
        out,
        "ok   config: {} is valid ({} outbox table(s), {}, delivery {:?}); nothing was connected to",
        path.display(),
        config.outbox.len(),
        match config.source.mode {
            crate::poll_config::SourceMode::Poll => {
                "poll mode: no checkpoint store".to_owned()
            }
            crate::poll_config::SourceMode::Binlog => {
                format!("checkpoint store `{}`", config.checkpoint.store)
            }
        },
        config.kafka.delivery
    )?;
    Ok(0)
}

/// `check`: prints one `ok`/`FAIL` line per item to `out`; returns 1 if any failed.
pub async fn check_command(path: &Path, out: &mut dyn Write) -> anyhow::Result<i32> {
    let config = load_config(path)?;
    let mut lines: Vec<CheckLine> = vec![CheckLine {
        ok: true,
        item: "config".into(),
        detail: format!("{} is valid", path.display()),
    }];
    let url = config.source.connection_url();
    if config.source.mode == crate::poll_config::SourceMode::Poll {
        lines.extend(poll_mode_lines(&config).await);
        return print_check_lines(&lines, out);
    }
    // Who the source is, for the checkpoint's line (`None`: unreachable, said above).
    let mut source_identity = None;
    match outbox_binlog::check_server(&url, &config.source.tls_options()).await {
        Ok(report) => {
            source_identity = Some(crate::pipeline::identity_of(&report));
            lines.push(CheckLine {
                ok: true,
                item: "source server".into(),
                detail: format!(
                    "{} {} ({}, server_id {})",
                    config.source.redacted_url(),
                    report.identity.version,
                    report.identity.flavor,
                    report.identity.server_id
                ),
            });
            for check in &report.checks {
                lines.push(CheckLine {
                    ok: check.severity != outbox_binlog::Severity::Error,
                    item: format!("source {}", check.setting),
                    detail: format!(
                        "expected {}, actual {} ({})",
                        check.expected, check.actual, check.severity
                    ),
                });
            }
            if report.checks.is_empty() {
                lines.push(CheckLine {
                    ok: true,
                    item: "source settings and grants".into(),
                    detail: "as needed".into(),
                });
            }
            lines.push(CheckLine {
                ok: true,
                item: "source TLS".into(),
                detail: format!(
                    "{} (tls.mode = {})",
                    report.tls,
                    config.source.tls_options().mode.as_str()
                ),
            });
        }
        Err(error) => lines.push(CheckLine {
            ok: false,
            item: "source server".into(),
            detail: format!("{}: {error}", config.source.redacted_url()),
        }),
    }
    lines.extend(outbox_table_lines(&config, &url).await);
    if config.source.on_purged == crate::config::OnPurged::FillFromTable {
        lines.push(match crate::pipeline::check_fill_ready(&config).await {
            Ok(()) => CheckLine {
                ok: true,
                item: "gap fill".into(),
                detail: format!(
                    "on_purged = \"fill_from_table\": every outbox table has its timestamp column indexed (rows from {} s before a purged checkpoint are published)",
                    config.source.fill_margin_s
                ),
            },
            Err(problem) => CheckLine {
                ok: false,
                item: "gap fill".into(),
                detail: problem,
            },
        });
    }
    lines.push(kafka_line(&config).await);
    let store = open_checkpoint_store(&config.checkpoint, &config.kafka).await;
    lines.push(match store {
        Err(error) => CheckLine {
            ok: false,
            item: "checkpoint".into(),
            detail: error.to_string(),
        },
        Ok(store) => match store.load().await {
            Ok(Some(checkpoint)) => {
                let stored = format!(
                    "{}: at {} (gtid set `{}`)",
                    store.describe(),
                    checkpoint.position.binlog,
                    checkpoint.position.gtid_set
                );
                match checkpoint_against_source(&config, &url, &checkpoint, source_identity).await {
                    Ok(note) => CheckLine {
                        ok: true,
                        item: "checkpoint".into(),
                        detail: format!("{stored}; {note}"),
                    },
                    Err(problem) => CheckLine {
                        ok: false,
                        item: "checkpoint".into(),
                        detail: format!("{stored}; {problem}"),
                    },
                }
            }
            Ok(None) => CheckLine {
                ok: true,
                item: "checkpoint".into(),
                detail: format!(
                    "{}: none yet; the first run starts at `{}`",
                    store.describe(),
                    config.source.start
                ),
            },
            Err(error) => CheckLine {
                ok: false,
                item: "checkpoint".into(),
                detail: error.to_string(),
            },
        },
    });
    print_check_lines(&lines, out)
}

/// `check` in poll mode: the poll source's startup checks (server, tables, columns,
/// grants), Kafka; no checkpoint store.
async fn poll_mode_lines(config: &RelayConfig) -> Vec<CheckLine> {
    let mut lines = Vec::new();
    let checked = async {
        let router = outbox_router::Router::new(&config.outbox, &config.route)
            .map_err(|error| anyhow::anyhow!("invalid [[outbox]]/[route]: {error}"))?;
        let mut conn = crate::pipeline::poll_connection_settings(config)
            .open()
            .await?;
        let checked = crate::pipeline::poll_startup_checks(config, &router, &mut conn).await;
        let _ = conn.disconnect().await;
        anyhow::Ok(checked?)
    };
    match checked.await {
        Ok((detail, clashes)) => {
            lines.push(CheckLine {
                ok: true,
                item: "poll source".into(),
                detail: format!("{}: {detail}", config.source.redacted_url()),
            });
            lines.extend(column_type_line(&clashes));
        }
        Err(error) => lines.push(CheckLine {
            ok: false,
            item: "poll source".into(),
            detail: format!("{}: {error}", config.source.redacted_url()),
        }),
    }
    lines.push(kafka_line(config).await);
    lines.push(CheckLine {
        ok: true,
        item: "checkpoint".into(),
        detail: "none: poll mode keeps each event's state in the outbox table".into(),
    });
    lines
}

/// One line per check, then the verdict; exit code 1 when one failed.
fn print_check_lines(lines: &[CheckLine], stdout: &mut dyn Write) -> anyhow::Result<i32> {
    let mut failed = 0;
    for line in lines {
        if !line.ok {
            failed += 1;
        }
        writeln!(
            stdout,
            "{} {}: {}",
            if line.ok { "ok  " } else { "FAIL" },
            line.item,
            crate::redact::redact_secrets(&line.detail)
        )?;
    }
    if failed > 0 {
        writeln!(stdout, "{failed} check(s) failed")?;
        Ok(1)
    } else {
        writeln!(stdout, "all checks passed")?;
        Ok(0)
    }
}

/// Whether `run` can resume from `checkpoint` on the source (`identity`, `None` when it was
/// unreachable): on the server that wrote it, its file position must be in the binlog
/// (purged and not-on-server are told apart, as `run` does); on another server, `run`
/// resumes by the GTID set, and refuses without one. `Ok`: a note on how `run` resumes.
async fn checkpoint_against_source(
    config: &RelayConfig,
    url: &str,
    checkpoint: &outbox_checkpoint::Checkpoint,
    identity: Option<outbox_checkpoint::SourceIdentity>,
) -> Result<String, String> {
    let Some(identity) = identity else {
        return Ok("not checked against the source (unreachable)".into());
    };
    let written_against = crate::pipeline::describe_identity(&checkpoint.source);
    let by_gtid = checkpoint.position.binlog == crate::pipeline::gtid_only_binlog_position();
    if by_gtid || identity != checkpoint.source {
        let connected = crate::pipeline::describe_identity(&identity);
        if checkpoint.position.gtid_set.is_empty() {
            return Err(format!("written against {written_against}, but the source is {connected}, and it has no GTID set to resume from: point source.url at the original server, or `outbox-relay checkpoint set --gtid ...`"));
        }
        let missing = async {
            let (mut conn, _tls) = outbox_binlog::connect_to_server(
                url,
                &config.source.tls_options(),
                Duration::from_secs(30),
            )
            .await?;
            let missing = outbox_binlog::gtid_set_not_on_server(
                &mut conn,
                identity.flavor,
                &checkpoint.position.gtid_set,
            )
            .await;
            let _ = conn.disconnect().await;
            anyhow::Ok(missing?)
        };
        return match missing.await {
            Err(error) => Err(format!("cannot look its GTID set up on the source: {error}")),
            Ok(Some(missing)) => Err(format!(
                "its GTID set holds transactions the source's binlog never had: {missing}; it was written against {written_against}, the source is {connected}: check that source.url points at the right server, or choose where to resume with `outbox-relay checkpoint set`"
            )),
            Ok(None) => Ok(format!(
                "written against {written_against}, the source is {connected}: run resumes by its GTID set, which the source has"
            )),
        };
    }
    let located = async {
        let (mut conn, _tls) = outbox_binlog::connect_to_server(
            url,
            &config.source.tls_options(),
            Duration::from_secs(30),
        )
        .await?;
        let located =
            outbox_binlog::locate_position_on_server(&mut conn, &checkpoint.position.binlog).await;
        let _ = conn.disconnect().await;
        anyhow::Ok(located?)
    };
    match located.await {
        Err(error) => Err(format!("cannot look it up on the source: {error}")),
        Ok(outbox_binlog::PositionOnServer::Available) => {
            Ok("the source still has it: run resumes there".into())
        }
        Ok(outbox_binlog::PositionOnServer::Purged) => Err(
            "the source purged that binlog file: run refuses to skip the gap; publish it from archived binlog files with `outbox-relay recover`, or skip it knowingly with `outbox-relay checkpoint set`".into(),
        ),
        Ok(outbox_binlog::PositionOnServer::NotOnServer { why }) => Err(format!(
            "not in the source's binlog, and not because of a purge: {why}; it was written against {written_against}: check that source.url points at that server, or, if this server replaced it (a restore, RESET MASTER), choose where to resume with `outbox-relay checkpoint set`"
        )),
    }
}

/// `check`'s lines for the `[[outbox]]` tables: each exists as the binlog names it, the
/// relay's user may read it, and it has the columns its route reads in every row: the same
/// checks `run` makes before it reads ([`outbox_binlog::resolve_watched_tables`],
/// [`crate::pipeline::describe_missing_columns`]).
async fn outbox_table_lines(config: &RelayConfig, url: &str) -> Vec<CheckLine> {
    let tables = config.outbox_tables();
    let item = if tables.len() == 1 {
        format!("outbox table {}", tables[0])
    } else {
        "outbox tables".to_owned()
    };
    let names = tables
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let failed = |detail: String| {
        vec![CheckLine {
            ok: false,
            item: item.clone(),
            detail,
        }]
    };
    let router = match outbox_router::Router::new(&config.outbox, &config.route) {
        Ok(router) => router,
        Err(error) => return failed(format!("invalid [[outbox]]/[route]: {error}")),
    };
    let resolved = async {
        let (mut conn, _tls) = outbox_binlog::connect_to_server(
            url,
            &config.source.tls_options(),
            Duration::from_secs(30),
        )
        .await?;
        let resolved = outbox_binlog::resolve_watched_tables(&mut conn, &tables).await;
        let _ = conn.disconnect().await;
        anyhow::Ok(resolved?)
    };
    match resolved.await {
        Err(error) => failed(format!("cannot check: {error}")),
        Ok(Err(unresolved)) => failed(unresolved.message),
        Ok(Ok(columns)) => match crate::pipeline::describe_missing_columns(&router, &columns) {
            Some(message) => failed(message),
            None => {
                let clashes = router.column_type_clashes(&columns);
                std::iter::once(CheckLine {
                    ok: true,
                    item,
                    detail: format!("{names}: exist, readable, with the columns the route reads"),
                })
                .chain(column_type_line(&clashes))
                .collect()
            }
        },
    }
}

/// `check`'s line for configured column types the server's definitions contradict
/// ([`outbox_router::Router::column_type_clashes`]); `None` when there is none. `run` warns
/// and goes on with the setting, `check` fails: a clash is almost always a mistake.
fn column_type_line(clashes: &[outbox_router::ColumnTypeClash]) -> Option<CheckLine> {
    (!clashes.is_empty()).then(|| CheckLine {
        ok: false,
        item: "column types".into(),
        detail: clashes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// The Kafka cluster's line: reachable with the relay's client settings, or why not.
async fn kafka_line(config: &RelayConfig) -> CheckLine {
    match broker_metadata(config).await {
        Ok((brokers, topics)) => CheckLine {
            ok: true,
            item: "kafka".into(),
            detail: format!(
                "{} reachable: {brokers} broker(s), {topics} topic(s); {}",
                config.kafka.brokers,
                config.kafka.security.describe()
            ),
        },
        Err(error) => CheckLine {
            ok: false,
            item: "kafka".into(),
            detail: format!("{}: {error}", config.kafka.brokers),
        },
    }
}

async fn broker_metadata(config: &RelayConfig) -> anyhow::Result<(usize, usize)> {
    use rdkafka::producer::{FutureProducer, Producer};
    // The check line shows only this error's own text: librdkafka's reason must be in it,
    // both when the client is refused and when a request fails (the reason of the latter
    // comes through the client context, the request's error says only e.g.
    // `BrokerTransportFailure`).
    let context = outbox_kafka::kafka_context::RelayClientContext::default();
    let failures = context.last_failure_handle();
    let producer: FutureProducer<_> =
        crate::sink::create_kafka_client(&crate::sink::producer_properties(&config.kafka), context)
            .map_err(|error| {
                anyhow::anyhow!("cannot create a Kafka client from [kafka]: {error}")
            })?;
    let timeout = Duration::from_millis(config.kafka.admin_timeout_ms);
    tokio::task::spawn_blocking(move || {
        let metadata = producer
            .client()
            .fetch_metadata(None, timeout)
            .map_err(|error| match failures.get() {
                Some(failure) => anyhow::anyhow!(
                    "cannot fetch cluster metadata: {error}: {failure}; check [kafka.security] and [kafka.properties]"
                ),
                None => anyhow::anyhow!("cannot fetch cluster metadata: {error}"),
            })?;
        Ok((metadata.brokers().len(), metadata.topics().len()))
    })
    .await
    .context("metadata task failed")?
}

/// `checkpoint show|set|reset`: the checkpoint JSON (or `null`) goes to `out`, messages to
/// stderr.
pub async fn checkpoint_command(
    action: CheckpointAction,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    match action {
        CheckpointAction::Show { config } => {
            let config = load_checkpoint_config(&config)?;
            let store = open_checkpoint_store(&config.checkpoint, &config.kafka).await?;
            match store.load().await? {
                Some(checkpoint) => writeln!(out, "{}", checkpoint.to_json())?,
                None => {
                    writeln!(out, "null")?;
                    eprintln!("no checkpoint stored in {}", store.describe());
                }
            }
            Ok(0)
        }
        CheckpointAction::Set {
            config,
            position,
            gtid,
        } => {
            let config = load_checkpoint_config(&config)?;
            let report = outbox_binlog::check_server(
                &config.source.connection_url(),
                &config.source.tls_options(),
            )
            .await
            .with_context(|| {
                format!(
                    "`checkpoint set` reads the source's identity: cannot reach {}",
                    config.source.redacted_url()
                )
            })?;
            let identity = crate::pipeline::identity_of(&report);
            let position = match (position, gtid) {
                (Some(text), None) => {
                    CheckpointPosition::at(parse_file_position(&text).map_err(anyhow::Error::msg)?)
                }
                (None, Some(text)) => {
                    let set = GtidSet::parse(identity.flavor, &text)
                        .with_context(|| format!("--gtid for a {} server", identity.flavor))?;
                    CheckpointPosition {
                        gtid_set: set,
                        ..CheckpointPosition::at(crate::pipeline::gtid_only_binlog_position())
                    }
                }
                _ => bail!("give exactly one of --position FILE:POS or --gtid SET"),
            };
            let checkpoint = Checkpoint::new(identity, position);
            let store = open_checkpoint_store(&config.checkpoint, &config.kafka).await?;
            store.set(&checkpoint).await?;
            writeln!(out, "{}", checkpoint.to_json())?;
            eprintln!("checkpoint stored in {}", store.describe());
            Ok(0)
        }
        CheckpointAction::ImportDebezium {
            config,
            offset,
            offsets_topic,
            offsets_file,
            connector,
            server,
        } => {
            use crate::import_debezium::{checkpoint_position, parse_offset, read_offsets_topic};
            let config = load_checkpoint_config(&config)?;
            let text = match (offset, offsets_topic, offsets_file, connector) {
                (Some(text), _, _, _) => text,
                (None, None, Some(file), Some(connector)) => {
                    crate::connect_offsets_file::read_offsets_file(
                        &file,
                        &connector,
                        server.as_deref(),
                    )?
                    .with_context(|| {
                        format!("no offset of connector `{connector}` in {} (was it renamed, or its offset reset? has the worker flushed it?)", file.display())
                    })?
                }
                (None, Some(topic), None, Some(connector)) => read_offsets_topic(
                    &config.kafka,
                    &topic,
                    &connector,
                    server.as_deref(),
                    DEAD_LETTER_READ_TIMEOUT,
                )
                .await?
                .with_context(|| {
                    format!("no offset of connector `{connector}` in `{topic}` (was it renamed, or its offset reset?)")
                })?,
                _ => bail!("give --offset JSON, or --offsets-topic TOPIC or --offsets-file PATH with --connector NAME"),
            };
            let offset = parse_offset(&text)?;
            let report = outbox_binlog::check_server(
                &config.source.connection_url(),
                &config.source.tls_options(),
            )
            .await
            .with_context(|| {
                format!(
                    "`checkpoint import-debezium` reads the source's identity: cannot reach {}",
                    config.source.redacted_url()
                )
            })?;
            let identity = crate::pipeline::identity_of(&report);
            let imported = checkpoint_position(
                &offset,
                identity.flavor,
                identity.server_id,
                crate::pipeline::gtid_only_binlog_position(),
            )?;
            let checkpoint = Checkpoint::new(identity, imported.position);
            let store = open_checkpoint_store(&config.checkpoint, &config.kafka).await?;
            store.set(&checkpoint).await?;
            writeln!(out, "{}", checkpoint.to_json())?;
            for note in &imported.notes {
                eprintln!("note: {note}");
            }
            eprintln!(
                "checkpoint imported from Debezium's offset into {}",
                store.describe()
            );
            Ok(0)
        }
        CheckpointAction::Reset { config } => {
            let config = load_checkpoint_config(&config)?;
            let store = open_checkpoint_store(&config.checkpoint, &config.kafka).await?;
            store.reset().await?;
            eprintln!(
                "checkpoint removed from {}; the next run starts at `{}`",
                store.describe(),
                config.source.start
            );
            Ok(0)
        }
    }
}

/// `inspect`: one JSON line per transaction of the given binlog files to `out`; errors to
/// `diagnostics`. Returns 2 for an unreadable or corrupt file (the message names file and
/// offset), 1 when rows could not be routed, else 0.
pub fn inspect_command(
    files: &[PathBuf],
    config: Option<&Path>,
    out: &mut dyn Write,
    diagnostics: &mut dyn Write,
) -> anyhow::Result<i32> {
    let (filter, router) = match config {
        Some(path) => {
            let config = load_config(path)?;
            let router = Router::new(&config.outbox, &config.route)
                .map_err(|e| anyhow::anyhow!("invalid [[outbox]]/[route]: {e}"))?;
            (router.table_filter(), Some(router))
        }
        None => (TableFilter::all(), None),
    };
    let mut reader = match BinlogFileReader::open(files.to_vec(), filter) {
        Ok(reader) => reader,
        Err(error) => {
            writeln!(
                diagnostics,
                "error: cannot open {}: {error}",
                describe_files(files)
            )?;
            return Ok(2);
        }
    };
    let stdout = out;
    let mut rows: Vec<serde_json::Value> = Vec::new();
    let mut routing_errors = 0u64;
    // On a terminal only: a progress line on stderr (crate::progress).
    let mut progress =
        crate::progress::FileProgress::on_stderr("reading", crate::progress::total_size(files));
    let mut events_read = 0u64;
    loop {
        let item = match reader.next_item() {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(error) => {
                progress.finish();
                stdout.flush()?;
                writeln!(diagnostics, "error: {error}")?;
                return Ok(2);
            }
        };
        if matches!(item, StreamItem::Row(_)) {
            events_read += 1;
        }
        progress.update(reader.bytes_read(), events_read);
        match item {
            StreamItem::Row(change) => match &router {
                None => rows.push(row_change_json(&change)),
                Some(router) => match router.route(&change) {
                    Ok(RouteOutcome::Record(record)) => rows.push(serde_json::json!({
                        "topic": record.topic,
                        "key": record.key.as_deref().map(lossy),
                        "value": record.value.as_deref().map(lossy),
                        "headers": record.headers.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(lossy(v)))).collect::<serde_json::Map<_, _>>(),
                        "timestamp_ms": record.timestamp_millis,
                        "partition": record.partition,
                        "event_id": record.event_id,
                    })),
                    Ok(RouteOutcome::Skipped { reason }) => {
                        rows.push(serde_json::json!({ "skipped": format!("{reason:?}") }))
                    }
                    Err(error) => {
                        routing_errors += 1;
                        rows.push(serde_json::json!({
                            "routing_error": error.to_string(),
                            "event_id": error.event_id,
                            "table": error.table.to_string(),
                            "column": error.column,
                        }))
                    }
                },
            },
            StreamItem::Commit(commit) => {
                let key = if router.is_some() { "records" } else { "rows" };
                let line = transaction_json(&commit, key, std::mem::take(&mut rows));
                writeln!(stdout, "{line}")?;
            }
            StreamItem::Heartbeat(_) => {}
        }
    }
    progress.finish();
    if !rows.is_empty() {
        writeln!(
            diagnostics,
            "warning: {} row(s) at the end of {} belong to a transaction without a commit (not printed)",
            rows.len(),
            describe_files(files)
        )?;
    }
    if routing_errors > 0 {
        writeln!(
            diagnostics,
            "error: {routing_errors} row(s) could not be routed (see `routing_error` lines)"
        )?;
        return Ok(1);
    }
    Ok(0)
}

pub(crate) fn describe_files(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn transaction_json(commit: &Commit, key: &str, rows: Vec<serde_json::Value>) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    object.insert("position".into(), commit.position.to_string().into());
    object.insert(
        "gtid".into(),
        commit
            .gtid
            .as_ref()
            .map(|g| serde_json::Value::String(g.to_string()))
            .unwrap_or(serde_json::Value::Null),
    );
    object.insert("timestamp".into(), commit.timestamp.into());
    object.insert(key.into(), serde_json::Value::Array(rows));
    serde_json::Value::Object(object)
}

fn row_json(row: &Row) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    for (column, value) in row.columns.iter().zip(&row.values) {
        object.insert(
            column.clone(),
            serde_json::to_value(value).unwrap_or(serde_json::Value::Null),
        );
    }
    serde_json::Value::Object(object)
}

fn row_change_json(change: &RowChange) -> serde_json::Value {
    serde_json::json!({
        "table": change.table.to_string(),
        "operation": change.operation,
        "before": change.before.as_ref().map(row_json),
        "after": change.after.as_ref().map(row_json),
        "event_position": change.event_position.to_string(),
    })
}

/// An error and its causes joined by `: `, skipping a cause whose text the message already
/// contains (many of the relay's messages embed their cause), with every secret masked
/// ([`crate::redact::redact_secrets`]): a cause from a library may quote a config value.
pub fn render_error_chain(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    crate::redact::redact_secrets(&message)
}

/// The whole `outbox-relay` program: parses the command line, sets up logging, runs the
/// command on a multi-threaded runtime and turns the outcome into the exit code. Both the
/// `outbox-relay` binary and the examples' copy of it are this one call.
pub fn main_entry() -> std::process::ExitCode {
    use clap::Parser;
    let cli = crate::cli::Cli::parse();
    let log_format = cli.log_format;
    init_logging(log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("outbox-relay")
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return std::process::ExitCode::from(1);
        }
    };
    let result = runtime.block_on(execute(cli));
    // Blocking helpers (a metadata request to a frozen broker, a producer flushing on drop)
    // must not hold the exit past the shutdown deadline: everything that matters (the final
    // checkpoint) is done by now.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(error) => {
            let message = render_error_chain(&error);
            match log_format {
                crate::cli::LogFormat::Json => {
                    tracing::error!(error = %message, "outbox-relay failed")
                }
                crate::cli::LogFormat::Human => eprintln!("error: {message}"),
            }
            std::process::ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn error_chains_do_not_repeat_embedded_causes() {
        let error = anyhow::Error::from(Outer(std::io::Error::other("disk gone")))
            .context("loading the checkpoint");
        assert_eq!(
            render_error_chain(&error),
            "loading the checkpoint: outer: disk gone"
        );
    }
}
