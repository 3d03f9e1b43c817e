//! What the audit keeps per expected event: hashes, not bytes, so a million rows fit in
//! about a hundred MiB whatever their payloads.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// Hashes of the parts of a record the audit compares (topic, key, value). SipHash with
/// fixed keys: equal within one process, which is all an audit needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordDigest {
    /// The topic's hash.
    topic: u64,
    /// The key's hash (`None` hashes apart from an empty key).
    key: u64,
    /// The value's hash (a tombstone hashes apart from an empty value).
    value: u64,
}

fn hash_of(part: impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    part.hash(&mut hasher);
    hasher.finish()
}

impl RecordDigest {
    pub(crate) fn of(topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) -> Self {
        Self {
            topic: hash_of(topic),
            key: hash_of(key),
            value: hash_of(value),
        }
    }

    /// The parts of `found` that differ from `self`, by name.
    pub(crate) fn differing_parts(&self, found: &Self) -> Vec<&'static str> {
        let mut parts = Vec::new();
        if self.topic != found.topic {
            parts.push("topic");
        }
        if self.key != found.key {
            parts.push("key");
        }
        if self.value != found.value {
            parts.push("payload");
        }
        parts
    }
}

/// An event id as the map's key: 128 bits of two independent hashes of its text (a
/// collision among a million ids has a chance near 2^-88), so the map holds no strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct IdKey(u128);

impl IdKey {
    pub(crate) fn of(id: &[u8]) -> Self {
        let high = u128::from(hash_of(id));
        let low = u128::from(outbox_kafka::dead_letter::fnv1a64(id));
        Self((high << 64) | low)
    }
}

/// What the window's rows should have become in Kafka.
#[derive(Debug, Clone, Copy)]
struct Expected {
    /// What the router makes of the row.
    digest: RecordDigest,
    /// Records read with this id, equal or not (more than one: at-least-once duplicates).
    seen: u32,
}

/// What a record read from Kafka is, measured against the window's rows.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Match {
    /// Its row is in the window and it is what the router makes of it.
    Same {
        /// It was read before (an at-least-once duplicate).
        duplicate: bool,
    },
    /// Its row is in the window; these parts differ from what the router makes of it.
    Differs(Vec<&'static str>),
    /// No row of the window has its id.
    NotInWindow,
}

/// The window's events by id.
#[derive(Debug, Default)]
pub(crate) struct ExpectedEvents {
    by_id: HashMap<IdKey, Expected>,
}

impl ExpectedEvents {
    /// Remembers a row's event; `false` when its id was already there (two rows, one id).
    pub(crate) fn insert(&mut self, id: &[u8], digest: RecordDigest) -> bool {
        self.by_id
            .insert(IdKey::of(id), Expected { digest, seen: 0 })
            .is_none()
    }

    /// Counts a record read from Kafka against its row.
    pub(crate) fn record_found(&mut self, id: &[u8], found: &RecordDigest) -> Match {
        let Some(expected) = self.by_id.get_mut(&IdKey::of(id)) else {
            return Match::NotInWindow;
        };
        // A record that differs still delivered the row's event, changed afterwards (an
        // UPDATE of the row after publish): reported, never refilled.
        expected.seen = expected.seen.saturating_add(1);
        let parts = expected.digest.differing_parts(found);
        if parts.is_empty() {
            Match::Same {
                duplicate: expected.seen > 1,
            }
        } else {
            Match::Differs(parts)
        }
    }

    /// Whether a record with `id` was read (`None`: not a row of the window).
    pub(crate) fn delivered(&self, id: &[u8]) -> Option<bool> {
        self.by_id
            .get(&IdKey::of(id))
            .map(|expected| expected.seen > 0)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_matches_its_row_or_names_what_differs() {
        let mut expected = ExpectedEvents::default();
        let row = RecordDigest::of("orders", Some(b"42"), Some(b"{\"a\":1}"));
        assert!(expected.insert(b"id-1", row));
        assert!(!expected.insert(b"id-1", row));
        assert_eq!(expected.delivered(b"id-1"), Some(false));
        assert_eq!(
            expected.record_found(
                b"id-1",
                &RecordDigest::of("orders", Some(b"42"), Some(b"{}"))
            ),
            Match::Differs(vec!["payload"])
        );
        assert_eq!(expected.delivered(b"id-1"), Some(true));
        assert_eq!(
            expected.record_found(
                b"id-1",
                &RecordDigest::of("order", None, Some(b"{\"a\":1}"))
            ),
            Match::Differs(vec!["topic", "key"])
        );
        assert_eq!(
            expected.record_found(b"id-1", &row),
            Match::Same { duplicate: true }
        );
        assert!(expected.insert(b"id-3", row));
        assert_eq!(
            expected.record_found(b"id-3", &row),
            Match::Same { duplicate: false }
        );
        assert_eq!(expected.record_found(b"id-2", &row), Match::NotInWindow);
        assert_eq!(expected.delivered(b"id-2"), None);
    }

    #[test]
    fn a_tombstone_is_not_an_empty_value() {
        assert_ne!(
            RecordDigest::of("t", Some(b"k"), None),
            RecordDigest::of("t", Some(b"k"), Some(b""))
        );
    }
}
