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
from .batch import TERM_GROUP, TERMS, Prediction, predict_batch
from .exchange import allreduce_s, gradient_buckets, overlap_pipeline, ring_allreduce_s, staging_memory
from .timeline import (Item, Step, default_trace_level, graph_loop_host_s, graph_refusal, launch_host_s, resolve_comm,
                       resolve_exec, timeline_batch_s, trace_cost, trace_detail, trace_words, traced_phases)

__all__ = ["predict_batch", "allreduce_s", "gradient_buckets", "overlap_pipeline", "ring_allreduce_s", "staging_memory",
           "graph_refusal", "resolve_comm", "resolve_exec", "TERM_GROUP", "TERMS", "Prediction", "Item", "Step",
           "graph_loop_host_s", "launch_host_s", "timeline_batch_s", "default_trace_level", "trace_cost",
           "trace_detail", "trace_words", "traced_phases"]
