#!/usr/bin/env bash
# Slurm Epilog (slurm.conf: Epilog=/path/gym-exporter-epilog.sh): stops the
# job's gym-exporter on this node (which removes its file_sd entry), and
# removes the entry anyway if it was left (an exporter killed), the job's
# registry and the exporter's files. The exporter's final capture (its last
# exposition and snapshot, written as it stops) is kept beside the job's
# outputs: moved into GYM_CAPTURE_DIR, else the job's working directory
# (SLURM_JOB_WORK_DIR), owned by the job's user. Settings as for
# gym-exporter-prolog.sh, and GYM_EXPORTER_STOP_SECONDS: how long it may
# take to stop before SIGKILL (default 10).
# Never fails (exit 0).
set -uo pipefail
job="${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run me as a Slurm epilog}"
node="${SLURMD_NODENAME:-$(hostname)}"
run_dir="${GYM_RUN_DIR:-/run/gym-exporter}/$job"
registry="/dev/shm/gym-metrics-$job"

if pid="$(cat "$run_dir/pid" 2>/dev/null)"; then
  # Only our exporter: the pid's command line names this job's configuration.
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$run_dir/gym-exporter.yml"; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq "$((${GYM_EXPORTER_STOP_SECONDS:-10} * 10))"); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
fi
if [ -n "${GYM_SD_DIR:-}" ]; then rm -f "$GYM_SD_DIR/slurm-$job-$node.json"; fi
keep="${GYM_CAPTURE_DIR:-${SLURM_JOB_WORK_DIR:-}}"
if [ -n "$keep" ] && [ -d "$run_dir/final" ]; then
  for f in "$run_dir"/final/gym-exporter-*; do
    [ -f "$f" ] || continue
    if [ -n "${SLURM_JOB_UID:-}" ]; then chown "$SLURM_JOB_UID" "$f" 2>/dev/null || true; fi
    mv -f "$f" "$keep/" 2>/dev/null ||
      echo "gym-exporter-epilog: job $job: cannot keep $f in $keep" >&2
  done
fi
rm -rf "$registry" "$run_dir"
exit 0
