// dpsolve/precond.cuh - the device face of a pointwise preconditioner, inlined by the fused kernels.
//
// A pointwise preconditioner computes z_i from r_i and row i's own data, so every fused kernel
// that forms r_i can form z_i in the same pass (the paper's Jacobi fusion). The kernels never
// read the preconditioner's data themselves: they build a Pointwise from the PrecondArgs they
// were given (args.cuh) and call active(), apply() and apply_adjoint(). Preconditioners that are
// not pointwise (Chebyshev, AMG: dpsolve/precond) run through their stream face instead, between
// the fused kernels, and the kernels get a PrecondArgs with nothing active.
#pragma once

#include <dpsolve/args.cuh>
#include <dpsolve/common.cuh>

namespace dps {

template <typename T>
struct Pointwise {
    const T* __restrict__ inv_diag;      // Jacobi's D^-1 (nullptr: inactive)

    __device__ __forceinline__ explicit Pointwise(const dyn::PrecondArgs<T>& a)
        : inv_diag(a.inv_diag) {}
    // whether z is a vector of its own (else z == r and nothing is applied)
    __device__ __forceinline__ bool active() const { return inv_diag != nullptr; }
    // z_i = (M r)_i
    __device__ __forceinline__ T apply(int i, T r) const { return dps::ldg(inv_diag + i) * r; }
    // z_i = (M^H r)_i (BiCG's shadow system)
    __device__ __forceinline__ T apply_adjoint(int i, T r) const {
        return dps::conj(dps::ldg(inv_diag + i)) * r;
    }
};

// the device face of the PrecondArgs a kernel was given, and of no preconditioner
template <typename T>
__device__ __forceinline__ Pointwise<T> pointwise(const dyn::PrecondArgs<T>& a) {
    return Pointwise<T>(a);
}
template <typename T>
__device__ __forceinline__ Pointwise<T> no_pointwise() {
    return Pointwise<T>(dyn::PrecondArgs<T>{nullptr});
}

}  // namespace dps
