#!/usr/bin/env bash
# Standby failover, measured (issue 25 part 2; docs/benchmarks.md "Standby failover"): runs
# the kill-loop tests of crates/relay/tests/kafka_failover.rs with ROUNDS disturbances each
# (default 30) for the at-least-once group (MySQL checkpoint store) and the exactly-once group
# (Kafka store), and prints each run's FAILOVER_FIGURES line (JSON) and a summary table;
# a p99 failover above the session timeout + 2 s fails the run (the test suite only fails
# a takeover that does not happen: it shares the cores with other tests).
# Needs what scripts/test.sh installs (MariaDB, Java, the Kafka jars).
#   scripts/bench-failover.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-30}"
log=$(mktemp /tmp/outbox-failover-XXXXXX.log)
echo "==> $rounds rounds per group; full output in $log"
OUTBOX_RELAY_FAILOVER_TARGET=enforce OUTBOX_RELAY_FAILOVER_ROUNDS="$rounds" cargo test -p outbox-relay --test kafka_failover kill_loop \
  -- --nocapture --test-threads 1 2>&1 | tee "$log" | grep -a -E "FAILOVER_FIGURES|test result|panicked"
grep -a -o 'FAILOVER_FIGURES .*' "$log" | sed 's/^FAILOVER_FIGURES //' | python3 -c '
import json, sys
print("| group | takeovers | p50 ms | p99 ms | max ms | double faults (max ms) | session ms | events | dup read_uncommitted | dup read_committed | standby deliveries |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for line in sys.stdin:
    f = json.loads(line)
    o = f["failover_ms"]
    d = f["double_fault_failover_ms"]
    committed = f["duplicates_read_committed"]
    cells = [f["store"], f["single_fault_takeovers"], o["p50"], o["p99"], o["max"],
             "%d (%s)" % (len(d), max(d) if d else "-"), f["session_timeout_ms"], f["events"],
             f["duplicates_read_uncommitted"], "-" if committed is None else committed,
             int(f["standby_deliveries"])]
    print("| " + " | ".join(str(c) for c in cells) + " |")
'
