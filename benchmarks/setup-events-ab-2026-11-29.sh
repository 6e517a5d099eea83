#!/usr/bin/env bash
# Kept as run (issue 30, session 24, H200 2026-11-29; it named setup-events-ab-2026-11-29.py scratch/abset24.py).
# tree A/B of the set-up (pinned to one core, ABAB x3), then the AMG GPU tests
export PYTHONUNBUFFERED=1
C=${CORE:-3}
for r in 1 2 3; do
  for t in before after; do
    if [ $t = before ]; then P=$PWD/.before; else P=$PWD; fi
    PYTHONPATH=$P taskset -c $C python3 scratch/abset24.py $t 2>&1 | grep ABSET
  done
done
export PYTHONPATH=$PWD
timeout 300 python3 -m pytest -q -n 8 tests/test_gpu_precond.py tests/test_gpu_spgemm.py -p no:cacheprovider 2>&1 | tail -4
