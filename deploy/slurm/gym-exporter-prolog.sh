#!/usr/bin/env bash
# Slurm Prolog (slurm.conf: Prolog=/path/gym-exporter-prolog.sh, run as root
# on each node of a job as it starts): one gym-exporter for the job on this
# node, reading the job's own registry in /dev/shm, and this node's entry of
# the job in a Prometheus file_sd directory that the cluster's Prometheus
# reads (file_sd_configs: [{files: [GYM_SD_DIR/*.json]}]).
#
# Monitoring never fails a job: whatever goes wrong is written to the log
# and the prolog exits 0 (a failing prolog would drain the node).
#
# Environment (Slurm's, and these settings):
#   SLURM_JOB_ID, SLURMD_NODENAME (else hostname), SLURM_JOB_UID (the
#     registry's owner), SLURM_JOB_NAME (the run's name by default),
#     SLURM_STEP_ID
#   GYM_SD_DIR        the file_sd directory (a shared filesystem); required
#   GYM_EXPORTER      the exporter (default: gym-exporter on PATH)
#   GYM_EXPORTER_PORT the port (default: any free one; the entry says which)
#   GYM_RUN           the run's name (default: SLURM_JOB_NAME, else the job id)
#   GYM_RUN_DIR       where the job's exporter keeps its files (default /run/gym-exporter)
#   GYM_EXPORTER_START_SECONDS  how long to wait for it to listen (default 10)
#
# The job's identity is one series, gym_run_info{run, slurm_job_id, ...}
# (the run: section below), joined on instance: not a label of every series
# the job's exporter serves. At its stop the exporter writes a final
# capture into the run directory, which the epilog keeps (see there).
# The job's tasks find the registry through GYM_METRICS_DIR, which
# gym-task-prolog.sh (TaskProlog) exports: /dev/shm/gym-metrics-JOBID.
set -uo pipefail
job="${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run me as a Slurm prolog}"
node="${SLURMD_NODENAME:-$(hostname)}"
run_dir="${GYM_RUN_DIR:-/run/gym-exporter}/$job"
registry="/dev/shm/gym-metrics-$job"
exporter="${GYM_EXPORTER:-$(command -v gym-exporter || echo /usr/bin/gym-exporter)}"
log() { echo "gym-exporter-prolog: job $job: $*" >&2; }

if [ -z "${GYM_SD_DIR:-}" ]; then
  log "GYM_SD_DIR is not set: no exporter for this job"
  exit 0
fi
mkdir -p "$run_dir" "$registry" || { log "cannot make $run_dir or $registry"; exit 0; }
# The job's processes write the registry; nobody else may.
if [ -n "${SLURM_JOB_UID:-}" ]; then chown "$SLURM_JOB_UID" "$registry" 2>/dev/null || true; fi
chmod 0700 "$registry"
# Label values as YAML strings: quotes and backslashes escaped.
quote() { local s="${1//\\/\\\\}"; printf '"%s"' "${s//\"/\\\"}"; }
cat > "$run_dir/gym-exporter.yml" <<YAML
registry:
  dir: $(quote "$registry")
web:
  listen_address: $(quote ":${GYM_EXPORTER_PORT:-0}")
  final_capture: $(quote "$run_dir/final")
run:
  name: $(quote "${GYM_RUN:-${SLURM_JOB_NAME:-$job}}")
  slurm_job_id: $(quote "$job")
service_discovery:
  file: $(quote "$GYM_SD_DIR/slurm-$job-$node.json")
  target: $(quote "$node")
YAML
setsid "$exporter" --config.file="$run_dir/gym-exporter.yml" \
  >>"$run_dir/exporter.log" 2>&1 </dev/null &
echo $! >"$run_dir/pid"
# Listening, with its entry written: or say why not.
for _ in $(seq "$((${GYM_EXPORTER_START_SECONDS:-10} * 10))"); do
  [ -f "$GYM_SD_DIR/slurm-$job-$node.json" ] && exit 0
  kill -0 "$(cat "$run_dir/pid")" 2>/dev/null || break
  sleep 0.1
done
log "the exporter did not start; its log ($run_dir/exporter.log) ends with:"
tail -n 5 "$run_dir/exporter.log" >&2
exit 0
