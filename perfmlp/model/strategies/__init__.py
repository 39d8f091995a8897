"""The strategies as closed forms: what each rank computes and hands to
collectives per step, the predicted time per batch, and which strategy wins
where (docs/model.md, "Strategies", derives them).

- data: the batch split over p ranks, the gradient buffer allreduced; with
  `--comm ps` / `ps-nccl` the parameter server (reduce to rank 0, update
  there, broadcast the parameters).
- model: every rank holds the whole batch and a shard of every weight matrix.
- hybrid: a p = p_data x p_model grid; rank r sits at (d, m) = divmod(r,
  p_model): a model group per row, a data group per column.

Over a model group, odd layers are split by rows and even ones by columns
(a partial sum: one allreduce of n_l x b); an output layer that would be
split by rows is replicated. Backward, a row layer l > 1 allreduces its
partial dA_{l-1}. A shard is a plain network (`shard_sizes`) run with the
same kernels. Execution modes as data parallelism's (predict/execution.py).
"""
from .counts import (DEVICE_COMMS, PS_COMMS, ROOT, StrategyError, check_shard, closed_form_bytes, coords, grid,
                     layer_splits, rank_collectives, rank_counts, shard_sizes, step_bytes)
from .prediction import Strategy, best_strategy, crossover_batch, label, predict_strategy, step_phases, strategy_exec

__all__ = ["Strategy", "best_strategy", "crossover_batch", "label", "closed_form_bytes", "rank_collectives",
           "rank_counts", "step_bytes", "DEVICE_COMMS", "PS_COMMS", "ROOT", "StrategyError", "check_shard", "coords",
           "grid", "layer_splits", "shard_sizes", "predict_strategy", "step_phases", "strategy_exec"]
