"""The strategies as closed forms: what each rank computes and hands to
collectives per step, the predicted time per batch, and which strategy wins
where (docs/model.md, "Strategies", derives them).

Strategies (`run --parallel`, with `--comm` for the library):
- data: the batch split over p ranks, the whole gradient buffer allreduced
  (perfmlp/model/predict); with `--comm ps` / `ps-nccl` the parameter server:
  the buffer reduced to rank 0, updated there, parameters broadcast.
- model: every rank holds the whole batch and a shard of every weight
  matrix (`layer_splits`); activations are combined inside the step.
- hybrid: a p = p_data x p_model grid; rank r sits at (d, m) = divmod(r,
  p_model): a model group per row, a data group per column.

Layer splits over a model group (layer l = 1..L): odd l by rows ("row",
the input whole, the output the rank's own rows); even l by columns
("col", the input the rows the layer below left, the output a partial sum:
one allreduce of n_l x b before the bias, which the output layer adds on
the group's first rank only); an output layer that would be split by rows
is replicated ("rep"). Backward, a row layer l > 1 produces a partial sum
of dA_{l-1}: one allreduce of n_{l-1} x b. A shard is therefore a plain
network (D, own_1, n_2, own_3, ..., C) (`shard_sizes`), run with the same
kernels. Collectives over a group of one rank are not called.

Execution modes as data parallelism's: with NCCL (and ps-nccl) the whole
step, the model group's allreduces included, is one CUDA graph; the staged
and host exchanges need the host inside the step, so they run eagerly
(predict/execution.py: graph_refusal, resolve_exec).

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
