//! `outbox-relay-bench`: outbox-relay's catch-up drain and commit -> ack latency beside the
//! machine's two limits (a raw binlog pull of the same log, a bare librdkafka producer
//! sending the same records) and beside Debezium (Kafka Connect + Outbox Event Router) on the
//! same log and broker, in one run. See docs/benchmarks.md.
//!
//! Every measured program runs in a process of its own (this binary again, in a hidden child
//! mode; Debezium in its JVM), so CPU seconds and peak RSS are per program:
//! * [`workload`]: schema, events, the bulk writer;
//! * [`children`]: the child modes (raw pull, bare producer, `outbox-relay run`, mock cluster);
//! * [`measure`]: one drain figure per program;
//! * [`latency`]: the fixed-rate writer and commit -> ack percentiles;
//! * [`report`]: medians, ratios, the table and `--json`;
//! * [`stats`]: `/proc` accounting and percentiles.

mod children;
mod latency;
mod measure;
mod options;
mod report;
mod stats;
mod workload;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};
use clap::Parser;
use outbox_testkit::connect::{DebeziumConnect, DEBEZIUM_SERVER_VERSION_ARG};
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::{ScratchMariadb, ScratchOptions};

use options::{BenchOptions, ChildMode, Cli};
use report::{Report, Round, Setup};
use workload::Workload;

/// The relay's allocator, so the relay child this program runs measures the relay as
/// shipped (see `outbox_relay::RelayAllocator`).
#[global_allocator]
static GLOBAL_ALLOCATOR: outbox_relay::RelayAllocator = outbox_relay::RelayAllocator;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.child {
        Some(ChildMode::Pull {
            url,
            server_id,
            first_file,
            end_file,
            end_position,
        }) => children::pull(&url, server_id, &first_file, &end_file, end_position).map(|()| 0),
        Some(ChildMode::Produce {
            config,
            topic_prefix,
            workload,
        }) => children::produce(&config, &topic_prefix, &workload).map(|()| 0),
        Some(ChildMode::Relay { config }) => children::relay(&config),
        Some(ChildMode::MockCluster { topics, partitions }) => {
            children::mock_cluster(&topics, partitions).map(|()| 0)
        }
        None => run_bench(cli.bench),
    };
    match outcome {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::from(1)
        }
    }
}

/// Progress lines on stderr (unless `--quiet`).
struct Progress {
    /// `--quiet`.
    quiet: bool,
    /// When the run started.
    started: std::time::Instant,
}

impl Progress {
    fn say(&self, line: impl AsRef<str>) {
        if !self.quiet {
            eprintln!(
                "[{:>6.1}s] {}",
                self.started.elapsed().as_secs_f64(),
                line.as_ref()
            );
        }
    }
}

/// An out-of-process rdkafka mock cluster (this binary's `child-mock-cluster`); it exits when
/// its standard input closes, i.e. when this is dropped.
struct MockClusterProcess {
    /// The child; its stdin is the lifeline.
    child: Child,
    /// Its bootstrap servers.
    bootstrap: String,
}

impl MockClusterProcess {
    fn start(topics: &[String], partitions: i32) -> Result<MockClusterProcess> {
        let mut child = Command::new(std::env::current_exe().context("this program's path")?)
            .arg("child-mock-cluster")
            .arg("--topics")
            .arg(topics.join(","))
            .arg("--partitions")
            .arg(partitions.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the mock cluster child")?;
        let stdout = child.stdout.take().context("the mock cluster's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .context("reading the mock cluster's bootstrap servers")?;
        let bootstrap = line.trim().to_string();
        if bootstrap.is_empty() {
            let _ = child.kill();
            bail!("the mock cluster child printed no bootstrap servers");
        }
        Ok(MockClusterProcess { child, bootstrap })
    }
}

impl Drop for MockClusterProcess {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn run_bench(options: BenchOptions) -> Result<i32> {
    if options.transactions == 0 || options.rows_per_transaction == 0 || options.rounds == 0 {
        bail!("--transactions, --rows-per-transaction and --rounds must be at least 1");
    }
    if options.mock_cluster && options.delivery.exactly_once() {
        // The mock cluster's transaction support is partial (no transaction markers for
        // read_committed fetches to honour): exactly-once is measured on Apache Kafka only.
        bail!("--delivery exactly_once/both needs Apache Kafka: drop --mock-cluster");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(bench(&options))?;
    if options.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.table());
    }
    Ok(0)
}

/// Transactions of the broker's warm-up pass (at most the run's own).
const WARMUP_TRANSACTIONS: u64 = 50_000;

async fn bench(options: &BenchOptions) -> Result<Report> {
    let progress = Progress {
        quiet: options.quiet,
        started: std::time::Instant::now(),
    };
    let load_average_at_start = load_average();
    let workload = Workload {
        transactions: options.transactions,
        rows_per_transaction: options.rows_per_transaction,
        payload_bytes: options.payload_bytes,
        noise_tables: options.noise_tables,
    };
    let events = workload.events();
    // Before the broker starts: its flags and the Connect worker's.
    outbox_testkit::process::use_jvm_profile(options.jvm_flags.profile())
        .context("choosing the JVM flags")?;
    progress.say("starting a scratch MariaDB and the Apache Kafka broker");
    let (db, broker) = tokio::join!(
        ScratchMariadb::start_with(ScratchOptions {
            extra_args: vec![
                // Debezium's MySQL connector needs a version it knows (see the testkit).
                DEBEZIUM_SERVER_VERSION_ARG.to_string(),
                // The binlog is what is measured, not the server's fsyncs: every reader
                // sees the same bytes either way.
                "--innodb-flush-log-at-trx-commit=0".into(),
                "--sync-binlog=0".into(),
                "--innodb-buffer-pool-size=256M".into(),
                // MariaDB's default redo log, not the testkit's 8 MiB (small for the many
                // servers of a test run): with 8 MiB every few megabytes of redo force a
                // checkpoint, which cost a poll-mode drain 30 % of the server's CPU per
                // row (`examples/claim_cost.rs` in crates/poll: 64 -> 45 CPU s per million).
                "--innodb-log-file-size=96M".into(),
                "--max-binlog-size=1G".into(),
                // 64 MiB payloads (`--payload-bytes`) and 1M-row transactions are single
                // statements far above the 16 MiB default.
                "--max-allowed-packet=1G".into(),
            ],
            ..ScratchOptions::default()
        }),
        KafkaBroker::shared()
    );
    let db = db.context("starting the scratch MariaDB")?;
    let broker = broker.context("starting the Apache Kafka broker")?;
    let tag = db.tag().to_string();

    let mut conn = db
        .conn()
        .await
        .context("connecting to the scratch MariaDB")?;
    let mut schema = workload.schema();
    if options.source == options::Source::Poll {
        // Before the rows are written, so they are PENDING from the start.
        let table =
            outbox_writer::OutboxTable::new("outbox", outbox_writer::ColumnPreset::Debezium)
                .and_then(|table| table.in_database("shop"))
                .context("the outbox table's name")?;
        schema.extend(outbox_poll::poll_mode_ddl(
            &table,
            &outbox_poll::PollColumns::default(),
        ));
    }
    for statement in schema {
        mysql_async::prelude::Queryable::query_drop(&mut conn, statement)
            .await
            .context("creating the schema")?;
    }
    progress.say(format!(
        "writing {} transactions ({events} outbox events)",
        options.transactions
    ));
    let write_started = std::time::Instant::now();
    workload.write(&mut conn, 0, options.transactions).await?;
    let write_seconds = write_started.elapsed().as_secs_f64();
    let end = workload::end_of_log(&mut conn).await?;
    let first_file = workload::first_log_file(&mut conn).await?;
    conn.disconnect()
        .await
        .context("disconnecting the writer")?;
    progress.say(format!(
        "wrote them in {write_seconds:.1} s; the log ends at {}:{}",
        end.file, end.position
    ));

    let topic_config = topic_config(options);
    let relay_shape = |exactly_once: bool| relay_shape(options, exactly_once);
    let prefix = |round: u32, side: &str| format!("{tag}.r{round}.{side}");
    let mock = if options.mock_cluster {
        let prefixes: Vec<String> = (0..options.rounds)
            .flat_map(|round| [prefix(round, "bare"), prefix(round, "relay")])
            .collect();
        let mock = MockClusterProcess::start(&measure::all_topics(&prefixes), options.partitions)?;
        progress.say(format!("mock cluster at {}", mock.bootstrap));
        Some(mock)
    } else {
        None
    };
    let drain_brokers = mock
        .as_ref()
        .map_or_else(|| broker.bootstrap(), |mock| mock.bootstrap.clone());
    let run_debezium = !options.skip_debezium && !options.mock_cluster;
    let scratch = tempfile::tempdir().context("a scratch directory")?;

    if mock.is_none() {
        // The broker is a fresh JVM: until its JIT has compiled the produce path, whoever
        // drains first pays for it (the bare producer of round 1, which would flatter every
        // ratio to it). One unmeasured bare-producer pass of up to 50 000 records warms it.
        let warmup_prefix = format!("{tag}.warmup");
        measure::create_topics(broker, &warmup_prefix, options.partitions, &topic_config).await?;
        let warmup = Workload {
            transactions: options.transactions.min(WARMUP_TRANSACTIONS),
            ..workload
        };
        progress.say(format!(
            "warming the broker up with {} unmeasured records",
            warmup.events()
        ));
        measure::bare_producer(
            scratch.path(),
            &drain_brokers,
            &warmup_prefix,
            &warmup,
            options.linger_ms,
        )
        .await?;
    }

    // The broker's CPU over each drain (the harness broker only: the mock cluster's
    // process is not looked at, so `before` is `None` with it).
    let broker_before = || {
        mock.is_none()
            .then(|| measure::broker_cpu_seconds(broker))
            .flatten()
    };
    let with_broker_cpu = |figure: measure::Figure, before: Option<f64>| match (
        before,
        measure::broker_cpu_seconds(broker),
    ) {
        (Some(before), Some(after)) => figure.with_broker_cpu(after - before),
        _ => figure,
    };

    let latency_wanted = options.latency_seconds > 0;
    let mut rounds = Vec::new();
    // The last round's relay and Debezium stream on into the latency phases (caught up, on
    // LogAppendTime topics), so neither starts twice.
    let mut streaming_relay = None;
    let mut streaming_debezium = None;
    for round in 0..options.rounds {
        let last = round + 1 == options.rounds;
        let label = format!("round {}/{}", round + 1, options.rounds);
        progress.say(format!("{label}: raw binlog pull"));
        let raw_pull = measure::raw_pull(&db, 7_000 + round, &first_file, &end, events).await?;
        progress.say(format!(
            "{label}: raw pull {:.0} events/s; bare producer",
            raw_pull.events_per_second
        ));
        let bare_prefix = prefix(round, "bare");
        if mock.is_none() {
            measure::create_topics(broker, &bare_prefix, options.partitions, &topic_config).await?;
        }
        let before = broker_before();
        let bare_producer = measure::bare_producer(
            scratch.path(),
            &drain_brokers,
            &bare_prefix,
            &workload,
            options.linger_ms,
        )
        .await?;
        let bare_producer = with_broker_cpu(bare_producer, before);
        progress.say(format!(
            "{label}: bare producer {:.0} events/s; outbox-relay",
            bare_producer.events_per_second
        ));
        // At-least-once first in even rounds, exactly-once first in odd ones.
        let mut order = Vec::new();
        if options.delivery.at_least_once() {
            order.push(false);
        }
        if options.delivery.exactly_once() {
            order.push(true);
        }
        if round % 2 == 1 {
            order.reverse();
        }
        let mut at_least_once = None;
        let mut exactly_once = None;
        for eo in order {
            let side = if eo { "relay-eo" } else { "relay" };
            let relay_prefix = prefix(round, side);
            if mock.is_none() {
                measure::create_topics(broker, &relay_prefix, options.partitions, &topic_config)
                    .await?;
            }
            // Against the mock cluster the latency phase needs a relay of its own on Kafka;
            // the exactly-once latency phase always starts its own relay.
            let keep_relay = last && latency_wanted && mock.is_none() && !eo;
            let before = broker_before();
            let (relay, kept) = measure::relay_drain(
                &db,
                &drain_brokers,
                &relay_prefix,
                &end,
                events,
                keep_relay,
                relay_shape(eo),
            )
            .await?;
            let relay = with_broker_cpu(relay, before);
            if let Some(kept) = kept {
                streaming_relay = Some((kept, relay_prefix.clone()));
            }
            progress.say(format!(
                "{label}: outbox-relay ({}) {:.0} events/s",
                if eo { "exactly-once" } else { "at-least-once" },
                relay.events_per_second
            ));
            if eo {
                exactly_once = Some(relay);
            } else {
                at_least_once = Some(relay);
            }
        }
        let (relay, relay_exactly_once) = match (at_least_once, exactly_once) {
            (Some(alo), eo) => (alo, eo),
            (None, Some(eo)) => (eo, None),
            (None, None) => bail!("no relay drain ran"),
        };
        let polling = if options.source == options::Source::Poll {
            let poll_prefix = prefix(round, "poll");
            if mock.is_none() {
                measure::create_topics(broker, &poll_prefix, options.partitions, &topic_config)
                    .await?;
            }
            measure::reset_poll_rows(&db).await?;
            progress.say(format!("{label}: outbox-relay, polling source"));
            let before = broker_before();
            let (figure, load) = measure::poll_drain(
                &db,
                &drain_brokers,
                &poll_prefix,
                events,
                poll_relay_shape(options),
            )
            .await?;
            let figure = with_broker_cpu(figure, before);
            progress.say(format!(
                "{label}: polling {:.0} events/s, database {:.0} queries/s",
                figure.events_per_second, load.queries_per_second
            ));
            Some((figure, load))
        } else {
            None
        };
        let debezium = if run_debezium {
            let dbz_prefix = prefix(round, "dbz");
            measure::create_topics(broker, &dbz_prefix, options.partitions, &topic_config).await?;
            progress.say(format!("{label}: Debezium"));
            let before = broker_before();
            let (figure, kept) = measure::debezium_drain(
                &db,
                broker,
                &format!("{tag}-r{round}-dbz"),
                &dbz_prefix,
                54_000 + round,
                options.partitions,
                events,
                last && latency_wanted,
            )
            .await?;
            let figure = with_broker_cpu(figure, before);
            if let Some(kept) = kept {
                streaming_debezium = Some((kept, dbz_prefix.clone()));
            }
            progress.say(format!(
                "{label}: Debezium {:.0} events/s",
                figure.events_per_second
            ));
            Some(figure)
        } else {
            None
        };
        let (relay_poll, poll_database) = polling.unzip();
        rounds.push(Round {
            raw_pull,
            bare_producer,
            relay,
            relay_exactly_once,
            debezium,
            relay_poll,
            poll_database,
        });
    }
    drop(mock);

    let (relay_latency, debezium_latency, relay_exactly_once_latency, relay_poll_latency) =
        if latency_wanted {
            // Each side's latency phase has the machine to itself: the Debezium worker streaming
            // on from the last round is frozen through the relays' phases (each relay stops
            // after its own), then continued and caught up before Debezium's phase.
            let frozen_debezium = match streaming_debezium.as_ref().and_then(|(c, _)| c.pid()) {
                Some(pid) => Some(latency::FrozenProcess::freeze(pid, "the Debezium worker")?),
                None => None,
            };
            let at_least_once_latency = if options.delivery.at_least_once() {
                let streaming_relay = match streaming_relay {
                    Some(streaming) => streaming,
                    None => start_latency_relay(options, &db, broker, &tag, false).await?,
                };
                Some(
                    relay_latency(
                        options,
                        &db,
                        broker,
                        &workload,
                        streaming_relay,
                        &progress,
                        0,
                    )
                    .await?,
                )
            } else {
                None
            };
            let exactly_once_latency = if options.delivery.exactly_once() {
                let streaming = start_latency_relay(options, &db, broker, &tag, true).await?;
                Some(relay_latency(options, &db, broker, &workload, streaming, &progress, 2).await?)
            } else {
                None
            };
            let poll_latency = if options.source == options::Source::Poll {
                let streaming = start_poll_latency_relay(options, &db, broker, &tag).await?;
                Some(relay_latency(options, &db, broker, &workload, streaming, &progress, 3).await?)
            } else {
                None
            };
            drop(frozen_debezium);
            let debezium_latency = match streaming_debezium {
                Some(streaming) => Some(
                    debezium_latency(options, &db, broker, &workload, streaming, &progress).await?,
                ),
                None => None,
            };
            match at_least_once_latency {
                Some(alo) => (
                    Some(alo),
                    debezium_latency,
                    exactly_once_latency,
                    poll_latency,
                ),
                None => (exactly_once_latency, debezium_latency, None, poll_latency),
            }
        } else {
            (None, None, None, None)
        };

    let setup = Setup {
        transactions: options.transactions,
        events,
        rows_per_transaction: options.rows_per_transaction,
        payload_bytes: options.payload_bytes,
        noise_tables: options.noise_tables,
        partitions: options.partitions,
        drain_broker: if options.mock_cluster {
            "an out-of-process rdkafka mock cluster".into()
        } else {
            format!(
                "Apache Kafka 4.4 (one broker, JVM flags: {})",
                match options.jvm_flags {
                    options::JvmFlags::Harness => "harness",
                    options::JvmFlags::KafkaScripts => "kafka-scripts",
                }
            )
        },
        write_seconds,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average_at_start,
        latency_rate: options.latency_rate,
        delivery: options.delivery,
        commit_interval_ms: options.commit_interval_ms,
        load_average_at_end: load_average(),
        build: env!("BENCH_BUILD").to_string(),
    };
    Report::new(
        setup,
        rounds,
        relay_latency,
        debezium_latency,
        relay_exactly_once_latency,
        relay_poll_latency,
    )
    .context("no figures to summarise")
}

/// The polling relay's settings from the options (at-least-once).
fn poll_relay_shape(options: &BenchOptions) -> measure::RelayShape {
    measure::RelayShape {
        poll: Some(measure::PollShape {
            interval_ms: options.poll_interval_ms,
            batch_size: options.poll_batch_size,
        }),
        ..relay_shape(options, false)
    }
}

/// The binlog relays' settings from the options.
fn relay_shape(options: &BenchOptions, exactly_once: bool) -> measure::RelayShape {
    measure::RelayShape {
        exactly_once,
        max_message_bytes: measure::max_message_bytes(options.payload_bytes),
        commit_interval_ms: options.commit_interval_ms,
        max_in_flight_bytes: options.max_in_flight_bytes,
        max_in_flight: options.max_in_flight,
        linger_ms: options.linger_ms,
        poll: None,
    }
}

/// Transactions of the latency phases start here, past the drained log's ids.
fn latency_first_transaction(options: &BenchOptions, phase: u64) -> u64 {
    options.transactions + phase * (options.latency_rate * options.latency_seconds + 1)
}

/// The outbox topics' config: LogAppendTime (the record timestamp is the broker's append
/// (= ack) time), and room for the records of big payloads.
fn topic_config(options: &BenchOptions) -> Vec<(&'static str, &'static str)> {
    let mut config = vec![("message.timestamp.type", "LogAppendTime")];
    if measure::max_message_bytes(options.payload_bytes).is_some() {
        // The harness broker's `message.max.bytes` (100 MiB).
        config.push(("max.message.bytes", "104857600"));
    }
    config
}

/// A relay on the Apache Kafka broker from the current end of the log, for the latency phase
/// when the drains went to the mock cluster.
async fn start_latency_relay(
    options: &BenchOptions,
    db: &ScratchMariadb,
    broker: &KafkaBroker,
    tag: &str,
    exactly_once: bool,
) -> Result<(measure::RelayProcess, String)> {
    let prefix = format!(
        "{tag}.latency.{}",
        if exactly_once { "relay-eo" } else { "relay" }
    );
    measure::create_topics(broker, &prefix, options.partitions, &topic_config(options)).await?;
    let mut conn = db.conn().await.context("connecting")?;
    let start = workload::end_of_log(&mut conn).await?;
    conn.disconnect().await.context("disconnecting")?;
    let mut dir = measure::RelayDir::new()?;
    dir.write_config(
        &db.url(),
        &broker.bootstrap(),
        &prefix,
        &format!("file:{}:{}", start.file, start.position),
        relay_shape(options, exactly_once),
    )?;
    let mut relay = measure::RelayProcess::start(dir)?;
    relay
        .wait_for_log(
            "binlog source connected",
            std::time::Duration::from_secs(60),
        )
        .await?;
    Ok((relay, prefix))
}

/// A polling relay for the latency phase, on topics of its own; the rows already in the
/// table (earlier phases') are marked SENT first, so it starts with no backlog.
async fn start_poll_latency_relay(
    options: &BenchOptions,
    db: &ScratchMariadb,
    broker: &KafkaBroker,
    tag: &str,
) -> Result<(measure::RelayProcess, String)> {
    let prefix = format!("{tag}.latency.poll");
    measure::create_topics(broker, &prefix, options.partitions, &topic_config(options)).await?;
    let mut conn = db.conn().await.context("connecting")?;
    mysql_async::prelude::Queryable::query_drop(
        &mut conn,
        "UPDATE shop.outbox SET poll_status = 'SENT' WHERE poll_status <> 'SENT'",
    )
    .await
    .context("marking the earlier phases' rows SENT")?;
    conn.disconnect().await.context("disconnecting")?;
    let mut dir = measure::RelayDir::new()?;
    dir.write_config(
        &db.url(),
        &broker.bootstrap(),
        &prefix,
        "latest",
        poll_relay_shape(options),
    )?;
    let mut relay = measure::RelayProcess::start(dir)?;
    relay
        .wait_for_log(
            measure::POLL_STREAMING_LOG_LINE,
            std::time::Duration::from_secs(60),
        )
        .await?;
    Ok((relay, prefix))
}

async fn relay_latency(
    options: &BenchOptions,
    db: &ScratchMariadb,
    broker: &KafkaBroker,
    workload: &Workload,
    (mut relay, prefix): (measure::RelayProcess, String),
    progress: &Progress,
    phase: u64,
) -> Result<latency::Latency> {
    let exactly_once = relay.dir.exactly_once();
    progress.say(format!(
        "latency: outbox-relay ({}), {} events/s for {} s",
        if exactly_once {
            "exactly-once, until visible to read_committed"
        } else {
            "at-least-once, until acked"
        },
        options.latency_rate,
        options.latency_seconds
    ));
    let figures = latency::measure(
        &db.url(),
        &broker.bootstrap(),
        &prefix,
        workload,
        latency_first_transaction(options, phase),
        options.latency_rate,
        options.latency_seconds,
        options.latency_writers,
        if exactly_once {
            latency::Arrival::Visible
        } else {
            latency::Arrival::Ack
        },
    )
    .await;
    relay.check_running()?;
    relay.stop().await?;
    let figures = figures?;
    progress.say(format!(
        "latency: outbox-relay p50 {:.1} ms, p99 {:.1} ms, p999 {:.1} ms",
        figures.p50_ms, figures.p99_ms, figures.p999_ms
    ));
    Ok(figures)
}

async fn debezium_latency(
    options: &BenchOptions,
    db: &ScratchMariadb,
    broker: &KafkaBroker,
    workload: &Workload,
    (connect, prefix): (DebeziumConnect, String),
    progress: &Progress,
) -> Result<latency::Latency> {
    progress.say("latency: Debezium catching up after the relays' phases");
    latency::wait_caught_up(&db.url(), &broker.bootstrap(), &prefix)
        .await
        .with_context(|| format!("Debezium's log: {}", connect.log_path().display()))?;
    progress.say(format!(
        "latency: Debezium, {} events/s for {} s",
        options.latency_rate, options.latency_seconds
    ));
    let figures = latency::measure(
        &db.url(),
        &broker.bootstrap(),
        &prefix,
        workload,
        latency_first_transaction(options, 1),
        options.latency_rate,
        options.latency_seconds,
        options.latency_writers,
        latency::Arrival::Ack,
    )
    .await
    .with_context(|| format!("Debezium's log: {}", connect.log_path().display()))?;
    drop(connect);
    progress.say(format!(
        "latency: Debezium p50 {:.1} ms, p99 {:.1} ms, p999 {:.1} ms",
        figures.p50_ms, figures.p99_ms, figures.p999_ms
    ));
    Ok(figures)
}
