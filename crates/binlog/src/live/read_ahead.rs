//! Reading events in batches, either inline (the task calling
//! [`crate::BinlogReader::next_item`] reads the next batch itself when it needs one) or with
//! a read-ahead task that pulls events from the replication stream into a bounded channel, so
//! the client library's packet reading and event parsing run next to the decoder.
//!
//! # Contract (the read-ahead task; inline mode keeps the same order and batches, and its
//! memory is one batch)
//! * **Order.** Events arrive in stream order, grouped in [`ReadAheadMessage::Events`]
//!   batches. A stream error ([`ReadAheadMessage::Failed`]) or the server ending the stream
//!   ([`ReadAheadMessage::Ended`]) comes after every event read before it and is the last
//!   message; the task ends after sending it.
//! * **Batches.** A batch holds the events that were already readable without waiting (one
//!   at least), at most [`MAX_BATCH_EVENTS`] of them ([`MAX_INLINE_BATCH_EVENTS`] inline),
//!   and stops growing once it holds [`MAX_BATCH_BYTES`] of events. The consumer is woken
//!   once per batch, not once per event.
//! * **Memory.** The channel holds at most `read_ahead_events / batch size` batches (at least
//!   one); with the batch being filled and the batch being decoded that is about
//!   `read_ahead_events + 2 × batch size` events, and never more than `channel capacity + 2`
//!   batches of at most [`MAX_BATCH_BYTES`] plus one event each, plus the decoded batches
//!   waiting to be reused (at most [`RECYCLED_BATCHES`]). When the consumer stops
//!   calling, the task stops reading and the server's dump waits on TCP flow control.
//!   Decoded batches come back through [`ReadAhead::recycle`]; the task drops their events
//!   (so memory is freed on the thread that allocated it) and refills the empty vectors.
//! * **Stopping.** Dropping [`ReadAhead`] aborts the task, which drops the replication
//!   connection; the task also ends when the receiving side is gone.
//! * **Cancellation.** [`ReadAhead::next_message`] is cancel-safe (`tokio::sync::mpsc`): a
//!   dropped call loses no message.

use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use mysql_async::BinlogStream;
use mysql_common::binlog::events::Event;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::internal_events::{BinlogEventsReceived, InternalEvent};

/// Most events in one batch of the read-ahead task: enough that a hand-over is rare, few
/// enough that a batch is handed over while the next one is read. The consumer (faster than
/// the task) parks whenever the channel is empty and is woken by the next send, so every
/// batch costs both threads a futex wake-up and a context switch. 2048-event batches cut the
/// process's context switches from ~7 500 to ~2 000 and the task mode's client CPU by about
/// a tenth against 256-event ones (`perf stat`, crate README); smaller batches cost more,
/// 4096 was no better.
pub(crate) const MAX_BATCH_EVENTS: usize = 2048;

/// Most events in one batch read inline (no task): there is no wake-up to amortise, only
/// the per-batch metrics; small batches let the allocator reuse the memory of decoded
/// events right away (256-event batches cost the client measurably more malloc/free work,
/// README, callgrind).
pub(crate) const MAX_INLINE_BATCH_EVENTS: usize = 8;

/// A batch stops growing at this many event bytes, so batches of large row events stay small
/// in memory (a batch holds at most this plus one event).
pub(crate) const MAX_BATCH_BYTES: usize = 1 << 20;

/// Spare batch vectors the task keeps: the one being filled, the one being decoded and one
/// in the channel cover the steady state of a reader that keeps up.
const RECYCLED_BATCHES: usize = 4;

/// What the read-ahead task sends.
pub(crate) enum ReadAheadMessage {
    /// Events in stream order (never empty).
    Events(Vec<Event>),
    /// The stream failed with this error; nothing follows.
    Failed(mysql_async::Error),
    /// The server ended the stream; nothing follows.
    Ended,
}

/// Where the reader's batches come from: its own task (read-ahead) or the reader's task
/// itself (inline, `read_ahead_events == 0`).
pub(crate) struct ReadAhead {
    /// Which of the two.
    mode: Mode,
}

/// The two ways of reading batches.
enum Mode {
    /// The caller's task reads the stream itself when it needs a batch: no second task, no
    /// hand-over between threads, no read-ahead beyond one batch.
    Inline {
        /// The replication connection (boxed: it is much larger than the other variant).
        stream: Box<BinlogStream>,
        /// The vector of the previous batch, reused (no allocation per batch).
        spare: Vec<Event>,
        /// An error or end of stream that came after the events of the last batch; it is
        /// returned by the next call.
        pending_final: Option<ReadAheadMessage>,
    },
    /// A spawned task reads ahead into a channel.
    Task {
        /// Batches, then possibly one final error or end.
        receiver: mpsc::Receiver<ReadAheadMessage>,
        /// Decoded batches going back to the task: it drops their events on its own thread
        /// (memory freed where it was allocated, no cross-thread frees in the allocator) and
        /// refills the vectors (no allocation per batch).
        recycled: mpsc::Sender<Vec<Event>>,
        /// The task, aborted on drop so the replication connection closes with the reader
        /// even while the task waits for an idle server.
        task: JoinHandle<()>,
    },
}

/// `idle_timeout` passed with nothing to read.
#[derive(Debug)]
pub(crate) struct IdleTimeoutElapsed;

impl ReadAhead {
    /// Reads `stream` inline when `read_ahead_events` is 0; otherwise spawns the task on the
    /// current tokio runtime, keeping about `read_ahead_events` events ahead of the consumer
    /// (see the module docs).
    pub(crate) fn new(stream: BinlogStream, read_ahead_events: usize) -> ReadAhead {
        if read_ahead_events == 0 {
            return ReadAhead {
                mode: Mode::Inline {
                    stream: Box::new(stream),
                    spare: Vec::new(),
                    pending_final: None,
                },
            };
        }
        let batch_events = read_ahead_events.clamp(1, MAX_BATCH_EVENTS);
        let capacity = (read_ahead_events / batch_events).max(1);
        let (sender, receiver) = mpsc::channel(capacity);
        let (recycled, recycled_receiver) = mpsc::channel(RECYCLED_BATCHES);
        let task = tokio::spawn(pull_events(stream, sender, recycled_receiver, batch_events));
        ReadAhead {
            mode: Mode::Task {
                receiver,
                recycled,
                task,
            },
        }
    }

    /// Hands a decoded batch back for reuse (see `recycled`, `spare`). Never waits.
    pub(crate) fn recycle(&mut self, batch: Vec<Event>) {
        if batch.capacity() == 0 {
            return;
        }
        match &mut self.mode {
            Mode::Inline { spare, .. } => *spare = batch,
            Mode::Task { recycled, .. } => {
                // A full or closed channel hands the batch back; it is then dropped here.
                let _ = recycled.try_send(batch);
            }
        }
    }

    /// The next message, waiting at most `idle_timeout` when nothing is buffered (one
    /// timer per wait, none when a batch is ready). `Ok(None)` when the task is gone
    /// (aborted or panicked) without a final message. Cancel-safe: dropped while waiting,
    /// it loses nothing (the channel's `recv`, or the stream's `next`, which keeps a
    /// partly read packet in the connection's buffer).
    pub(crate) async fn next_message(
        &mut self,
        idle_timeout: Duration,
    ) -> Result<Option<ReadAheadMessage>, IdleTimeoutElapsed> {
        match &mut self.mode {
            Mode::Task { receiver, .. } => match receiver.try_recv() {
                Ok(message) => Ok(Some(message)),
                Err(mpsc::error::TryRecvError::Disconnected) => Ok(None),
                Err(mpsc::error::TryRecvError::Empty) => {
                    tokio::time::timeout(idle_timeout, receiver.recv())
                        .await
                        .map_err(|_| IdleTimeoutElapsed)
                }
            },
            Mode::Inline {
                stream,
                spare,
                pending_final,
            } => {
                if let Some(final_message) = pending_final.take() {
                    return Ok(Some(final_message));
                }
                let first = match stream.next().now_or_never() {
                    Some(readable) => readable,
                    None => tokio::time::timeout(idle_timeout, stream.next())
                        .await
                        .map_err(|_| IdleTimeoutElapsed)?,
                };
                // Synchronous from here on: nothing is lost if the caller is dropped.
                let mut batch = std::mem::take(spare);
                batch.clear();
                let final_message = fill_batch(stream, first, &mut batch, MAX_INLINE_BATCH_EVENTS);
                if batch.is_empty() {
                    return Ok(final_message);
                }
                *pending_final = final_message;
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

/// Puts `first` and then every event readable without waiting into `batch` (up to
/// `batch_events` events or [`MAX_BATCH_BYTES`]); counts the batch. Returns the error or end
/// of stream that stopped it, if any (it comes after the batch's events).
fn fill_batch(
    stream: &mut BinlogStream,
    first: Option<Result<Event, mysql_async::Error>>,
    batch: &mut Vec<Event>,
    batch_events: usize,
) -> Option<ReadAheadMessage> {
    let mut next = first;
    let mut batch_bytes = 0_usize;
    let final_message = loop {
        match next {
            Some(Ok(event)) => {
                batch_bytes += event_bytes(&event);
                batch.push(event);
                if batch.len() >= batch_events || batch_bytes >= MAX_BATCH_BYTES {
                    break None;
                }
            }
            Some(Err(error)) => break Some(ReadAheadMessage::Failed(error)),
            None => break Some(ReadAheadMessage::Ended),
        }
        // Only what is readable right now joins this batch (a pending read is polled
        // again, with a real waker, by the caller's `.await`).
        match stream.next().now_or_never() {
            Some(readable) => next = readable,
            None => break None,
        }
    };
    if !batch.is_empty() {
        BinlogEventsReceived {
            count: batch.len(),
            bytes: batch_bytes,
        }
        .emit();
    }
    final_message
}

/// The task: reads events, batches the ones readable without waiting, sends each batch.
async fn pull_events(
    mut stream: BinlogStream,
    sender: mpsc::Sender<ReadAheadMessage>,
    mut recycled: mpsc::Receiver<Vec<Event>>,
    batch_events: usize,
) {
    loop {
        // Waiting for the first event of a batch has no timeout: the consumer measures
        // silence (`idle_timeout`) while it waits for a batch.
        let first = stream.next().await;
        let mut batch = match recycled.try_recv() {
            Ok(mut spare) => {
                spare.clear();
                spare
            }
            Err(_) => Vec::with_capacity(batch_events),
        };
        let final_message = fill_batch(&mut stream, first, &mut batch, batch_events);
        if !batch.is_empty() && sender.send(ReadAheadMessage::Events(batch)).await.is_err() {
            return;
        }
        if let Some(final_message) = final_message {
            // Nobody may be listening any more; the task ends either way.
            let _ = sender.send(final_message).await;
            return;
        }
    }
}

/// Size of one event on the wire (header `event_size`).
fn event_bytes(event: &Event) -> usize {
    usize::try_from(event.header().event_size()).unwrap_or(usize::MAX)
}
