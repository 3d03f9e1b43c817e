//! outbox-relay: the transactional-outbox connector. Tails a MySQL/MariaDB binlog, turns
//! committed inserts into outbox tables into Kafka records, and stores its binlog position
//! only after Kafka acknowledged everything before it (at-least-once, stable event ids).
//!
//! The crate is a library plus a thin `main.rs`, so tests and the `demo` command can run the
//! relay in-process:
//! * [`config`]: the TOML configuration and its validation; [`redact`] masks its secrets in
//!   every message an operator sees;
//! * [`pipeline`]: [`run_relay`], the source -> router -> sink -> tracker -> store tasks;
//! * [`sink`]: the Kafka producer side (idempotent, retrying, topic creation; the library
//!   is `outbox-kafka`'s, this module adds how the relay hosts it);
//! * [`dead_letter`]: dead letters (what a permanent per-event failure becomes) and replay
//!   (`outbox-kafka`'s, re-exported);
//! * [`commands`]: the CLI subcommands (`run`, `check`, `checkpoint`, `inspect`, `demo`);
//! * [`from_debezium`]: `config from-debezium`, a Debezium connector config as relay TOML;
//! * [`import_debezium`]: `checkpoint import-debezium`, a Debezium offset as checkpoint;
//! * [`recover`]: `recover`, publishing the events of archived binlog files; [`progress`]:
//!   their (and `inspect`'s) progress line on a terminal;
//! * [`metrics`] and [`internal_events`]: Prometheus counters and the log lines that go
//!   with them; [`http`] serves them with [`health`]'s readiness checks
//!   ([`broker_probe`] feeds the broker one);
//! * [`shutdown`]: the shutdown signal every task listens to;
//! * [`heartbeat`]: `[heartbeat]`, Debezium-format heartbeat records;
//! * [`ha`] and [`ha_config`]: `[ha]`, standby failover (the `run` command as a standby
//!   loop on a Kafka lease, leader epochs stamped into checkpoints);
//! * [`kafka_context`]: librdkafka's logs through `tracing`, repeats rate-limited;
//! * [`crash_points`]: `OUTBOX_RELAY_CRASH_AT`, deliberate crashes for failure tests;
//! * [`replay`]: the records a restart after a crash sends again, counted;
//! * `xa_hold`: the records of two-phase XA transactions, held until their outcome.
//!
//! # Resumption
//! See [`pipeline`]: a stored checkpoint always wins over `source.start`; transient source
//! errors resume from the reader's own resume point.

#![warn(missing_docs)]

mod allocator;
pub mod audit_command;
pub mod broker_probe;
mod budget;
pub mod cli;
pub mod commands;
#[cfg(test)]
mod commands_tests;
pub mod config;
pub mod connect_offsets_file;
pub use outbox_kafka::crash_points;
/// Dead letters: what a per-event permanent failure becomes, and `dlq list` / `dlq replay`
/// (defined in `outbox-kafka`, with the sink that writes them).
pub mod dead_letter {
    pub use outbox_kafka::dead_letter::*;
}
pub mod demo;
pub mod from_debezium;
pub mod ha;
pub mod ha_config;
pub mod health;
pub mod heartbeat;
pub mod http;
pub mod import_debezium;
pub mod internal_events;
pub use outbox_kafka::kafka_context;
pub mod metrics;
pub mod pipeline;
pub mod poll_commands;
pub mod poll_config;
pub mod progress;
pub mod purge_horizon;
pub mod recover;
pub mod redact;
pub mod replay;
pub mod security;
pub mod shutdown;
pub mod sink;
mod startup_retry;
pub mod status;
mod stores;
pub mod table_fill;
mod tasks;
mod xa_hold;

pub use outbox_kafka::Backoff;
/// Bounded exponential backoff with jitter (defined in `outbox-kafka`, where the sink uses
/// it).
mod backoff {
    pub use outbox_kafka::Backoff;
}
pub use allocator::{RelayAllocator, BIG_ALLOCATION_BYTES};
pub use config::{ConfigError, DeadLetterConfig, RelayConfig, StartSetting};
pub use dead_letter::{
    read_dead_letters, replay_dead_letters, DeadLetter, RecordOrigin, ReplaySelection,
};
pub use metrics::Metrics;
pub use pipeline::{run_relay, RelayError, RelayHandles, RelaySummary};
pub use shutdown::{Shutdown, ShutdownController};
pub use sink::{
    run_kafka_sink, KafkaSinkSettings, OutboundRecord, SinkError, SinkItem, SinkSummary,
};
pub use stores::open_checkpoint_store;
pub use tasks::spawn_named;
