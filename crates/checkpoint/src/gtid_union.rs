//! Union of GTID sets (the binlog crate offers adding one GTID at a time). Used by the ack
//! tracker to fold merged runs of transactions into its checkpoint without per-transaction
//! set snapshots.

use outbox_binlog::GtidSet;

/// Adds every transaction of `later` to `target`. `later` holds transactions that come after
/// `target`'s in binlog order, so for MariaDB (last GTID per domain) its entries win. Sets of
/// the other flavor are ignored, as [`GtidSet::add`] does.
pub(crate) fn union_into(target: &mut GtidSet, later: GtidSet) {
    match later {
        GtidSet::Empty => {}
        GtidSet::Mariadb(later_map) => match target {
            GtidSet::Empty => *target = GtidSet::Mariadb(later_map),
            GtidSet::Mariadb(target_map) => target_map.extend(later_map),
            GtidSet::Mysql(_) => {}
        },
        GtidSet::Mysql(later_map) => match target {
            GtidSet::Empty => *target = GtidSet::Mysql(later_map),
            GtidSet::Mysql(target_map) => {
                for (key, intervals) in later_map {
                    let existing = target_map.entry(key).or_default();
                    merge_intervals(existing, intervals);
                }
            }
            GtidSet::Mariadb(_) => {}
        },
    }
}

/// Merges sorted, disjoint inclusive intervals `more` into `list`, keeping `list` sorted,
/// disjoint and non-adjacent.
fn merge_intervals(list: &mut Vec<(u64, u64)>, more: Vec<(u64, u64)>) {
    // Fast path: `more` starts right after (or inside) `list`'s last interval.
    if let (Some(last), [(first_start, _), ..]) = (list.last(), more.as_slice()) {
        if *first_start >= last.0 {
            list.extend(more);
            coalesce_tail(list);
            return;
        }
    }
    list.extend(more);
    list.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(list.len());
    for &(start, end) in list.iter() {
        match merged.last_mut() {
            Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    *list = merged;
}

/// Coalesces a list that is sorted by start (after an append of sorted intervals that start
/// at or after the previous last start).
fn coalesce_tail(list: &mut Vec<(u64, u64)>) {
    let mut write = 0;
    for read in 1..list.len() {
        let (start, end) = list[read];
        if start <= list[write].1.saturating_add(1) {
            list[write].1 = list[write].1.max(end);
        } else {
            write += 1;
            list[write] = (start, end);
        }
    }
    list.truncate(write + 1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_binlog::{Flavor, Gtid};
    use proptest::prelude::*;

    const U: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const V: &str = "4e11fa47-71ca-11e1-9e33-c80aa9429562";

    fn mysql_gtid(uuid_index: u8, id: u64) -> Gtid {
        Gtid::Mysql {
            source_uuid: if uuid_index == 0 { U } else { V }.to_owned(),
            tag: None,
            transaction_id: id,
        }
    }

    #[test]
    fn mariadb_later_entries_win_per_domain() {
        let mut target = GtidSet::parse(Flavor::Mariadb, "0-1-10,1-1-5").unwrap();
        union_into(
            &mut target,
            GtidSet::parse(Flavor::Mariadb, "0-2-11,2-1-1").unwrap(),
        );
        assert_eq!(target.to_string(), "0-2-11,1-1-5,2-1-1");
    }

    proptest! {
        /// Union equals adding every transaction one by one.
        #[test]
        fn mysql_union_matches_adding_one_by_one(
            first in prop::collection::vec((0u8..2, 1u64..60), 0..30),
            second in prop::collection::vec((0u8..2, 1u64..60), 0..30),
        ) {
            let mut target = GtidSet::Empty;
            let mut later = GtidSet::Empty;
            let mut expected = GtidSet::Empty;
            for &(uuid, id) in &first {
                target.add(&mysql_gtid(uuid, id));
                expected.add(&mysql_gtid(uuid, id));
            }
            for &(uuid, id) in &second {
                later.add(&mysql_gtid(uuid, id));
                expected.add(&mysql_gtid(uuid, id));
            }
            union_into(&mut target, later);
            prop_assert_eq!(target.to_string(), expected.to_string());
            prop_assert_eq!(target, expected);
        }
    }
}
