#!/usr/bin/env bash
# The driver of batch-range-ab-2026-11-30.py (AB_SCRIPT=another of benchmarks/ for another, e.g.
# batch-checks-ab-2026-11-30.py): each TAG=DIR (DIR holds a dpsolve/) in turn, one process a
# turn, ROUNDS rounds, on one machine; the CSV header once; AB_REPS=K: K calls a median (the
# script's default: 7), AB_WORK=TEXT: only the works whose label holds TEXT. Usage:
#   benchmarks/batch-range-ab-2026-11-30.sh ROUNDS before=DIR after=DIR ... > ab.csv
rounds=$1; shift
here=$(cd "$(dirname "$0")/.." && pwd)
script=$here/benchmarks/${AB_SCRIPT:-batch-range-ab-2026-11-30.py}
skip=1                                    # the first process's header is kept
for r in $(seq "$rounds"); do
  for pair in "$@"; do
    PYTHONPATH=${pair#*=} python3 "$script" "${pair%%=*}" ${AB_REPS:-} | tail -n +$skip
    skip=2
  done
done
