//! Where a poll-mode drain spends the server's time, without Kafka: fills a scratch
//! MariaDB's outbox table (the bench's shape: 30,000 aggregates, ~150-byte payloads) with
//! PENDING rows and drains it as the relay does, claims on one connection
//! (`CLAIM_COST_CLAIMERS=N`: N) and marks on another. Prints rows/s and the server's CPU per
//! row; with `CLAIM_COST_SLOW_LOG=1` the server logs every statement, with its time and rows
//! examined, to `/tmp/claim_cost_slow.log`. Variants: `CLAIM_COST_EXTRA_DDL` runs statements
//! (`;`-separated) after the DDL (other indexes), `CLAIM_COST_SESSION` one statement on each
//! connection (`SET SESSION binlog_row_image = 'MINIMAL'`). `CLAIM_COST_ROUNDS=N` drains N
//! times, every row set PENDING again between rounds (`CLAIM_COST_REBUILD=1`: and the table
//! rebuilt). `CLAIM_COST_SERVER_ARGS` adds server arguments (space-separated).
//!
//! `cargo run -p outbox-poll --example claim_cost -- ROWS BATCH`

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use outbox_poll::{poll_mode_ddl, PollColumns, Poller};
use outbox_testkit::{ScratchMariadb, ScratchOptions};
use outbox_writer::{create_table_sql, ColumnPreset, OutboxTable};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rows: u64 = args.next().map_or(Ok(100_000), |a| a.parse())?;
    let batch: u32 = args.next().map_or(Ok(500), |a| a.parse())?;
    let mut extra_args = vec![
        "--innodb-flush-log-at-trx-commit=0".into(),
        "--sync-binlog=0".into(),
        "--innodb-buffer-pool-size=256M".into(),
        // MariaDB's default, as the bench's (the testkit's 8 MiB costs 30 % more CPU).
        "--innodb-log-file-size=96M".into(),
        "--slow-query-log-file=/tmp/claim_cost_slow.log".into(),
        "--long-query-time=0".into(),
        format!(
            "--slow-query-log={}",
            u8::from(std::env::var("CLAIM_COST_SLOW_LOG").is_ok())
        ),
    ];
    // Variants of the server: more arguments, separated by spaces.
    if let Ok(more) = std::env::var("CLAIM_COST_SERVER_ARGS") {
        extra_args.extend(more.split_whitespace().map(str::to_owned));
    }
    let db = ScratchMariadb::start_with(ScratchOptions {
        extra_args,
        ..ScratchOptions::default()
    })
    .await?;
    let table = OutboxTable::new("outbox", ColumnPreset::Debezium)?.in_database("shop")?;
    let columns = PollColumns::default();
    let mut statements = vec!["CREATE DATABASE shop".to_owned(), create_table_sql(&table)];
    statements.extend(poll_mode_ddl(&table, &columns));
    // Variants to compare: extra statements after the DDL, separated by `;`.
    if let Ok(extra) = std::env::var("CLAIM_COST_EXTRA_DDL") {
        statements.extend(extra.split(';').map(str::to_owned));
    }
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    db.exec(&statements).await?;
    let mut conn = db.conn().await?;
    let payload = format!("{{\"pad\":\"{}\"}}", "x".repeat(130));
    let mut written = 0;
    while written < rows {
        let chunk = (rows - written).min(1000);
        let values: Vec<String> = (written..written + chunk)
            .map(|i| {
                format!(
                    "(UUID(), 'order', 'order-{}', 'created', '{payload}')",
                    i % 30_000
                )
            })
            .collect();
        conn.query_drop(format!(
            "INSERT INTO shop.outbox (id, aggregatetype, aggregateid, type, payload) VALUES {}",
            values.join(",")
        ))
        .await?;
        written += chunk;
    }
    for statement in outbox_poll::SESSION_SETUP {
        conn.query_drop(*statement).await?;
    }
    conn.query_drop("FLUSH SLOW LOGS").await?;
    let pid_file: String = conn
        .query_first("SELECT @@pid_file")
        .await?
        .ok_or("no pid file")?;
    let pid = std::fs::read_to_string(pid_file)?.trim().to_owned();
    let server_cpu = || -> Result<f64, Box<dyn std::error::Error>> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let field = |index: usize| -> Result<f64, Box<dyn std::error::Error>> {
            Ok(fields
                .get(index)
                .ok_or("a short /proc stat")?
                .parse::<f64>()?)
        };
        // utime and stime, in clock ticks (100 a second).
        let ticks = field(11)? + field(12)?;
        Ok(ticks / 100.0)
    };
    let poller = Poller::new(&table, &columns);
    let rounds: u32 = std::env::var("CLAIM_COST_ROUNDS")
        .ok()
        .map_or(Ok(1), |n| n.parse())?;
    for round in 1..=rounds {
        if round > 1 {
            // As the bench does between rounds: every row PENDING again, then wait until
            // InnoDB purged what that rewrote.
            conn.query_drop(
                "UPDATE shop.outbox SET poll_status = 'PENDING', poll_attempts = 0, \
                 poll_next_attempt_at = NOW(6), poll_locked_until = NULL, poll_claim_token = '', \
                 poll_last_error = NULL, poll_sent_at = NULL",
            )
            .await?;
            if std::env::var("CLAIM_COST_REBUILD").is_ok() {
                conn.query_drop("ALTER TABLE shop.outbox FORCE").await?;
            }
            loop {
                let history: Option<u64> = conn
                    .query_first(
                        "SELECT COUNT FROM information_schema.INNODB_METRICS \
                         WHERE NAME = 'trx_rseg_history_len'",
                    )
                    .await?;
                if history.is_none_or(|length| length < 100) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        print!("round {round}: ");
        let cpu_before = server_cpu()?;
        let started = Instant::now();
        let mut claim_time = Duration::ZERO;
        let claimers: usize = std::env::var("CLAIM_COST_CLAIMERS")
            .ok()
            .map_or(Ok(1), |n| n.parse())?;
        let (drained, mark_time) = {
            // As the relay: claims on `claimers` connections, marks on another.
            let mut marker = db.conn().await?;
            if let Ok(extra) = std::env::var("CLAIM_COST_SESSION") {
                marker.query_drop(extra).await?;
            }
            let (send, mut receive) = tokio::sync::mpsc::channel::<outbox_poll::Claim>(4);
            let mark_poller = poller.clone();
            let marks = tokio::spawn(async move {
                let mut time = Duration::ZERO;
                while let Some(claim) = receive.recv().await {
                    let at = Instant::now();
                    mark_poller.mark_sent(&mut marker, &claim).await?;
                    time += at.elapsed();
                }
                Ok::<_, outbox_poll::PollError>(time)
            });
            let claimed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let mut tasks = Vec::new();
            for _ in 0..claimers {
                let mut conn = db.conn().await?;
                for statement in outbox_poll::SESSION_SETUP {
                    conn.query_drop(*statement).await?;
                }
                if let Ok(extra) = std::env::var("CLAIM_COST_SESSION") {
                    conn.query_drop(extra).await?;
                }
                let (poller, send, claimed) = (poller.clone(), send.clone(), claimed.clone());
                tasks.push(tokio::spawn(async move {
                    let mut time = Duration::ZERO;
                    while claimed.load(std::sync::atomic::Ordering::SeqCst) < rows {
                        let at = Instant::now();
                        let (claim, _images) = poller
                            .claim_rows(
                                &mut conn,
                                batch,
                                Duration::from_secs(30),
                                Some((batch * 4).max(2000)),
                            )
                            .await?;
                        time += at.elapsed();
                        if claim.rows.is_empty() {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            continue;
                        }
                        claimed.fetch_add(
                            claim.rows.len() as u64,
                            std::sync::atomic::Ordering::SeqCst,
                        );
                        if send.send(claim).await.is_err() {
                            break;
                        }
                    }
                    Ok::<_, outbox_poll::PollError>(time)
                }));
            }
            drop(send);
            for task in tasks {
                claim_time += task.await??;
            }
            (
                claimed.load(std::sync::atomic::Ordering::SeqCst),
                marks.await??,
            )
        };
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "{drained} rows in {seconds:.2} s: {:.0} rows/s; claim {:.1} us/row, mark {:.1} us/row",
            drained as f64 / seconds,
            claim_time.as_micros() as f64 / drained as f64,
            mark_time.as_micros() as f64 / drained as f64
        );
        println!(
            "server CPU {:.1} s per million rows",
            (server_cpu()? - cpu_before) * 1e6 / drained as f64
        );
    }
    Ok(())
}
