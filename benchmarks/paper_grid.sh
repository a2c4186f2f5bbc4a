#!/usr/bin/env bash
# The paper's grid from the command line, as docs/generation.md shows it: one `run` per (model,
# dataset, mode); --parallel runs one loop per model side by side (each model has its own rate
# limits), --serial one loop over everything. benchmarks/paper_scale.py times it.
#
#   bash benchmarks/paper_grid.sh --home DIR --parallel --models "a b" --datasets "x y" \
#        [--limits "x=10 y=20"] -- [run flags...]
set -u
home="" parallel=1 models="" datasets="" limits=""
while [ $# -gt 0 ]; do
  case "$1" in
    --home) home="$2"; shift 2 ;;
    --parallel) parallel=1; shift ;;
    --serial) parallel=0; shift ;;
    --models) models="$2"; shift 2 ;;
    --datasets) datasets="$2"; shift 2 ;;
    --limits) limits="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
python="${PYTHON:-python}"

limit_of() {  # the --limit of a dataset, from "name=n ..." (none: the whole table)
  for pair in $limits; do
    [ "${pair%%=*}" = "$1" ] && { echo "--limit ${pair#*=}"; return; }
  done
}

lane() {  # every run of one model, one after another
  local model="$1" dataset mode status=0
  shift
  for dataset in $datasets; do
    for mode in vanilla cot; do
      # shellcheck disable=SC2046
      "$python" -m persobench --home "$home" run --dataset "$dataset" --model "$model" --mode "$mode" \
        $(limit_of "$dataset") "$@" || status=1
    done
  done
  return $status
}

status=0
if [ "$parallel" = 1 ]; then
  pids=()
  for model in $models; do lane "$model" "$@" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
else
  for model in $models; do lane "$model" "$@" || status=1; done
fi
exit $status
