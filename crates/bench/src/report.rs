//! The figures of one run, their summary (medians over the rounds, ratios within a round) and
//! the table.

use crate::latency::Latency;
use crate::measure::Figure;
use crate::stats::median;

/// One round: each program once, back to back.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Round {
    /// Raw binlog pull of the whole log (limit 1).
    pub raw_pull: Figure,
    /// Bare librdkafka producer sending the same records (limit 2).
    pub bare_producer: Figure,
    /// outbox-relay's drain (at-least-once; exactly-once with `--delivery exactly_once`).
    pub relay: Figure,
    /// outbox-relay's exactly-once drain in the same round (`--delivery both`).
    pub relay_exactly_once: Option<Figure>,
    /// Debezium's drain (`None` when skipped).
    pub debezium: Option<Figure>,
    /// outbox-relay's polling source on the same rows (`--source poll`).
    pub relay_poll: Option<Figure>,
    /// The database's load during that drain.
    pub poll_database: Option<crate::measure::DatabaseLoad>,
}

impl Round {
    /// relay events/s over min(raw pull, bare producer) events/s in this round.
    pub fn relay_to_limit(&self) -> f64 {
        self.relay.events_per_second
            / self
                .raw_pull
                .events_per_second
                .min(self.bare_producer.events_per_second)
    }
}

/// Medians of one program over the rounds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    /// Median events/s.
    pub events_per_second: f64,
    /// Median CPU seconds per million events.
    pub cpu_seconds_per_million_events: f64,
    /// Largest peak RSS over the rounds, MiB.
    pub peak_rss_mib: f64,
    /// Median CPU seconds per million events of the Apache Kafka broker during the drain
    /// (`None` for the raw pull and for the mock cluster).
    pub broker_cpu_seconds_per_million_events: Option<f64>,
}

impl Summary {
    fn of<'a>(figures: impl Iterator<Item = &'a Figure> + Clone) -> Option<Summary> {
        let rates: Vec<f64> = figures.clone().map(|f| f.events_per_second).collect();
        let cpu: Vec<f64> = figures
            .clone()
            .map(|f| f.cpu_seconds_per_million_events)
            .collect();
        let broker_cpu: Vec<f64> = figures
            .clone()
            .filter_map(|f| f.broker_cpu_seconds_per_million_events)
            .collect();
        let rss = figures.map(|f| f.peak_rss_bytes).max()?;
        Some(Summary {
            events_per_second: median(&rates)?,
            cpu_seconds_per_million_events: median(&cpu)?,
            peak_rss_mib: rss as f64 / (1024.0 * 1024.0),
            broker_cpu_seconds_per_million_events: median(&broker_cpu),
        })
    }
}

/// Ratios of outbox-relay's drain, each the median of the per-round ratios.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ratios {
    /// relay / raw pull.
    pub relay_to_raw_pull: f64,
    /// relay / bare producer.
    pub relay_to_bare_producer: f64,
    /// relay / min(raw pull, bare producer): the target is >= 0.8.
    pub relay_to_limit: f64,
    /// relay / Debezium (events/s): the target is >= 5.
    pub relay_to_debezium: Option<f64>,
    /// Debezium's CPU seconds per event over the relay's.
    pub debezium_cpu_to_relay_cpu: Option<f64>,
    /// Exactly-once events/s over at-least-once events/s in the same round.
    pub exactly_once_to_at_least_once: Option<f64>,
    /// Exactly-once CPU seconds per event over at-least-once's in the same round.
    pub exactly_once_cpu_to_at_least_once_cpu: Option<f64>,
}

/// Everything one run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// What ran where.
    pub setup: Setup,
    /// Every round's figures.
    pub rounds: Vec<Round>,
    /// Medians per program.
    pub raw_pull: Summary,
    /// Medians of the bare producer.
    pub bare_producer: Summary,
    /// Medians of outbox-relay.
    pub relay: Summary,
    /// Medians of Debezium.
    pub debezium: Option<Summary>,
    /// Medians of outbox-relay's exactly-once drains (`--delivery both`).
    pub relay_exactly_once: Option<Summary>,
    /// outbox-relay's ratios.
    pub ratios: Ratios,
    /// Commit -> ack latency of outbox-relay.
    pub relay_latency: Option<Latency>,
    /// Commit -> ack latency of Debezium.
    pub debezium_latency: Option<Latency>,
    /// Commit -> visible to `read_committed` latency of the exactly-once relay
    /// (`--delivery both`).
    pub relay_exactly_once_latency: Option<Latency>,
    /// Medians of the polling source's drains (`--source poll`).
    pub relay_poll: Option<Summary>,
    /// Medians of the database's load during them: queries/s, server CPU s per million
    /// events.
    pub poll_database: Option<(f64, f64)>,
    /// Commit -> ack latency of the polling source.
    pub relay_poll_latency: Option<Latency>,
}

/// The run's setup, printed with the table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Setup {
    /// Transactions written.
    pub transactions: u64,
    /// Outbox events written (transactions x rows per transaction).
    pub events: u64,
    /// Outbox rows per transaction.
    pub rows_per_transaction: u32,
    /// Payload bytes.
    pub payload_bytes: usize,
    /// Noise tables.
    pub noise_tables: u32,
    /// Partitions per topic.
    pub partitions: i32,
    /// Where the bare producer and the relay drained to: `apache-kafka` or `mock-cluster`.
    pub drain_broker: String,
    /// Seconds the bulk writer took.
    pub write_seconds: f64,
    /// Processors online.
    pub cores: usize,
    /// 1-minute load average at the start (a busy machine makes every figure noisy).
    pub load_average_at_start: f64,
    /// Target rate of the latency phase.
    pub latency_rate: u64,
    /// `--delivery`: `at_least_once`, `exactly_once` (the `relay` row is then exactly-once)
    /// or `both`.
    pub delivery: crate::options::Delivery,
    /// `--commit-interval-ms` (`None`: the relay's default, 1 000 ms).
    pub commit_interval_ms: Option<u64>,
    /// 1-minute load average at the end.
    pub load_average_at_end: f64,
    /// The build profile and optimisation level of the workspace crates of this harness (and
    /// so of the relay code it runs); dependencies are built at the profile's own level.
    pub build: String,
}

impl Report {
    /// Summarises `rounds`.
    pub fn new(
        setup: Setup,
        rounds: Vec<Round>,
        relay_latency: Option<Latency>,
        debezium_latency: Option<Latency>,
        relay_exactly_once_latency: Option<Latency>,
        relay_poll_latency: Option<Latency>,
    ) -> Option<Report> {
        let raw_pull = Summary::of(rounds.iter().map(|r| &r.raw_pull))?;
        let bare_producer = Summary::of(rounds.iter().map(|r| &r.bare_producer))?;
        let relay = Summary::of(rounds.iter().map(|r| &r.relay))?;
        let debezium = Summary::of(rounds.iter().filter_map(|r| r.debezium.as_ref()));
        let relay_exactly_once =
            Summary::of(rounds.iter().filter_map(|r| r.relay_exactly_once.as_ref()));
        let relay_poll = Summary::of(rounds.iter().filter_map(|r| r.relay_poll.as_ref()));
        let loads: Vec<&crate::measure::DatabaseLoad> = rounds
            .iter()
            .filter_map(|r| r.poll_database.as_ref())
            .collect();
        let poll_database = median(
            &loads
                .iter()
                .map(|l| l.queries_per_second)
                .collect::<Vec<_>>(),
        )
        .zip(median(
            &loads
                .iter()
                .map(|l| l.cpu_seconds_per_million_events)
                .collect::<Vec<_>>(),
        ));
        let per_round = |f: &dyn Fn(&Round) -> Option<f64>| -> Option<f64> {
            median(&rounds.iter().filter_map(f).collect::<Vec<_>>())
        };
        let ratios = Ratios {
            relay_to_raw_pull: per_round(&|r| {
                Some(r.relay.events_per_second / r.raw_pull.events_per_second)
            })?,
            relay_to_bare_producer: per_round(&|r| {
                Some(r.relay.events_per_second / r.bare_producer.events_per_second)
            })?,
            relay_to_limit: per_round(&|r| Some(r.relay_to_limit()))?,
            relay_to_debezium: per_round(&|r| {
                r.debezium
                    .as_ref()
                    .map(|d| r.relay.events_per_second / d.events_per_second)
            }),
            debezium_cpu_to_relay_cpu: per_round(&|r| {
                r.debezium.as_ref().map(|d| {
                    d.cpu_seconds_per_million_events / r.relay.cpu_seconds_per_million_events
                })
            }),
            exactly_once_to_at_least_once: per_round(&|r| {
                r.relay_exactly_once
                    .as_ref()
                    .map(|e| e.events_per_second / r.relay.events_per_second)
            }),
            exactly_once_cpu_to_at_least_once_cpu: per_round(&|r| {
                r.relay_exactly_once.as_ref().map(|e| {
                    e.cpu_seconds_per_million_events / r.relay.cpu_seconds_per_million_events
                })
            }),
        };
        Some(Report {
            setup,
            rounds,
            raw_pull,
            bare_producer,
            relay,
            debezium,
            relay_exactly_once,
            ratios,
            relay_latency,
            debezium_latency,
            relay_exactly_once_latency,
            relay_poll,
            poll_database,
            relay_poll_latency,
        })
    }

    /// The table.
    pub fn table(&self) -> String {
        let s = &self.setup;
        let mut out = format!(
            "{} transactions x {} outbox row(s), {}-byte payloads, {} noise table(s), {} partitions; \
             drains into {}; delivery {:?}, commit interval {}; {} cores, load {:.1} at start, {:.1} at end; {}; bulk write {:.1} s\n\n",
            s.transactions,
            s.rows_per_transaction,
            s.payload_bytes,
            s.noise_tables,
            s.partitions,
            s.drain_broker,
            s.delivery,
            s.commit_interval_ms
                .map_or("default".to_string(), |ms| format!("{ms} ms")),
            s.cores,
            s.load_average_at_start,
            s.load_average_at_end,
            s.build,
            s.write_seconds
        );
        out.push_str(&format!(
            "{:<16} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}\n",
            "",
            "events/s",
            "x pull",
            "x prod",
            "x dbz",
            "CPU s/M",
            "brk s/M",
            "RSS MiB",
            "p50 ms",
            "p99 ms",
            "p999 ms"
        ));
        let pull = self.raw_pull.events_per_second;
        let producer = self.bare_producer.events_per_second;
        let debezium = self.debezium.as_ref().map(|d| d.events_per_second);
        let ratio = |value: f64, of: Option<f64>| match of {
            Some(of) if of > 0.0 => format!("{:.2}", value / of),
            _ => "-".to_string(),
        };
        let latency_cells = |latency: Option<&Latency>| match latency {
            Some(l) => format!("{:>8.1} {:>8.1} {:>8.1}", l.p50_ms, l.p99_ms, l.p999_ms),
            None => format!("{:>8} {:>8} {:>8}", "-", "-", "-"),
        };
        let mut row = |name: &str, summary: &Summary, latency: Option<&Latency>, ratios: bool| {
            let rate = summary.events_per_second;
            let (x_pull, x_producer, x_debezium) = if ratios {
                (
                    ratio(rate, Some(pull)),
                    ratio(rate, Some(producer)),
                    ratio(rate, debezium),
                )
            } else {
                ("-".into(), "-".into(), "-".into())
            };
            out.push_str(&format!(
                "{name:<16} {rate:>10.0} {x_pull:>8} {x_producer:>8} {x_debezium:>8} {:>9.2} {:>9} {:>9.1} {}\n",
                summary.cpu_seconds_per_million_events,
                summary
                    .broker_cpu_seconds_per_million_events
                    .map_or("-".to_string(), |cpu| format!("{cpu:.2}")),
                summary.peak_rss_mib,
                latency_cells(latency)
            ));
        };
        row("raw binlog pull", &self.raw_pull, None, false);
        row("bare producer", &self.bare_producer, None, false);
        let relay_name = if s.delivery == crate::options::Delivery::ExactlyOnce {
            "relay exactly1"
        } else {
            "outbox-relay"
        };
        row(relay_name, &self.relay, self.relay_latency.as_ref(), true);
        if let Some(summary) = &self.relay_exactly_once {
            row(
                "relay exactly1",
                summary,
                self.relay_exactly_once_latency.as_ref(),
                true,
            );
        }
        if let Some(summary) = &self.relay_poll {
            row(
                "relay polling",
                summary,
                self.relay_poll_latency.as_ref(),
                true,
            );
        }
        if let Some(summary) = &self.debezium {
            row("Debezium", summary, self.debezium_latency.as_ref(), false);
        }
        let r = &self.ratios;
        out.push_str(&format!(
            "\noutbox-relay / min(pull, producer) = {:.2} (median of per-round ratios; target >= 0.8)\n",
            r.relay_to_limit
        ));
        if let Some(dbz) = r.relay_to_debezium {
            out.push_str(&format!(
                "outbox-relay / Debezium = {dbz:.2} (target >= 5); Debezium CPU per event / outbox-relay's = {:.2}\n",
                r.debezium_cpu_to_relay_cpu.unwrap_or(f64::NAN)
            ));
        }
        if let (Some(rate), Some(cpu)) = (
            r.exactly_once_to_at_least_once,
            r.exactly_once_cpu_to_at_least_once_cpu,
        ) {
            out.push_str(&format!(
                "exactly-once / at-least-once = {rate:.2} events/s, {cpu:.2} CPU per event (median of per-round ratios)\n"
            ));
        }
        if let Some((queries, cpu)) = self.poll_database {
            out.push_str(&format!(
                "relay polling: the database ran {queries:.0} queries/s, {cpu:.2} server CPU s per million events (median of rounds)\n"
            ));
        }
        for (name, latency) in [
            (relay_name, &self.relay_latency),
            ("relay exactly1", &self.relay_exactly_once_latency),
            ("relay polling", &self.relay_poll_latency),
            ("Debezium", &self.debezium_latency),
        ] {
            if let Some(l) = latency {
                out.push_str(&format!(
                    "{name} latency: {} samples at {:.0} events/s (target {}), max {:.1} ms\n",
                    l.samples, l.achieved_rate, s.latency_rate, l.max_ms
                ));
            }
        }
        out.push_str(
            "\nper round (events/s): pull / producer / relay / Debezium / relay exactly-once / relay polling\n",
        );
        for (index, round) in self.rounds.iter().enumerate() {
            out.push_str(&format!(
                "  round {}: {:.0} / {:.0} / {:.0} / {} / {} / {}\n",
                index + 1,
                round.raw_pull.events_per_second,
                round.bare_producer.events_per_second,
                round.relay.events_per_second,
                round
                    .debezium
                    .as_ref()
                    .map_or("-".to_string(), |d| format!("{:.0}", d.events_per_second)),
                round
                    .relay_exactly_once
                    .as_ref()
                    .map_or("-".to_string(), |e| format!("{:.0}", e.events_per_second)),
                round
                    .relay_poll
                    .as_ref()
                    .map_or("-".to_string(), |p| format!("{:.0}", p.events_per_second))
            ));
        }
        out
    }
}
