#!/usr/bin/env bash
# Slurm TaskProlog (slurm.conf: TaskProlog=/path/gym-task-prolog.sh): each
# task of the job writes into the registry its node's exporter reads.
# Slurm sets what a TaskProlog prints as "export NAME=value".
echo "export GYM_METRICS_DIR=/dev/shm/gym-metrics-${SLURM_JOB_ID}"
