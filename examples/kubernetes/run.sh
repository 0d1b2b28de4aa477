#!/bin/bash
# Runs render-job.yaml, waits until it has completed or failed, then runs merge-job.yaml and
# prints what the merge said. Exits with the merge's status: 0 when every shard is complete
# and no file failed.
#
# To resume after failures: delete both jobs (kubectl delete -f render-job.yaml -f
# merge-job.yaml) and run this again. Every pod renders with --skip-existing, so only what is
# missing is rendered; the shards that were complete find all their outputs present.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
timeout=${TIMEOUT:-24h}

# Waits until job $1 is Complete or Failed (`kubectl wait` takes one condition at a time).
finished() {
  kubectl wait --for=condition=complete "job/$1" --timeout="$timeout" &
  local complete=$!
  kubectl wait --for=condition=failed "job/$1" --timeout="$timeout" &
  local failed=$!
  wait -n "$complete" "$failed" || true
  kill "$complete" "$failed" 2>/dev/null || true
}

kubectl apply -f "$here/render-job.yaml"
finished dicomflow-render

kubectl delete job/dicomflow-merge --ignore-not-found
kubectl apply -f "$here/merge-job.yaml"
finished dicomflow-merge
kubectl logs job/dicomflow-merge
[ "$(kubectl get job/dicomflow-merge -o jsonpath='{.status.succeeded}')" = 1 ]
