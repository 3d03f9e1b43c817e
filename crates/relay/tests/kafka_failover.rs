//! Standby failover (`[ha]`) with real processes: three relays with the same connector name
//! and a MySQL checkpoint store on a scratch MariaDB, the real Apache Kafka broker deciding
//! who leads. The leader is found through its `outbox_relay_leader` metric.
//!
//! * `kill_loop_*` (issue 25 part 2): a loop of kill -9 of the leader, of a standby, a
//!   SIGSTOP'd zombie and a double fault while a writer commits all along, with the MySQL
//!   store (at-least-once) and exactly-once: every event arrives (also through Kafka's
//!   console consumer; `read_committed` exactly once), no standby publishes, and the time
//!   from each disturbance to the first record the new leader produced (records carry the
//!   producer's send time, `timestamp_source = "producer_time"`) is measured. The target,
//!   p99 within the session timeout plus 2 s, is a speed target: the benchmark
//!   (`scripts/bench-failover.sh`, 30 rounds, nothing else running) asserts it
//!   (`OUTBOX_RELAY_FAILOVER_TARGET=enforce`); in the test suite, where other tests share
//!   the two cores (exactly-once sits 1.7 s above the session timeout on a quiet machine,
//!   2.2 s was seen in CI), only a takeover that does not happen within two session
//!   timeouts plus 2 s fails.
//! * `a_paused_leader_is_fenced_and_rejoins_as_a_standby`: SIGSTOP of the leader until
//!   another relay leads, then SIGCONT: the stored checkpoint never moves backwards (read
//!   from the table all along), nothing is lost, the old leader stops publishing and is a
//!   standby (`outbox_relay_leader` 0).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use mysql_async::prelude::Queryable;
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::ScratchMariadb;

/// `[ha] session_timeout_ms` of the test relays (the broker's minimum by default).
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// What a failover may take beyond the session timeout: the rebalance, the new leader's
/// start (source connection, checkpoint take-over, producer) and its first send.
const FAILOVER_SLACK: Duration = Duration::from_secs(6);

fn sum_of(samples: &BTreeMap<String, f64>, family: &str) -> f64 {
    samples
        .iter()
        .filter(|(name, _)| name.as_str() == family || name.starts_with(&format!("{family}{{")))
        .map(|(_, value)| value)
        .sum()
}

/// One relay of the group and its metrics address.
struct HaRelay {
    relay: Relay,
    metrics: String,
}

impl HaRelay {
    /// `outbox_relay_leader` (None: not answering, e.g. stopped or starting).
    async fn leader_metric(&self) -> Option<f64> {
        scrape_metrics(&self.metrics)
            .await
            .ok()
            .and_then(|samples| samples.get("outbox_relay_leader").copied())
    }
}

/// Where a group keeps its checkpoint, which decides its delivery mode.
#[derive(Debug, Clone, Copy, PartialEq)]
enum HaStore {
    /// At-least-once, the checkpoint in a MySQL table of the scratch server.
    Mysql,
    /// Exactly-once (Kafka transactions), the checkpoint on a compacted topic `TAG.checkpoints`.
    KafkaExactlyOnce,
}

/// `count` relays (not started) sharing connector `TAG` and the lease topic `TAG.lease`.
async fn ha_group(db: &ScratchMariadb, broker: &KafkaBroker, count: usize) -> Vec<HaRelay> {
    ha_group_with(db, broker, count, HaStore::Mysql).await
}

async fn ha_group_with(
    db: &ScratchMariadb,
    broker: &KafkaBroker,
    count: usize,
    store: HaStore,
) -> Vec<HaRelay> {
    if store == HaStore::Mysql {
        db.exec(&["CREATE DATABASE outbox_relay"]).await.unwrap();
    }
    (0..count)
        .map(|_| {
            let mut setup = RelaySetup::new(db, &broker.bootstrap());
            match store {
                HaStore::Mysql => setup.mysql_checkpoint_url = Some(db.url()),
                HaStore::KafkaExactlyOnce => {
                    setup.kafka_checkpoint_topic = Some(format!("{}.checkpoints", db.tag()))
                }
            }
            let metrics = free_loopback_address();
            setup.metrics_listen = Some(metrics.clone());
            setup.shutdown_timeout_ms = Some(2000);
            let relay = Relay::prepare(&setup);
            relay.edit_config(&[
                (
                    "preset = \"seeds\"",
                    "preset = \"seeds\"\ntimestamp_source = \"producer_time\"",
                ),
                (
                    "[pipeline]",
                    &format!(
                        "[ha]\nenabled = true\nlease_topic = \"{}.lease\"\nsession_timeout_ms = {}\n\n[pipeline]",
                        db.tag(),
                        SESSION_TIMEOUT.as_millis()
                    ),
                ),
            ]);
            match store {
                HaStore::Mysql => relay.edit_config(&[(
                    "connector = \"test\"",
                    &format!("connector = \"{}\"", db.tag()),
                )]),
                HaStore::KafkaExactlyOnce => relay.edit_config(&[(
                    "[kafka]\n",
                    "[kafka]\ndelivery = \"exactly_once\"\ntransaction_timeout_ms = 20000\n",
                )]),
            }
            HaRelay { relay, metrics }
        })
        .collect()
}

/// The index of the one relay whose leader metric is 1 (and no other's), waiting up to
/// `limit`; `skip` is not asked (a stopped process).
async fn wait_for_single_leader(group: &[HaRelay], skip: Option<usize>, limit: Duration) -> usize {
    let started = Instant::now();
    loop {
        let mut leaders = Vec::new();
        for (index, member) in group.iter().enumerate() {
            if Some(index) == skip {
                continue;
            }
            if member.leader_metric().await == Some(1.0) {
                leaders.push(index);
            }
        }
        if leaders.len() == 1 {
            return leaders[0];
        }
        if started.elapsed() > limit {
            let tails: Vec<String> = group.iter().map(|m| m.relay.log_tail(25)).collect();
            panic!(
                "no single leader within {limit:?} (leaders {leaders:?}); logs:\n{}",
                tails.join("\n-----\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A writer committing one-event transactions every 25 ms until stopped; returns it.
fn spawn_writer(
    mut writer: ShopWriter,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<ShopWriter> {
    tokio::spawn(async move {
        let mut index = 0u32;
        while !stop.load(Ordering::SeqCst) {
            writer.alternating_transaction(index, 1, true, false).await;
            index += 1;
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        writer
    })
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index]
}

/// The stored checkpoint as the table holds it: (binlog file, position, leader epoch).
async fn stored_checkpoint(
    conn: &mut mysql_async::Conn,
    connector: &str,
) -> Option<(String, u64, Option<u64>)> {
    let row: Option<(String, u64, String)> = conn
        .exec_first(
            "SELECT binlog_file, binlog_position, checkpoint_json \
             FROM outbox_relay.relay_checkpoints WHERE connector_name = ?",
            (connector,),
        )
        .await
        .ok()
        .flatten();
    row.map(|(file, position, json)| {
        let epoch = serde_json::from_str::<serde_json::Value>(&json)
            .ok()
            .and_then(|doc| doc.get("leader_epoch").and_then(|e| e.as_u64()));
        (file, position, epoch)
    })
}

/// Reads the MySQL store's checkpoint every 20 ms while `watching`: it must never move
/// backwards and its epoch never shrink (the task panics otherwise). Returns every distinct
/// checkpoint seen, in order.
fn spawn_checkpoint_watch(
    db: &ScratchMariadb,
    watching: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(String, u64, Option<u64>)>> {
    let url = db.url();
    let connector = db.tag().to_string();
    tokio::spawn(async move {
        let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
        let mut history: Vec<(String, u64, Option<u64>)> = Vec::new();
        while watching.load(Ordering::SeqCst) {
            if let Some(now) = stored_checkpoint(&mut conn, &connector).await {
                if let Some(last) = history.last() {
                    assert!(
                        (now.0.as_str(), now.1) >= (last.0.as_str(), last.1),
                        "the checkpoint moved backwards: {last:?} -> {now:?}"
                    );
                    assert!(now.2 >= last.2, "the epoch shrank: {last:?} -> {now:?}");
                }
                if history.last() != Some(&now) {
                    history.push(now);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = conn.disconnect().await;
        history
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_fenced_and_rejoins_as_a_standby() {
    zombie_scenario(false).await;
}

/// The same with a lease that learns of the loss late (`OUTBOX_RELAY_TEST_LEASE_DEAF=1`:
/// it ends a term only when the store refuses the epoch): the woken zombie goes on reading
/// and publishing, and it is the checkpoint store that refuses its commits (stale leader
/// epoch) and sends it back to standby; the checkpoint still never moves backwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_that_learns_late_is_fenced_by_the_checkpoint_store() {
    zombie_scenario(true).await;
}

async fn zombie_scenario(lease_deaf: bool) {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut group = ha_group(&db, broker, 2).await;
    for member in &mut group {
        if lease_deaf {
            member
                .relay
                .start_with_env(&[("OUTBOX_RELAY_TEST_LEASE_DEAF", "1")]);
        } else {
            member.relay.start();
        }
    }
    let stop_writing = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(
        ShopWriter::connect(&db, "zombie").await,
        stop_writing.clone(),
    );
    let topics: Vec<String> = ALTERNATING_AGGREGATE_TYPES
        .iter()
        .map(|t| topic_for(&db, t))
        .collect();

    // Watch the stored checkpoint all along: it must never move backwards, and its epoch
    // never shrink.
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = spawn_checkpoint_watch(&db, watching.clone());

    let zombie = wait_for_single_leader(&group, None, Duration::from_secs(60)).await;
    let other = 1 - zombie;
    tokio::time::sleep(Duration::from_secs(2)).await;
    group[zombie].relay.send_signal("STOP");
    let stopped_at = Instant::now();
    let took_over = wait_for_single_leader(
        &group,
        Some(zombie),
        SESSION_TIMEOUT + FAILOVER_SLACK + Duration::from_secs(10),
    )
    .await;
    assert_eq!(took_over, other);
    println!(
        "the standby took over {:?} after SIGSTOP",
        stopped_at.elapsed()
    );
    // Let the new leader commit a few checkpoints of its own, then wake the zombie.
    tokio::time::sleep(Duration::from_secs(2)).await;
    group[zombie].relay.send_signal("CONT");

    // The zombie notices, stops publishing and is a standby; the new leader stays.
    let started = Instant::now();
    loop {
        let zombie_leader = group[zombie].leader_metric().await;
        if zombie_leader == Some(0.0) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the zombie still says leader = {zombie_leader:?}; log:\n{}",
            group[zombie].relay.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let zombie_metrics = scrape_metrics(&group[zombie].metrics).await.unwrap();
    assert!(
        sum_of(&zombie_metrics, "outbox_relay_fencing_events_total") >= 1.0,
        "no fencing event counted: {zombie_metrics:?}"
    );
    if lease_deaf {
        assert!(
            zombie_metrics
                .get("outbox_relay_fencing_events_total{kind=\"checkpoint_store\"}")
                .is_some_and(|count| *count >= 1.0),
            "the store did not fence the zombie: {zombie_metrics:?}\n{}",
            group[zombie].relay.log_tail(40)
        );
        assert!(
            group[zombie]
                .relay
                .log()
                .contains("refusing a checkpoint write of leader epoch"),
            "{}",
            group[zombie].relay.log_tail(40)
        );
    }
    let delivered_then = sum_of(&zombie_metrics, "outbox_relay_records_delivered_total");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let zombie_metrics = scrape_metrics(&group[zombie].metrics).await.unwrap();
    assert_eq!(
        sum_of(&zombie_metrics, "outbox_relay_records_delivered_total"),
        delivered_then,
        "the zombie still publishes"
    );
    assert_eq!(zombie_metrics.get("outbox_relay_leader"), Some(&0.0));
    assert_eq!(
        wait_for_single_leader(&group, None, Duration::from_secs(5)).await,
        other
    );
    let log = group[zombie].relay.log();
    assert!(
        log.contains("stopped publishing: no longer the leader"),
        "{}",
        group[zombie].relay.log_tail(40)
    );

    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_writing.store(true, Ordering::SeqCst);
    let writer = writer.await.unwrap();
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(60),
    )
    .await;
    let summary = assert_writer_delivery(
        "after the zombie woke",
        &writer,
        &records,
        &group[other].relay,
    );
    // The checkpoint reaches the end with the new leader's epoch.
    let end = {
        let mut conn = mysql_async::Conn::from_url(db.url()).await.unwrap();
        let end = conn_master_position(&mut conn).await;
        let _ = conn.disconnect().await;
        end
    };
    let started = Instant::now();
    loop {
        let mut conn = mysql_async::Conn::from_url(db.url()).await.unwrap();
        let stored = stored_checkpoint(&mut conn, db.tag()).await;
        let _ = conn.disconnect().await;
        if stored.as_ref().is_some_and(|(file, position, _)| {
            (file.as_str(), *position) >= (end.0.as_str(), end.1)
        }) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "checkpoint {stored:?} did not reach {end:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    watching.store(false, Ordering::SeqCst);
    let history = watcher.await.expect("the checkpoint never moved backwards");
    let epochs: Vec<Option<u64>> = history.iter().map(|entry| entry.2).collect();
    println!(
        "zombie test (lease deaf: {lease_deaf}): {summary:?}; checkpoint epochs seen: {epochs:?}"
    );
    assert!(
        epochs.windows(2).any(|pair| pair[0] < pair[1]),
        "the epoch never changed: {epochs:?}"
    );
    for member in &mut group {
        member.relay.assert_running("at the end");
        member.relay.stop_gracefully("graceful stop").await;
    }
    writer.close().await;
}

async fn conn_master_position(conn: &mut mysql_async::Conn) -> (String, u64) {
    let point = master_position(conn).await;
    (point.file.clone(), point.position)
}

/// How one round of the kill loop disturbs the group.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Disturbance {
    /// kill -9 of the leader; a standby must take over.
    KillLeader,
    /// kill -9 of a standby; the leader must stay.
    KillStandby,
    /// SIGSTOP of the leader until a standby leads, then (past the session timeout) SIGCONT:
    /// the woken zombie must stop publishing and become a standby.
    PauseLeader,
    /// A double fault: kill -9 of a standby, its restart, and 2 s later kill -9 of the leader,
    /// while the killed standby's old member still holds a place in the group (its session
    /// has not run out). Kafka's group protocol then waits for that member's session before
    /// the join that was already running completes, and restarts the dead leader's session
    /// timer there: this failover takes up to about two session timeouts.
    KillStandbyThenLeader,
}

/// Rounds 0..: leader, leader, standby, leader, pause, standby-then-leader, then again.
fn disturbance_of(round: usize) -> Disturbance {
    match round % 6 {
        2 => Disturbance::KillStandby,
        4 => Disturbance::PauseLeader,
        5 => Disturbance::KillStandbyThenLeader,
        _ => Disturbance::KillLeader,
    }
}

/// Rounds of the kill loop: `OUTBOX_RELAY_FAILOVER_ROUNDS` (docs/benchmarks.md runs 30),
/// 6 by default (every kind of disturbance, in about 80 s).
fn failover_rounds() -> usize {
    std::env::var("OUTBOX_RELAY_FAILOVER_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(6)
}

/// Who published while not leading, seen from the metrics: every 100 ms each relay's
/// `outbox_relay_leader` and `outbox_relay_records_delivered_total` are read; a relay
/// whose delivered count rose between two samples that both said `leader 0` published as
/// a standby (a zombie past its fencing point). Overlaps (two relays saying `leader 1` at
/// once: a paused zombie that has not yet noticed) are counted and timed.
#[derive(Debug, Default)]
struct LeadershipWatch {
    /// Samples taken (rounds of scrapes of every relay).
    samples: u64,
    /// Records delivered by a relay between two samples that both said it was a standby.
    standby_deliveries: f64,
    /// Samples in which two or more relays said `leader 1`.
    overlapping_samples: u64,
    /// Records delivered during overlapping samples, by the relays saying `leader 1`.
    overlap_deliveries: f64,
}

fn spawn_leadership_watch(
    addresses: Vec<String>,
    watching: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<LeadershipWatch> {
    tokio::spawn(async move {
        let mut watch = LeadershipWatch::default();
        // Per relay: (leader, delivered) of the previous sample that answered.
        let mut previous: Vec<Option<(f64, f64)>> = vec![None; addresses.len()];
        while watching.load(Ordering::SeqCst) {
            let mut now: Vec<Option<(f64, f64)>> = Vec::new();
            for address in &addresses {
                let scraped =
                    tokio::time::timeout(Duration::from_millis(300), scrape_metrics(address))
                        .await
                        .ok()
                        .and_then(Result::ok);
                now.push(scraped.and_then(|samples| {
                    let leader = samples.get("outbox_relay_leader").copied()?;
                    Some((
                        leader,
                        sum_of(&samples, "outbox_relay_records_delivered_total"),
                    ))
                }));
            }
            watch.samples += 1;
            let leaders = now
                .iter()
                .flatten()
                .filter(|(leader, _)| *leader == 1.0)
                .count();
            for (before, after) in previous.iter().zip(&now) {
                let (Some((was_leader, delivered_before)), Some((is_leader, delivered_after))) =
                    (before, after)
                else {
                    continue;
                };
                // A restarted process counts from 0 again: no interval to judge.
                let delivered = delivered_after - delivered_before;
                if delivered <= 0.0 {
                    continue;
                }
                if *was_leader == 0.0 && *is_leader == 0.0 {
                    watch.standby_deliveries += delivered;
                }
                if leaders >= 2 && *is_leader == 1.0 {
                    watch.overlap_deliveries += delivered;
                }
            }
            if leaders >= 2 {
                watch.overlapping_samples += 1;
            }
            for (slot, sample) in previous.iter_mut().zip(now) {
                if sample.is_some() {
                    *slot = sample;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        watch
    })
}

/// Waits until `member` answers its metrics as a standby (`leader 0`), up to `limit`.
async fn wait_for_standby(member: &HaRelay, limit: Duration, context: &str) {
    let started = Instant::now();
    while member.leader_metric().await != Some(0.0) {
        assert!(
            started.elapsed() < limit,
            "{context}: not a standby within {limit:?}; log:\n{}",
            member.relay.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Part 2 of issue 25: three relays under `[ha]`, a writer committing all along, and a loop
/// of [`failover_rounds`] disturbances (kill -9 of the leader, of a standby, SIGSTOP of the
/// leader past the session timeout then SIGCONT), each process restarted or woken. Checks:
/// nothing lost, per-key order kept, no standby publishes ([`LeadershipWatch`]), the stored
/// checkpoint never moves backwards (MySQL store), and in exactly-once mode a
/// `read_committed` consumer (Kafka's console consumer) sees every event exactly once.
/// Prints the failover times (disturbance -> first record sent after it, by the producer's
/// clock: `timestamp_source = "producer_time"`) as one `FAILOVER_FIGURES` JSON line.
async fn kill_loop(store: HaStore) {
    let rounds = failover_rounds();
    let (db, broker) = start_shop_database_and_broker().await;
    let mut group = ha_group_with(&db, broker, 3, store).await;
    for member in &mut group {
        member.relay.start();
    }
    let stop_writing = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(
        ShopWriter::connect(&db, "killloop").await,
        stop_writing.clone(),
    );
    let topics: Vec<String> = ALTERNATING_AGGREGATE_TYPES
        .iter()
        .map(|t| topic_for(&db, t))
        .collect();
    let watching = Arc::new(AtomicBool::new(true));
    let watch = spawn_leadership_watch(
        group.iter().map(|member| member.metrics.clone()).collect(),
        watching.clone(),
    );
    // The MySQL store's checkpoint, watched all along: never backwards, epochs never shrink.
    let checkpoint_watch =
        (store == HaStore::Mysql).then(|| spawn_checkpoint_watch(&db, watching.clone()));

    let failover_limit = SESSION_TIMEOUT + FAILOVER_SLACK + Duration::from_secs(10);
    // (disturbance, wall-clock ms) of every round that took the leader away.
    let mut takeovers: Vec<(Disturbance, i64)> = Vec::new();
    let mut leader = wait_for_single_leader(&group, None, Duration::from_secs(60)).await;
    for round in 0..rounds {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let disturbance = disturbance_of(round);
        let context = format!("round {round} ({disturbance:?})");
        group[leader].relay.assert_running(&context);
        match disturbance {
            Disturbance::KillLeader => {
                group[leader].relay.kill9();
                takeovers.push((disturbance, now_ms()));
                let next = wait_for_single_leader(&group, Some(leader), failover_limit).await;
                assert_ne!(next, leader, "{context}");
                group[leader].relay.start();
                wait_for_standby(&group[leader], Duration::from_secs(60), &context).await;
                leader = next;
            }
            Disturbance::KillStandby | Disturbance::KillStandbyThenLeader => {
                let standby = (leader + 1) % group.len();
                group[standby].relay.kill9();
                tokio::time::sleep(Duration::from_secs(1)).await;
                group[standby].relay.start();
                wait_for_standby(&group[standby], Duration::from_secs(60), &context).await;
                assert_eq!(
                    wait_for_single_leader(&group, None, Duration::from_secs(10)).await,
                    leader,
                    "{context}: a standby's restart moved the lead"
                );
                if disturbance == Disturbance::KillStandbyThenLeader {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    group[leader].relay.kill9();
                    takeovers.push((disturbance, now_ms()));
                    let next = wait_for_single_leader(
                        &group,
                        Some(leader),
                        failover_limit + SESSION_TIMEOUT,
                    )
                    .await;
                    group[leader].relay.start();
                    wait_for_standby(&group[leader], Duration::from_secs(60), &context).await;
                    leader = next;
                }
            }
            Disturbance::PauseLeader => {
                group[leader].relay.send_signal("STOP");
                let stopped = Instant::now();
                takeovers.push((disturbance, now_ms()));
                let next = wait_for_single_leader(&group, Some(leader), failover_limit).await;
                // Paused past the session timeout (the lease is gone), then woken.
                let past = SESSION_TIMEOUT + Duration::from_secs(1);
                if let Some(rest) = past.checked_sub(stopped.elapsed()) {
                    tokio::time::sleep(rest).await;
                }
                group[leader].relay.send_signal("CONT");
                wait_for_standby(&group[leader], Duration::from_secs(30), &context).await;
                leader = next;
            }
        }
        // Let the old member of a restarted process run out of session before the next
        // disturbance (the double fault above is the measured exception).
        tokio::time::sleep(SESSION_TIMEOUT).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_writing.store(true, Ordering::SeqCst);
    let writer = writer.await.unwrap();
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(90),
    )
    .await;
    let summary = assert_writer_delivery(
        &format!("after {rounds} rounds ({store:?})"),
        &writer,
        &records,
        &group[leader].relay,
    );
    watching.store(false, Ordering::SeqCst);
    let watch = watch.await.unwrap();
    let checkpoint_changes = match checkpoint_watch {
        Some(task) => Some(
            task.await
                .expect("the checkpoint never moved backwards")
                .len(),
        ),
        None => None,
    };
    assert_eq!(
        watch.standby_deliveries, 0.0,
        "a relay published while its metrics said standby: {watch:?}"
    );
    let committed_view = if store == HaStore::KafkaExactlyOnce {
        let mut committed = Vec::new();
        for topic in &topics {
            committed.extend(
                outbox_testkit::consume::console_consume_isolated(
                    &broker.bootstrap(),
                    topic,
                    1_000_000,
                    Duration::from_secs(5),
                    "read_committed",
                )
                .await
                .expect("kafka-console-consumer runs"),
            );
        }
        let view = assert_writer_delivery(
            "read_committed (kafka-console-consumer)",
            &writer,
            &committed,
            &group[leader].relay,
        );
        assert_eq!(
            view.duplicates, 0,
            "read_committed saw duplicates in exactly-once mode: {view:?}"
        );
        Some(view)
    } else {
        let console = assert_console_consumer_agrees(&broker.bootstrap(), &records).await;
        assert_writer_delivery(
            "kafka-console-consumer",
            &writer,
            &console,
            &group[leader].relay,
        );
        None
    };

    let each: Vec<(Disturbance, Duration)> = takeovers
        .iter()
        .map(|&(disturbance, at)| {
            let first = records
                .iter()
                .filter_map(|r| r.timestamp)
                .filter(|&t| t > at)
                .min()
                .unwrap_or_else(|| panic!("no record after the {disturbance:?} at {at}"));
            (
                disturbance,
                Duration::from_millis(u64::try_from(first - at).unwrap()),
            )
        })
        .collect();
    // The target holds for single faults; the double fault is reported (and bounded) apart.
    let mut failovers: Vec<Duration> = each
        .iter()
        .filter(|(disturbance, _)| *disturbance != Disturbance::KillStandbyThenLeader)
        .map(|(_, took)| *took)
        .collect();
    failovers.sort();
    let double_faults: Vec<Duration> = each
        .iter()
        .filter(|(disturbance, _)| *disturbance == Disturbance::KillStandbyThenLeader)
        .map(|(_, took)| *took)
        .collect();
    let (p50, p99, max) = (
        percentile(&failovers, 0.5),
        percentile(&failovers, 0.99),
        *failovers.last().expect("at least one takeover"),
    );
    let figures = serde_json::json!({
        "store": format!("{store:?}"),
        "rounds": rounds,
        "single_fault_takeovers": failovers.len(),
        "session_timeout_ms": SESSION_TIMEOUT.as_millis() as u64,
        "double_fault_failover_ms": double_faults.iter().map(|d| d.as_millis() as u64).collect::<Vec<_>>(),
        "failover_ms": {
            "p50": p50.as_millis() as u64,
            "p99": p99.as_millis() as u64,
            "max": max.as_millis() as u64,
            "each": each
                .iter()
                .map(|(disturbance, took)| format!("{disturbance:?} {}", took.as_millis()))
                .collect::<Vec<_>>(),
        },
        "events": writer.committed.len(),
        "records": summary.records,
        "duplicates_read_uncommitted": summary.duplicates,
        "duplicates_read_committed": committed_view.as_ref().map(|view| view.duplicates),
        "watch_samples": watch.samples,
        "standby_deliveries": watch.standby_deliveries,
        "overlapping_samples": watch.overlapping_samples,
        "overlap_deliveries": watch.overlap_deliveries,
        "checkpoint_changes_seen": checkpoint_changes,
    });
    println!("FAILOVER_FIGURES {figures}");
    // The target, p99 within the session timeout + 2 s, is the benchmark's to assert (a
    // speed target, on a quiet machine); the suite fails a takeover that does not happen.
    let target = if std::env::var("OUTBOX_RELAY_FAILOVER_TARGET").as_deref() == Ok("enforce") {
        SESSION_TIMEOUT + Duration::from_secs(2)
    } else {
        SESSION_TIMEOUT * 2 + Duration::from_secs(2)
    };
    assert!(
        p99 <= target,
        "failover p99 {p99:?} is over {target:?} (session timeout {SESSION_TIMEOUT:?}): {figures}"
    );
    for took in &double_faults {
        assert!(
            *took <= SESSION_TIMEOUT * 2 + Duration::from_secs(2),
            "a double-fault failover took {took:?}, over two session timeouts + 2 s: {figures}"
        );
    }
    for member in &mut group {
        member.relay.assert_running("at the end");
    }
    for member in &mut group {
        member.relay.stop_gracefully("graceful stop").await;
    }
    writer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_loop_at_least_once_loses_nothing_and_fails_over_within_the_session_timeout() {
    kill_loop(HaStore::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_loop_exactly_once_shows_each_event_once_to_read_committed() {
    kill_loop(HaStore::KafkaExactlyOnce).await;
}
