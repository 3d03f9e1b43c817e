//! The Prometheus endpoint of a running relay process agrees with what the broker holds.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET /metrics` over a raw HTTP/1.0 request; sample name (with labels) -> value.
async fn scrape(address: &str) -> Result<BTreeMap<String, f64>, String> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("connect {address}: {e}"))?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
        .await
        .map_err(|_| "metrics response timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("not an HTTP response: {response:?}"))?;
    if !head.starts_with("HTTP/1.") || !head.contains(" 200") {
        return Err(format!("unexpected status: {head}"));
    }
    Ok(body
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_was_delivered() {
    let (db, broker) = start_shop_database_and_broker().await;
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{metrics_port}");
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

    // Counters settle with the checkpoint; the lag drops to 0 once idle and caught up.
    let started = Instant::now();
    let samples = loop {
        let samples = scrape(&address).await;
        let settled = samples.as_ref().is_ok_and(|s| {
            s.get("outbox_relay_records_delivered_total") == Some(&delivered)
                && s.get("outbox_relay_in_flight") == Some(&0.0)
                && s.get("outbox_relay_checkpoint_lag_seconds") == Some(&0.0)
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
    assert_eq!(get("outbox_relay_in_flight"), Some(0.0), "{relevant:#?}");
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
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
}
