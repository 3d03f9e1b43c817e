//! The GTID history a stream started by file+position knows (`BinlogReader::start_gtid_set`):
//! the server's own, every replication domain, not only what is read from the start on.

mod live_support;

use live_support::*;
use mysql_async::prelude::Queryable;
use outbox_binlog::{BinlogPosition, Flavor, GtidSet, StartPosition};

/// Writes one row in replication domain `domain`.
async fn write_in_domain(server: &outbox_testkit::ScratchMariadb, domain: u32, id: i64) {
    let mut conn = server.conn().await.expect("connect");
    conn.query_drop(format!("SET SESSION gtid_domain_id = {domain}"))
        .await
        .expect("set domain");
    conn.exec_drop("INSERT INTO app.outbox (id) VALUES (?)", (id,))
        .await
        .expect("insert");
    conn.disconnect().await.expect("disconnect");
}

async fn master_position(server: &outbox_testkit::ScratchMariadb) -> BinlogPosition {
    let mut conn = server.conn().await.expect("connect");
    let row: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .expect("SHOW MASTER STATUS")
        .expect("binlog on");
    conn.disconnect().await.expect("disconnect");
    BinlogPosition::new(
        row.get::<String, _>(0).expect("file"),
        row.get::<u64, _>(1).expect("position"),
    )
}

#[tokio::test]
async fn a_start_by_position_knows_the_server_history_of_every_domain() {
    let server = server_with_app_outbox().await;
    write_in_domain(&server, 7, 1).await;
    write_in_domain(&server, 0, 2).await;
    let middle = master_position(&server).await;
    let history_at_middle = gtid_binlog_pos(&server).await;
    write_in_domain(&server, 7, 3).await;
    let history_at_end = gtid_binlog_pos(&server).await;
    let parse = |text: &str| GtidSet::parse(Flavor::Mariadb, text).expect("a MariaDB GTID set");
    assert_eq!(
        parse(&history_at_end).to_string().matches('-').count(),
        4,
        "two domains: {history_at_end}"
    );

    let latest = connect_reader(&server, StartPosition::Latest, &["app.outbox"]).await;
    assert_eq!(latest.start_gtid_set(), Some(&parse(&history_at_end)));

    let at_middle = connect_reader(
        &server,
        StartPosition::Position(middle.clone()),
        &["app.outbox"],
    )
    .await;
    assert_eq!(
        at_middle.start_gtid_set(),
        Some(&parse(&history_at_middle)),
        "at {middle}"
    );

    let earliest = connect_reader(&server, StartPosition::Earliest, &["app.outbox"]).await;
    assert_eq!(
        earliest.start_gtid_set(),
        Some(&GtidSet::Empty),
        "nothing precedes the first file of a fresh server"
    );
}
