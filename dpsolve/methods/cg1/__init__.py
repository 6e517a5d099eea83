"""The single-reduction Conjugate Gradient (Chronopoulos & Gear 1989; PETSc's KSPCG with
``-ksp_cg_single_reduction``): CG's iterates with the inner products of an iteration reduced
together, one all-reduce per iteration on a distributed system where CG makes two (three
preconditioned).

Not a method of the table: this folder defines nothing (``dpsolve.methods`` imports it as it
imports every sub-package, and finds no ``define`` here). It is another formulation of ``cg``,
not a method the single-GPU front end exposes (one GPU has no all-reduce to save); it is reached
as ``dpsolve.distributed.cg(..., single_reduction=True)``:

* ``reference.py``: ``cg1``, the specification, in the reference solvers' calling convention
  (``space=`` included: its ``space.dots`` is the one reduction); the distributed ``host``
  variant runs it over ``DistributedSpace``;
* ``gpu.py``: ``cg1_cuda``, the loop of the distributed ``cuda`` variant over an executor, with
  the fused kernels of ``dpsolve/cuda/cg1.cu``: per iteration one fused update kernel, the SpMV,
  the partials of <u, A u>, one finishing kernel, ONE ``ex.allreduce_slots`` of three adjacent
  scalar slots, one scalar kernel.
"""
