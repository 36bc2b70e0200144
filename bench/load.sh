#!/usr/bin/env bash
# Load on /metrics: wrk with 64 connections for 30 s against gym-exporter
# serving 1,000 live writer segments; prints wrk's latency distribution and
# errors, and the exporter's resident memory before and after.
#   bench/load.sh [build dir] [seconds]
set -euo pipefail
build="${1:-build}"
seconds="${2:-30}"
dir="$(mktemp -d /dev/shm/gym-load-XXXXXX)"
log="$(mktemp)"
: > "$log.hold"
"$build/bench/exporter_bench" --hold-segments=1000 --dir="$dir" > "$log.hold" &
holder=$!
cleanup() { kill "$exporter" "$holder" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir" "$log" "$log.hold"; }
trap cleanup EXIT
until grep -q ready "$log.hold"; do sleep 0.1; done
"$build/exporter/gym-exporter" --registry.dir="$dir" --web.listen-address=127.0.0.1:0 2>"$log" &
exporter=$!
until grep -q "(port" "$log"; do sleep 0.1; done
port="$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$log" | head -1)"
rss() { awk '/VmRSS/ {print $2 " KiB"}' "/proc/$exporter/status"; }
curl -s -o /dev/null "http://127.0.0.1:$port/metrics"
echo "exporter RSS before: $(rss)"
wrk -t2 -c64 -d"${seconds}s" --timeout 10s --latency "http://127.0.0.1:$port/metrics"
echo "exporter RSS after: $(rss)"
