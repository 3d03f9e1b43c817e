//! Issue 31 item 6: a stored checkpoint the source's binlog does not have, and not because of
//! a purge (after the newest file, past a file's end, a GTID set the server never had): `check`
//! fails on it and `run` refuses it, both saying what is actually wrong, never that binlog
//! files were purged (there is nothing to recover from archives).

mod common;

use common::*;

/// `checkpoint set` with `args` on the relay's config (the source must be reachable).
fn set_checkpoint(relay: &Relay, args: &[&str]) {
    let config = relay.config_path.to_str().expect("utf-8 path");
    let mut command = vec!["checkpoint", "set", "--config", config];
    command.extend_from_slice(args);
    let (code, stdout, stderr) = run_relay_command(&command);
    assert_eq!(code, 0, "checkpoint set {args:?}:\n{stdout}\n{stderr}");
}

/// The `checkpoint` line of `check` (which must fail on it) holds every one of `needles`.
fn check_checkpoint_line(relay: &Relay, needles: &[&str]) {
    let config = relay.config_path.to_str().expect("utf-8 path");
    let (code, stdout, stderr) = run_relay_command(&["check", "--config", config]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|line| line.starts_with("FAIL checkpoint"))
        .unwrap_or_else(|| panic!("no FAIL checkpoint line:\n{stdout}"));
    for needle in needles {
        assert!(line.contains(needle), "no `{needle}` in: {line}");
    }
    assert!(!line.contains("purged"), "not a purge: {line}");
}

/// `run` exits 1 at once; its final error holds every one of `needles` and no purge advice.
async fn run_refuses(relay: &mut Relay, needles: &[&str]) {
    let final_error = run_is_refused(relay, needles).await;
    for advice in ["purged binlog files", "recover --config"] {
        assert!(
            !final_error.contains(advice),
            "purge advice `{advice}` for a checkpoint that was never purged:\n{final_error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_the_binlog_never_had_is_named_as_such_by_check_and_run() {
    let db = start_shop_database().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, "127.0.0.1:1"));
    let (file, _) = {
        let mut writer = ShopWriter::connect(&db, "beyond").await;
        writer
            .transaction("order", "beyond-1", 1, true, false)
            .await;
        let end = writer.master_position().await;
        (end.file.clone(), end.position)
    };
    let (base, number) = file
        .rsplit_once('.')
        .expect("binlog file name with a number");
    let after_newest = format!("{base}.{:06}", number.parse::<u32>().unwrap() + 7);

    // 1. A file after the newest one.
    set_checkpoint(&relay, &["--position", &format!("{after_newest}:4")]);
    check_checkpoint_line(
        &relay,
        &[
            "not in the source's binlog, and not because of a purge",
            &format!("{after_newest} is after the server's newest file, {file}"),
        ],
    );
    run_refuses(
        &mut relay,
        &[
            "is not in the source server's binlog",
            "after the server's newest file",
            "Check that source.url points at the server",
        ],
    )
    .await;

    // 2. An offset past the end of the newest file.
    set_checkpoint(&relay, &["--position", &format!("{file}:987654321")]);
    check_checkpoint_line(
        &relay,
        &[&format!("offset 987654321 is past the end of {file}")],
    );
    run_refuses(&mut relay, &["past the end of"]).await;

    // 3. A GTID set with transactions the server never had (a checkpoint of another server).
    set_checkpoint(&relay, &["--gtid", "0-1-999999"]);
    check_checkpoint_line(
        &relay,
        &[
            "its GTID set holds transactions the source's binlog never had",
            "0-1-999999 (the server's last in domain 0 is 0-1-",
        ],
    );
    run_refuses(
        &mut relay,
        &[
            "is not in the source server's binlog",
            "holds transactions this server's binlog never had",
        ],
    )
    .await;
}
