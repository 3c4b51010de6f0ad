#!/usr/bin/env bash
# Wait until a Kubernetes Job has finished, either way; exit 0 if it completed, 1 if it failed (saying
# why), 124 if it is still running after TIMEOUT seconds. `kubectl wait` cannot wait for either of two
# conditions: `--for=condition=complete` waits out its whole timeout on a job that failed.
#
#   stacks/wait-for-job.sh JOB [TIMEOUT_SECONDS (default 1200)] [kubectl flags, e.g. -n NAMESPACE]
#
# WAIT_INTERVAL (seconds between checks, default 10) is for tests.
set -euo pipefail
job=${1:?usage: stacks/wait-for-job.sh JOB [TIMEOUT_SECONDS] [kubectl flags]}
timeout=${2:-1200}
shift $(( $# < 2 ? $# : 2 ))
deadline=$(( SECONDS + timeout ))
while :; do
  conditions=" $(kubectl get "job/$job" "$@" -o jsonpath='{.status.conditions[?(@.status=="True")].type}') "
  case $conditions in
    *" Complete "*) echo "job/$job completed"; exit 0 ;;
    *" Failed "*)
      echo "job/$job failed: $(kubectl get "job/$job" "$@" -o jsonpath='{.status.conditions[?(@.type=="Failed")].message}')" >&2
      exit 1 ;;
  esac
  if (( SECONDS >= deadline )); then
    echo "job/$job is still running after ${timeout}s" >&2
    exit 124
  fi
  sleep "${WAIT_INTERVAL:-10}"
done
