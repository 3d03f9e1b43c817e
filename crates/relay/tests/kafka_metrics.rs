//! The metrics and health endpoint of a running relay process agree with what happened:
//! counters against the broker's records, `/readyz` against a broker that stops and
//! returns, and the text format against a real Prometheus scraping it.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` over a raw HTTP/1.0 request: (status code, body).
async fn http_get(address: &str, path: &str) -> Result<(u16, String), String> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("connect {address}: {e}"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
        .await
        .map_err(|_| format!("GET {path} timed out"))?
        .map_err(|e| e.to_string())?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("not an HTTP response: {response:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// `GET /metrics`: sample name (with labels) -> value.
async fn scrape(address: &str) -> Result<BTreeMap<String, f64>, String> {
    let (status, body) = http_get(address, "/metrics").await?;
    if status != 200 {
        return Err(format!("unexpected status {status}"));
    }
    Ok(parse_metrics_text(&body))
}

/// Sum of every sample of `family` (any labels).
fn sum_of(samples: &BTreeMap<String, f64>, family: &str) -> f64 {
    samples
        .iter()
        .filter(|(name, _)| name.as_str() == family || name.starts_with(&format!("{family}{{")))
        .map(|(_, value)| value)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_was_delivered() {
    let (db, broker) = start_shop_database_and_broker().await;
    let address = free_loopback_address();
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.metrics_listen = Some(address.clone());
    let mut relay = Relay::prepare(&setup);
    let mut writer = ShopWriter::connect(&db, "metrics").await;
    relay.start();
    for index in 0..25u32 {
        writer
            .alternating_transaction(
                index,
                1 + (index % 3) as usize,
                index % 6 != 5,
                index % 4 == 0,
            )
            .await;
    }
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    let delivered = writer.committed.len() as f64;

    // Counters settle with the checkpoint; lag and ages drop to 0 once idle and caught up
    // (the source's heartbeat says so).
    let started = Instant::now();
    let samples = loop {
        let samples = scrape(&address).await;
        let settled = samples.as_ref().is_ok_and(|s| {
            s.get("outbox_relay_records_delivered_total") == Some(&delivered)
                && s.get("outbox_relay_in_flight") == Some(&0.0)
                && s.get("outbox_relay_checkpoint_lag_seconds") == Some(&0.0)
                && s.get("outbox_relay_source_seconds_behind") == Some(&0.0)
                && s.get("outbox_relay_oldest_unacked_age_seconds") == Some(&0.0)
        });
        if settled || started.elapsed() > Duration::from_secs(8) {
            break samples;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let samples = samples.unwrap_or_else(|e| panic!("scraping {address}: {e}"));
    let relevant: BTreeMap<&String, &f64> = samples
        .iter()
        .filter(|(name, _)| name.starts_with("outbox_relay_"))
        .collect();
    let get = |name: &str| samples.get(name).copied();
    assert_eq!(
        get("outbox_relay_records_delivered_total"),
        Some(delivered),
        "delivered counter vs {delivered} committed events: {relevant:#?}"
    );
    assert_eq!(
        get("outbox_relay_events_routed_total"),
        Some(delivered),
        "{relevant:#?}"
    );
    // Every watched row read was routed or skipped by design (updates, deletes).
    assert_eq!(
        get("outbox_relay_events_read_total"),
        Some(delivered + get("outbox_relay_events_skipped_total").unwrap_or(0.0)),
        "{relevant:#?}"
    );
    assert_eq!(
        sum_of(&samples, "outbox_relay_delivery_errors_total"),
        0.0,
        "{relevant:#?}"
    );
    assert_eq!(
        sum_of(&samples, "outbox_relay_dead_lettered_total"),
        0.0,
        "{relevant:#?}"
    );
    assert_eq!(
        sum_of(&samples, "outbox_relay_producer_rebuilds_total"),
        0.0,
        "{relevant:#?}"
    );
    // The latency histograms count every acked record, and a local broker acks fast.
    for histogram in [
        "outbox_relay_publish_latency_seconds",
        "outbox_relay_end_to_end_latency_seconds",
    ] {
        assert_eq!(
            get(&format!("{histogram}_count")),
            Some(delivered),
            "{histogram}: {relevant:#?}"
        );
        assert_eq!(
            get(&format!("{histogram}_bucket{{le=\"+Inf\"}}")),
            Some(delivered),
            "{histogram}: {relevant:#?}"
        );
        assert!(
            get(&format!("{histogram}_bucket{{le=\"60\"}}")) == Some(delivered),
            "{histogram}: a record took over 60 s: {relevant:#?}"
        );
    }
    assert_eq!(get("outbox_relay_in_flight"), Some(0.0), "{relevant:#?}");
    assert_eq!(
        get("outbox_relay_in_flight_bytes"),
        Some(0.0),
        "{relevant:#?}"
    );
    assert_eq!(
        get("outbox_relay_oldest_unacked_age_seconds"),
        Some(0.0),
        "nothing unacked when idle: {relevant:#?}"
    );
    assert_eq!(
        get("outbox_relay_source_seconds_behind"),
        Some(0.0),
        "caught up when idle: {relevant:#?}"
    );
    assert_eq!(
        get("outbox_relay_topics_created_total"),
        Some(2.0),
        "{relevant:#?}"
    );
    assert_eq!(
        get("outbox_relay_checkpoint_lag_seconds"),
        Some(0.0),
        "lag must be 0 when caught up and idle: {relevant:#?}"
    );
    assert!(
        get("outbox_relay_checkpoint_commits_total").is_some_and(|commits| commits >= 1.0),
        "{relevant:#?}"
    );
    assert!(
        samples
            .keys()
            .any(|name| name.starts_with("outbox_relay_build_info{")),
        "{relevant:#?}"
    );
    assert!(get("process_resident_memory_bytes").is_some_and(|rss| rss > 0.0));
    let (status, ready) = http_get(&address, "/readyz").await.unwrap();
    assert_eq!(status, 200, "{ready}");

    // `status` agrees: ready, nothing unacked, the stored checkpoint, the source's view.
    let config = relay.config_path.to_str().unwrap().to_string();
    let (code, stdout, stderr) = run_relay_command(&["status", "--config", &config, "--json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let status: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(status["relay"]["ready"], true, "{status}");
    assert_eq!(
        status["relay"]["oldest_unacked_age_seconds"], 0.0,
        "{status}"
    );
    assert_eq!(status["relay"]["records_delivered"], delivered, "{status}");
    assert_eq!(
        status["checkpoint"]["position"].as_str(),
        relay
            .checkpoint()
            .position
            .map(|p| format!("{}:{}", p.file, p.position))
            .as_deref(),
        "{status}"
    );
    assert!(status["source"]["binlog_bytes_behind"].is_u64(), "{status}");
    let (code, human, _) = run_relay_command(&["status", "--config", &config]);
    assert_eq!(code, 0);
    assert!(human.contains("ready: true"), "{human}");
    relay.stop_gracefully("graceful stop").await;
    // Stopped: not ready (exit 1), and the stored checkpoint is still shown.
    let (code, stdout, _) = run_relay_command(&["status", "--config", &config, "--json"]);
    assert_eq!(code, 1, "{stdout}");
    let status: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(
        status["relay"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("not reachable")),
        "{status}"
    );
    assert!(status["checkpoint"]["position"].is_string(), "{status}");
    writer.close().await;
}

/// Polls `/readyz` until its status is `want` (or 60 s pass); returns the body.
async fn wait_for_readiness(address: &str, want: u16, relay: &Relay) -> String {
    let started = Instant::now();
    loop {
        let answer = http_get(address, "/readyz").await;
        if let Ok((status, body)) = &answer {
            if *status == want {
                return body.clone();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "/readyz never answered {want}; last: {answer:?}\n{}",
            relay.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_flips_when_the_broker_stops_and_returns() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let address = free_loopback_address();
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.metrics_listen = Some(address.clone());
    let mut relay = Relay::prepare(&setup);
    relay.start();
    let body = wait_for_readiness(&address, 200, &relay).await;
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    for check in [
        "source_connected",
        "broker_reachable",
        "checkpoint_store",
        "not_backing_off",
    ] {
        assert_eq!(report[check]["ok"], true, "{check}: {report}");
    }
    let (status, alive) = http_get(&address, "/healthz").await.unwrap();
    assert_eq!((status, alive.trim()), (200, "{\"alive\":true}"));

    broker.stop().expect("broker stops");
    let body = wait_for_readiness(&address, 503, &relay).await;
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["ready"], false, "{report}");
    assert_eq!(report["broker_reachable"]["ok"], false, "{report}");
    assert_eq!(report["source_connected"]["ok"], true, "{report}");
    let samples = scrape(&address).await.unwrap();
    assert_eq!(samples.get("outbox_relay_ready"), Some(&0.0));
    // Alive all along.
    assert_eq!(http_get(&address, "/healthz").await.unwrap().0, 200);
    // An event written now stays unacked: its age grows while the broker is away.
    let mut writer = ShopWriter::connect(&db, "readyz").await;
    writer.alternating_transaction(0, 1, true, false).await;
    let started = Instant::now();
    loop {
        let age = scrape(&address)
            .await
            .ok()
            .and_then(|s| s.get("outbox_relay_oldest_unacked_age_seconds").copied());
        if age.is_some_and(|age| age >= 2.0) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the oldest unacked age did not grow: {age:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    broker.restart().await.expect("broker restarts");
    let body = wait_for_readiness(&address, 200, &relay).await;
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["broker_reachable"]["ok"], true, "{report}");
    // Delivered once the broker is back: nothing unacked, the age is 0 again.
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(60)).await;
    let started = Instant::now();
    loop {
        let samples = scrape(&address).await.unwrap();
        if samples.get("outbox_relay_oldest_unacked_age_seconds") == Some(&0.0) {
            assert_eq!(samples.get("outbox_relay_ready"), Some(&1.0));
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the oldest unacked age stays {:?}",
            samples.get("outbox_relay_oldest_unacked_age_seconds")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
}

/// A Prometheus server (the Debian `prometheus` binary) scraping one target every second,
/// with its storage in a temp dir; killed on drop.
struct PrometheusServer {
    /// Its `host:port`.
    address: String,
    /// The process.
    child: std::process::Child,
    /// Config and storage.
    _dir: tempfile::TempDir,
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts Prometheus scraping `target`; `None` when the binary is absent outside CI
/// (`CI=true`: a failure).
async fn start_prometheus(target: &str) -> Option<PrometheusServer> {
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| dir.join("prometheus").is_file())
    });
    if !on_path {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "prometheus is not installed, and CI=true: install the Debian package `prometheus` (scripts/test.sh does)"
        );
        eprintln!("skipped: prometheus is not installed (apt-get install prometheus)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: outbox-relay\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let address = free_loopback_address();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let child = std::process::Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={address}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let server = PrometheusServer {
        address,
        child,
        _dir: dir,
    };
    let started = Instant::now();
    while !matches!(http_get(&server.address, "/-/ready").await, Ok((200, _))) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "prometheus not ready: {}",
            std::fs::read_to_string(server._dir.path().join("prometheus.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Some(server)
}

/// `GET /api/v1/query?query=QUERY` (the query is a bare metric name, no escaping needed):
/// the result vector.
async fn prometheus_query(prometheus: &str, query: &str) -> Vec<serde_json::Value> {
    let (status, body) = http_get(prometheus, &format!("/api/v1/query?query={query}"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{query}: {body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["status"], "success", "{answer}");
    answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_every_family() {
    let (db, broker) = start_shop_database_and_broker().await;
    let address = free_loopback_address();
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.metrics_listen = Some(address.clone());
    let mut relay = Relay::prepare(&setup);
    let mut writer = ShopWriter::connect(&db, "prometheus").await;
    relay.start();
    for index in 0..5u32 {
        writer.alternating_transaction(index, 2, true, false).await;
    }
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    let delivered = writer.committed.len() as f64;
    let Some(prometheus) = start_prometheus(&address).await else {
        relay.stop_gracefully("graceful stop").await;
        return;
    };
    // Every family of the relay's own scrape, by its `# TYPE` line.
    let (_, text) = http_get(&address, "/metrics").await.unwrap();
    let families: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| {
            let mut parts = rest.split_whitespace();
            Some((parts.next()?.to_string(), parts.next()?.to_string()))
        })
        .collect();
    assert!(families.len() > 30, "{families:?}");
    // Wait until Prometheus stored a scrape with every record delivered.
    let started = Instant::now();
    loop {
        let result =
            prometheus_query(&prometheus.address, "outbox_relay_records_delivered_total").await;
        let value = result
            .first()
            .and_then(|sample| sample["value"][1].as_str())
            .and_then(|v| v.parse::<f64>().ok());
        if value == Some(delivered) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "Prometheus never saw {delivered} delivered: {result:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let up = prometheus_query(&prometheus.address, "up").await;
    assert_eq!(
        up.first().map(|s| s["value"][1].clone()),
        Some("1".into()),
        "{up:?}"
    );
    let mut missing = Vec::new();
    for (family, kind) in &families {
        let series = match kind.as_str() {
            "histogram" | "summary" => format!("{family}_count"),
            _ => family.clone(),
        };
        if prometheus_query(&prometheus.address, &series)
            .await
            .is_empty()
        {
            missing.push(series);
        }
    }
    assert!(
        missing.is_empty(),
        "families Prometheus has no sample of: {missing:?}"
    );
    // One value each, checked against what happened.
    let value_of = |result: Vec<serde_json::Value>| {
        result
            .first()
            .and_then(|sample| sample["value"][1].as_str())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert_eq!(
        value_of(
            prometheus_query(
                &prometheus.address,
                "outbox_relay_publish_latency_seconds_count"
            )
            .await
        ),
        Some(delivered)
    );
    assert_eq!(
        value_of(prometheus_query(&prometheus.address, "outbox_relay_ready").await),
        Some(1.0)
    );
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_flips_when_the_source_stops_and_returns() {
    let (mut db, broker) = start_shop_database_and_broker().await;
    let address = free_loopback_address();
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.metrics_listen = Some(address.clone());
    let mut relay = Relay::prepare(&setup);
    relay.start();
    wait_for_readiness(&address, 200, &relay).await;

    db.stop();
    let body = wait_for_readiness(&address, 503, &relay).await;
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["source_connected"]["ok"], false, "{report}");
    assert!(
        report["source_connected"]["detail"]
            .as_str()
            .is_some_and(|detail| detail.starts_with("reconnecting")),
        "{report}"
    );
    assert_eq!(report["broker_reachable"]["ok"], true, "{report}");
    let samples = scrape(&address).await.unwrap();
    assert!(
        samples
            .get("outbox_relay_retries_total{class=\"source_reconnect\"}")
            .is_some_and(|retries| *retries >= 1.0),
        "{samples:?}"
    );

    db.restart().await.expect("the source restarts");
    let body = wait_for_readiness(&address, 200, &relay).await;
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["source_connected"]["ok"], true, "{report}");
    relay.stop_gracefully("graceful stop").await;
}

/// The stored checkpoint's `sent_through` position (`None`: not stored).
fn stored_sent_through(relay: &Relay) -> Option<BinlogPoint> {
    let view = relay.checkpoint();
    let json: serde_json::Value = serde_json::from_str(view.raw.trim()).ok()?;
    let sent = json.get("sent_through")?;
    Some(BinlogPoint {
        file: sent["binlog_file"].as_str()?.to_string(),
        position: sent["binlog_position"].as_u64()?,
    })
}

/// Duplicates after a crash, counted: the broker freezes, the relay reads and sends `k`
/// records that cannot be acked, stores how far it sent (the checkpoint stays before them),
/// and is killed with `kill -9`. After the restart it reads and sends exactly those `k`
/// again, and `outbox_relay_replayed_records_total` says `k`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_kill_nine_counts_the_records_it_sends_again() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let address = free_loopback_address();
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.metrics_listen = Some(address.clone());
    setup.commit_interval_ms = 200;
    let mut relay = Relay::prepare(&setup);
    let mut writer = ShopWriter::connect(&db, "replay").await;
    relay.start();
    for index in 0..3u32 {
        writer.alternating_transaction(index, 2, true, false).await;
    }
    let acked_end = writer.master_position().await;
    wait_for_checkpoint(&relay, &acked_end, Duration::from_secs(30)).await;
    // Caught up: nothing is after the checkpoint, so nothing is recorded as sent beyond it.
    let started = Instant::now();
    while stored_sent_through(&relay).is_some_and(|sent| sent > acked_end) {
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    broker.freeze().expect("broker freezes");
    let mut unacked = 0;
    for index in 3..7u32 {
        unacked += writer
            .alternating_transaction(index, 1 + (index % 2) as usize, true, false)
            .await
            .len();
    }
    let sent_end = writer.master_position().await;
    // The relay records that it sent through the last transaction, while the checkpoint
    // itself cannot move (nothing is acked).
    let started = Instant::now();
    loop {
        if stored_sent_through(&relay).as_ref() == Some(&sent_end) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "sent_through never reached {sent_end}: {}\n{}",
            relay.checkpoint().raw,
            relay.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(relay.checkpoint().position, Some(acked_end.clone()));
    relay.kill9();
    broker.thaw().expect("broker thaws");

    relay.start();
    wait_for_checkpoint(&relay, &sent_end, Duration::from_secs(60)).await;
    let started = Instant::now();
    let samples = loop {
        let samples = scrape(&address).await;
        if samples
            .as_ref()
            .is_ok_and(|s| s.get("outbox_relay_records_delivered_total") == Some(&(unacked as f64)))
            || started.elapsed() > Duration::from_secs(10)
        {
            break samples.unwrap_or_else(|e| panic!("scraping {address}: {e}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // This run sent exactly the records after the checkpoint, and all of them had been
    // sent by the killed run.
    assert_eq!(
        samples.get("outbox_relay_records_delivered_total"),
        Some(&(unacked as f64)),
        "{samples:#?}"
    );
    assert_eq!(
        samples.get("outbox_relay_replayed_records_total"),
        Some(&(unacked as f64)),
        "replayed vs the {unacked} records re-sent: {samples:#?}\n{}",
        relay.log_tail(20)
    );
    assert_eq!(
        log_count(&relay, "replayed records the previous run had already sent"),
        1
    );
    // Past it now: the stored checkpoint needs no sent_through, and new records are new.
    writer.alternating_transaction(7, 1, true, false).await;
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    let samples = scrape(&address).await.unwrap();
    assert_eq!(
        samples.get("outbox_relay_replayed_records_total"),
        Some(&(unacked as f64))
    );
    relay.stop_gracefully("graceful stop").await;
    // A graceful stop stores a final checkpoint covering everything sent: no replay.
    relay.start();
    wait_for_readiness(&address, 200, &relay).await;
    let samples = scrape(&address).await.unwrap();
    assert_eq!(
        samples.get("outbox_relay_replayed_records_total"),
        Some(&0.0)
    );
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
}

/// After an injected failure (a record over the topic's `max.message.bytes` on the real
/// broker: rejected for good, resent up to `dead_letter.max_attempts`, then dead-lettered)
/// the retry, resend, error and dead-letter counters and the newest dead letter's time move
/// on `/metrics`, by exactly what happened; the records around it are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_failure_moves_retries_and_dead_letters() {
    let (db, broker) = start_shop_database_and_broker().await;
    let order_topic = topic_for(&db, "order");
    broker
        .create_topic_with_config(&order_topic, 1, &[("max.message.bytes", "20000")])
        .await
        .expect("topic with a small max.message.bytes");
    let address = free_loopback_address();
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.metrics_listen = Some(address.clone());
    let mut relay = Relay::prepare(&setup);
    relay.start();
    wait_for_readiness(&address, 200, &relay).await;
    let before = scrape(&address).await.unwrap();
    assert_eq!(sum_of(&before, "outbox_relay_retries_total"), 0.0);
    assert_eq!(
        before.get("outbox_relay_dead_letter_last_timestamp_seconds"),
        Some(&0.0)
    );

    let injected_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let mut conn = db.conn().await.expect("connect");
    let big = format!("{{\"blob\":\"{}\"}}", "x".repeat(60_000));
    for (id, payload) in [
        ("small-1", "{\"n\":1}".to_string()),
        ("too-big-2", big),
        ("small-3", "{\"n\":3}".to_string()),
    ] {
        mysql_async::prelude::Queryable::exec_drop(
            &mut conn,
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (?, 'order', 'order-1', 'order_created', ?)",
            (id, payload),
        )
        .await
        .unwrap();
    }
    let end = master_position(&mut conn).await;
    conn.disconnect().await.unwrap();
    wait_for_checkpoint(&relay, &end, Duration::from_secs(60)).await;

    let samples = scrape(&address).await.unwrap();
    let relevant: BTreeMap<&String, &f64> = samples
        .iter()
        .filter(|(name, _)| name.starts_with("outbox_relay_"))
        .collect();
    let get = |name: &str| samples.get(name).copied().unwrap_or(f64::NAN);
    // The big record's three sends rejected (dead_letter.max_attempts = 3), two of them
    // retried, then one dead letter of class message_too_large. A small record that shared
    // the big one's produce request is rejected with it (the broker fails the whole
    // request) and retried alone: every rejection is a retry or the dead-lettering.
    let rejected = get("outbox_relay_delivery_errors_total{kind=\"permanent\"}");
    let retried = get("outbox_relay_retries_total{class=\"kafka_delivery\"}");
    assert!(rejected >= 3.0, "{relevant:#?}");
    assert!(retried >= 2.0, "{relevant:#?}");
    assert_eq!(rejected, retried + 1.0, "{relevant:#?}");
    assert!(
        get("outbox_relay_records_resent_total") >= 2.0,
        "{relevant:#?}"
    );
    assert_eq!(
        get("outbox_relay_dead_lettered_total{class=\"message_too_large\"}"),
        1.0,
        "{relevant:#?}"
    );
    assert_eq!(
        sum_of(&samples, "outbox_relay_dead_lettered_total"),
        1.0,
        "{relevant:#?}"
    );
    let newest = get("outbox_relay_dead_letter_last_timestamp_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        newest >= injected_at - 1.0 && newest <= now + 1.0,
        "newest dead letter at {newest}, injected at {injected_at}, now {now}"
    );
    // The two small records and the dead letter were acknowledged; nothing stuck.
    assert_eq!(
        get("outbox_relay_records_delivered_total"),
        3.0,
        "{relevant:#?}"
    );
    assert_eq!(get("outbox_relay_in_flight"), 0.0, "{relevant:#?}");
    relay.stop_gracefully("graceful stop").await;
}
