//! Reading events in batches, either inline (the task calling
//! [`crate::BinlogReader::next_item`] reads the next batch itself when it needs one) or with
//! a read-ahead task that reads the replication connection into a bounded channel, so the
//! socket reads and packet framing run next to the decoder.
//!
//! # Contract (the read-ahead task; inline mode keeps the same order and batches, and its
//! memory is one batch)
//! * **Order.** Events arrive in stream order, grouped in [`ReadAheadMessage::Events`]
//!   batches. A stream error ([`ReadAheadMessage::Failed`]) or the server ending the stream
//!   ([`ReadAheadMessage::Ended`]) comes after every event read before it and is the last
//!   message; the task ends after sending it.
//! * **Batches.** A batch is every complete event one socket read brought (one at least):
//!   the buffer the socket was read into, decoded in place ([`EventBatch`]). Reads take up
//!   to 128 KiB, so a batch holds a few hundred small events, or one large event whole. The
//!   consumer is woken once per batch, not once per event.
//! * **Memory.** The channel holds at most `read_ahead_events / ASSUMED_EVENTS_PER_BATCH`
//!   batches (at least one); with the batch being filled and the batch being decoded that is
//!   `channel capacity + 2` buffers of about 128 KiB (an event larger than that makes its
//!   buffer as large as the event, shrunk again when the buffer is reused), plus the decoded
//!   batches waiting to be reused (at most [`RECYCLED_BATCHES`]). When the consumer stops
//!   calling, the task stops reading and the server's dump waits on TCP flow control.
//!   Decoded batches come back through [`ReadAhead::recycle`] and are refilled.
//! * **Stopping.** Dropping [`ReadAhead`] aborts the task, which drops the replication
//!   connection; the task also ends when the receiving side is gone.
//! * **Cancellation.** [`ReadAhead::next_message`] is cancel-safe (`tokio::sync::mpsc`, and
//!   inline the connection keeps read bytes in its buffer): a dropped call loses no event.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::replication_connection::{EventBatch, ReadFailure, ReplicationConnection, StreamEnd};
use crate::internal_events::{BinlogEventsReceived, InternalEvent};

/// How many events a batch of the read-ahead task is assumed to hold when turning
/// `read_ahead_events` into a channel capacity (a 128 KiB read of ~200-byte events).
const ASSUMED_EVENTS_PER_BATCH: usize = 512;

/// Spare batches the task keeps: the one being filled, the one being decoded and one in the
/// channel cover the steady state of a reader that keeps up.
const RECYCLED_BATCHES: usize = 4;

/// What the read-ahead task sends.
pub(crate) enum ReadAheadMessage {
    /// Events in stream order (never empty).
    Events(EventBatch),
    /// The stream failed with this error; nothing follows.
    Failed(mysql_async::Error),
    /// The server ended the stream; nothing follows.
    Ended,
}

/// What goes through the read-ahead task's channel: a message, or, as its last one, that no
/// byte arrived for the task's idle timeout.
type TaskMessage = Result<ReadAheadMessage, IdleTimeoutElapsed>;

/// Where the reader's batches come from: its own task (read-ahead) or the reader's task
/// itself (inline, `read_ahead_events == 0`).
pub(crate) struct ReadAhead {
    /// Which of the two.
    mode: Mode,
}

/// The two ways of reading batches.
enum Mode {
    /// The caller's task reads the connection itself when it needs a batch: no second task,
    /// no hand-over between threads, no read-ahead beyond one batch.
    Inline {
        /// The replication connection (boxed: it is much larger than the other variant).
        connection: Box<ReplicationConnection>,
        /// The buffers of the previous batch, reused (no allocation per batch).
        spare: EventBatch,
        /// An error or end of stream that came after the events of the last batch; it is
        /// returned by the next call.
        pending_final: Option<ReadAheadMessage>,
    },
    /// A spawned task reads ahead into a channel.
    Task {
        /// Batches, then possibly one final error, end or idle timeout.
        receiver: mpsc::Receiver<TaskMessage>,
        /// Decoded batches going back to the task to be refilled (no allocation per batch).
        recycled: mpsc::Sender<EventBatch>,
        /// The task, aborted on drop so the replication connection closes with the reader
        /// even while the task waits for an idle server.
        task: JoinHandle<()>,
    },
}

/// `idle_timeout` passed with nothing to read.
#[derive(Debug)]
pub(crate) struct IdleTimeoutElapsed;

impl ReadAhead {
    /// Reads `connection` inline when `read_ahead_events` is 0; otherwise spawns the task on
    /// the current tokio runtime, keeping about `read_ahead_events` events ahead of the
    /// consumer (see the module docs); the task gives up after `idle_timeout` without a
    /// byte from the server.
    pub(crate) fn new(
        connection: ReplicationConnection,
        read_ahead_events: usize,
        idle_timeout: Duration,
    ) -> ReadAhead {
        if read_ahead_events == 0 {
            return ReadAhead {
                mode: Mode::Inline {
                    connection: Box::new(connection),
                    spare: EventBatch::default(),
                    pending_final: None,
                },
            };
        }
        let capacity = (read_ahead_events / ASSUMED_EVENTS_PER_BATCH).max(1);
        let (sender, receiver) = mpsc::channel(capacity);
        let (recycled, recycled_receiver) = mpsc::channel(RECYCLED_BATCHES);
        // Named by its tracing span (`tokio::task::Builder` needs `tokio_unstable`).
        let span = tracing::info_span!("task", name = "binlog-read-ahead");
        let task = tokio::spawn(tracing::Instrument::instrument(
            pull_events(connection, sender, recycled_receiver, idle_timeout),
            span,
        ));
        ReadAhead {
            mode: Mode::Task {
                receiver,
                recycled,
                task,
            },
        }
    }

    /// Hands a decoded batch back for reuse (see `recycled`, `spare`). Never waits.
    pub(crate) fn recycle(&mut self, batch: EventBatch) {
        match &mut self.mode {
            Mode::Inline { spare, .. } => *spare = batch,
            Mode::Task { recycled, .. } => {
                // A full or closed channel hands the batch back; it is then dropped here.
                let _ = recycled.try_send(batch);
            }
        }
    }

    /// The next message. Fails with [`IdleTimeoutElapsed`] when no byte arrived for
    /// `idle_timeout` (inline: this call's limit, timed per socket read, so a large event
    /// arriving slowly is not idle; task: the task's own limit from [`ReadAhead::new`]).
    /// No timer runs when a batch is ready. `Ok(None)` when the task is gone (aborted or
    /// panicked) without a final message. Cancel-safe: dropped while waiting, it loses
    /// nothing (the channel's `recv`, or the connection's read, which keeps read bytes in
    /// the connection's buffer until they are framed into a batch).
    pub(crate) async fn next_message(
        &mut self,
        idle_timeout: Duration,
    ) -> Result<Option<ReadAheadMessage>, IdleTimeoutElapsed> {
        match &mut self.mode {
            Mode::Task { receiver, .. } => {
                let message = match receiver.try_recv() {
                    Ok(message) => Some(message),
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                    // The task measures silence; waiting here needs no timer of its own.
                    Err(mpsc::error::TryRecvError::Empty) => receiver.recv().await,
                };
                message.transpose()
            }
            Mode::Inline {
                connection,
                spare,
                pending_final,
            } => {
                if let Some(final_message) = pending_final.take() {
                    return Ok(Some(final_message));
                }
                let mut batch = std::mem::take(spare);
                let read = read_next_batch(connection, &mut batch, idle_timeout).await;
                let final_message = final_message_of(read);
                if batch.is_empty() {
                    *spare = batch;
                    return final_message;
                }
                count(&batch);
                // A read that brought events never timed out.
                *pending_final = final_message.ok().flatten();
                Ok(Some(ReadAheadMessage::Events(batch)))
            }
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        if let Mode::Task { task, .. } = &self.mode {
            task.abort();
        }
    }
}

/// Reads the next batch: what already arrived first, without a timer; then waits (the idle
/// timer restarting with every socket read).
async fn read_next_batch(
    connection: &mut ReplicationConnection,
    batch: &mut EventBatch,
    idle_timeout: Duration,
) -> Result<Option<StreamEnd>, ReadFailure> {
    match connection.try_read_batch(batch) {
        Ok(None) if batch.is_empty() => connection.read_batch(batch, idle_timeout).await,
        Ok(end) => Ok(end),
        Err(error) => Err(ReadFailure::Connection(error)),
    }
}

/// The message that ends the stream after a batch, if the read ended it (or the idle
/// timeout).
fn final_message_of(
    read: Result<Option<StreamEnd>, ReadFailure>,
) -> Result<Option<ReadAheadMessage>, IdleTimeoutElapsed> {
    match read {
        Ok(None) => Ok(None),
        Ok(Some(StreamEnd::Ended)) => Ok(Some(ReadAheadMessage::Ended)),
        Ok(Some(StreamEnd::Failed(error))) | Err(ReadFailure::Connection(error)) => {
            Ok(Some(ReadAheadMessage::Failed(error)))
        }
        Err(ReadFailure::Idle) => Err(IdleTimeoutElapsed),
    }
}

/// Counts a batch in the reader's metrics.
fn count(batch: &EventBatch) {
    BinlogEventsReceived {
        count: batch.len(),
        bytes: batch.event_bytes(),
    }
    .emit();
}

/// The task: reads batches and sends them, until the stream ends or nobody listens.
async fn pull_events(
    mut connection: ReplicationConnection,
    sender: mpsc::Sender<TaskMessage>,
    mut recycled: mpsc::Receiver<EventBatch>,
    idle_timeout: Duration,
) {
    loop {
        let mut batch = recycled.try_recv().unwrap_or_default();
        let read = read_next_batch(&mut connection, &mut batch, idle_timeout).await;
        let final_message = final_message_of(read);
        if !batch.is_empty() {
            count(&batch);
            if sender
                .send(Ok(ReadAheadMessage::Events(batch)))
                .await
                .is_err()
            {
                return;
            }
        }
        if let Some(final_message) = final_message.transpose() {
            // Nobody may be listening any more; the task ends either way.
            let _ = sender.send(final_message).await;
            return;
        }
    }
}
