//! Global transaction identifiers of both flavors, and sets of them.
//!
//! * MySQL: `source_uuid[:tag]:transaction_id`; a set is a list of `uuid[:tag]:a-b:c-d`
//!   interval lists joined by commas (`gtid_executed` syntax).
//! * MariaDB: `domain-server-sequence`; a "set" is the list of the last GTID per replication
//!   domain (`gtid_slave_pos` syntax), since MariaDB sequence numbers are dense per domain.

use std::collections::BTreeMap;
use std::fmt;

/// The GTID of one transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Gtid {
    /// MySQL GTID.
    Mysql {
        /// Source server UUID, lower-case canonical text form.
        source_uuid: String,
        /// MySQL 8.3+ tag (`uuid:tag:n`), if any.
        tag: Option<String>,
        /// Transaction number, starting at 1.
        transaction_id: u64,
    },
    /// MariaDB GTID.
    Mariadb {
        /// Replication domain.
        domain_id: u32,
        /// Server that originated the transaction.
        server_id: u32,
        /// Sequence number within the domain.
        sequence: u64,
    },
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gtid::Mysql {
                source_uuid,
                tag: Some(tag),
                transaction_id,
            } => write!(f, "{source_uuid}:{tag}:{transaction_id}"),
            Gtid::Mysql {
                source_uuid,
                tag: None,
                transaction_id,
            } => write!(f, "{source_uuid}:{transaction_id}"),
            Gtid::Mariadb {
                domain_id,
                server_id,
                sequence,
            } => write!(f, "{domain_id}-{server_id}-{sequence}"),
        }
    }
}

/// Why a GTID set string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid GTID set `{input}`: {reason}")]
pub struct GtidSetParseError {
    /// The text that was parsed.
    pub input: String,
    /// What was wrong with it.
    pub reason: String,
}

/// The source of MySQL GTIDs: a server UUID and an optional tag (MySQL 8.3+).
pub type MysqlGtidSource = (String, Option<String>);

/// A set of executed transactions, in the syntax of the flavor that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GtidSet {
    /// No transaction yet (valid for both flavors).
    #[default]
    Empty,
    /// MySQL: for each `(uuid, tag)` a sorted list of disjoint, non-adjacent inclusive intervals.
    Mysql(BTreeMap<MysqlGtidSource, Vec<(u64, u64)>>),
    /// MariaDB: for each domain, the last GTID applied in it.
    Mariadb(BTreeMap<u32, (u32, u64)>),
}

impl GtidSet {
    /// Parses a set in the given flavor's syntax. An empty string is the empty set.
    pub fn parse(flavor: crate::Flavor, text: &str) -> Result<GtidSet, GtidSetParseError> {
        let err = |reason: String| GtidSetParseError {
            input: text.to_owned(),
            reason,
        };
        let trimmed: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        if trimmed.is_empty() {
            return Ok(GtidSet::Empty);
        }
        let mut set = GtidSet::Empty;
        for part in trimmed.split(',') {
            match flavor {
                crate::Flavor::Mariadb => {
                    let fields: Vec<&str> = part.split('-').collect();
                    let [d, s, q] = fields.as_slice() else {
                        return Err(err(format!("`{part}` is not `domain-server-sequence`")));
                    };
                    let gtid = Gtid::Mariadb {
                        domain_id: d.parse().map_err(|_| err(format!("bad domain id `{d}`")))?,
                        server_id: s.parse().map_err(|_| err(format!("bad server id `{s}`")))?,
                        sequence: q.parse().map_err(|_| err(format!("bad sequence `{q}`")))?,
                    };
                    if let GtidSet::Mariadb(map) = &set {
                        if let Gtid::Mariadb { domain_id, .. } = &gtid {
                            if map.contains_key(domain_id) {
                                return Err(err(format!("domain {domain_id} appears twice")));
                            }
                        }
                    }
                    set.add(&gtid);
                }
                crate::Flavor::Mysql => {
                    let mut fields = part.split(':');
                    let uuid = fields.next().unwrap_or_default().to_ascii_lowercase();
                    if !is_uuid(&uuid) {
                        return Err(err(format!("`{uuid}` is not a server UUID")));
                    }
                    let mut tag: Option<String> = None;
                    let mut any_interval = false;
                    for field in fields {
                        if field
                            .chars()
                            .next()
                            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                        {
                            tag = Some(field.to_ascii_lowercase());
                            continue;
                        }
                        let (a, b) = match field.split_once('-') {
                            Some((a, b)) => (a, b),
                            None => (field, field),
                        };
                        let a: u64 = a
                            .parse()
                            .map_err(|_| err(format!("bad interval `{field}`")))?;
                        let b: u64 = b
                            .parse()
                            .map_err(|_| err(format!("bad interval `{field}`")))?;
                        if a == 0 || b < a {
                            return Err(err(format!("bad interval `{field}`")));
                        }
                        set.add_mysql_interval(&uuid, tag.as_deref(), a, b);
                        any_interval = true;
                    }
                    if !any_interval {
                        return Err(err(format!("`{part}` has no interval")));
                    }
                }
            }
        }
        Ok(set)
    }

    /// Adds one transaction. Adding a GTID of the other flavor than the set holds replaces
    /// nothing and is ignored (a server cannot mix flavors).
    pub fn add(&mut self, gtid: &Gtid) {
        match gtid {
            Gtid::Mysql {
                source_uuid,
                tag,
                transaction_id,
            } => self.add_mysql_interval(
                source_uuid,
                tag.as_deref(),
                *transaction_id,
                *transaction_id,
            ),
            Gtid::Mariadb {
                domain_id,
                server_id,
                sequence,
            } => {
                if matches!(self, GtidSet::Empty) {
                    *self = GtidSet::Mariadb(BTreeMap::new());
                }
                if let GtidSet::Mariadb(map) = self {
                    map.insert(*domain_id, (*server_id, *sequence));
                }
            }
        }
    }

    fn add_mysql_interval(&mut self, uuid: &str, tag: Option<&str>, start: u64, end: u64) {
        if matches!(self, GtidSet::Empty) {
            *self = GtidSet::Mysql(BTreeMap::new());
        }
        let GtidSet::Mysql(map) = self else { return };
        let intervals = map
            .entry((uuid.to_owned(), tag.map(str::to_owned)))
            .or_default();
        // Fast path: appending right after the last interval (the normal streaming case).
        if let Some(last) = intervals.last_mut() {
            if start >= last.0 && start <= last.1.saturating_add(1) {
                last.1 = last.1.max(end);
                return;
            }
        }
        intervals.push((start, end));
        intervals.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
        for &(a, b) in intervals.iter() {
            match merged.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        *intervals = merged;
    }

    /// True when `gtid` is in the set (MariaDB: its sequence is at or below the domain's last).
    pub fn contains(&self, gtid: &Gtid) -> bool {
        match (self, gtid) {
            (
                GtidSet::Mysql(map),
                Gtid::Mysql {
                    source_uuid,
                    tag,
                    transaction_id,
                },
            ) => map
                .get(&(source_uuid.clone(), tag.clone()))
                .is_some_and(|iv| {
                    iv.iter()
                        .any(|&(a, b)| a <= *transaction_id && *transaction_id <= b)
                }),
            (
                GtidSet::Mariadb(map),
                Gtid::Mariadb {
                    domain_id,
                    sequence,
                    ..
                },
            ) => map
                .get(domain_id)
                .is_some_and(|&(_, last)| *sequence <= last),
            _ => false,
        }
    }

    /// What of `self` `server` (a server's executed set) does not hold, one clause for the
    /// operator, or `None` when it holds all of it. MariaDB: a domain the server lacks, or a
    /// sequence past the server's last in that domain; MySQL: GTIDs outside its intervals.
    pub fn not_within(&self, server: &GtidSet) -> Option<String> {
        let missing: Vec<String> = match (self, server) {
            (GtidSet::Empty, _) => Vec::new(),
            (GtidSet::Mariadb(mine), _) => {
                let theirs = match server {
                    GtidSet::Mariadb(theirs) => Some(theirs),
                    _ => None,
                };
                mine.iter()
                    .filter_map(|(domain, (server_id, sequence))| {
                        let last = theirs.and_then(|theirs| theirs.get(domain));
                        match last {
                            Some((_, last)) if last >= sequence => None,
                            Some((last_server, last)) => Some(format!(
                                "{domain}-{server_id}-{sequence} (the server's last in domain {domain} is {domain}-{last_server}-{last})"
                            )),
                            None => Some(format!(
                                "{domain}-{server_id}-{sequence} (the server has no domain {domain})"
                            )),
                        }
                    })
                    .collect()
            }
            (GtidSet::Mysql(mine), _) => {
                let theirs = match server {
                    GtidSet::Mysql(theirs) => Some(theirs),
                    _ => None,
                };
                mine.iter()
                    .flat_map(|(source, intervals)| {
                        let server_intervals: &[(u64, u64)] = theirs
                            .and_then(|theirs| theirs.get(source))
                            .map_or(&[], Vec::as_slice);
                        intervals.iter().filter_map(move |&(start, end)| {
                            // The server's intervals are merged: a covered interval lies
                            // inside one of them.
                            let holding = server_intervals
                                .iter()
                                .find(|&&(a, b)| a <= start && start <= b);
                            let first_missing = match holding {
                                Some(&(_, b)) if end <= b => return None,
                                Some(&(_, b)) => b + 1,
                                None => start,
                            };
                            Some(format!(
                                "{}:{first_missing} (of {}:{start}-{end})",
                                source.0, source.0
                            ))
                        })
                    })
                    .collect()
            }
        };
        (!missing.is_empty()).then(|| missing.join(", "))
    }

    /// True for the empty set.
    pub fn is_empty(&self) -> bool {
        match self {
            GtidSet::Empty => true,
            GtidSet::Mysql(map) => map.is_empty(),
            GtidSet::Mariadb(map) => map.is_empty(),
        }
    }
}

impl fmt::Display for GtidSet {
    /// Prints the set in the server's own syntax (parseable by [`GtidSet::parse`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GtidSet::Empty => Ok(()),
            GtidSet::Mysql(map) => {
                let mut first = true;
                for ((uuid, tag), intervals) in map {
                    if !first {
                        f.write_str(",")?;
                    }
                    first = false;
                    f.write_str(uuid)?;
                    if let Some(tag) = tag {
                        write!(f, ":{tag}")?;
                    }
                    for (a, b) in intervals {
                        if a == b {
                            write!(f, ":{a}")?;
                        } else {
                            write!(f, ":{a}-{b}")?;
                        }
                    }
                }
                Ok(())
            }
            GtidSet::Mariadb(map) => {
                let mut first = true;
                for (domain, (server, seq)) in map {
                    if !first {
                        f.write_str(",")?;
                    }
                    first = false;
                    write!(f, "{domain}-{server}-{seq}")?;
                }
                Ok(())
            }
        }
    }
}

impl serde::Serialize for GtidSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_set_not_within_the_servers_names_what_the_server_never_had() {
        let mariadb = |text| GtidSet::parse(crate::Flavor::Mariadb, text).unwrap();
        assert_eq!(mariadb("0-1-5").not_within(&mariadb("0-1-9,1-2-3")), None);
        assert_eq!(mariadb("").not_within(&mariadb("0-1-9")), None);
        let ahead = mariadb("0-1-12,2-7-1")
            .not_within(&mariadb("0-1-9"))
            .unwrap();
        assert!(
            ahead.contains("0-1-12 (the server's last in domain 0 is 0-1-9)"),
            "{ahead}"
        );
        assert!(
            ahead.contains("2-7-1 (the server has no domain 2)"),
            "{ahead}"
        );

        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mysql = |text: &str| GtidSet::parse(crate::Flavor::Mysql, text).unwrap();
        let server = mysql(&format!("{uuid}:1-100:200-300"));
        assert_eq!(
            mysql(&format!("{uuid}:1-50:210-300")).not_within(&server),
            None
        );
        let gap = mysql(&format!("{uuid}:1-150")).not_within(&server).unwrap();
        assert!(
            gap.contains(&format!("{uuid}:101 (of {uuid}:1-150)")),
            "{gap}"
        );
        let other = "4e11fa47-71ca-11e1-9e33-c80aa9429562";
        let foreign = mysql(&format!("{other}:1-3")).not_within(&server).unwrap();
        assert!(
            foreign.contains(&format!("{other}:1 (of {other}:1-3)")),
            "{foreign}"
        );
    }

    use super::*;
    use crate::Flavor;

    const U: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

    #[test]
    fn mysql_set_round_trips_and_merges() {
        let set = GtidSet::parse(Flavor::Mysql, &format!("{U}:1-5:7, {U}:6")).unwrap();
        assert_eq!(set.to_string(), format!("{U}:1-7"));
        let tagged = GtidSet::parse(Flavor::Mysql, &format!("{U}:1-3:blue:1-2")).unwrap();
        assert_eq!(tagged.to_string(), format!("{U}:1-3,{U}:blue:1-2"));
    }

    #[test]
    fn mysql_add_and_contains() {
        let mut set = GtidSet::Empty;
        for n in [1, 2, 3, 5] {
            set.add(&Gtid::Mysql {
                source_uuid: U.into(),
                tag: None,
                transaction_id: n,
            });
        }
        assert_eq!(set.to_string(), format!("{U}:1-3:5"));
        let g = |n| Gtid::Mysql {
            source_uuid: U.into(),
            tag: None,
            transaction_id: n,
        };
        assert!(set.contains(&g(2)));
        assert!(!set.contains(&g(4)));
        set.add(&g(4));
        assert_eq!(set.to_string(), format!("{U}:1-5"));
    }

    #[test]
    fn mariadb_list_keeps_last_per_domain() {
        let mut set = GtidSet::parse(Flavor::Mariadb, "0-1-100,2-5-7").unwrap();
        set.add(&Gtid::Mariadb {
            domain_id: 0,
            server_id: 1,
            sequence: 101,
        });
        assert_eq!(set.to_string(), "0-1-101,2-5-7");
        assert!(set.contains(&Gtid::Mariadb {
            domain_id: 0,
            server_id: 9,
            sequence: 50
        }));
        assert!(!set.contains(&Gtid::Mariadb {
            domain_id: 1,
            server_id: 1,
            sequence: 1
        }));
    }

    #[test]
    fn bad_sets_are_errors() {
        for bad in ["0-1", "a-b-c", "0-1-2,0-1-3"] {
            assert!(GtidSet::parse(Flavor::Mariadb, bad).is_err(), "{bad}");
        }
        for bad in ["nope:1", U, &format!("{U}:0"), &format!("{U}:5-3")] {
            assert!(GtidSet::parse(Flavor::Mysql, bad).is_err(), "{bad}");
        }
        assert_eq!(GtidSet::parse(Flavor::Mysql, " ").unwrap(), GtidSet::Empty);
    }
}
