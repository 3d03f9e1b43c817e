//! The read-ahead task: pulls events from the replication stream into a bounded channel,
//! so the client library's packet reading and event parsing (one task) run next to the
//! decoder (the task calling [`crate::BinlogReader::next_item`]).
//!
//! # Contract
//! * **Order.** Events arrive in stream order, grouped in [`ReadAheadMessage::Events`]
//!   batches. A stream error ([`ReadAheadMessage::Failed`]) or the server ending the stream
//!   ([`ReadAheadMessage::Ended`]) comes after every event read before it and is the last
//!   message; the task ends after sending it.
//! * **Batches.** A batch holds the events that were already readable without waiting (one
//!   at least), at most [`MAX_BATCH_EVENTS`] of them, and stops growing once it holds
//!   [`MAX_BATCH_BYTES`] of events. The consumer is woken once per batch, not once per
//!   event.
//! * **Memory.** The channel holds at most `read_ahead_events / batch size` batches (at least
//!   one); with the batch being filled and the batch being decoded that is about
//!   `read_ahead_events + 2 × batch size` events, and never more than `channel capacity + 2`
//!   batches of at most [`MAX_BATCH_BYTES`] plus one event each. When the consumer stops
//!   calling, the task stops reading and the server's dump waits on TCP flow control.
//! * **Stopping.** Dropping [`ReadAhead`] aborts the task, which drops the replication
//!   connection; the task also ends when the receiving side is gone.
//! * **Cancellation.** [`ReadAhead::recv`] is cancel-safe (`tokio::sync::mpsc`): a dropped
//!   call loses no message.

use futures_util::{FutureExt, StreamExt};
use mysql_async::BinlogStream;
use mysql_common::binlog::events::Event;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::internal_events::{BinlogEventsReceived, InternalEvent};

/// Most events in one batch: enough that waking the consumer (a cross-thread wake-up costs
/// about as much as parsing several events) is rare, few enough that a batch is handed over
/// while the next one is read.
pub(crate) const MAX_BATCH_EVENTS: usize = 256;

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

/// The receiving side of the read-ahead task; aborts the task when dropped.
pub(crate) struct ReadAhead {
    /// Batches, then possibly one final error or end.
    receiver: mpsc::Receiver<ReadAheadMessage>,
    /// Decoded batches going back to the task: it drops their events on its own thread
    /// (memory freed where it was allocated, no cross-thread frees in the allocator) and
    /// refills the vectors (no allocation per batch).
    recycled: mpsc::Sender<Vec<Event>>,
    /// The task, aborted on drop so the replication connection closes with the reader even
    /// while the task waits for an idle server.
    task: JoinHandle<()>,
}

impl ReadAhead {
    /// Spawns the task reading `stream` on the current tokio runtime, keeping about
    /// `read_ahead_events` events ahead of the consumer (see the module docs).
    pub(crate) fn spawn(stream: BinlogStream, read_ahead_events: usize) -> ReadAhead {
        let batch_events = read_ahead_events.clamp(1, MAX_BATCH_EVENTS);
        let capacity = (read_ahead_events / batch_events).max(1);
        let (sender, receiver) = mpsc::channel(capacity);
        let (recycled, recycled_receiver) = mpsc::channel(RECYCLED_BATCHES);
        let task = tokio::spawn(pull_events(stream, sender, recycled_receiver, batch_events));
        ReadAhead {
            receiver,
            recycled,
            task,
        }
    }

    /// Hands a decoded batch back to the task (see `recycled`); dropped here instead when the
    /// task has enough spare vectors or is gone. Never waits.
    pub(crate) fn recycle(&self, batch: Vec<Event>) {
        if batch.capacity() > 0 {
            // A full or closed channel hands the batch back; it is then dropped here.
            let _ = self.recycled.try_send(batch);
        }
    }

    /// The next message if one is waiting; `Err(Empty)` when the task has nothing yet,
    /// `Err(Disconnected)` when it is gone (aborted or panicked) without a final message.
    pub(crate) fn try_recv(&mut self) -> Result<ReadAheadMessage, mpsc::error::TryRecvError> {
        self.receiver.try_recv()
    }

    /// Waits for the next message; `None` when the task is gone without a final message.
    /// Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Option<ReadAheadMessage> {
        self.receiver.recv().await
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.task.abort();
    }
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
        let mut next = stream.next().await;
        let mut batch = match recycled.try_recv() {
            Ok(mut spare) => {
                spare.clear();
                spare
            }
            Err(_) => Vec::with_capacity(batch_events),
        };
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
            // again, with a real waker, by the `.await` above).
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
            if sender.send(ReadAheadMessage::Events(batch)).await.is_err() {
                return;
            }
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
