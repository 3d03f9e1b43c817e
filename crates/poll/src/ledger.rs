//! The claims being published: which rows of each claim Kafka has not acknowledged yet, so
//! a claim is marked once all of its rows are settled, and its lease renewed until then.

use std::collections::BTreeMap;

use crate::claim::{Claim, ClaimedRow};

/// A claimed row on its way to Kafka; the sink hands it back on the ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowTicket {
    /// The ledger's number for the row's claim.
    pub claim: u64,
    /// The row's `poll_seq`.
    pub sequence: u64,
}

/// How a row's publish ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowOutcome {
    /// Kafka acknowledged the record.
    Delivered,
    /// The record could not be routed, or Kafka rejected it for good: its dead letter was
    /// acknowledged instead; the row becomes DEAD with this reason.
    DeadLettered(String),
    /// The sink gave up on the record (Kafka unreachable or failing): the row goes back to
    /// PENDING with a backoff, or DEAD at `max_attempts`, with this reason.
    Failed(String),
}

/// A claim whose every row was settled: mark it ([`crate::Poller::settle`]), then tell the
/// ledger ([`ClaimLedger::marked`]); its lease is renewed until then.
#[derive(Debug, Clone, PartialEq)]
pub struct SettledClaim {
    /// The ledger's number for the claim.
    pub number: u64,
    /// Which configured table (the caller's index).
    pub table: usize,
    /// The claim, with its token.
    pub claim: Claim,
    /// Its dead-lettered rows and why.
    pub dead: Vec<(ClaimedRow, String)>,
    /// Its rows whose publish failed (to retry later) and why.
    pub failed: Vec<(ClaimedRow, String)>,
}

/// The open claims of one relay.
#[derive(Debug, Default)]
pub struct ClaimLedger {
    /// Open claims by their number.
    open: BTreeMap<u64, OpenClaim>,
    /// The next claim's number.
    next_claim: u64,
    /// Rows claimed and not settled yet, over every open claim: the caller bounds it.
    rows_in_flight: usize,
    /// Settled claims not marked yet, by number: (table, token). Their leases are renewed
    /// too, or a slow mark would let another relay publish them again.
    marking: BTreeMap<u64, (usize, String)>,
}

/// A claim being published.
#[derive(Debug)]
struct OpenClaim {
    table: usize,
    claim: Claim,
    /// Rows not settled yet; the claim closes at zero.
    unsettled: usize,
    /// Rows settled as dead letters, by sequence, with the reason.
    dead: Vec<(u64, String)>,
    /// Rows whose publish failed, by sequence, with the reason.
    failed: Vec<(u64, String)>,
}

impl ClaimLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens `claim` of table `table`: one ticket per row, in the claim's order. An empty
    /// claim opens nothing.
    pub fn open(&mut self, table: usize, claim: Claim) -> Vec<RowTicket> {
        if claim.rows.is_empty() {
            return Vec::new();
        }
        let number = self.next_claim;
        self.next_claim += 1;
        let tickets: Vec<RowTicket> = claim
            .rows
            .iter()
            .map(|row| RowTicket {
                claim: number,
                sequence: row.sequence,
            })
            .collect();
        self.rows_in_flight += tickets.len();
        self.open.insert(
            number,
            OpenClaim {
                table,
                unsettled: tickets.len(),
                claim,
                dead: Vec::new(),
                failed: Vec::new(),
            },
        );
        tickets
    }

    /// Settles one row; returns its claim once every row of it is settled. A ticket of no
    /// open claim (settled twice) changes nothing.
    pub fn settle(&mut self, ticket: RowTicket, outcome: RowOutcome) -> Option<SettledClaim> {
        let open = self.open.get_mut(&ticket.claim)?;
        if open.unsettled == 0 {
            return None;
        }
        open.unsettled -= 1;
        self.rows_in_flight -= 1;
        match outcome {
            RowOutcome::Delivered => {}
            RowOutcome::DeadLettered(reason) => open.dead.push((ticket.sequence, reason)),
            RowOutcome::Failed(reason) => open.failed.push((ticket.sequence, reason)),
        }
        if open.unsettled > 0 {
            return None;
        }
        let OpenClaim {
            table,
            claim,
            dead,
            failed,
            ..
        } = self.open.remove(&ticket.claim)?;
        let rows_of = |settled: Vec<(u64, String)>| {
            settled
                .into_iter()
                .filter_map(|(sequence, reason)| {
                    claim
                        .rows
                        .iter()
                        .find(|row| row.sequence == sequence)
                        .map(|row| (row.clone(), reason))
                })
                .collect()
        };
        let dead = rows_of(dead);
        let failed = rows_of(failed);
        self.marking
            .insert(ticket.claim, (table, claim.token.clone()));
        Some(SettledClaim {
            number: ticket.claim,
            table,
            claim,
            dead,
            failed,
        })
    }

    /// Rows claimed and not settled yet.
    pub fn rows_in_flight(&self) -> usize {
        self.rows_in_flight
    }

    /// A settled claim was marked: its lease needs no renewing any more.
    pub fn marked(&mut self, number: u64) {
        self.marking.remove(&number);
    }

    /// Whether a claim is being published or marked: rows of its aggregates become
    /// claimable once it is marked.
    pub fn has_claims_out(&self) -> bool {
        !self.open.is_empty() || !self.marking.is_empty()
    }

    /// The tokens of the claims being published or marked, by table: their leases need
    /// renewing.
    pub fn open_tokens(&self) -> BTreeMap<usize, Vec<String>> {
        let mut tokens: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        let open = self
            .open
            .values()
            .map(|open| (open.table, &open.claim.token));
        let marking = self.marking.values().map(|(table, token)| (*table, token));
        for (table, token) in open.chain(marking) {
            tokens.entry(table).or_default().push(token.clone());
        }
        tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(token: &str, sequences: &[u64]) -> Claim {
        Claim {
            token: token.into(),
            rows: sequences
                .iter()
                .map(|&sequence| ClaimedRow {
                    sequence,
                    event_id: format!("e{sequence}"),
                    aggregate_type: "order".into(),
                    aggregate_id: format!("a{sequence}"),
                    attempts: 1,
                })
                .collect(),
        }
    }

    #[test]
    fn a_claim_settles_when_its_last_row_does_in_any_order() {
        let mut ledger = ClaimLedger::new();
        let tickets = ledger.open(0, claim("t1", &[1, 2, 3]));
        assert_eq!(tickets.len(), 3);
        assert_eq!(ledger.rows_in_flight(), 3);
        assert_eq!(ledger.settle(tickets[2], RowOutcome::Delivered), None);
        assert_eq!(
            ledger.settle(tickets[0], RowOutcome::DeadLettered("too large".into())),
            None
        );
        let more = ledger.open(0, claim("t0", &[9]));
        let alone = ledger
            .settle(more[0], RowOutcome::Failed("no ack".into()))
            .expect("a one-row claim settles at once");
        assert_eq!(alone.failed[0].0.sequence, 9);
        assert!(alone.dead.is_empty());
        let settled = ledger
            .settle(tickets[1], RowOutcome::Delivered)
            .expect("the last row settles the claim");
        assert_eq!(settled.claim.token, "t1");
        assert_eq!(settled.dead.len(), 1);
        assert_eq!(settled.dead[0].0.sequence, 1);
        assert_eq!(settled.dead[0].1, "too large");
        assert!(settled.failed.is_empty());
        assert_eq!(ledger.rows_in_flight(), 0);
        // Renewed until marked.
        assert_eq!(
            ledger.open_tokens(),
            BTreeMap::from([(0, vec!["t1".to_owned(), "t0".to_owned()])])
        );
        assert!(ledger.has_claims_out());
        ledger.marked(alone.number);
        ledger.marked(settled.number);
        assert!(ledger.open_tokens().is_empty());
        assert!(!ledger.has_claims_out());
    }

    #[test]
    fn claims_are_apart_and_a_second_settle_changes_nothing() {
        let mut ledger = ClaimLedger::new();
        let first = ledger.open(0, claim("t1", &[1]));
        let second = ledger.open(1, claim("t2", &[7, 8]));
        assert!(ledger.open(0, claim("empty", &[])).is_empty());
        assert_eq!(
            ledger.open_tokens(),
            BTreeMap::from([(0, vec!["t1".to_owned()]), (1, vec!["t2".to_owned()])])
        );
        let settled = ledger.settle(first[0], RowOutcome::Delivered).unwrap();
        assert_eq!((settled.table, settled.claim.token.as_str()), (0, "t1"));
        assert_eq!(ledger.settle(first[0], RowOutcome::Delivered), None);
        assert_eq!(ledger.rows_in_flight(), 2);
        assert_eq!(ledger.settle(second[1], RowOutcome::Delivered), None);
        assert_eq!(ledger.rows_in_flight(), 1);
    }
}
