//! The sink's unacked records by sequence number.
//!
//! Sequence numbers are handed out densely and in increasing order, and records mostly
//! leave in about that order (acks come per partition batch), so a deque of slots indexed by
//! `sequence - first_sequence` replaces an ordered map: inserting at the back, looking up and
//! removing are O(1), with no rebalancing and no moving of the (large) pending records, which
//! sit in boxes. A record acked out of order leaves an empty slot (one pointer) until every
//! record before it left too; [`PendingRecords::span`] is what those slots cost, and the sink
//! bounds it (see `task.rs`).

use std::collections::VecDeque;

use super::dead_lettering::Pending;

/// Unacked records in sequence order.
pub(super) struct PendingRecords<T> {
    /// The sequence number of `slots[0]`; the front slot is always occupied (or the deque is
    /// empty), so the oldest unacked record is found at once.
    first_sequence: u64,
    /// One slot per sequence from `first_sequence` on: `None` once its record left.
    slots: VecDeque<Option<Box<Pending<T>>>>,
    /// Occupied slots: the number of unacked records.
    len: usize,
    /// The sequence of the next record: sequences are dense, so the slots need no keys.
    next_sequence: u64,
}

impl<T> PendingRecords<T> {
    /// No records.
    pub(super) fn new() -> Self {
        Self {
            first_sequence: 0,
            slots: VecDeque::new(),
            len: 0,
            next_sequence: 0,
        }
    }

    /// Unacked records.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether every record was acked (or dead-lettered and acked).
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sequences from the oldest unacked record to the newest one, holes included: the
    /// slots held (a pointer each).
    pub(super) fn span(&self) -> usize {
        self.slots.len()
    }

    /// The sequence number the next [`PendingRecords::push`] gives its record.
    pub(super) fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    /// Adds a record under the next sequence number, which it returns.
    pub(super) fn push(&mut self, item: Pending<T>) -> u64 {
        let sequence = self.next_sequence;
        if self.slots.is_empty() {
            self.first_sequence = sequence;
        }
        self.slots.push_back(Some(Box::new(item)));
        self.len += 1;
        self.next_sequence += 1;
        sequence
    }

    fn index(&self, sequence: u64) -> Option<usize> {
        let offset = sequence.checked_sub(self.first_sequence)?;
        usize::try_from(offset)
            .ok()
            .filter(|index| *index < self.slots.len())
    }

    /// The record of `sequence`, if unacked.
    pub(super) fn get(&self, sequence: u64) -> Option<&Pending<T>> {
        let index = self.index(sequence)?;
        self.slots.get(index)?.as_deref()
    }

    /// The record of `sequence`, if unacked.
    pub(super) fn get_mut(&mut self, sequence: u64) -> Option<&mut Pending<T>> {
        let index = self.index(sequence)?;
        self.slots.get_mut(index)?.as_deref_mut()
    }

    /// Whether `sequence` is unacked.
    pub(super) fn contains(&self, sequence: u64) -> bool {
        self.get(sequence).is_some()
    }

    /// Takes the record of `sequence` out (acked); then frees the empty slots at the front.
    pub(super) fn remove(&mut self, sequence: u64) -> Option<Pending<T>> {
        let index = self.index(sequence)?;
        let item = self.slots.get_mut(index)?.take()?;
        self.len -= 1;
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.first_sequence += 1;
        }
        Some(*item)
    }

    /// The oldest unacked record.
    pub(super) fn oldest(&self) -> Option<&Pending<T>> {
        self.slots.front().and_then(|slot| slot.as_deref())
    }

    /// Unacked records, oldest first.
    pub(super) fn values(&self) -> impl Iterator<Item = &Pending<T>> {
        self.slots.iter().filter_map(|slot| slot.as_deref())
    }

    /// Unacked records, oldest first.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Pending<T>> {
        self.slots.iter_mut().filter_map(|slot| slot.as_deref_mut())
    }

    /// Sequences of the unacked records, in order.
    pub(super) fn sequences(&self) -> impl Iterator<Item = u64> + '_ {
        let first = self.first_sequence;
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.is_some())
            .map(move |(index, _)| first + index as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dead_letter::RecordOrigin;
    use crate::sink::OutboundRecord;

    fn item(ticket: u32) -> Pending<u32> {
        Pending {
            record: OutboundRecord {
                topic: "t".into(),
                key: None,
                payload: Some(vec![1, 2, 3]),
                headers: Vec::new(),
                null_headers: Vec::new(),
                timestamp_ms: None,
                partition: None,
            },
            ticket,
            origin: RecordOrigin::default(),
            permanent_failures: 0,
            first_failure_ms: 0,
            sent_at: None,
            accepted_at_ms: 0,
            payload_with_producer: false,
        }
    }

    fn tickets(pending: &PendingRecords<u32>) -> Vec<u32> {
        pending.values().map(|item| item.ticket).collect()
    }

    #[test]
    fn records_leave_in_any_order_and_the_front_follows_the_oldest_unacked_one() {
        let mut pending = PendingRecords::new();
        for ticket in 0..5u32 {
            assert_eq!(pending.next_sequence(), u64::from(ticket));
            assert_eq!(pending.push(item(ticket)), u64::from(ticket));
        }
        assert_eq!((pending.len(), pending.span()), (5, 5));
        // Out of order: holes stay until the records before them left.
        assert_eq!(pending.remove(2).map(|item| item.ticket), Some(2));
        assert_eq!(pending.remove(2).map(|item| item.ticket), None);
        assert!(!pending.contains(2));
        assert_eq!((pending.len(), pending.span()), (4, 5));
        assert_eq!(pending.oldest().map(|item| item.ticket), Some(0));
        assert_eq!(pending.remove(0).map(|item| item.ticket), Some(0));
        assert_eq!(pending.remove(1).map(|item| item.ticket), Some(1));
        // 2 was gone already: the front is 3 now.
        assert_eq!(pending.span(), 2);
        assert_eq!(pending.oldest().map(|item| item.ticket), Some(3));
        assert_eq!(pending.sequences().collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(tickets(&pending), vec![3, 4]);
        if let Some(record) = pending.get_mut(4) {
            record.permanent_failures = 3;
        }
        assert_eq!(pending.get(4).map(|item| item.permanent_failures), Some(3));
        for record in pending.values_mut() {
            record.first_failure_ms = 7;
        }
        assert!(pending.values().all(|item| item.first_failure_ms == 7));
        // Nothing outside the span.
        assert!(pending.get(1).is_none() && pending.get(5).is_none());
        assert!(pending.remove(3).is_some() && pending.remove(4).is_some());
        assert!(pending.is_empty());
        assert_eq!(pending.span(), 0);
        // Emptied, the next record starts the span anew, with the next sequence.
        assert_eq!(pending.push(item(5)), 5);
        assert_eq!((pending.len(), pending.span()), (1, 1));
        assert_eq!(pending.oldest().map(|item| item.ticket), Some(5));
    }
}
