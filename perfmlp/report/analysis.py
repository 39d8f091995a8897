"""Every run read once into a typed, frozen summary: the machine files for
the GPU the traces saw, and per run its time per batch (the slowest rank's
median over the steady batches), each rank's median phase times, its
counters and its predictions, each computed here once. Sections select on
these fields and never go back to the trace.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from ..model.machine import CpuMachine, Machine
from ..model.machine.choose import Machines, pick_machines
from ..model.predict import TERM_GROUP, Prediction, predict_batch
from ..model.strategies import label as strategy_label, predict_strategy
from ..trace.format import comparable_terms
from ..trace.reader import Run
from .study import Study
from .whatif import cpu_setting_of
from .. import names as N

# The groups a batch's time and the model's terms are compared in, in batch order: each the sum of its phases;
# a model term with no phase of its own (gemm, elementwise, launches, the tracer's events) falls inside compute.
TERMS = N.GROUPS
BUSY_TERMS = (N.H2D_BATCH, N.COMPUTE)  # a rank's own work before it waits for the others


# ---- one run ---------------------------------------------------------------------------

@dataclass(frozen=True)
class RunSummary:
    run_id: str
    path: str
    hidden: tuple[int, ...]
    batch: int                  # samples per batch, all ranks together
    procs: int
    precision: str
    transfer: str
    comm: str                   # a `python -m perfmlp.run --comm` name
    gemm: str
    backend: str
    complete: bool
    profiled: bool
    endings: tuple[tuple[int, str], ...]   # (rank, how it ended)
    manifest_status: str
    batches: int                # steady batches every rank finished
    t_ms: float                 # time per batch: slowest rank, median over steady batches
    flops_job: int
    flops_rank0: int
    bytes_copied_rank: int      # the most any rank copied with cudaMemcpy in a batch
    phases_ms: Mapping[int, Mapping[str, float]]   # rank -> phase -> median ms
    slowest_rank: int
    datasheet: Prediction | None    # GPU runs only
    calibrated: Prediction | None   # GPU runs with a calibrated machine file
    util_datasheet: float | None
    util_calibrated_peak: float | None
    parallel: str = "data"      # run --parallel (older traces: data)
    model_procs: int = 0
    exec: str = N.EAGER         # the execution mode that ran (Run.exec)
    host_enqueue: bool = False  # a GPU run timed by the host's enqueue (trace/reader.py Run.host_enqueue_times)
    phase_clock: str = "host"   # the steady batches' phase clock: host, cuda-events or cupti (Run.phase_clock)
    comparable: frozenset = frozenset(TERMS)  # terms measured as the model means them (trace.format.comparable_terms)
    overlap: bool = False       # run --overlap: the allreduce started in buckets during the backward pass
    bucket_bytes: int = 0       # run --bucket-bytes (used only with overlap)
    cprofile: bool = False      # run --cprofile: the host's time includes cProfile's, which the model leaves out
    trace_level: str = "phases"  # the tracer's level that ran (Run.trace_level)
    layer_sizes: tuple = ()     # D, the hidden sizes, C
    mem_bytes_rank0: int | None = None   # device-memory bytes rank 0's kernels move in a batch (the trace's Shape)
    bytes_exchanged_rank0: int = 0       # bytes rank 0 hands to MPI and NCCL collectives in a batch (the Shape's)
    blas: str | None = None     # the BLAS library NumPy called (the manifest's ran.blas)
    blas_threads: tuple = ()    # each rank's BLAS threads as it trained (ran.blas_threads; None: not known)

    @property
    def strategy(self) -> str:
        """data, ps, model or hybrid <p_data>x<p_model> (perfmlp/model/strategies)."""
        return strategy_label(self.parallel, self.model_procs, self.comm, self.procs)

    @property
    def gpu(self) -> bool:
        return self.backend == N.CUPY

    @property
    def hidden_label(self) -> str:
        return "x".join(map(str, self.hidden))

    @property
    def predicted(self) -> Prediction | None:
        """The prediction with the report's primary machine."""
        return self.calibrated or self.datasheet

    @property
    def predicted_ms(self) -> float | None:
        """The primary prediction's time per batch (ms)."""
        return self.predicted.total_s * 1e3 if self.predicted else None

    @property
    def ai(self) -> float:
        """FLOPs of one rank over the bytes it copied (inf when it copied none)."""
        return self.flops_rank0 / self.bytes_copied_rank if self.bytes_copied_rank else math.inf

    @property
    def tflops_job(self) -> float:
        return self.flops_job / (self.t_ms * 1e-3) / 1e12

    @property
    def status(self) -> str:
        """"complete", or which ranks ended how and what the manifest says."""
        if self.complete:
            return "complete"
        by_ending: dict[str, list[int]] = {}
        for rank, ending in self.endings:
            by_ending.setdefault(ending, []).append(rank)
        parts = [f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} {ending}"
                 for ending, ranks in by_ending.items()]
        m = self.manifest_status
        parts.append("manifest still says running" if m == "running" else f"manifest says {m}")
        return "; ".join(parts)

    def error_pct(self, pred: Prediction | None) -> float | None:
        return 100 * (pred.total_s / (self.t_ms * 1e-3) - 1) if pred else None

    def measured_terms(self, rank: int) -> dict[str, float]:
        return measured_terms(self.phases_ms[rank])

    @property
    def incomparable_terms(self) -> tuple[str, ...]:
        """The terms the slowest rank timed on the host clock, not as the model means them (comparable_terms)."""
        timed = {N.PHASE_GROUP[p] for p in self.phases_ms[self.slowest_rank]}
        return tuple(t for t in TERMS if t in timed and t not in self.comparable)

    def busy_ms(self, rank: int) -> float:
        """A rank's copies and compute in a batch, before it waits for the others."""
        return sum(self.phases_ms[rank].get(p, 0.0) for p in N.PHASES if N.PHASE_GROUP[p] in BUSY_TERMS)


def error_pct(predicted_ms: float, measured_ms: float) -> float:
    """The model's error: above the measurement is positive."""
    return 100 * (predicted_ms / measured_ms - 1)


def measured_terms(phases_ms: Mapping[str, float]) -> dict[str, float]:
    """One rank's median phase times summed into the report's terms (ms)."""
    terms = dict.fromkeys(TERMS, 0)
    for phase, term in N.PHASE_GROUP.items():
        terms[term] += phases_ms.get(phase, 0.0)
    return terms


def predicted_terms(pred: Prediction) -> dict[str, float]:
    """The model's terms (seconds) summed into the report's (ms)."""
    terms = dict.fromkeys(TERMS, 0.0)
    for term, s in pred.terms.items():
        terms[TERM_GROUP.get(term, N.COMPUTE)] += s
    return {k: v * 1e3 for k, v in terms.items()}


def _endings(run: Run) -> tuple[tuple[int, str], ...]:
    ranks = (run.ranks.get(k) for k in range(max(run.procs, len(run.ranks))))
    return tuple((k, "left no trace file" if rt is None else "killed (no end line)" if rt.end is None
                  else rt.end.status) for k, rt in enumerate(ranks))


def predict_run(run: Run, m: Machine | None) -> Prediction | None:
    """The run's prediction with machine file `m`; a NumPy run's from a CPU file at rank 0's BLAS threads,
    data parallelism with MPI's allreduce (model/predict/cpu.py); None for what the model does not describe."""
    c, ran = run.config, run.ran
    if m is None:
        return None
    if not run.on_gpu:
        if (not isinstance(m, CpuMachine) or ran.parallel != N.DATA or run.comm in N.PS_COMMS or ran.slices > 1
                or ran.grad_precision != N.FLOAT32):
            return None
        try:
            return cpu_setting_of(run).predict(m)
        except ValueError:
            return None
    if ran.parallel != N.DATA or run.comm in N.PS_COMMS:
        return predict_strategy(m, run.layer_sizes, c["batch_size"], run.procs, c["precision"], run.comm,
                                ran.batch_transfer, ran.parallel, ran.model_procs, run.trace_level, exec_mode=run.exec)
    return predict_batch(m, run.layer_sizes, c["batch_size"], run.procs, c["precision"], run.comm,
                         ran.batch_transfer, run.trace_level, exec_mode=run.exec, overlap=ran.overlap,
                         bucket_bytes=ran.bucket_bytes, gemm=ran.gemm if m.has_gemm_kernel(ran.gemm) else N.CUBLAS,
                         fuse_output=ran.fuse_output, output_grad_cols=ran.output_grad_cols)


def summarise(run: Run, machines: Machines) -> RunSummary:
    c, ran = run.config, run.ran   # the configuration asked for; what ran (the strategy, transfer, GEMM, overlap)
    steady = run.steady_batches().values()
    ranks = sorted(run.ranks)
    per_rank_ms = {r: statistics.median(run.batch_time_ms(recs[r]) for recs in steady) for r in ranks}
    counters = {r: run.counters(r) for r in ranks}
    first = counters[ranks[0]]
    flops_job = sum(sum(b.flops.values()) for b in counters.values() if b)
    # the one place the device-memory bytes are read: the Shape record's per-phase counts, where the trace has them
    mem = getattr(first, "mem_bytes", None) if first else None
    t_ms = run.median_batch_ms()
    gpu = run.on_gpu

    def util(m: Machine | None) -> float | None:
        if m is None or not gpu:
            return None
        return flops_job / (t_ms * 1e-3) / (run.procs * m.peak_flops_per_s(c["precision"]))

    return RunSummary(
        run_id=run.run_id, path=run.path, hidden=tuple(int(h) for h in c["hidden_sizes"]),
        batch=int(c["batch_size"]), procs=run.procs, precision=c["precision"], transfer=ran.batch_transfer,
        comm=run.comm, gemm=ran.gemm, backend=run.backend, complete=run.complete,
        profiled=run.profiled, endings=_endings(run), manifest_status=run.manifest.status,
        batches=len(steady), t_ms=t_ms, flops_job=flops_job, flops_rank0=sum(first.flops.values()) if first else 0,
        bytes_copied_rank=max((b.bytes_h2d + b.bytes_d2h for b in counters.values() if b), default=0),
        phases_ms=MappingProxyType({r: MappingProxyType(run.phase_ms(r)) for r in ranks}),
        slowest_rank=max(per_rank_ms, key=per_rank_ms.get), datasheet=predict_run(run, machines.datasheet),
        calibrated=predict_run(run, machines.calibrated if gpu else machines.cpu),
        util_datasheet=util(machines.datasheet), util_calibrated_peak=util(machines.calibrated),
        parallel=ran.parallel, model_procs=ran.model_procs, exec=run.exec, host_enqueue=run.host_enqueue_times,
        phase_clock=run.phase_clock,
        comparable=comparable_terms(run.phase_clock, gpu, ran.batch_transfer, run.comm, ran.parallel),
        overlap=ran.overlap, bucket_bytes=ran.bucket_bytes, cprofile=bool(c.get("cprofile", False)),
        trace_level=run.trace_level, layer_sizes=tuple(int(n) for n in run.layer_sizes),
        mem_bytes_rank0=sum(mem.values()) if mem else None,
        bytes_exchanged_rank0=first.bytes_mpi + first.bytes_nccl if first else 0, blas=ran.blas,
        blas_threads=tuple(ran.blas_threads or ()))


# ---- every run ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Analysis:
    study: Study
    machines: Machines
    runs: tuple[RunSummary, ...]     # by H, p, B, run id
    skipped: tuple[str, ...]
    traces: tuple[Run, ...]          # as read (the Nsight cross-check reads the batches again)
    folder: Path | None = None

    @property
    def gpu_runs(self) -> tuple[RunSummary, ...]:
        return tuple(s for s in self.runs if s.gpu)


def analyse(runs: list[Run], skipped: list[str], study: Study, machine_arg: str | None = None,
            folder: Path | None = None) -> Analysis:
    machines = pick_machines(runs, machine_arg)
    summaries = sorted((summarise(r, machines) for r in runs), key=lambda s: (s.hidden, s.procs, s.batch, s.run_id))
    return Analysis(study, machines, tuple(summaries), tuple(skipped), tuple(runs), folder)
