"""Predicted time per batch as a sum of named terms for the slowest rank
(the largest piece), each term in the trace's phase group that measures it
(TERM_GROUP); docs/model.md gives each term's formula. The total is the sum
(copies, communication and compute serialised, as the trainer runs them);
the overlapped lower bound is the max of the compute terms and the rest.

Overlap (each gradient bucket's allreduce started as the backward pass
writes it) is a two-stage pipeline on one stream: end_i = max(end_{i-1},
written_i) + comm_i; what adds to the batch is end_last less the end of the
backward pass. Not modelled: compute kernels slowed by sharing SMs with the
communication kernels.
"""
import importlib

_NAMES = {"batch": ("predict_batch", "TERM_GROUP", "TERMS", "Prediction"),
          "exchange": ("allreduce_s", "gradient_buckets", "overlap_pipeline", "ring_allreduce_s", "staging_memory"),
          "timeline": ("Item", "Step", "default_trace_level", "graph_loop_host_s", "graph_refusal", "launch_host_s",
                       "resolve_comm", "resolve_exec", "timeline_batch_s", "trace_cost", "trace_detail", "trace_words",
                       "traced_phases")}
_HOME = {name: module for module, names in _NAMES.items() for name in names}
__all__ = list(_HOME)


def __getattr__(name):
    # each name loaded from its module on first use: the trainer reads the execution rules and the staging
    # memory, and so never loads the machine files' reader (batch.py) it does not need
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
