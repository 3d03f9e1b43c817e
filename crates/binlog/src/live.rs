//! The live source: connect to a MySQL or MariaDB server as a replica, stream its binlog and
//! turn it into [`StreamItem`]s, one at a time.
//!
//! [`BinlogReader::connect`] opens a normal connection, runs the startup check
//! ([`crate::check_server`]; Error-severity problems make it fail with
//! [`BinlogError::ServerMisconfigured`]), resolves the start, then opens the replication
//! connection:
//! * `SET @master_heartbeat_period` (and `@source_heartbeat_period`) so an idle server still
//!   sends heartbeats;
//! * MariaDB: `SET @mariadb_slave_capability=4` so GTID events arrive as such (without it the
//!   server rewrites them into `BEGIN` queries and GTIDs are lost); starting by GTID uses
//!   `SET @slave_connect_state` with strict mode and a normal `COM_BINLOG_DUMP` (MariaDB
//!   answers 1047 to MySQL's GTID dump command);
//! * MySQL: starting by GTID uses `COM_BINLOG_DUMP_GTID` with the set;
//! * checksums: `SET @master_binlog_checksum='ALL'` declares the connection
//!   checksum-aware, so events arrive exactly as the server logged them, CRC32 included, and
//!   the decoder verifies them.
//!
//! The replication connection is our own small protocol client
//! (`live/replication_connection.rs`: handshake, authentication, the dump commands, packet
//! framing); every other connection (startup check, position lookups, column names,
//! error explanations) is a `mysql_async` one. Connections accept packets up to 1 GiB, so
//! single rows of tens of MiB pass.
//!
//! # Streaming and memory
//! Events are read in batches (`live/read_ahead.rs`): a batch is every complete event one
//! socket read (up to 128 KiB) brought, decoded where it lies in the read buffer; only an
//! unfinished packet at its end is copied (into the next buffer). Two modes, chosen with
//! [`BinlogReader::connect_with_read_ahead`]:
//! * **inline** (`read_ahead_events` 0, the default of [`BinlogReader::connect`], see
//!   [`DEFAULT_READ_AHEAD_EVENTS`]): `next_item` reads the next batch itself when the last
//!   one is decoded. One task, no hand-over between threads; memory is one batch.
//! * **read-ahead task** (`read_ahead_events` > 0): a spawned task reads and frames batches
//!   into a bounded channel while `next_item` decodes, so reading and decoding can use two
//!   cores; it keeps about `read_ahead_events` events ahead and stops reading when the
//!   caller stops calling `next_item`. It costs more CPU in total (hand-over, wake-ups).
//!
//! One event is decoded at a time; a transaction of any size is never buffered as a whole.
//! The idle timer runs only while `next_item` waits with nothing buffered (at most one timer
//! per socket read, none per event) and measures silence: it restarts with every read, so a
//! large event that takes longer than `idle_timeout` to arrive still gets through.
//!
//! # Large events
//! Decoding an event copies its rows' values out of the raw bytes, so while a decoded row
//! waits for room downstream both copies are live. A caller that bounds the memory of rows
//! in flight (the relay's `pipeline.max_in_flight_bytes`) calls
//! [`BinlogReader::next_item_or_large_event`] instead of `next_item`: it stops before
//! decoding an event at or above a size limit that may yield rows (a rows event of a
//! watched table, or a compressed transaction), returning its raw size, so the caller can
//! reserve that much first. Until the next call the reader holds only that event's raw
//! bytes (inline reading reads nothing more; a read-ahead task keeps reading up to its
//! channel's capacity). Which events may yield rows is read from the event header and
//! table id alone (`Decoder::may_yield_rows`); nothing is skipped or reordered.
//!
//! # Cancellation
//! [`BinlogReader::next_item`] is cancel-safe: it may be dropped at any `.await` (e.g. in a
//! `tokio::select!` with a shutdown signal). Partly read packets stay in the connection's
//! buffer, an event waiting for a column-name lookup is kept and pushed again, and the
//! side connection is dropped (and reopened later) if the lookup was interrupted. No item is
//! lost or repeated.
//!
//! # Errors
//! After an error the reader is finished; further calls fail again. Transient errors
//! ([`BinlogError::is_transient`]: connection lost or refused, server shutdown or restart,
//! idle and connect timeouts) mean: connect a new reader at [`BinlogReader::resume_point`].
//! Definite errors (purged position naming the oldest file still available, duplicate
//! `server_id`, access denied, wrong settings, undecodable data) need an operator. Every
//! error names the server address and the position.
//!
//! # Resumption
//! [`BinlogReader::resume_point`] is the last transaction boundary handed out (the
//! position of the last [`Commit`] or [`crate::Heartbeat`] returned by `next_item`, or a later
//! boundary the decoder reached when every decoded item was handed out, e.g. after a
//! rotation). A reader started there yields exactly the transactions after it. When the
//! stream was started by GTID, the resume point is a GTID set: the start set plus the GTID of
//! every commit handed out.
//!
//! # Duplicate `server_id`
//! A second replica connecting with a `server_id` that is already streaming takes over: the
//! server ends the *older* dump. MySQL sends the older connection error 1236 ("A slave with
//! the same server_uuid/server_id as this slave has connected"); MariaDB 10.6+ sends error
//! 4052 ("A slave with the same server_uuid/server_id is already connected"; asserted
//! against MariaDB 10.11 in `tests/live_errors.rs`). Both become the definite
//! [`BinlogError::DuplicateServerId`] on the older reader, while the newer one streams
//! normally: reconnecting would only kick the other reader off in turn.

mod connection;
mod ddl_scan;
#[cfg(test)]
mod fake_server;
#[cfg(test)]
mod fixture_stream_tests;
#[cfg(test)]
mod large_event_tests;
mod raw_pull;
mod read_ahead;
mod replication_connection;
mod start;
pub use connection::describe_client_error;
pub use start::{
    gtid_set_not_on_server, locate_position, locate_position_on_server, PositionOnServer,
};

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::checks::{inspect_server, ServerIdentity};
use crate::decoder::{Decoder, EventHeader, LookedUpColumn, PushOutcome};
use crate::internal_events::{
    ColumnNamesLookedUp, InternalEvent, ItemsHandedOut, ReaderConnected, StreamError,
};
use crate::watched_tables::WatchedTableColumns;
use crate::{BinlogError, BinlogPosition, Commit, Flavor, GtidSet, StreamItem, TableFilter};
use crate::{Heartbeat, TableName, TlsOptions};
use read_ahead::{IdleTimeoutElapsed, ReadAhead, ReadAheadMessage};
use replication_connection::{DumpStart, EventBatch, ReplicationConnection};

pub(crate) use connection::{session_tls, ServerEndpoint};
#[doc(hidden)]
pub use raw_pull::pull_raw_events;

/// The read-ahead [`BinlogReader::connect`] uses: 0, i.e. events are read inline, in batches,
/// by the task calling `next_item` (module docs, `# Streaming and memory`). Measured with
/// `benches/reader.rs` on a 2-core machine (crate README), inline was as fast as or faster
/// than a 4096-event read-ahead task in every run and used less client CPU (no hand-over
/// between threads); a read-ahead task ([`BinlogReader::connect_with_read_ahead`]) can pay
/// off on hosts with idle cores and a slow consumer.
pub const DEFAULT_READ_AHEAD_EVENTS: usize = 0;

/// How to connect and where to start. See the module docs for what each field does on the
/// wire.
#[derive(Clone)]
pub struct ReaderConfig {
    /// `mysql://user:pass@host:port` of the server to replicate from.
    pub url: String,
    /// Our replica `server_id`. It must differ from the server's own and from every other
    /// replica's, or the server kicks one of the two off.
    pub server_id: u32,
    /// Where the stream starts.
    pub start: StartPosition,
    /// Which tables' rows are decoded and yielded.
    pub filter: TableFilter,
    /// How often an idle server sends a heartbeat (`@master_heartbeat_period`). Must be
    /// shorter than `idle_timeout`.
    pub heartbeat_interval: Duration,
    /// With not a byte from the server (no event, no heartbeat) for this long, the
    /// connection is presumed dead and `next_item` fails with the transient
    /// [`BinlogError::IdleTimeout`]. The timer restarts with every socket read, so a large
    /// row event arriving slowly over a slow link is not silence.
    pub idle_timeout: Duration,
    /// Limit for connecting, the startup queries, and the server's first answer to the dump.
    pub connect_timeout: Duration,
    /// TLS mode, certificates and credential files for every connection to the server.
    pub tls: TlsOptions,
}

impl ReaderConfig {
    /// A config with the usual timings: heartbeat every 5 s, idle timeout 30 s, connect
    /// timeout 10 s.
    pub fn new(
        url: impl Into<String>,
        server_id: u32,
        start: StartPosition,
        filter: TableFilter,
    ) -> Self {
        ReaderConfig {
            url: url.into(),
            server_id,
            start,
            filter,
            heartbeat_interval: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            tls: TlsOptions::default(),
        }
    }
}

impl fmt::Debug for ReaderConfig {
    /// Like a derived `Debug`, but without the URL (it may hold a password).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderConfig")
            .field("url", &"<hidden>")
            .field("server_id", &self.server_id)
            .field("start", &self.start)
            .field("filter", &self.filter)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("idle_timeout", &self.idle_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Where a stream starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPosition {
    /// The oldest binlog file the server still has (first line of `SHOW BINARY LOGS`).
    Earliest,
    /// The current end of the binlog (`SHOW MASTER STATUS` / `SHOW BINARY LOG STATUS`):
    /// only transactions committed after connecting.
    Latest,
    /// Exactly here: a transaction boundary (a [`Commit::position`] or heartbeat position).
    Position(BinlogPosition),
    /// Right after the transactions in this set (the set's flavor must match the server's).
    Gtid(GtidSet),
}

impl fmt::Display for StartPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartPosition::Earliest => f.write_str("earliest"),
            StartPosition::Latest => f.write_str("latest"),
            StartPosition::Position(position) => write!(f, "{position}"),
            StartPosition::Gtid(set) => write!(f, "GTID set `{set}`"),
        }
    }
}

/// What [`BinlogReader::next_item_or_large_event`] found next.
#[derive(Debug)]
pub enum NextItem {
    /// The next item, as [`BinlogReader::next_item`] returns it.
    Item(StreamItem),
    /// The next event to decode may yield rows and is at least the limit asked for. Nothing
    /// of it is decoded yet: the reader holds its raw bytes and the next call decodes it.
    LargeRowsEvent {
        /// The event's size as the server sent it (common header, body, checksum): about
        /// what its rows take once decoded (less for a compressed transaction).
        bytes: usize,
    },
}

/// A live replication stream from one server. See the module docs.
pub struct BinlogReader {
    /// How to reach the server (also for side connections) and its address for errors.
    endpoint: ServerEndpoint,
    /// Our replica server_id, for errors about duplicates.
    our_server_id: u32,
    /// Limit for opening side connections.
    connect_timeout: Duration,
    /// Limit for one read of the stream (no event and no heartbeat).
    idle_timeout: Duration,
    /// Who the server is (from the startup check).
    identity: ServerIdentity,
    /// The task reading the replication connection ahead of the decoder (module docs).
    read_ahead: ReadAhead,
    /// The batch of events received last. Events are decoded where they lie in it; once the
    /// whole batch is decoded its buffers go back to be refilled.
    read_ahead_batch: EventBatch,
    /// Index in `read_ahead_batch` of the next event to push to the decoder; it moves only
    /// once the decoder consumed the event, so an event waiting for a column-name lookup is
    /// pushed again by the next call.
    next_event_index: usize,
    /// Items handed out since the metrics were last updated (flushed once per batch, so
    /// counting costs no atomic operation per item).
    items_handed_out: ItemsHandedOut,
    /// Turns events into items (rows of watched tables, commits, heartbeats).
    decoder: Decoder,
    /// Items decoded but not handed out yet (at most the items of one event).
    decoded_items: VecDeque<StreamItem>,
    /// True while the event at `next_event_index` waits for a column-name lookup (the
    /// decoder is inside it, so its boundary is not a resume point yet).
    event_waits_for_column_names: bool,
    /// True once the event at `next_event_index` was announced as a large rows event
    /// ([`NextItem::LargeRowsEvent`]): the next call decodes it instead of announcing it
    /// again. Cleared whenever `next_event_index` moves to another event.
    large_event_announced: bool,
    /// Normal connection for information_schema lookups and error explanations; kept
    /// open, reopened when lost.
    side_connection: Option<Conn>,
    /// The last transaction boundary handed out (initially the resolved start).
    handed_out_boundary: BinlogPosition,
    /// When streaming by GTID: the start set plus every commit GTID handed out.
    handed_out_gtids: Option<GtidSet>,
    /// The server's GTID history at the start (see [`BinlogReader::start_gtid_set`]).
    server_gtids_at_start: Option<GtidSet>,
    /// Set once an error was returned: (was it transient, its text).
    failure: Option<(bool, String)>,
}

impl fmt::Debug for BinlogReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BinlogReader")
            .field("server", &self.identity)
            .field("our_server_id", &self.our_server_id)
            .field("resume_point", &self.resume_point())
            .field("failed", &self.failure.is_some())
            .finish_non_exhaustive()
    }
}

impl BinlogReader {
    /// Checks the server, resolves the start, opens the replication stream and waits for the
    /// server's first answer (so a purged start or a refused dump fails here, not later).
    /// Reads events inline ([`DEFAULT_READ_AHEAD_EVENTS`]).
    pub async fn connect(config: ReaderConfig) -> Result<BinlogReader, BinlogError> {
        Self::connect_with_read_ahead(config, DEFAULT_READ_AHEAD_EVENTS).await
    }

    /// Like [`BinlogReader::connect`], choosing how events are read (see `# Streaming and
    /// memory` in the module docs): `0` reads them inline on the caller's task, in batches of
    /// what the socket already holds; above 0 a task spawned on the current tokio runtime
    /// keeps about `read_ahead_events` events read ahead of the decoder.
    pub async fn connect_with_read_ahead(
        config: ReaderConfig,
        read_ahead_events: usize,
    ) -> Result<BinlogReader, BinlogError> {
        let endpoint = ServerEndpoint::new(&config.url, &config.tls)?;
        let requested = config.start.to_string();
        if config.heartbeat_interval.is_zero() || config.heartbeat_interval >= config.idle_timeout {
            return Err(BinlogError::InvalidReaderConfig {
                server: endpoint.address.clone(),
                field: "heartbeat_interval".into(),
                message: format!(
                    "must be above zero and shorter than idle_timeout ({:?}), is {:?}",
                    config.idle_timeout, config.heartbeat_interval
                ),
            });
        }
        let connect_timeout = config.connect_timeout;
        let mut side = endpoint.connect(connect_timeout, &requested).await?;
        let address = endpoint.address.clone();
        let within_connect_timeout = |waited| BinlogError::ConnectTimeout {
            server: address.clone(),
            position: requested.clone(),
            waited,
        };
        let report = tokio::time::timeout(connect_timeout, inspect_server(&mut side, &endpoint))
            .await
            .map_err(|_| within_connect_timeout(connect_timeout))??;
        for warning in report.warnings() {
            tracing::warn!(server = %endpoint.address, "startup check: {warning}");
        }
        if !report.is_usable() {
            let problems: Vec<String> = report.errors().map(ToString::to_string).collect();
            return Err(BinlogError::ServerMisconfigured {
                server: endpoint.address.clone(),
                position: requested,
                problems: problems.join("; "),
            });
        }
        let identity = report.identity;
        let flavor = identity.flavor;
        if config.server_id == 0 || config.server_id == identity.server_id {
            return Err(BinlogError::InvalidReaderConfig {
                server: endpoint.address.clone(),
                field: "server_id".into(),
                message: format!(
                    "{} cannot be used: a replica server_id must be above 0 and differ from \
                     the server's own ({})",
                    config.server_id, identity.server_id
                ),
            });
        }

        let mut mysql_executed_at_end = None;
        let resolved = tokio::time::timeout(
            connect_timeout,
            resolve_start(
                &mut side,
                &endpoint,
                &identity,
                &config.start,
                &mut mysql_executed_at_end,
            ),
        )
        .await
        .map_err(|_| within_connect_timeout(connect_timeout))??;
        let server_gtids_at_start = match mysql_executed_at_end {
            Some(executed) => Some(Some(executed)),
            None => server_gtids_at(&mut side, &endpoint, flavor, &resolved, connect_timeout).await,
        };
        ReaderConnected {
            server: &identity,
            start: &resolved.to_string(),
        }
        .emit();

        let (connection, start_file) = tokio::time::timeout(
            connect_timeout,
            open_stream(&endpoint, &config, flavor, &resolved, &requested),
        )
        .await
        .map_err(|_| within_connect_timeout(connect_timeout))??;

        let mut reader = BinlogReader {
            endpoint,
            our_server_id: config.server_id,
            connect_timeout,
            idle_timeout: config.idle_timeout,
            identity,
            read_ahead: ReadAhead::new(connection, read_ahead_events, config.idle_timeout),
            read_ahead_batch: EventBatch::default(),
            next_event_index: 0,
            items_handed_out: ItemsHandedOut::default(),
            decoder: match &resolved {
                StartPosition::Position(position) => {
                    Decoder::new(config.filter.clone(), start_file.clone())
                        .with_start(position.position, None)
                }
                _ => Decoder::new(config.filter.clone(), start_file.clone()),
            },
            decoded_items: VecDeque::new(),
            event_waits_for_column_names: false,
            large_event_announced: false,
            side_connection: server_gtids_at_start.as_ref().map(|_| side),
            server_gtids_at_start: server_gtids_at_start.flatten(),
            handed_out_boundary: match &resolved {
                StartPosition::Position(position) => position.clone(),
                _ => BinlogPosition::new(start_file, 0),
            },
            handed_out_gtids: match &resolved {
                StartPosition::Gtid(set) => Some(set.clone()),
                _ => None,
            },
            failure: None,
        };
        // The server answers the dump with its first event or an error (purged position,
        // duplicate server_id, missing grant): surface those from `connect`.
        match reader.read_ahead.next_message(connect_timeout).await {
            Ok(Some(ReadAheadMessage::Events(events))) => {
                reader.read_ahead_batch = events;
            }
            Ok(Some(ReadAheadMessage::Failed(error))) => return Err(reader.explain(error).await),
            Ok(Some(ReadAheadMessage::Ended) | None) => {
                return Err(BinlogError::StreamLost {
                    server: reader.endpoint.address.clone(),
                    position: requested,
                    message: "the server ended the stream before sending any event".into(),
                })
            }
            Err(_) => return Err(within_connect_timeout(connect_timeout)),
        };
        Ok(reader)
    }

    /// Next item in binlog order: rows of watched tables, then their transaction's
    /// [`Commit`]; [`crate::Heartbeat`]s between transactions. Cancel-safe (module docs).
    ///
    /// Fails with the transient [`BinlogError::IdleTimeout`] when neither an event nor a
    /// heartbeat arrived for `idle_timeout`, and with [`BinlogError::StreamLost`] when the
    /// connection breaks or the server shuts down, and with the definite
    /// [`BinlogError::DuplicateServerId`] when another replica with our `server_id` took
    /// over (module docs).
    pub async fn next_item(&mut self) -> Result<StreamItem, BinlogError> {
        loop {
            // With no limit no event is announced; the loop only satisfies the type.
            if let NextItem::Item(item) = self.next_item_or_large_event(usize::MAX).await? {
                return Ok(item);
            }
        }
    }

    /// Like [`BinlogReader::next_item`], but stops before decoding a large event that may
    /// yield rows (see `# Large events` in the module docs): when the next event to decode
    /// is `limit` bytes or more and is a rows event of a watched table (or a compressed
    /// transaction), returns [`NextItem::LargeRowsEvent`] with its raw size instead,
    /// having decoded nothing of it. The reader then holds that event's raw bytes only,
    /// and reads nothing further until called again; the next call decodes it, whatever
    /// `limit` (an event is announced once). So a caller that bounds the memory of rows
    /// in flight can reserve the event's size first and never holds a decoded copy of a
    /// row it has no room for. Cancel-safe, fails like `next_item`.
    pub async fn next_item_or_large_event(
        &mut self,
        limit: usize,
    ) -> Result<NextItem, BinlogError> {
        if let Some((transient, message)) = &self.failure {
            let position = self.position_text();
            let server = self.endpoint.address.clone();
            let message = format!("the reader already failed: {message}");
            return Err(if *transient {
                BinlogError::StreamLost {
                    server,
                    position,
                    message,
                }
            } else {
                BinlogError::Protocol {
                    server,
                    position,
                    message,
                }
            });
        }
        // The loop lives here rather than in an inner `async fn` whose result is matched:
        // an item then leaves through one future instead of two (each level copies the
        // item; callgrind, crate README).
        loop {
            if let Some(item) = self.decoded_items.pop_front() {
                self.note_handed_out(&item);
                return Ok(NextItem::Item(item));
            }
            let Some(event) = self.read_ahead_batch.get(self.next_event_index) else {
                if let Err(error) = self.next_batch().await {
                    return Err(self.fail(error));
                }
                continue;
            };
            if event.len() >= limit
                && !self.large_event_announced
                && self.decoder.may_yield_rows(event)
            {
                self.large_event_announced = true;
                return Ok(NextItem::LargeRowsEvent { bytes: event.len() });
            }
            match self.decoder.push(event, &mut self.decoded_items) {
                Ok(PushOutcome::Consumed) => {
                    self.next_event_index += 1;
                    self.event_waits_for_column_names = false;
                    self.large_event_announced = false;
                }
                Ok(PushOutcome::NeedColumnNames(table)) => {
                    // The index stays: if this future is dropped during the lookup, the
                    // next call pushes the same event again.
                    self.event_waits_for_column_names = true;
                    // Where the event ends (the next event starts): the forward scan for
                    // DDL on the table begins there.
                    let (event_start, event_end) =
                        EventHeader::read(event).map_or((0, 0), |header| {
                            let end = u64::from(header.log_pos());
                            (end.saturating_sub(u64::from(header.event_size())), end)
                        });
                    let event_end = BinlogPosition::new(self.decoder.current_file(), event_end);
                    match self.column_names(&table, &event_end).await {
                        Ok(columns) => self.decoder.set_looked_up_columns(&table, columns),
                        Err(ColumnLookupFailure::Error(error)) => return Err(self.fail(error)),
                        Err(ColumnLookupFailure::DdlAhead(ddl)) => {
                            let error = self.ddl_ahead_error(table, event_start, ddl);
                            return Err(self.fail(error));
                        }
                    }
                }
                Err(source) => {
                    let error = BinlogError::FromServer {
                        server: self.endpoint.address.clone(),
                        source: Box::new(source),
                    };
                    return Err(self.fail(error));
                }
            }
        }
    }

    /// Records that the reader failed with `error` (later calls fail again), flushes the
    /// item counters and reports the error; returns it.
    fn fail(&mut self, error: BinlogError) -> BinlogError {
        let transient = error.is_transient();
        self.failure = Some((transient, error.to_string()));
        self.items_handed_out.flush();
        StreamError {
            error: &error,
            transient,
        }
        .emit();
        error
    }

    /// Hands the decoded batch back to the read-ahead task and takes the next one, waiting
    /// for it when none is ready; fails after `idle_timeout` of silence (no event, no
    /// heartbeat) while nothing is buffered. Cancel-safe: the used batch is handed back
    /// before the first `.await`, the only `.await`s are the channel's `recv` (which loses
    /// nothing when dropped) and the error explanation (after `failure` is set).
    async fn next_batch(&mut self) -> Result<(), BinlogError> {
        let decoded_batch = std::mem::take(&mut self.read_ahead_batch);
        self.next_event_index = 0;
        self.large_event_announced = false;
        self.read_ahead.recycle(decoded_batch);
        self.items_handed_out.flush();
        let message = match self.read_ahead.next_message(self.idle_timeout).await {
            Ok(message) => message,
            Err(IdleTimeoutElapsed) => {
                return Err(BinlogError::IdleTimeout {
                    server: self.endpoint.address.clone(),
                    position: self.position_text(),
                    waited: self.idle_timeout,
                })
            }
        };
        match message {
            Some(ReadAheadMessage::Events(events)) => {
                self.read_ahead_batch = events;
                Ok(())
            }
            Some(ReadAheadMessage::Failed(error)) => {
                // Recorded before the explaining query, so a cancelled `next_item`
                // cannot lose the error and wait on a finished stream.
                self.failure = Some((
                    connection::is_transient_client_error(&error),
                    error.to_string(),
                ));
                tracing::debug!(
                    server = %self.endpoint.address,
                    file = %self.decoder.current_file(),
                    %error,
                    "replication stream failed"
                );
                Err(self.explain(error).await)
            }
            Some(ReadAheadMessage::Ended) => Err(BinlogError::StreamLost {
                server: self.endpoint.address.clone(),
                position: self.position_text(),
                message: format!(
                    "the server ended the replication stream (while in {})",
                    self.decoder.current_file()
                ),
            }),
            None => Err(BinlogError::StreamLost {
                server: self.endpoint.address.clone(),
                position: self.position_text(),
                message: format!(
                    "the read-ahead task stopped without a result (while in {})",
                    self.decoder.current_file()
                ),
            }),
        }
    }

    /// Columns of `table` in `ORDINAL_POSITION` order, from `information_schema` on the
    /// side connection (for servers that log `binlog_row_metadata=MINIMAL` or less), once a
    /// forward scan from `event_end` found no DDL on the table after the event
    /// (`live/ddl_scan.rs`). A side connection that went stale while idle (server
    /// `wait_timeout`, killed) is replaced once.
    async fn column_names(
        &mut self,
        table: &TableName,
        event_end: &BinlogPosition,
    ) -> Result<Vec<LookedUpColumn>, ColumnLookupFailure> {
        let position = self.position_text();
        match self.side_connection.take() {
            Some(reused) => match self
                .lookup_column_names(reused, table, event_end, &position)
                .await
            {
                Err(ColumnLookupFailure::Error(error)) if error.is_transient() => {
                    tracing::debug!(
                        server = %self.endpoint.address,
                        %error,
                        "side connection failed; retrying the column lookup on a new one"
                    );
                    let fresh = self
                        .endpoint
                        .connect(self.connect_timeout, &position)
                        .await?;
                    self.lookup_column_names(fresh, table, event_end, &position)
                        .await
                }
                result => result,
            },
            None => {
                let fresh = self
                    .endpoint
                    .connect(self.connect_timeout, &position)
                    .await?;
                self.lookup_column_names(fresh, table, event_end, &position)
                    .await
            }
        }
    }

    /// The definite error for an event whose looked-up names may not be its own: a DDL on
    /// the table lies between it and the lookup.
    fn ddl_ahead_error(
        &self,
        table: TableName,
        event_start: u64,
        ddl: ddl_scan::DdlAhead,
    ) -> BinlogError {
        BinlogError::FromServer {
            server: self.endpoint.address.clone(),
            source: Box::new(BinlogError::RowImageMismatch {
                table,
                position: BinlogPosition::new(self.decoder.current_file(), event_start),
                reason: format!(
                    "the event's TABLE_MAP carries no column names (binlog_row_metadata=MINIMAL) \
                     and the table's current names cannot be its own: a DDL on the table at {} \
                     (`{}`) lies between the event and now. Set binlog_row_metadata=FULL on \
                     the server so events carry their own column names; the events written \
                     before that must be handled by hand (e.g. start after them)",
                    ddl.position, ddl.statement
                ),
            }),
        }
    }

    /// One `information_schema.COLUMNS` query on `conn`; keeps `conn` as the side connection
    /// when it succeeds.
    /// Then scans the binlog from `event_end` for DDL on the table (each query within
    /// `connect_timeout`).
    async fn lookup_column_names(
        &mut self,
        mut conn: Conn,
        table: &TableName,
        event_end: &BinlogPosition,
        position: &str,
    ) -> Result<Vec<LookedUpColumn>, ColumnLookupFailure> {
        let timeout = self.connect_timeout;
        let timed_out = || {
            ColumnLookupFailure::Error(BinlogError::ConnectTimeout {
                server: self.endpoint.address.clone(),
                position: position.to_owned(),
                waited: timeout,
            })
        };
        // First the names, then the scan up to the binlog's end as it is after the lookup
        // (the order matters: see `live/ddl_scan.rs`).
        let lookup = conn.exec::<(String, String), _, _>(
            "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (table.database.as_str(), table.table.as_str()),
        );
        let columns = match tokio::time::timeout(timeout, lookup).await {
            Ok(Ok(columns)) => columns,
            Ok(Err(error)) => return Err(self.endpoint.connect_error(error, position).into()),
            Err(_) => return Err(timed_out()),
        };
        let files = match tokio::time::timeout(timeout, start::binary_log_files(&mut conn)).await {
            Ok(Ok(files)) => files,
            Ok(Err(error)) => return Err(self.endpoint.connect_error(error, position).into()),
            Err(_) => return Err(timed_out()),
        };
        let ddl_ahead =
            match ddl_scan::find_ddl_ahead(&mut conn, &files, event_end, table, timeout).await {
                Ok(found) => found,
                Err(ddl_scan::ScanFailure::Query(error)) => {
                    return Err(self.endpoint.connect_error(error, position).into())
                }
                Err(ddl_scan::ScanFailure::PageTimedOut) => return Err(timed_out()),
            };
        self.side_connection = Some(conn);
        ColumnNamesLookedUp {
            table,
            columns: columns.len(),
        }
        .emit();
        if let Some(ddl) = ddl_ahead {
            return Err(ColumnLookupFailure::DdlAhead(ddl));
        }
        Ok(columns
            .into_iter()
            .map(|(name, data_type)| LookedUpColumn::new(name, data_type))
            .collect())
    }

    async fn explain(&mut self, error: mysql_async::Error) -> BinlogError {
        let start = self.resume_point();
        let position = start.to_string();
        start::explain_stream_error(
            &self.endpoint,
            &mut self.side_connection,
            self.connect_timeout,
            self.identity.flavor,
            self.our_server_id,
            error,
            &position,
            &start,
        )
        .await
    }

    fn note_handed_out(&mut self, item: &StreamItem) {
        match item {
            StreamItem::Row(_) => self.items_handed_out.rows += 1,
            StreamItem::Commit(Commit { position, gtid, .. }) => {
                self.items_handed_out.commits += 1;
                // Reuses the boundary's file-name buffer (no allocation per commit).
                self.handed_out_boundary.file.clone_from(&position.file);
                self.handed_out_boundary.position = position.position;
                if let (Some(set), Some(gtid)) = (self.handed_out_gtids.as_mut(), gtid) {
                    set.add(gtid);
                }
            }
            StreamItem::Heartbeat(Heartbeat { position }) => {
                self.items_handed_out.heartbeats += 1;
                if is_later_position(position, &self.handed_out_boundary) {
                    self.handed_out_boundary = position.clone();
                }
            }
        }
    }

    /// Checks that every watched table exists under the exact name the binlog gives it
    /// (`lower_case_table_names` honoured: the names as the server stores them); a missing
    /// one is the definite [`BinlogError::WatchedTableMissing`] naming the closest existing
    /// table. Run once at startup: a table that vanishes later (a drop, a rename without a
    /// swap) is only reported (`WatchedTableVanished`), so a rename swap never stops a
    /// running relay. Watching every table checks nothing. A table the relay's user may
    /// not read is refused naming the grant (the server hides it, so it looks missing).
    /// Returns each watched table's columns, for the caller's own checks.
    pub async fn verify_watched_tables(&mut self) -> Result<Vec<WatchedTableColumns>, BinlogError> {
        let watched: Vec<TableName> = self.decoder.filter().watched().cloned().collect();
        if watched.is_empty() {
            return Ok(Vec::new());
        }
        let position = self.position_text();
        let mut conn = match self.side_connection.take() {
            Some(conn) => conn,
            None => {
                self.endpoint
                    .connect(self.connect_timeout, &position)
                    .await?
            }
        };
        let lookup = crate::watched_tables::resolve_watched_tables(&mut conn, &watched);
        let resolved = match tokio::time::timeout(self.connect_timeout, lookup).await {
            Ok(Ok(found)) => found,
            Ok(Err(error)) => return Err(self.endpoint.connect_error(error, &position)),
            Err(_) => {
                return Err(BinlogError::ConnectTimeout {
                    server: self.endpoint.address.clone(),
                    position,
                    waited: self.connect_timeout,
                })
            }
        };
        self.side_connection = Some(conn);
        resolved.map_err(|unresolved| BinlogError::WatchedTableMissing {
            server: self.endpoint.address.clone(),
            tables: unresolved.tables,
            message: unresolved.message,
        })
    }

    /// The server family (from the version string).
    pub fn flavor(&self) -> Flavor {
        self.identity.flavor
    }

    /// Who the server is: address, version, server_id, server_uuid (MySQL), hostname.
    pub fn server(&self) -> &ServerIdentity {
        &self.identity
    }

    /// The GTID set of every transaction before the start, as the server knows it: the
    /// start set when started by GTID; when started by file+position (also `Earliest` and
    /// `Latest`), the server's history at that position (MariaDB `BINLOG_GTID_POS`, every
    /// domain; MySQL `Previous_gtids` plus the file's GTIDs before it). A checkpoint taken
    /// later is this set plus the GTIDs handed out, so a resume or failover by GTID set
    /// asks for exactly what follows. `None` when the server could not tell (no GTIDs,
    /// lookup failed or timed out: logged as a warning).
    pub fn start_gtid_set(&self) -> Option<&GtidSet> {
        self.server_gtids_at_start.as_ref()
    }

    /// Where a new connection must resume to continue exactly after the last item handed
    /// out (see `# Resumption` in the module docs).
    pub fn resume_point(&self) -> StartPosition {
        match &self.handed_out_gtids {
            Some(set) => StartPosition::Gtid(set.clone()),
            None => StartPosition::Position(self.resume_position()),
        }
    }

    fn resume_position(&self) -> BinlogPosition {
        let everything_handed_out = self.decoded_items.is_empty()
            && !self.event_waits_for_column_names
            && !self.decoder.in_transaction();
        if everything_handed_out {
            let (decoder_boundary, _gtid) = self.decoder.last_boundary();
            if is_later_position(&decoder_boundary, &self.handed_out_boundary) {
                return decoder_boundary;
            }
        }
        self.handed_out_boundary.clone()
    }

    fn position_text(&self) -> String {
        self.resume_point().to_string()
    }
}

/// Why column names for a MINIMAL-metadata TABLE_MAP could not be used.
#[derive(Debug)]
enum ColumnLookupFailure {
    /// The lookup or scan failed (transient or definite as the error says).
    Error(BinlogError),
    /// A DDL on the table lies after the event: the looked-up names may not be its own.
    DdlAhead(ddl_scan::DdlAhead),
}

impl From<BinlogError> for ColumnLookupFailure {
    fn from(error: BinlogError) -> Self {
        ColumnLookupFailure::Error(error)
    }
}

impl Drop for BinlogReader {
    /// Counts the items handed out since the last batch (the read-ahead task is aborted by
    /// its own drop).
    fn drop(&mut self) {
        self.items_handed_out.flush();
    }
}

/// True when `candidate` is a real position (file known, offset past the file header) that
/// is at or after `current` in binlog order. Files compare by their numeric extension
/// (`binlog.000009` < `binlog.000010` < `binlog.1000000`).
fn is_later_position(candidate: &BinlogPosition, current: &BinlogPosition) -> bool {
    if candidate.file.is_empty() || candidate.position < 4 {
        return false;
    }
    if current.file.is_empty() {
        return true;
    }
    let sequence = |file: &str| {
        file.rsplit_once('.')
            .and_then(|(_, extension)| extension.parse::<u64>().ok())
    };
    let file_order = match (sequence(&candidate.file), sequence(&current.file)) {
        (Some(a), Some(b)) => a.cmp(&b),
        _ => candidate.file.cmp(&current.file),
    };
    match file_order {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => candidate.position >= current.position,
    }
}

/// Turns Earliest/Latest into a concrete position; checks a GTID set's flavor. For `Latest`
/// on MySQL, sets `mysql_executed_at_end` to the server's executed GTID set at that end.
async fn resolve_start(
    side: &mut Conn,
    endpoint: &ServerEndpoint,
    identity: &ServerIdentity,
    start: &StartPosition,
    mysql_executed_at_end: &mut Option<GtidSet>,
) -> Result<StartPosition, BinlogError> {
    let requested = start.to_string();
    match start {
        StartPosition::Position(_) => Ok(start.clone()),
        StartPosition::Gtid(set) => {
            let set_flavor = match set {
                GtidSet::Empty => None,
                GtidSet::Mysql(_) => Some(Flavor::Mysql),
                GtidSet::Mariadb(_) => Some(Flavor::Mariadb),
            };
            match set_flavor {
                Some(flavor) if flavor != identity.flavor => {
                    Err(BinlogError::InvalidReaderConfig {
                        server: endpoint.address.clone(),
                        field: "start".into(),
                        message: format!(
                            "{requested} is a {flavor} GTID set but the server is {} ({})",
                            identity.flavor, identity.version
                        ),
                    })
                }
                _ => Ok(start.clone()),
            }
        }
        StartPosition::Earliest => {
            let files = start::binary_log_files(side)
                .await
                .map_err(|error| endpoint.connect_error(error, &requested))?;
            match files.into_iter().next() {
                Some(file) => Ok(StartPosition::Position(BinlogPosition::new(file, 4))),
                None => Err(BinlogError::ServerMisconfigured {
                    server: endpoint.address.clone(),
                    position: requested,
                    problems: "SHOW BINARY LOGS lists no file (is log_bin ON?)".into(),
                }),
            }
        }
        StartPosition::Latest => {
            let end = start::current_end(side, identity.flavor, &identity.version)
                .await
                .map_err(|error| endpoint.connect_error(error, &requested))?;
            match end {
                Some((position, executed)) => {
                    // MySQL's executed set of the same status row: the history at exactly
                    // this end, no scan needed.
                    *mysql_executed_at_end =
                        executed.and_then(|text| GtidSet::parse(Flavor::Mysql, &text).ok());
                    Ok(StartPosition::Position(position))
                }
                None => Err(BinlogError::ServerMisconfigured {
                    server: endpoint.address.clone(),
                    position: requested,
                    problems: "SHOW MASTER STATUS is empty (is log_bin ON?)".into(),
                }),
            }
        }
    }
}

/// The server's GTID history at the resolved start (see [`BinlogReader::start_gtid_set`]).
/// `Some(state)` when the side connection is still usable, `None` when the lookup timed
/// out (the connection may be half-open: the caller drops it). A failed or empty lookup is
/// a warning, never an error: the stream itself does not need the set.
async fn server_gtids_at(
    side: &mut Conn,
    endpoint: &ServerEndpoint,
    flavor: Flavor,
    resolved: &StartPosition,
    timeout: Duration,
) -> Option<Option<GtidSet>> {
    let position = match resolved {
        StartPosition::Gtid(set) => return Some(Some(set.clone())),
        StartPosition::Position(position) => position,
        StartPosition::Earliest | StartPosition::Latest => return Some(None),
    };
    match tokio::time::timeout(timeout, start::gtid_state_at(side, flavor, position)).await {
        Ok(Ok(state)) => {
            if state.is_none() {
                tracing::warn!(server = %endpoint.address, %position, "the server names no GTID state at the start position; checkpoints hold only the GTIDs read from here on");
            }
            Some(state)
        }
        Ok(Err(error)) => {
            tracing::warn!(server = %endpoint.address, %position, %error, "cannot look up the GTID state at the start position; checkpoints hold only the GTIDs read from here on");
            Some(None)
        }
        Err(_) => {
            tracing::warn!(server = %endpoint.address, %position, waited = ?timeout, "the GTID state lookup at the start position got no answer; checkpoints hold only the GTIDs read from here on");
            None
        }
    }
}

/// Opens the replication connection and sends the dump request. Returns the connection and
/// the start file (empty when starting by GTID: the server names it in its first event).
async fn open_stream(
    endpoint: &ServerEndpoint,
    config: &ReaderConfig,
    flavor: Flavor,
    resolved: &StartPosition,
    requested: &str,
) -> Result<(ReplicationConnection, String), BinlogError> {
    let mut conn = endpoint.open_replication(requested).await?;
    if let Some(session) = conn.tls_session() {
        tracing::debug!(server = %endpoint.address, tls = %session, "replication connection secured");
    }
    let heartbeat_nanos = u64::try_from(config.heartbeat_interval.as_nanos()).unwrap_or(u64::MAX);
    let mut setup = vec![
        // Events arrive with their CRC32 as logged (the decoder verifies it).
        "SET @master_binlog_checksum='ALL'".to_owned(),
        format!("SET @master_heartbeat_period={heartbeat_nanos}"),
        format!("SET @source_heartbeat_period={heartbeat_nanos}"),
    ];
    if flavor == Flavor::Mariadb {
        // MARIA_SLAVE_CAPABILITY_GTID: send GTID events, not BEGIN queries.
        setup.push("SET @mariadb_slave_capability=4".into());
        if let StartPosition::Gtid(set) = resolved {
            setup.extend(start::mariadb_gtid_setup(set));
        }
    }
    for statement in &setup {
        conn.execute(statement)
            .await
            .map_err(|error| endpoint.connect_error(error, requested))?;
    }
    let (start, start_file) = match resolved {
        StartPosition::Position(position) => (
            DumpStart::Position {
                file: &position.file,
                position: position.position,
            },
            position.file.clone(),
        ),
        StartPosition::Gtid(set) if flavor == Flavor::Mysql => {
            let sids =
                start::mysql_sids(set).map_err(|message| BinlogError::InvalidReaderConfig {
                    server: endpoint.address.clone(),
                    field: "start".into(),
                    message,
                })?;
            (DumpStart::MysqlGtid(sids), String::new())
        }
        // MariaDB by GTID (@slave_connect_state decides), Earliest/Latest are resolved.
        _ => (DumpStart::ConnectState, String::new()),
    };
    conn.request_dump(config.server_id, start)
        .await
        .map_err(|error| endpoint.connect_error(error, requested))?;
    Ok((conn, start_file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_positions_compare_by_file_sequence_then_offset() {
        let at = |file: &str, position| BinlogPosition::new(file, position);
        assert!(is_later_position(
            &at("binlog.000002", 4),
            &at("binlog.000001", 900)
        ));
        assert!(is_later_position(
            &at("binlog.1000000", 4),
            &at("binlog.999999", 900)
        ));
        assert!(is_later_position(
            &at("binlog.000001", 900),
            &at("binlog.000001", 900)
        ));
        assert!(!is_later_position(
            &at("binlog.000001", 899),
            &at("binlog.000001", 900)
        ));
        assert!(!is_later_position(&at("", 900), &at("binlog.000001", 4)));
        assert!(!is_later_position(
            &at("binlog.000003", 0),
            &at("binlog.000001", 4)
        ));
        assert!(is_later_position(&at("binlog.000001", 4), &at("", 0)));
    }

    #[test]
    fn decoder_errors_name_the_server_and_keep_their_transience() {
        let definite = BinlogError::FromServer {
            server: "db:3306".into(),
            source: Box::new(BinlogError::Protocol {
                server: "db:3306".into(),
                position: "binlog.000001:4".into(),
                message: "bad".into(),
            }),
        };
        assert!(!definite.is_transient());
        assert!(
            definite.to_string().starts_with("from db:3306: "),
            "{definite}"
        );
        let transient = BinlogError::FromServer {
            server: "db:3306".into(),
            source: Box::new(BinlogError::IdleTimeout {
                server: "db:3306".into(),
                position: "binlog.000001:4".into(),
                waited: Duration::from_secs(1),
            }),
        };
        assert!(transient.is_transient());
    }

    #[test]
    fn start_positions_display_for_errors() {
        assert_eq!(StartPosition::Earliest.to_string(), "earliest");
        assert_eq!(
            StartPosition::Position(BinlogPosition::new("binlog.000002", 1234)).to_string(),
            "binlog.000002:1234"
        );
    }

    #[test]
    fn config_debug_hides_the_url() {
        let config = ReaderConfig {
            url: "mysql://relay:secret@db:3306".into(),
            server_id: 7,
            start: StartPosition::Latest,
            filter: TableFilter::all(),
            heartbeat_interval: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            tls: TlsOptions::default(),
        };
        assert!(!format!("{config:?}").contains("secret"));
    }
}
