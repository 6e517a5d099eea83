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


def test_variants_report_gpu_present():
    from dpsolve._device import status
    st = status()
    assert st.ok and st.name and st.compute_capability >= (7, 0)
