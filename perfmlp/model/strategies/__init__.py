"""The strategies as closed forms: what each rank computes and hands to
collectives per step, the predicted time per batch, and which wins where
(docs/model.md, "Strategies", derives them): data (the parameter server with
`--comm ps`/`ps-nccl`), model (a shard of every weight matrix a rank: odd
layers split by rows, even by columns, a row-split output replicated) and
hybrid (a p_data x p_model grid, rank r at divmod(r, p_model)).
"""
from .counts import (DEVICE_COMMS, PS_COMMS, ROOT, StrategyError, check_shard, closed_form_bytes, coords, grid,
                     layer_splits, rank_collectives, rank_counts, shard_sizes, step_bytes)
from .prediction import Strategy, best_strategy, crossover_batch, label, predict_strategy, step_phases, strategy_exec

__all__ = ["Strategy", "best_strategy", "crossover_batch", "label", "closed_form_bytes", "rank_collectives",
           "rank_counts", "step_bytes", "DEVICE_COMMS", "PS_COMMS", "ROOT", "StrategyError", "check_shard", "coords",
           "grid", "layer_splits", "shard_sizes", "predict_strategy", "step_phases", "strategy_exec"]
