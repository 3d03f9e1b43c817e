#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need, then runs every
# test of the workspace.
#   - MariaDB server binaries (apt-get) for the scratch MariaDB servers;
#   - a JRE and Maven (apt-get) when `java` / `mvn` are missing;
#   - Prometheus and promtool (apt-get `prometheus`) when missing, for the alert-rule and
#     scrape tests;
#   - helm (go install helm.sh/helm/v4/cmd/helm@v4.3.2) for the Helm chart checks;
#   - the jars of Apache Kafka 4.4.0 (broker, tools), the Kafka Connect worker and Debezium
#     3.6.1.Final (Maven Central, via scripts/fetch-jars.sh, cached outside the work tree).
# Tests start their own scratch MariaDB servers, Kafka brokers and Connect workers on free
# loopback ports; the machine's own services (if any) are never touched.
#
# Usage: scripts/test.sh [--quick] [extra cargo test args]
#   --quick   unit tests only (library and binary targets): no MariaDB, Kafka or Java needed
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '\n==> %s\n' "$*"; }

if [ "${1:-}" = "--quick" ]; then
  shift
  log "cargo test --workspace --lib --bins (unit tests only)"
  exec cargo test --workspace --lib --bins "$@"
fi

apt_packages=()
# 1. MariaDB server binaries (mariadbd, mariadb-install-db).
if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
  apt_packages+=(mariadb-server mariadb-client)
fi
# 2. A JRE for Kafka and Kafka Connect, Maven for their jars.
command -v java >/dev/null 2>&1 || apt_packages+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || apt_packages+=(maven)
# 2b. cmake, which builds librdkafka (with its static libcurl).
command -v cmake >/dev/null 2>&1 || apt_packages+=(cmake)
# 3. promtool (alert rule tests) and prometheus (the end-to-end scrape test).
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  apt_packages+=(prometheus)
fi
if [ ${#apt_packages[@]} -gt 0 ]; then
  log "installing ${apt_packages[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${apt_packages[@]}" >/dev/null
fi

# 3b. Helm (a Go module) for the chart checks (tests/helm_chart.rs): about 2 minutes of
#     `go install` the first time on a machine.
export PATH="$PATH:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
if ! command -v helm >/dev/null 2>&1; then
  log "installing helm v4.3.2 (go install helm.sh/helm/v4/cmd/helm@v4.3.2)"
  go install helm.sh/helm/v4/cmd/helm@v4.3.2
fi

# 4. The jars (the first time on a machine: about a minute of Maven downloads).
log "resolving the Kafka, Kafka Connect and Debezium jars (scripts/fetch-jars.sh)"
started=$(date +%s)
scripts/fetch-jars.sh
log "jars ready in $(( $(date +%s) - started )) s"
log "tools: $(/usr/sbin/mariadbd --version 2>/dev/null || mariadbd --version) | $(java -version 2>&1 | head -1)"

# 5. The test suite (unit, property, fixture and integration tests).
log "cargo test --workspace --no-fail-fast"
cargo test --workspace --no-fail-fast "$@"
