#!/usr/bin/env bash
# Sets up and runs the main job: builds, starts gym-demo (a synthetic Gym host
# writing into a registry) and gym-exporter serving it on :9478.
#   scripts/run.sh              until Ctrl-C
#   GYM_RUN_SECONDS=60 scripts/run.sh
#   GYM_BUILD_DIR=dir scripts/run.sh   (default: build/)
# Then: curl -s localhost:9478/metrics | grep gym_
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/deps.sh"
build="${GYM_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" >/dev/null
cmake --build "$build" -j "$(nproc)" --target gym-exporter gym-demo

registry="${GYM_METRICS_DIR:-/dev/shm/gym-metrics}"
"$build/demo/gym-demo" --registry.dir="$registry" &
demo=$!
"$build/exporter/gym-exporter" --config.file="$root/config/gym-exporter.yml" \
  --registry.dir="$registry" &
exporter=$!
trap 'kill $demo $exporter 2>/dev/null; wait $demo $exporter 2>/dev/null' EXIT INT TERM
echo "gym-exporter on http://localhost:9478/metrics (pid $exporter), gym-demo pid $demo" >&2
# Until Ctrl-C or GYM_RUN_SECONDS; at once, with the exporter's status, when
# the exporter stops by itself (it could not listen, say: its error is above).
deadline=$((SECONDS + ${GYM_RUN_SECONDS:-0}))
while kill -0 "$exporter" 2>/dev/null; do
  if [ -n "${GYM_RUN_SECONDS:-}" ] && [ "$SECONDS" -ge "$deadline" ]; then exit 0; fi
  sleep 0.2
done
status=0
wait "$exporter" || status=$?
echo "gym-exporter stopped (exit status $status)" >&2
exit "$status"
