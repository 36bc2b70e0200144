#!/usr/bin/env bash
# The gpu collector against the driver, on a machine with an NVIDIA GPU and
# its driver (and nothing else of NVIDIA's: no CUDA toolkit). It builds the
# exporter (Release, or uses build-release/ when there) and a tiny program
# that declares a server and has a child allocate a known amount of GPU
# memory through the CUDA driver API, then checks the exporter's
# gym_server_gpu_memory_bytes for that server against
# `nvidia-smi --query-compute-apps=pid,used_memory` (within 2 MiB).
#   scripts/gpu-check.sh [MIB]      (default 512)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mib="${1:-512}"
build="$root/build-release"
if [ ! -x "$build/exporter/gym-exporter" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j "$(nproc)" --target gym-exporter gymmetrics
fi
work="$(mktemp -d /tmp/gym-gpu-check-XXXXXX)"
registry="/dev/shm/${work##*/}"
cleanup() {
  [ -n "${alloc_pid:-}" ] && kill "$alloc_pid" 2>/dev/null || true
  rm -rf "$work" "$registry"
}
trap cleanup EXIT
cc -O2 -o "$work/gpu_alloc" "$root/scripts/gpu-check/gpu_alloc.c" -I"$root/lib/include" \
  -L"$build/lib" -lgymmetrics -Wl,-rpath,"$build/lib" -ldl
GYM_METRICS_DIR="$registry" "$work/gpu_alloc" gpu_check "$mib" >"$work/out" &
alloc_pid=$!
for _ in $(seq 1 300); do
  grep -q '^allocated' "$work/out" 2>/dev/null && break
  kill -0 "$alloc_pid" 2>/dev/null || { echo "gpu-check: the allocator failed" >&2; exit 1; }
  sleep 0.1
done
child="$(awk '/^allocated/ {print $2}' "$work/out")"
[ -n "$child" ] || { echo "gpu-check: no allocation within 30 s" >&2; exit 1; }
echo "gpu-check: server gpu_check, child $child holds $mib MiB (cuMemAlloc)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits
smi_mib="$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
  awk -F', *' -v pid="$child" '$1 == pid {print $2}')"
[ -n "$smi_mib" ] || { echo "gpu-check: nvidia-smi does not list pid $child" >&2; exit 1; }
"$build/exporter/gym-exporter" --once --registry.dir="$registry" 2>"$work/log" >"$work/metrics"
grep -E '^gym_(server_)?gpu|^gym_exporter_gpu' "$work/metrics" || true
ours="$(awk '/^gym_server_gpu_memory_bytes\{/ && /nemo_gym_server_name="gpu_check"/ {s += $NF}
  END {if (NR) printf "%.0f", s}' "$work/metrics")"
[ -n "$ours" ] && [ "$ours" != 0 ] || { echo "gpu-check: no GPU memory for gpu_check" >&2; cat "$work/log" >&2; exit 1; }
ours_mib="$(awk -v b="$ours" 'BEGIN {printf "%.1f", b / 1048576}')"
echo "gpu-check: exporter ${ours_mib} MiB, nvidia-smi ${smi_mib} MiB"
awk -v a="$ours_mib" -v b="$smi_mib" 'BEGIN {d = a - b; if (d < 0) d = -d; exit !(d <= 2)}' ||
  { echo "gpu-check: FAILED (more than 2 MiB apart)"; exit 1; }
echo "gpu-check: OK"
