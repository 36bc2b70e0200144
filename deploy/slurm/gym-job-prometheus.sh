#!/usr/bin/env bash
# A Prometheus for one Slurm job, started from the job's batch script
# (`gym-job-prometheus.sh &` on its first node): it finds the job's
# exporters, one a node, by the file_sd entries the prolog has them write
# (GYM_SD_DIR/slurm-JOBID-NODE.json), and keeps its data beside the job's
# outputs, where they stay when the job ends. With the exporters' final
# captures (kept by the epilog), nothing the job's servers did is lost.
#
# Environment: SLURM_JOB_ID, GYM_SD_DIR (as for the prolog), and
#   GYM_PROMETHEUS_DATA    its directory (default SLURM_SUBMIT_DIR/gym-prometheus-JOBID)
#   GYM_PROMETHEUS_LISTEN  its address (default 127.0.0.1:9090)
#   GYM_PROMETHEUS         the binary (default: prometheus on PATH)
#   GYM_SCRAPE_INTERVAL    (default 15s)
#   GYM_RULES              the gym rules' directory (default /usr/share/gym-exporter/rules)
set -euo pipefail
job="${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run me in a Slurm job}"
sd_dir="${GYM_SD_DIR:?GYM_SD_DIR is not set (the file_sd directory of the prolog)}"
data="${GYM_PROMETHEUS_DATA:-${SLURM_SUBMIT_DIR:-$PWD}/gym-prometheus-$job}"
prometheus="${GYM_PROMETHEUS:-$(command -v prometheus || echo /usr/bin/prometheus)}"
mkdir -p "$data"
# Paths as YAML strings: quotes and backslashes escaped.
quote() { local s="${1//\\/\\\\}"; printf '"%s"' "${s//\"/\\\"}"; }
cat >"$data/prometheus.yml" <<YAML
global:
  scrape_interval: ${GYM_SCRAPE_INTERVAL:-15s}
  scrape_timeout: ${GYM_SCRAPE_INTERVAL:-15s}
rule_files:
  - $(quote "${GYM_RULES:-/usr/share/gym-exporter/rules}/*.yml")
scrape_configs:
  - job_name: gym
    file_sd_configs:
      - files: [$(quote "$sd_dir/slurm-$job-*.json")]
YAML
exec "$prometheus" --config.file="$data/prometheus.yml" --storage.tsdb.path="$data/tsdb" \
  --web.listen-address="${GYM_PROMETHEUS_LISTEN:-127.0.0.1:9090}"
