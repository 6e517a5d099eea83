"""The ``dpsolve`` command line.

    dpsolve info            device, driver and CUDA versions, NVML energy support, variants
    dpsolve study           solve the default 3-D Laplace problem with every available variant
"""
from __future__ import annotations

import argparse
import platform
import sys

import numpy as np


def cmd_info(args) -> int:
    import scipy

    from . import __version__, variants
    from ._device import status
    from .measure import RaplMeter, nvml_energy_support

    dev = status()
    print(f"dpsolve {__version__}  (Python {platform.python_version()}, NumPy {np.__version__}, "
          f"SciPy {scipy.__version__}, CuPy {dev.cupy_version or 'not installed'})")
    if dev.ok:
        cc = dev.compute_capability
        print(f"device        : {dev.name} (compute capability {cc[0]}.{cc[1]}, "
              f"{dev.multiprocessors} SMs)")
    else:
        print(f"device        : none usable - {dev.reason}")
    print(f"driver CUDA   : {dev.driver_cuda_version or 'n/a'}")
    print(f"runtime CUDA  : {dev.runtime_cuda_version or 'n/a'}")
    ok, detail = nvml_energy_support()
    print(f"GPU energy    : {'yes' if ok else 'no'} - {detail}")
    rapl = RaplMeter()
    print(f"host energy   : {'RAPL (' + str(len(rapl.domains)) + ' package domains)' if rapl.available else 'no - RAPL not present or not readable'}")
    print("variants:")
    for v in variants():
        state = "available" if v.available else f"unavailable: {v.reason}"
        print(f"  {v.name:<11} {state}")
        print(f"  {'':<11} {v.description}")
    return 0


def _table(rows, headers):
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in rows]
    return "\n".join(out)


def cmd_study(args) -> int:
    import warnings

    from . import cg, variants
    from ._errors import DpsolveError
    from .matrices import laplace_3d, paper_rhs
    from .measure import measure_window

    A = laplace_3d(args.grid)
    dtype = np.dtype(args.dtype)
    A = A.astype(dtype)
    b, _ = paper_rhs(A)
    print(f"3-D Laplace {args.grid}^3: n = {A.shape[0]:,}, nnz = {A.nnz:,}, {dtype}, "
          f"x* = ones, b = A x*, x0 = 0, rtol = {args.rtol:g}; each configuration repeated over "
          f"a {args.window:g} s window (time, CPU and energy are per solve)", flush=True)
    names = [v.name for v in variants() if v.available]
    skipped = [(v.name, v.reason) for v in variants() if not v.available]
    rows = []
    for name in names:
        for sync in ("polling", "blocking"):
            def solve():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return cg(A, b, rtol=args.rtol, variant=name, sync=sync, full_output=True)
            print(f"  {name} / {sync} ...", end="", flush=True)
            try:
                m = measure_window(solve, seconds=args.window, warmup=1)
            except DpsolveError as e:
                print(" error")
                rows.append([name, "-", sync, "error", "-", "-", "-", "-", str(e)[:60]])
                continue
            _, info, rep = m["result"]
            print(f" {m['reps']} solves")

            def f(v, spec):
                return "n/a" if v is None else format(v, spec)
            rows.append([name, rep.format or "-", sync, str(info), str(rep.iterations),
                         f(rep.residual_norm / np.linalg.norm(b), ".2e"),
                         f(m["wall"] * 1e3, ".2f"), f(m["cpu"] * 1e3, ".2f"),
                         f(m["gpu_energy"], ".3f")])
            if not args.both_sync or name == "host":
                break
    print(_table(rows, ["variant", "format", "sync", "info", "iters", "rel.res", "wall ms",
                        "CPU ms", "GPU J"]))
    for name, reason in skipped:
        print(f"skipped {name}: {reason}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dpsolve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="device, driver, NVML energy support and available variants")
    s = sub.add_parser("study", help="solve the default 3-D Laplace problem with every variant")
    s.add_argument("--grid", type=int, default=48, help="grid points per side (default 48)")
    s.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    s.add_argument("--rtol", type=float, default=1e-8)
    s.add_argument("--window", type=float, default=1.0,
                   help="seconds each configuration is repeated for (default 1)")
    s.add_argument("--no-both-sync", dest="both_sync", action="store_false",
                   help="run GPU variants in polling mode only")
    args = p.parse_args(argv)
    return {"info": cmd_info, "study": cmd_study}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
