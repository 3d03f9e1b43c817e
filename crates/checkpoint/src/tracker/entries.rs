//! The tracker's entries: runs of records in binlog order, kept in a deque in sequence order.
//!
//! Entries are appended at the back (records and transaction ends arrive in binlog order)
//! and released from the front, both in O(1). An ack finds its entry by checking the front
//! and the back first (acks come almost in order) and by binary search otherwise.
//!
//! Adjacent complete entries stand for one run (see the tracker's memory bound). Merging
//! two of them physically means removing one from the deque, which is cheap only near
//! either end; in the middle of a long deque the merge is only counted
//! ([`Entries::unmerged_links`]) and done for all such pairs at once when they outnumber
//! the runs ([`Entries::compact`]), so every ack stays amortised O(1) apart from the search
//! and the deque never holds more than about twice the entries of the logical bound.

use std::collections::VecDeque;

use outbox_binlog::{BinlogPosition, Gtid, GtidSet};

use super::gtid_add::add_gtid;
use crate::gtid_union::union_into;

/// A complete entry this close to either end of the deque (in entries) is merged with a
/// complete neighbour at once; farther in, the merge waits for [`Entries::compact`].
/// Tiny in unit tests, so that their small scenarios take every path.
const MERGE_NEAR_END: usize = if cfg!(test) { 1 } else { 16 };

/// Unmerged pairs tolerated beyond the number of runs before [`Entries::compact`] runs,
/// so a short deque is not compacted over and over (tiny in unit tests, as above).
pub(super) const COMPACTION_SLACK: usize = if cfg!(test) { 2 } else { 64 };

/// A run of records in binlog order: one transaction, or several merged fully acked ones.
#[derive(Debug)]
pub(super) struct Entry {
    /// Sequence number of the entry's first record (its records are contiguous).
    pub(super) first_sequence: u64,
    /// How many records the entry covers.
    pub(super) record_count: u64,
    /// How many of them are not acked yet.
    pub(super) unacked_count: u64,
    /// One bit per record (`1` = acked), to tell a double ack from a first one; released once
    /// the entry is complete (any ack in range is then a double ack).
    pub(super) acked_bits: AckBits,
    /// Where the entry's last transaction ends; `None` while the transaction is open.
    pub(super) end: Option<EntryEnd>,
    /// How many transactions (or heartbeats) the entry stands for (more than 1 once merged),
    /// so the tracker's count of completed transactions stays exact.
    pub(super) transaction_count: u64,
}

impl Entry {
    /// The open transaction's entry, holding its first record `sequence`.
    fn open_with_record(sequence: u64) -> Self {
        Self {
            first_sequence: sequence,
            record_count: 1,
            unacked_count: 1,
            acked_bits: AckBits::default(),
            end: None,
            transaction_count: 1,
        }
    }

    /// An ended transaction without records (or a heartbeat) before record `next_sequence`.
    pub(super) fn empty(next_sequence: u64, end: EntryEnd) -> Self {
        Self {
            first_sequence: next_sequence,
            record_count: 0,
            unacked_count: 0,
            acked_bits: AckBits::default(),
            end: Some(end),
            transaction_count: 1,
        }
    }

    /// Stands in for an entry moved out during [`Entries::compact`]; never observed.
    fn placeholder() -> Self {
        Self {
            first_sequence: 0,
            record_count: 0,
            unacked_count: 0,
            acked_bits: AckBits::default(),
            end: None,
            transaction_count: 0,
        }
    }

    /// Ended and fully acked: the checkpoint may pass it.
    pub(super) fn is_complete(&self) -> bool {
        self.end.is_some() && self.unacked_count == 0
    }

    fn contains(&self, sequence: u64) -> bool {
        sequence >= self.first_sequence && sequence - self.first_sequence < self.record_count
    }

    /// Adds the next record (sequence `first_sequence + record_count`) to the open entry.
    fn add_record(&mut self) {
        self.acked_bits.make_room_for(self.record_count);
        self.record_count += 1;
        self.unacked_count += 1;
    }

    /// Merges `later` (the complete entry right after this complete one) into this one.
    fn absorb(&mut self, later: Entry) {
        self.record_count += later.record_count;
        self.transaction_count += later.transaction_count;
        match (self.end.as_mut(), later.end) {
            (Some(earlier), Some(later)) => earlier.absorb(later),
            (None, later) => self.end = later,
            (Some(_), None) => {}
        }
    }
}

/// The end of an entry: what the checkpoint becomes when the entry is released.
///
/// Entries do not carry a snapshot of the whole GTID set (a clone per transaction); they
/// carry their own GTIDs, folded into the checkpoint's set on release.
#[derive(Debug)]
pub(super) struct EntryEnd {
    /// Position after the entry's last transaction.
    pub(super) binlog: BinlogPosition,
    /// The GTID of the entry's last transaction that had one (becomes the checkpoint's
    /// `gtid`); `None` if none had one.
    pub(super) last_gtid: Option<Gtid>,
    /// GTIDs of the entry's other (merged, earlier) transactions; empty, without an
    /// allocation, for a single transaction, and always empty when `last_gtid` is `None`.
    pub(super) earlier_gtids: GtidSet,
    /// Event timestamp after the last transaction (heartbeats' 0 already replaced).
    pub(super) timestamp: u32,
    /// Which server `binlog` belongs to: an index into the tracker's sources (0: the server
    /// the tracker started on), so the position and its server move together.
    pub(super) source: usize,
}

impl EntryEnd {
    /// Appends `later` (the next transaction's or entry's end) to this one.
    pub(super) fn absorb(&mut self, later: EntryEnd) {
        // `later` without a last GTID holds only heartbeats or GTID-less transactions (its
        // `earlier_gtids` is empty then): it keeps this entry's last GTID.
        if let Some(later_gtid) = later.last_gtid.as_ref() {
            // Binlog order matters for MariaDB (last GTID per domain wins).
            if let Some(gtid) = self.last_gtid.as_ref() {
                if !same_mariadb_domain(gtid, later_gtid) {
                    add_gtid(&mut self.earlier_gtids, gtid);
                }
            }
            union_into(&mut self.earlier_gtids, later.earlier_gtids);
            self.last_gtid = later.last_gtid;
        }
        self.binlog = later.binlog;
        self.timestamp = later.timestamp;
        self.source = later.source;
    }
}

/// True when both are MariaDB GTIDs of one domain: the later one replaces the earlier in
/// any set both are added to in order, so the earlier need not be kept (a single-domain
/// run then needs no set of earlier GTIDs at all).
fn same_mariadb_domain(earlier: &Gtid, later: &Gtid) -> bool {
    matches!(
        (earlier, later),
        (Gtid::Mariadb { domain_id: a, .. }, Gtid::Mariadb { domain_id: b, .. }) if a == b
    )
}

/// One bit per record; the first 64 inline, so small transactions allocate nothing.
#[derive(Debug, Default)]
pub(super) struct AckBits {
    /// Bits of records 0..64.
    first_word: u64,
    /// Bits of records 64.., 64 per word.
    more_words: Vec<u64>,
}

impl AckBits {
    /// Ensures record `index` (the next one added) has a bit.
    fn make_room_for(&mut self, index: u64) {
        if index >= 64 && index % 64 == 0 {
            self.more_words.push(0);
        }
    }

    /// The word holding record `index`'s bit.
    pub(super) fn word_mut(&mut self, index: u64) -> Option<&mut u64> {
        if index < 64 {
            return Some(&mut self.first_word);
        }
        let word = usize::try_from(index / 64 - 1).ok()?;
        self.more_words.get_mut(word)
    }
}

/// The entries in binlog order. Only the back one can be open (records and ends are added
/// in binlog order), and the front one is never complete between the tracker's calls (it
/// is released at once).
#[derive(Debug, Default)]
pub(super) struct Entries {
    /// The entries, in sequence order (an empty entry shares its first sequence with the
    /// next one and comes before it).
    deque: VecDeque<Entry>,
    /// Adjacent pairs of complete entries in `deque` not merged yet (far from both ends,
    /// see the module docs): `deque.len() - unmerged_links` is the number of entries
    /// the tracker logically holds.
    unmerged_links: usize,
}

impl Entries {
    /// Entries as the tracker's memory bound counts them (a run of complete ones as one).
    pub(super) fn logical_len(&self) -> usize {
        self.deque.len().saturating_sub(self.unmerged_links)
    }

    /// Entries actually stored (for tests of the bound).
    #[cfg(test)]
    pub(super) fn physical_len(&self) -> usize {
        self.deque.len()
    }

    /// Checks the count of unmerged pairs against the deque (for tests: the count is kept
    /// incrementally, and a wrong one would skew only the bound, silently).
    #[cfg(test)]
    pub(super) fn assert_links_counted(&self) {
        let actual = self
            .deque
            .iter()
            .zip(self.deque.iter().skip(1))
            .filter(|(a, b)| a.is_complete() && b.is_complete())
            .count();
        assert_eq!(self.unmerged_links, actual, "unmerged pairs");
        assert!(
            self.deque.front().is_none_or(|front| !front.is_complete()),
            "a complete front entry was not released"
        );
    }

    pub(super) fn front(&self) -> Option<&Entry> {
        self.deque.front()
    }

    pub(super) fn back_mut(&mut self) -> Option<&mut Entry> {
        self.deque.back_mut()
    }

    pub(super) fn get_mut(&mut self, index: usize) -> Option<&mut Entry> {
        self.deque.get_mut(index)
    }

    /// The index of the back entry (`None` when empty).
    pub(super) fn back_index(&self) -> Option<usize> {
        self.deque.len().checked_sub(1)
    }

    /// Adds record `sequence` (the next one) to the open transaction, opening its entry if
    /// this is its first record.
    pub(super) fn add_record(&mut self, sequence: u64) {
        match self.deque.back_mut() {
            Some(open) if open.end.is_none() => open.add_record(),
            _ => self.deque.push_back(Entry::open_with_record(sequence)),
        }
    }

    /// Appends an ended entry (the open transaction's entry is ended in place instead).
    pub(super) fn push_ended(&mut self, entry: Entry) {
        self.deque.push_back(entry);
    }

    /// The index of the entry holding record `sequence`, if it is still tracked (records
    /// before the front entry were released, so acking them again is a double ack).
    pub(super) fn find(&self, sequence: u64) -> Option<usize> {
        let front = self.deque.front()?;
        if front.contains(sequence) {
            return Some(0);
        }
        if sequence < front.first_sequence {
            return None;
        }
        let len = self.deque.len();
        let back = len - 1;
        if self.deque[back].contains(sequence) {
            return Some(back);
        }
        // The last entry starting at or before `sequence` (an empty entry sharing its first
        // sequence with the next comes before it, so this is the one that can hold it),
        // galloping from the front and then by bisection: acks come almost in order, so the
        // entry is usually a few from the front, and the probes stay in a few cache lines.
        // Throughout, `low` starts at or before `sequence` and `high` (if not `len`) after.
        let mut low = 0;
        let mut step = 1;
        let mut high = loop {
            let probe = low + step;
            if probe >= len {
                break len;
            }
            if self.deque[probe].first_sequence > sequence {
                break probe;
            }
            low = probe;
            step *= 2;
        };
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if self.deque[middle].first_sequence <= sequence {
                low = middle;
            } else {
                high = middle;
            }
        }
        self.deque[low].contains(sequence).then_some(low)
    }

    /// The entry at `index` just became complete: releases its ack bits and merges it with
    /// complete neighbours (now, near an end; elsewhere later, see
    /// [`Entries::compact_if_sparse`]).
    pub(super) fn completed(&mut self, index: usize) {
        let Some(entry) = self.deque.get_mut(index) else {
            return;
        };
        entry.acked_bits = AckBits::default();
        let previous_complete = index
            .checked_sub(1)
            .and_then(|previous| self.deque.get(previous))
            .is_some_and(Entry::is_complete);
        let next_complete = self.deque.get(index + 1).is_some_and(Entry::is_complete);
        self.unmerged_links += usize::from(previous_complete) + usize::from(next_complete);
        if next_complete && self.near_end(index + 1) {
            self.merge_into_previous(index + 1);
        }
        if previous_complete && self.near_end(index) {
            self.merge_into_previous(index);
        }
    }

    /// Compacts when the unmerged pairs outnumber the runs (plus the slack), so the deque
    /// stays within twice the logical count. Call after [`Entries::completed`] and the
    /// releases that follow it. Amortised O(1): a compaction moves fewer than twice as many
    /// entries as there are unmerged pairs, and each completion adds at most two.
    pub(super) fn compact_if_sparse(&mut self) {
        if self.unmerged_links > self.logical_len() + COMPACTION_SLACK {
            self.compact();
        }
    }

    /// Removes the front entry if it is complete (for the checkpoint to pass it).
    pub(super) fn pop_front_complete(&mut self) -> Option<Entry> {
        if !self.deque.front()?.is_complete() {
            return None;
        }
        let front = self.deque.pop_front()?;
        if self.deque.front().is_some_and(Entry::is_complete) {
            self.unmerged_links = self.unmerged_links.saturating_sub(1);
        }
        Some(front)
    }

    /// True when removing the entry at `index` moves only a few others.
    fn near_end(&self, index: usize) -> bool {
        index.min(self.deque.len() - 1 - index) <= MERGE_NEAR_END
    }

    /// Merges the complete entry at `index` into the complete one before it.
    fn merge_into_previous(&mut self, index: usize) {
        let Some(previous) = index.checked_sub(1) else {
            return;
        };
        if let Some(entry) = self.deque.remove(index) {
            if let Some(previous) = self.deque.get_mut(previous) {
                previous.absorb(entry);
                self.unmerged_links = self.unmerged_links.saturating_sub(1);
            }
        }
    }

    /// Merges every run of adjacent complete entries into one, in place.
    fn compact(&mut self) {
        let entries = self.deque.make_contiguous();
        let mut write = 0;
        for read in 0..entries.len() {
            let merges =
                write > 0 && entries[write - 1].is_complete() && entries[read].is_complete();
            if merges {
                let entry = std::mem::replace(&mut entries[read], Entry::placeholder());
                entries[write - 1].absorb(entry);
            } else {
                if write != read {
                    entries.swap(write, read);
                }
                write += 1;
            }
        }
        self.deque.truncate(write);
        self.unmerged_links = 0;
    }
}
