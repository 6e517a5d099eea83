#!/usr/bin/env bash
# The driver of batch-range-ab-2026-11-30.py: each TAG=DIR (DIR holds a dpsolve/) in turn, one
# process a turn, ROUNDS rounds, on one machine. Usage:
#   benchmarks/batch-range-ab-2026-11-30.sh ROUNDS before=DIR after=DIR ... > ab.csv
rounds=$1; shift
here=$(cd "$(dirname "$0")/.." && pwd)
echo "tag,work,dtype,M,ms,its_max,worst_rel_res,path"
for r in $(seq "$rounds"); do
  for pair in "$@"; do
    PYTHONPATH=${pair#*=} python3 "$here/benchmarks/batch-range-ab-2026-11-30.py" "${pair%%=*}" \
      | tail -n +2
  done
done
