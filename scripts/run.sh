#!/usr/bin/env bash
# Sets up and runs the main job: builds, starts gym-demo (a synthetic Gym host
# writing into a registry) and gym-exporter serving it on :9478.
#   scripts/run.sh              until Ctrl-C
#   GYM_RUN_SECONDS=60 scripts/run.sh
# Then: curl -s localhost:9478/metrics | grep gym_
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/deps.sh"
cmake -S "$root" -B "$root/build" >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target gym-exporter gym-demo

registry="${GYM_METRICS_DIR:-/dev/shm/gym-metrics}"
"$root/build/demo/gym-demo" --registry.dir="$registry" &
demo=$!
"$root/build/exporter/gym-exporter" --config.file="$root/config/gym-exporter.yml" \
  --registry.dir="$registry" &
exporter=$!
trap 'kill $demo $exporter 2>/dev/null; wait $demo $exporter 2>/dev/null' EXIT INT TERM
echo "gym-exporter on http://localhost:9478/metrics (pid $exporter), gym-demo pid $demo" >&2
if [ -n "${GYM_RUN_SECONDS:-}" ]; then
  sleep "$GYM_RUN_SECONDS"
else
  wait $exporter
fi
