"""Predicted time per batch as a sum of named terms, for the slowest rank
(the largest piece); each term belongs to the trace's phase group that
measures it (TERM_GROUP). docs/model.md gives each term's formula:
- gemm: each GEMM's FLOPs over the measured rate at its shape, else the peak;
- elementwise: the trainer's own kernels at their measured time, else bytes
  over memory bandwidth (and a graph's copies into its static inputs);
- kernel_gaps: the GPU's idle time between kernels;
- launches (eager), graph_launch (graph): what the host's launches, the
  tracer's host time and the loop's own work add to the GPU's work, from
  the host/GPU timeline (timeline.py): the host enqueues kernels while
  earlier ones run, and a synchronising call waits for the stream;
- tracing: the tracer's CUDA events, at the `phases` level (TRACE_COSTS);
- h2d_batch: X and Y copied, the node's bandwidth shared by the ranks
  copying at once, less what a pageable copy's staging hides behind the
  previous batch's GPU work; 0 when resident; prefetched, only what the
  pipeline takes beyond the rest of the step;
- d2h_grad, h2d_grad: the staged gradient copies (mpi-staged);
- allreduce: the measured table for this comm and p, else the ring model;
  with `overlap`, only what the backward pass does not hide;
- rank_wait: the calibrated wait for the slowest rank; 0 on one process.

Overlap (each gradient bucket's allreduce started as the backward pass
writes it) is a two-stage pipeline on one stream: bucket i's communication
ends at end_i = max(end_{i-1}, written_i) + comm_i, and what adds to the
batch is end_last less the end of the backward pass. Not modelled: the
slowdown of compute kernels sharing SMs with the communication kernels.

The total is the sum (copies, communication and compute serialised, as the
trainer runs them); the overlapped lower bound is the max of the compute
terms and the copy/communication terms.

The modules: terms.py (the terms, their groups, Prediction), execution.py
(eager or graph), tracing.py (the tracer's cost per level), compute.py (the
kernels' GPU time), copies.py (the batch's copies), exchange.py (allreduces,
staged copies, the overlapped pipeline), timeline.py (the host issuing a
batch to the stream), batch.py (predict_batch, the sum).
"""
from .batch import predict_batch
from .exchange import allreduce_s, gradient_buckets, overlap_pipeline, ring_allreduce_s, staging_memory
from .execution import (default_trace_level, graph_refusal, resolve_comm, resolve_exec, trace_cost, trace_detail,
                        trace_words, traced_phases)
from .terms import TERM_GROUP, TERMS, Prediction
from .timeline import Item, Step, graph_loop_host_s, launch_host_s, timeline_batch_s
from ...names import GROUPS, TRACE_LEVELS, UNTRACED

__all__ = ["predict_batch", "allreduce_s", "gradient_buckets", "overlap_pipeline", "ring_allreduce_s", "staging_memory",
           "graph_refusal", "resolve_comm", "resolve_exec", "TERM_GROUP", "TERMS", "Prediction", "Item", "Step",
           "graph_loop_host_s", "launch_host_s", "timeline_batch_s", "default_trace_level", "trace_cost",
           "trace_detail", "trace_words", "traced_phases", "GROUPS", "TRACE_LEVELS", "UNTRACED"]
