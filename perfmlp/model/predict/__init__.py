"""Predicted time per batch as a sum of named terms.

Terms (seconds, for the slowest rank: the one with the largest piece), each
with the trace phase group that measures it (TERM_GROUP):
- gemm: each GEMM's FLOPs over the machine's rate for its shape and kernel
  (the calibrated table where the file has one, else the peak);
- elementwise: the trainer's own kernels (costs.OWN_KERNELS), each at its
  measured time (Machine.kernel_time_s) else its device-memory bytes over
  memory bandwidth; in graph mode with resident data also the piece's
  device copy into the graph's static inputs;
- kernel_gaps: the GPU's idle time between kernels (kernel_gap_s eager,
  graph_kernel_gap_s in a replay);
- launches (eager): the host's launches (the time per operation with p
  ranks launching at once, Machine.launch_s, times the step's size factor
  and after pageable copies Machine.pageable_launch) and the tracer's host
  time per phase, as far as the GPU work does not hide them: the host
  enqueues kernels while earlier ones run;
- graph_launch (graph): the same for one cudaGraphLaunch per segment (the
  staged scheme has two, around the host allreduce), the loop's own host
  work between replays (graph_loop_host_s) and the GPU's time per replay
  beyond its kernels (graph_replay_gap_s);
- tracing: the GPU time of the tracer's CUDA events, one per recorded phase
  (per segment in graph mode), at the `phases` level only (TRACE_COSTS);
- h2d_batch: X and Y copied (latency + bytes / bandwidth, the node's
  aggregate shared by the ranks copying at once); 0 when resident.
  Prefetched, only what the pipeline (its copies, and a pageable source's
  staging by the host's threads: Machine.prefetch_pace) takes beyond the
  rest of the step, whose launches then include the loop's calls that order
  the two streams (Machine.prefetch_host_s). A pageable copy less what its staging hides behind the
  previous batch's GPU work (the timeline with it against without it): one
  staged whole (Machine.pageable_ahead) up to its staging time, a larger
  one min(ahead_s, max(0, queued - ahead_delay_s)) of the work still queued;
- d2h_grad, h2d_grad: the staged gradient copies (mpi-staged), shared alike;
- allreduce: host MPI or NCCL, interpolated in the machine's measured table
  for this process count (host MPI's through the run's staging memory),
  else the ring model (MPI 2(p-1) alpha + 2(p-1)/p n / bw, NCCL alpha +
  2(p-1)/p n / bw); with `overlap`, only what the backward pass does not hide;
- rank_wait: the calibrated wait for the slowest rank at the collective
  (arrival jitter; the staged exchange's own where the file has it); 0 on
  one process. Unequal pieces are already in the slowest rank's terms.

Overlap (each layer's gradient allreduced as soon as it is written, in
buckets of bucket_bytes) is a two-stage pipeline on one stream: bucket i's
communication ends at end_i = max(end_{i-1}, written_i) + comm_i, and what
adds to the batch is end_last less the end of the backward pass. Not
modelled: compute kernels slowed by sharing SMs with the communication.

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
from .execution import graph_refusal, resolve_comm, resolve_exec
from .terms import TERM_GROUP, TERMS, Prediction
from .timeline import Item, Step, graph_loop_host_s, launch_host_s, timeline_batch_s
from .tracing import default_trace_level, trace_cost, trace_detail, trace_words, traced_phases
from ...names import GROUPS, TRACE_LEVELS, UNTRACED

__all__ = ["predict_batch", "allreduce_s", "gradient_buckets", "overlap_pipeline", "ring_allreduce_s", "staging_memory",
           "graph_refusal", "resolve_comm", "resolve_exec", "TERM_GROUP", "TERMS", "Prediction", "Item", "Step",
           "graph_loop_host_s", "launch_host_s", "timeline_batch_s", "default_trace_level", "trace_cost",
           "trace_detail", "trace_words", "traced_phases", "GROUPS", "TRACE_LEVELS", "UNTRACED"]
