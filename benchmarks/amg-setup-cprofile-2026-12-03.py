#!/usr/bin/env python3
"""Where the AMG set-up's host time goes, by Python function (session 72, H200 2026-12-03).

    PYTHONPATH=. python3 benchmarks/amg-setup-cprofile-2026-12-03.py 3:100 2:1024
    PYTHONPATH=. python3 benchmarks/amg-setup-cprofile-2026-12-03.py update 3:100 3:160

With `update` first (session 74, 2026-12-03) the call timed and profiled is the re-set-up
instead: P.update(M) of one prepared system, M alternately 2 A and A (bench-amg's re-set-up).

At these sizes the set-up was found bound by the host (~1,500 calls of ~25 us; BENCHMARKS.md,
12-02; at 3-D 160^3 it is the GPU's, a trace of 12-03 found). For each problem
("2:1024": 2-D Poisson 1024^2, "3:100": 3-D Laplace 100^3): two untimed prepares (modules
compiled, pool warm), then 5 prepares(A, "cg", M="amg", variant="graph") timed without the
profiler (median), then 5 under cProfile. Prints the untimed median, the profiled wall, the
functions of most own time (tottime) and of most cumulative time inside dpsolve, and the
calls to CuPy's kernel launchers and to device synchronisation, a prepare's share each."""
import cProfile
import gc
import io
import pstats
import statistics
import sys
import time

import cupy

from amg_setup_ab import prepared, problem

REPS = 5


def main():
    args = sys.argv[1:]
    update = bool(args) and args[0] == "update"
    what = "update" if update else "prepare"
    for spec in args[update:] or ["3:100", "2:1024"]:
        A = problem(spec)
        held = [None]                  # the last system, dropped before the next (as bench-amg)
        both = [A * 2.0, A]

        def before():                  # untimed
            if not update:
                held[0] = None
                gc.collect()

        def call():
            if update:                 # the one prepared system, its values alternating
                both.reverse()
                held[0].update(both[0])
                cupy.cuda.Device().synchronize()
            else:
                held[0] = prepared(A)
        for _ in range(2):
            held[0] = prepared(A)
        plain = []
        for _ in range(REPS):
            before()
            t0 = time.perf_counter()
            call()
            plain.append((time.perf_counter() - t0) * 1e3)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        for _ in range(REPS):
            before()
            prof.enable()
            call()
            prof.disable()
        wall = (time.perf_counter() - t0) * 1e3 / REPS      # (with the drops: as before)
        print(f"== {spec}: {what} {statistics.median(plain):.1f} ms (median of {REPS}, "
              f"{min(plain):.1f}-{max(plain):.1f}); under cProfile {wall:.1f} ms a call",
              flush=True)
        st = pstats.Stats(prof)
        total_calls = sum(v[1] for v in st.stats.values())
        print(f"   Python calls a {what}: {total_calls / REPS:.0f}")
        for order, limit in (("tottime", 25), ("cumulative", 40)):
            buf = io.StringIO()
            st2 = pstats.Stats(prof, stream=buf)
            st2.sort_stats(order)
            if order == "cumulative":
                st2.print_stats("dpsolve", limit)
            else:
                st2.print_stats(limit)
            lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
            start = next(i for i, ln in enumerate(lines) if "ncalls" in ln)
            print(f"   -- by {order} (all {REPS} prepares) --")
            for ln in lines[start:]:
                print("   " + ln[:170])
        counts = {}
        for (fname, _, func), v in st.stats.items():
            key = None
            if "synchronize" in func:
                key = f"synchronize ({func})"
            elif func == "__call__" and ("cupy" in fname or "pdl" in fname):
                key = f"__call__ ({fname.rsplit('/', 1)[-1]})"
            elif func in ("launch", "launch_raw", "_launch"):
                key = f"{func} ({fname.rsplit('/', 1)[-1]})"
            if key:
                counts[key] = counts.get(key, 0) + v[1]
        for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:12]:
            print(f"   calls a {what}: {v / REPS:8.1f}  {k}")


if __name__ == "__main__":
    main()
