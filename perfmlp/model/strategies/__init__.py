"""The strategies as closed forms: what each rank computes and hands to
collectives per step, the predicted time per batch, and which strategy wins
where (docs/model.md, "Strategies").

Strategies (`run --parallel`, with `--comm` for the library):
- data: the batch split over p ranks, the whole gradient buffer allreduced
  (perfmlp/model/predict); with `--comm ps` / `ps-nccl` the parameter server instead:
  the gradient buffer reduced to rank 0, updated there, parameters broadcast.
- model: every rank holds the whole batch and a shard of every weight matrix
  (`layer_splits`); activations are combined inside the step, no gradient
  is exchanged.
- hybrid: a p = p_data x p_model grid; rank r sits at (d, m) = divmod(r,
  p_model): a model group per row (the ranks of one data piece), a data
  group per column (the ranks holding the same shard).

Layer splits of a network D - n_1 - ... - n_{L-1} - C over a model group
(layer l = 1..L):
- odd l ("row"): W_l split by rows (output units); needs the whole input
  (replicated), gives its own rows of the activation.
- even l ("col"): W_l split by columns (input units), so its input is the
  row shard the layer below produced; gives a partial sum of the whole
  pre-activation: one allreduce of n_l x b before the bias (the output
  layer: after adding the bias on the group's first rank, so that its
  sigmoid or softmax sees the whole sum).
- the output layer when L is odd ("rep"): replicated (C rows are too few to
  split); its input is whole (the col layer below it), so no collective.
Backward: a col layer's dA is its own rows (no collective); a row layer
l > 1 produces a partial sum of dA_{l-1}: one allreduce of n_{l-1} x b.
A shard is therefore a plain network of sizes (D, own_1, n_2, own_3, ...,
C) (`shard_sizes`), which the trainer runs with the same kernels.

Collectives over a group of one rank are not called (and not counted).

Execution modes: as data parallelism's, eager (kernel by kernel) or graph:
with NCCL (and the parameter server's ps-nccl) the whole step, the model
group's allreduces included, is one CUDA graph replayed per batch; the
staged and host exchanges need the host inside the step, so they run
eagerly (perfmlp/model/predict's graph_refusal and resolve_exec, which the
trainer uses too).

The modules: grid.py (the grid, the layer splits, the shards), counts.py
(each rank's counts and collectives, the closed forms), prediction.py (the
time per batch, the phases a batch records), choice.py (the candidates,
the fastest, crossovers), summary.py (one configuration for the CLI).
"""
from .choice import Strategy, best_strategy, crossover_batch, label
from .counts import closed_form_bytes, rank_collectives, rank_counts, step_bytes
from .grid import DEVICE_COMMS, PS_COMMS, ROOT, StrategyError, check_shard, coords, grid, layer_splits, shard_sizes
from .prediction import predict_strategy, step_phases, strategy_exec
from .summary import format_strategy, strategy_summary

__all__ = ["Strategy", "best_strategy", "crossover_batch", "label", "closed_form_bytes", "rank_collectives",
           "rank_counts", "step_bytes", "DEVICE_COMMS", "PS_COMMS", "ROOT", "StrategyError", "check_shard", "coords",
           "grid", "layer_splits", "shard_sizes", "predict_strategy", "step_phases", "strategy_exec",
           "format_strategy", "strategy_summary"]
