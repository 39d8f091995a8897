"""Model parallelism, the hybrid grid and the parameter server: the trainer
side of perfmlp/model/strategies (which says what each strategy splits,
computes and exchanges; docs/model.md derives the bytes).

groups.py: the p = p_data x p_model grid as a model group (the ranks sharing
a piece of the batch, one shard each) and a data group (the ranks holding the
same shard) per rank. shard.py: a shard's network, Network's step with an
allreduce over the model group where a column-split layer's partial sums
must be combined (so the operations recorded are `step_ops(shard_sizes)`).
activations.py: those allreduces per communication mode. server.py: the
parameter server (`--comm ps`, `ps-nccl`). build.py: backend_parts, what
backend.build calls. `SHARD` and `SERVER` are the step's parts
(perfmlp/step.py), eager or replayed as CUDA graphs as data parallelism's.
Collectives over a group of one rank are not called, so not counted.
"""
