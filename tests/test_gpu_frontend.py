"""Front-end type round trips with CuPy inputs (GPU machines only)."""
import numpy as np
import pytest
import scipy.sparse as sp

import dpsolve
from dpsolve.matrices import laplace_2d

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cupy_in_cupy_out(dtype):
    import cupy
    import cupyx.scipy.sparse as csp
    A = laplace_2d(9).astype(dtype)
    b = np.arange(81, dtype=dtype)
    x0 = cupy.ones(81, dtype=dtype)
    x0_saved = x0.copy()
    rtol = 1e-4 if dtype == np.float32 else 1e-8
    for dA in (csp.csr_matrix(sp.csr_matrix(A)), cupy.asarray(A.toarray())):
        x, info = dpsolve.cg(dA, cupy.asarray(b), x0=x0, variant="host", rtol=rtol)
        assert isinstance(x, cupy.ndarray) and x.dtype == dtype and info == 0
        assert float(cupy.linalg.norm(cupy.asarray(b) - dA @ x)) <= rtol * np.linalg.norm(b) * 1.01
        assert bool((x0 == x0_saved).all())
    x, info = dpsolve.cg(csp.csr_matrix(sp.csr_matrix(A)), b, variant="host")
    assert isinstance(x, np.ndarray), "NumPy b gives NumPy x, whatever A is"


def test_cupy_nan_rejected():
    import cupy
    A = laplace_2d(4)
    b = cupy.ones(16)
    b[3] = cupy.nan
    with pytest.raises(ValueError, match="b contains NaN or Inf"):
        dpsolve.cg(A, b, variant="host")


@pytest.mark.parametrize("what", ["b", "x0", "A", "cupy A", "cupy dense A", "cupy b", "nan b",
                                  "nan A"])
def test_a_value_past_the_working_dtype_is_named_on_the_device(what):
    """The device's checks (PendingVectors, PendingCSR: the cast on the device) tell a value
    past the largest float32 in a float64 input to a float32 system from a NaN or Inf, as the
    host's do (tests/test_validation.py); no NumPy warning either way. Before, both read "NaN
    or Inf"."""
    import warnings

    import cupy
    import cupyx.scipy.sparse as csp
    A = sp.csr_array(laplace_2d(5))
    big = np.ones(25)
    big[3] = np.nan if what.startswith("nan") else 1e39
    Abig = A.copy()
    Abig.data[0] = big[3]
    match = "contains NaN or Inf" if what.startswith("nan") else \
        "past the largest float32, the working dtype"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        P = dpsolve.prepare(A.astype(np.float32), "cg", dtype="float32", variant="cuda")
        calls = {"b": lambda: P.solve(big), "x0": lambda: P.solve(np.ones(25), x0=big),
                 "cupy b": lambda: P.solve(cupy.asarray(big)), "nan b": lambda: P.solve(big),
                 "A": lambda: dpsolve.prepare(Abig, "cg", dtype="float32", variant="cuda"),
                 "nan A": lambda: dpsolve.prepare(Abig, "cg", dtype="float32", variant="cuda"),
                 "cupy A": lambda: dpsolve.prepare(csp.csr_matrix(sp.csr_matrix(Abig)), "cg",
                                                   dtype="float32", variant="cuda"),
                 "cupy dense A": lambda: dpsolve.prepare(cupy.asarray(Abig.toarray()), "cg",
                                                         dtype="float32", variant="cuda")}
        with pytest.raises(ValueError, match=match):
            calls[what]()
        x, info = P.solve(np.ones(25))
    assert info == 0


def test_variants_report_gpu_present():
    from dpsolve._device import status
    st = status()
    assert st.ok and st.name and st.compute_capability >= (7, 0)


SPIN = r'''
extern "C" __global__ void spin(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < (unsigned long long)ns);
}
'''


@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize("variant", ["cuda", "graph", "persistent"])
def test_a_scaled_x_is_whole_when_the_caller_reads_it(monkeypatch, variant, prepared):
    """b out of the safe range (2^-600 b'): x is multiplied back on dpsolve's stream after the
    solve's last host wait, and the caller's stream must be ordered after that. A 50 ms kernel
    queued ahead of each multiplication makes a missing order show: the caller's x.get() would
    copy x before it is written. x is b''s x times 2^-600, bit for bit (the scaling is exact)."""
    import cupy
    import cupyx.scipy.sparse as csp
    from dpsolve import _frontend
    spin = cupy.RawKernel(SPIN, "spin")
    times = _frontend.times_power_of_two

    def slow(v, e):
        if isinstance(v, cupy.ndarray):
            spin((1,), (1,), (np.int64(50_000_000),))      # on the current stream
        return times(v, e)
    A = csp.csr_matrix(sp.csr_matrix(laplace_2d(12)))
    b1 = cupy.asarray(np.random.default_rng(3).standard_normal(144))
    P = dpsolve.prepare(A, "cg", variant=variant) if prepared else None
    solve = P.solve if prepared else (lambda b, **kw: dpsolve.cg(A, b, variant=variant, **kw))
    x1, info1 = solve(b1, rtol=1e-8, full_output=True)[:2]
    monkeypatch.setattr(_frontend, "times_power_of_two", slow)
    x, info = solve(b1 * 2.0 ** -600, rtol=1e-8, full_output=True)[:2]
    assert info == info1 == 0
    assert np.array_equal(x.get(), x1.get() * 2.0 ** -600)


FIRST_CALL = r"""
import json, sys
import numpy as np, scipy.sparse as sp
import dpsolve
from dpsolve.cuda import _loader
from dpsolve.matrices import laplace_2d
submitted, fetched = [], set()
submit, compiled = _loader._submit, _loader._compiled
_loader._submit = lambda key: (submitted.append(key), submit(key))[1]
_loader._compiled = lambda *key: (fetched.add(key), compiled(*key))[1]
dtype = np.dtype(sys.argv[1])
A = sp.csr_array(laplace_2d(int(sys.argv[2]))).astype(dtype)
x, info = dpsolve.cg(A, A @ np.ones(A.shape[0], dtype))
print(json.dumps({"info": info, "submitted": [k[1:3] for k in submitted],
                  "unused": [k[1:3] for k in submitted if k not in fetched]}))
"""


@pytest.mark.parametrize("dtype, size", [("float64", 32), ("float32", 100)])
def test_the_first_calls_prefetched_modules_are_the_ones_it_fetches(dtype, size):
    """A process's first default call starts its modules compiling side by side
    (``_frontend._prefetch_first_call``): each one the call then fetches a kernel from, none
    compiled for nothing (a fresh process: every module goes through the loader)."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", FIRST_CALL, dtype, str(size)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["info"] == 0
    assert {tuple(k) for k in seen["submitted"]} >= {("check", np.dtype(dtype).str),
                                                    ("spmv", np.dtype(dtype).str)}, seen
    assert seen["unused"] == [], seen
