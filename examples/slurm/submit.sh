#!/bin/bash
# Submits a sharded dicomflow job: an array of N render tasks (render.sbatch, one GPU each)
# and a merge job that runs after them, whatever their outcome (merge.sbatch).
#
#   submit.sh N OUT INPUT              render the folder INPUT into OUT in N shards
#   MANIFEST=ct.tsv submit.sh N OUT    the same from a manifest (`dicomflow scan`): no tree
#                                      walk per task, shards balanced by bytes
#
# Prints the two job ids. With WAIT=1 it waits for the merge and exits with its status (0: all
# N shards complete, nothing failed). SBATCH_OPTS adds sbatch options to both jobs (e.g.
# "--partition=gpu --time=2:00:00"); SHARD_BY, DICOMFLOW and DICOMFLOW_ARGS are passed on (see
# render.sbatch).
set -euo pipefail

if [ $# -lt 2 ] || { [ $# -lt 3 ] && [ -z "${MANIFEST:-}" ]; }; then
  echo "usage: submit.sh N OUT INPUT   (or MANIFEST=FILE submit.sh N OUT)" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
export SHARDS=$1 OUT=$2
if [ $# -ge 3 ]; then
  export INPUT=$3
fi

# shellcheck disable=SC2086 # SBATCH_OPTS is split on purpose
array=$(sbatch --parsable ${SBATCH_OPTS:-} --array="0-$((SHARDS - 1))" "$here/render.sbatch")
array=${array%%;*} # --parsable prints "id;cluster" on multi-cluster sites
echo "render: job array $array (shards 0-$((SHARDS - 1)))"
wait_opt=()
if [ "${WAIT:-0}" = 1 ]; then
  wait_opt=(--wait)
fi
# shellcheck disable=SC2086
merge=$(sbatch --parsable ${SBATCH_OPTS:-} "${wait_opt[@]}" --dependency="afterany:$array" \
  "$here/merge.sbatch") || status=$?
echo "merge: job ${merge%%;*} (after the array; writes $OUT/.dicomflow/merged.json)"
exit "${status:-0}"
