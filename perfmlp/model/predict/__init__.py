"""Predicted time per batch as a sum of named terms.

Terms (seconds, for the slowest rank, i.e. the one with the largest piece),
each with the trace phase group that measures it (TERM_GROUP):
- gemm: each GEMM's FLOPs over the machine's GPU-time rate for its shape and
  kernel (calibrated table when the file has one, else the peak);
- elementwise: the other kernels (the trainer's own, costs.OWN_KERNELS):
  each one's measured GPU time at its shape where the machine file's
  kernel_s has that kernel (Machine.kernel_time_s), else its device-memory
  bytes over memory bandwidth; and in graph mode with resident data the
  piece's device-to-device copy into the graph's static inputs (read and
  written: twice its bytes);
- kernel_gaps: the GPU's idle time between consecutive kernels (one per
  kernel: kernel_gap_s launched one by one, graph_kernel_gap_s in a replay);
- launches (eager): the host time to launch the step's kernels (kernels
  times the host's time per launched operation, plus the tracer's host time
  per phase, both as calibrated with p ranks launching at once:
  Machine.launch_s, trace_host_s, the first times the step's own size
  factor, Machine.launch_factor, and after pageable batch copies
  Machine.pageable_launch) that the GPU work does not hide: the host
  enqueues kernels while earlier ones run, so only max(0, host time - GPU
  time) adds to the batch;
- graph_launch (graph): the same for one cudaGraphLaunch per graph segment
  (one step; the staged scheme is two segments around the host allreduce)
  and the training loop's own host work between replays
  (graph_loop_host_s, from the calibrated graph_step_host_s), and the GPU's
  own time per replay beyond its kernels (graph_replay_gap_s);
- tracing (traced runs): the GPU time of the tracer's CUDA events (one per
  recorded phase eager, one per segment in graph mode), at the `phases`
  trace level only (TRACE_COSTS below); the tracer's host time per phase,
  at every level, is in launches / graph_launch;
- h2d_batch: X and Y copied (latency + bytes / bandwidth each, at the
  precision's storage width), the node's aggregate bandwidth shared by the
  ranks copying at once; 0 when resident; prefetched (the next batch's copy
  on a copy stream while this one computes) only what the pipeline
  (prefetch_s: the copies, and a pageable source's staging by the host's
  threads at the pace calibrated beside the loop of the execution mode,
  Machine.prefetch_pace) takes beyond the rest of the step, which is then
  max(pipeline, the rest) plus the loop's calls that order the two streams
  (Machine.prefetch_host_s where calibrated);
  a pageable copy less what its staging hides behind the previous batch's
  GPU work (the timeline with it against the one without it): one the
  runtime stages whole (Machine.pageable_ahead: not `blocks`) up to its
  staging time; a larger one, whose call waits once the runtime's staging
  buffers are full, min(ahead_s, max(0, queued - ahead_delay_s)) of the
  work still queued when its call starts (Machine.pageable_ahead_delay;
  a file without that figure: nothing hidden);
- d2h_grad, h2d_grad: the staged gradient copies (mpi-staged only), shared
  the same way;
- allreduce: host MPI or NCCL: interpolated in the machine's measured
  allreduce table for this process count (host MPI's through the staging
  memory the run uses) where it has one, else the ring
  model (MPI 2(p-1) alpha + 2(p-1)/p n / bw, NCCL alpha + 2(p-1)/p n / bw);
  with `overlap`, only the part the backward pass does not hide (below);
- rank_wait: the calibrated wait for the slowest rank at the collective
  (arrival jitter of equal ranks; with the staged exchange, the staged
  step's own where the file has it: its host copies, D2H and MPI vary from
  rank to rank and batch to batch, calibrate.staged_wait; imbalance of
  unequal pieces is already in the slowest rank's own terms); 0 on one
  process.

Overlap (gradient allreduce started per layer as each gradient is written,
the first layer's split into buckets of bucket_bytes) is a two-stage
pipeline on one communication stream: bucket i's communication starts when
its gradient is written and the previous bucket's communication is done,
end_i = max(end_{i-1}, written_i) + comm_i. What adds to the batch is the
exposed remainder end_last - (end of the backward pass); in steady state
each bucket costs max(compute, communication). Not modelled: the slowdown
of compute kernels sharing SMs with the communication kernels.

The total is the sum (copies, communication and compute serialised, as the
trainer runs them); the overlapped lower bound is the max of the compute
terms and the copy/communication terms.

The modules: terms.py (the terms, their groups, Prediction), execution.py
(eager or graph), tracing.py (the tracer's cost per level), compute.py (the
kernels' GPU time), copies.py (the batch's copies, prefetched or not), exchange.py (allreduces, staged copies, the overlapped
pipeline), timeline.py (the host issuing a batch to the stream), batch.py
(predict_batch, the sum).
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
