#!/usr/bin/env bash
# Resolves the Java side of the test harness with Maven and prints where it is:
#   kafka=DIR      Apache Kafka 4.4.0 broker + tools (tests/jars/kafka/pom.xml)
#   connect=DIR    the Kafka Connect worker that runs Debezium (tests/jars/connect/pom.xml)
#   debezium=DIR   Debezium's MySQL connector as a Connect plugin (tests/jars/debezium/pom.xml)
#
# Each set lives in a cache folder outside the work tree, named after a hash of its pom, so a
# changed pom resolves anew and an unchanged one costs nothing:
#   ${OUTBOX_RELAY_JARS:-$HOME/.cache/outbox-relay/jars}/<set>-<hash>/
# A folder counts only once its `.complete` marker exists (an interrupted download is redone).
# Maven's own repository (~/.m2) caches the downloads themselves.
#
# Usage: scripts/fetch-jars.sh [--quiet]
set -euo pipefail
cd "$(dirname "$0")/.."

quiet=0
[ "${1:-}" = "--quiet" ] && quiet=1
cache="${OUTBOX_RELAY_JARS:-$HOME/.cache/outbox-relay/jars}"
mkdir -p "$cache"

say() { [ "$quiet" = 1 ] || printf '==> %s\n' "$*" >&2; }

if ! command -v mvn >/dev/null 2>&1; then
  echo "fetch-jars: mvn (Apache Maven) is not on PATH; install it (apt-get install maven)" >&2
  exit 2
fi

for set in kafka connect debezium; do
  pom="tests/jars/$set/pom.xml"
  hash=$(sha256sum "$pom" | cut -c1-12)
  dir="$cache/$set-$hash"
  if [ ! -f "$dir/.complete" ]; then
    say "resolving $set jars with Maven into $dir"
    started=$(date +%s)
    partial="$dir.partial.$$"
    rm -rf "$partial"
    mvn_log=$(mktemp)
    if ! mvn -q -B -f "$pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$partial" >"$mvn_log" 2>&1; then
      cat "$mvn_log" >&2
      rm -rf "$partial" "$mvn_log"
      echo "fetch-jars: Maven could not resolve $pom (its output is above)" >&2
      exit 1
    fi
    rm -f "$mvn_log"
    rm -rf "$dir"
    mv "$partial" "$dir"
    touch "$dir/.complete"
    say "$set: $(ls "$dir" | wc -l) jars in $(( $(date +%s) - started )) s"
  fi
  printf '%s=%s\n' "$set" "$dir"
done
