//! Adding one GTID to a set without the allocation [`GtidSet::add`] makes for a MySQL GTID
//! (it builds an owned `(uuid, tag)` key to look its interval list up), once per released
//! transaction. The result is always exactly `GtidSet::add`'s.

use outbox_binlog::{Gtid, GtidSet};

/// A MySQL set with more sources than this is searched by [`GtidSet::add`] (a linear scan
/// is only cheaper for a few).
const LINEAR_SCAN_LIMIT: usize = 8;

/// Adds `gtid` to `set`, as [`GtidSet::add`] does.
pub(super) fn add_gtid(set: &mut GtidSet, gtid: &Gtid) {
    match (&mut *set, gtid) {
        (
            GtidSet::Mysql(map),
            Gtid::Mysql {
                source_uuid,
                tag,
                transaction_id,
            },
        ) if map.len() <= LINEAR_SCAN_LIMIT => {
            let intervals = map.iter_mut().find_map(|((uuid, source_tag), intervals)| {
                (uuid == source_uuid && source_tag == tag).then_some(intervals)
            });
            // The streaming case: right after (or inside) the source's last interval.
            if let Some(last) = intervals.and_then(|intervals| intervals.last_mut()) {
                if *transaction_id >= last.0 && *transaction_id <= last.1.saturating_add(1) {
                    last.1 = last.1.max(*transaction_id);
                    return;
                }
            }
            set.add(gtid);
        }
        // MariaDB (`GtidSet::add` allocates nothing for it), a bigger MySQL set, or a
        // GTID of the other flavor.
        _ => set.add(gtid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_binlog::Flavor;
    use proptest::prelude::*;

    const UUIDS: [&str; 2] = [
        "3e11fa47-71ca-11e1-9e33-c80aa9429562",
        "4e11fa47-71ca-11e1-9e33-c80aa9429562",
    ];

    fn mysql(source: usize, tagged: bool, id: u64) -> Gtid {
        Gtid::Mysql {
            source_uuid: UUIDS[source % 2].to_owned(),
            tag: tagged.then(|| "blue".to_owned()),
            transaction_id: id,
        }
    }

    fn mariadb(domain: u32, server: u32, sequence: u64) -> Gtid {
        Gtid::Mariadb {
            domain_id: domain,
            server_id: server,
            sequence,
        }
    }

    #[test]
    fn a_gtid_of_the_other_flavor_is_ignored_as_by_gtid_set_add() {
        let mut set = GtidSet::parse(Flavor::Mariadb, "0-1-5").unwrap();
        add_gtid(&mut set, &mysql(0, false, 3));
        assert_eq!(set.to_string(), "0-1-5");
        let mut set = GtidSet::parse(Flavor::Mysql, &format!("{}:1-3", UUIDS[0])).unwrap();
        add_gtid(&mut set, &mariadb(0, 1, 9));
        assert_eq!(set.to_string(), format!("{}:1-3", UUIDS[0]));
    }

    proptest! {
        /// Any sequence of GTIDs (in order, with gaps, repeats, out of order, tags, several
        /// sources) builds the same set as `GtidSet::add`.
        #[test]
        fn same_set_as_gtid_set_add(
            gtids in prop::collection::vec((0usize..3, any::<bool>(), 1u64..40), 0..60),
            mariadb_flavor in any::<bool>(),
        ) {
            let mut fast = GtidSet::Empty;
            let mut expected = GtidSet::Empty;
            for &(source, tagged, id) in &gtids {
                let gtid = if mariadb_flavor {
                    mariadb(source as u32, u32::from(tagged), id)
                } else {
                    mysql(source, tagged, id)
                };
                add_gtid(&mut fast, &gtid);
                expected.add(&gtid);
                prop_assert_eq!(&fast, &expected);
            }
        }

        /// Past the linear scan limit, too.
        #[test]
        fn same_set_with_many_sources(ids in prop::collection::vec((0u64..12, 1u64..20), 0..80)) {
            let mut fast = GtidSet::Empty;
            let mut expected = GtidSet::Empty;
            for &(source, id) in &ids {
                let gtid = Gtid::Mysql {
                    source_uuid: format!("{source:08x}-71ca-11e1-9e33-c80aa9429562"),
                    tag: None,
                    transaction_id: id,
                };
                add_gtid(&mut fast, &gtid);
                expected.add(&gtid);
                prop_assert_eq!(&fast, &expected);
            }
        }
    }
}
