// dpsolve/args.cuh - the device-driven solves' arguments: one struct per method, passed by value.
//
// The host launches one kernel per device-driven solve (<method>_dyn_start of variant "dynamic",
// <method>_persistent of variant "persistent") with one of these structs as its only argument;
// the dynamic chain passes the same struct from kernel to kernel. dpsolve/cuda/abi.py mirrors
// every struct field for field (ARGS), and packs it as a NumPy record (abi.pack);
// tests/test_abi.py parses this file and fails when the two disagree. Grammar the test reads:
// one `struct NameArgs {` per struct, one declaration per line, `int a, b;` lists allowed; a field
// whose type is another struct of this file (`PrecondArgs<T> pc;`) is nested, as C lays it out.
// Pointers are 64-bit words on the Python side (nullptr: 0).
#pragma once

#include <dpsolve/common.cuh>

namespace dyn {

// The device face of a pointwise preconditioner (z_i = M(r)_i: a function of row i alone), as
// the fused kernels of every variant take it, by value; dpsolve/cuda/include/dpsolve/precond.cuh
// applies it (dps::Pointwise). The Python side packs it from the preconditioner's device face
// (dpsolve/precond: ``DeviceFace.args``). A new pointwise preconditioner adds its fields here
// and its arithmetic in precond.cuh; no kernel changes.
template <typename T>
struct PrecondArgs {
    const T* inv_diag;                   // Jacobi: D^-1; nullptr: no fused preconditioner (z == r)
};

// CG (cg_dynamic.cu, cg_persistent.cu)
template <typename T>
struct CgArgs {
    int n, width, maxiter;               // width: the ELL width (0 for CSR)
    int flags;                           // abi.cuh's DPS_FAST_* (read by FAST kernels; else 0)
    double atol;
    double rtol;                         // with DPS_FAST_TOL: the tolerance max(atol, rtol ||b||)
    const int* indptr;                   // CSR (nullptr for ELL)
    const int* indices;
    const T* data;
    const T* b;
    PrecondArgs<T> pc;                   // pointwise M (pc.inv_diag nullptr: none, z == r)
    T* x;
    T* r;
    T* z;
    T* p0;                               // p_j lives in p0 for even j, p1 for odd j
    T* p1;
    T* v;
    T* part_pv;                          // gridDim.x partials each
    T* part_rz;
    T* part_rr;
    double* status;                      // abi.cuh's DYN_* result area
    dps::real_t<T>* hist;                // optional residual history: hist[j] = tau_j (nullptr: none)
    const unsigned long long* bins;      // csr-adaptive's bin descriptor (nullptr otherwise)
    const int* guard;                    // a FAST kernel's csr_check (flags, longest row,
                                         // exponents) of A, queued before it; it runs only
                                         // where all pass (cg_persistent.cu's guard_stops;
                                         // nullptr: none)
};

// BiCG (bicg_dynamic.cu, bicg_persistent.cu): A and A^H in the same format
template <typename T>
struct BicgArgs {
    int n, width, width_h, maxiter;      // width, width_h: ELL widths of A and A^H
    double atol;
    const int* indptr;                   // A (CSR; indptr nullptr for ELL)
    const int* indices;
    const T* data;
    const int* h_indptr;                 // A^H, same format
    const int* h_indices;
    const T* h_data;
    const T* b;
    PrecondArgs<T> pc;                   // pointwise M (none: z == r, z~ == r~)
    T* x;
    T* r;
    T* rt;
    T* z;
    T* zt;
    T* p0;                               // p_j, p~_j live in p0, pt0 for even j, p1, pt1 for odd j
    T* p1;
    T* pt0;
    T* pt1;
    T* q;                                // A p
    T* qt;                               // A^H p~
    T* part_rho;                         // gridDim.x partials each
    T* part_rr;
    T* part_rv;
    double* status;
    dps::real_t<T>* hist;                // optional: hist[j] = ||r_j|| (nullptr: none)
    const unsigned long long* bins;      // csr-adaptive's bin descriptors of A and A^H
    const unsigned long long* h_bins;    // (nullptr otherwise)
};

// BiCGStab (bicgstab_dynamic.cu, bicgstab_persistent.cu)
template <typename T>
struct StabArgs {
    int n, width, maxiter;
    double atol;
    const int* indptr;                   // CSR (nullptr for ELL)
    const int* indices;
    const T* data;
    const T* b;
    PrecondArgs<T> pc;                   // pointwise M (none: p^ = p, s^ = s)
    T* x;
    T* r;
    T* rt;
    T* p0;                               // p_j, v_j live in p0, v0 for even j, p1, v1 for odd j
    T* p1;
    T* v0;
    T* v1;
    T* s;
    T* t;
    T* part_rho;                         // gridDim.x partials each
    T* part_rr;
    T* part_rv;
    T* part_ss;
    T* part_ts;
    T* part_tt;
    double* status;
    dps::real_t<T>* hist;                // optional residual history (nullptr: none)
    const unsigned long long* bins;      // csr-adaptive's bin descriptor (nullptr otherwise)
};

}  // namespace dyn
