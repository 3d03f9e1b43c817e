#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need (MariaDB server
# binaries, the Tansu Kafka-protocol broker), then runs every test of the workspace.
# Tests start their own scratch MariaDB and broker processes on free loopback ports; the
# machine's own MariaDB service (if any, on 3306) is never touched.
#
# Usage: scripts/test.sh [extra cargo test args]
set -euo pipefail
cd "$(dirname "$0")/.."

TANSU_VERSION=0.6.0
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '\n==> %s\n' "$*"; }

# 1. MariaDB server binaries (mariadbd, mariadb-install-db).
if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
  log "installing mariadb-server (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq mariadb-server mariadb-client >/dev/null
fi

# 2. Tansu broker (built once from crates.io; ~20-30 min on 2 cores).
if ! tansu --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
  log "installing tansu $TANSU_VERSION (cargo install; this takes a while the first time)"
  cargo install "tansu@$TANSU_VERSION" --locked --features dynostore
fi
log "tools: $(/usr/sbin/mariadbd --version 2>/dev/null || mariadbd --version) | $(tansu --version)"

# 3. The test suite (unit, property, fixture and integration tests).
log "cargo test --workspace --no-fail-fast"
cargo test --workspace --no-fail-fast "$@"
