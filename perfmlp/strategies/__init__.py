"""Model parallelism, the hybrid grid and the parameter server: the trainer
side of perfmlp/model/strategies (which says what each strategy splits,
computes and exchanges; docs/model.md derives the bytes).

- `split_groups`: the p = p_data x p_model grid as two MPI communicators per
  rank (Comm.Split): its model group (the ranks sharing a piece of the
  batch, one shard each) and its data group (the ranks holding the same
  shard, one piece each).
- `ShardNetwork`: a network (NumPy, or the GPU's fused kernels) of the
  shard's sizes, whose forward and backward are Network's with an allreduce
  over the model group where a column-split layer's partial sums must be
  combined (the model package's `activation_collectives`); the kernels are
  Network's own, so the operations recorded are `step_ops(shard_sizes)`.
- Activation allreduces, one per communication mode: host MPI (NumPy),
  staged through the host (GPU, mpi-staged) or NCCL; each counts its bytes
  where it issues them, as comm.py's reducers do.
- The parameter server (`--comm ps` on NumPy, `ps-nccl` on the GPU): the
  gradient buffer reduced to rank 0, updated there, parameters broadcast.
- `SHARD` and `SERVER`: the training step's parts (perfmlp/step.py) with
  these exchanges and their trace phases (`combine`, `reduce`, `bcast`).
  The step is perfmlp/step.py's, eager or, with NCCL, replayed as one CUDA
  graph per piece size (perfmlp/gpu/graph.py), as data parallelism's is.

Collectives over a group of one rank are not called, so not counted.

The modules: groups.py (communicators), activations.py (the model group's
allreduces), shard.py (a shard's step), server.py (the parameter server),
build.py (backend_parts, what backend.build calls).
"""
