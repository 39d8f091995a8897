"""Each figure of a machine file, declared once: its unit, its check, where
it comes from (a datasheet, or the calibrate module that measures it), how
it scales to another GPU (scaled.py), which spread source moves it in an
interval (interval.py), and the machine classes it applies to. The loader's
key lists (files.py), the interval's scalars and docs/model.md's machine-file
table (`markdown_table`) read it.

Checks: `rate` positive, `time` not negative, `optional-rate` positive or 0
(absent), `table` a list of points, `word` text. Scaling: `flops`, `mem_bw`,
`copy`, `collective` by the ratio of the two datasheets' figure; `measured`
and `none` carried as they are."""
from __future__ import annotations

from dataclasses import dataclass

from ... import names as N

GPU, CPU = "gpu", "cpu"   # machine classes: a CPU file has no PCIe, its exchange is MPI between local ranks
BOTH = (GPU, CPU)
DATASHEET = "datasheet"


@dataclass(frozen=True)
class Field:
    unit: str
    check: str
    source: str            # DATASHEET or the calibrate module (and function) that measures it
    scales: str            # how scaled.py carries it to another GPU
    spread: str | None     # the spread source whose draws move it (interval.py), None: none
    doc: str = ""
    applies: tuple = (GPU,)
    required: bool = False
    from_base: bool = False   # optional, yet a calibration that does not measure it takes --base's value


_COPIES = {f"{d}_{m}": f"{'host to device' if d == N.HOST_TO_DEVICE else 'device to host'}, {m} memory"
           for d in N.COPY_DIRECTIONS for m in N.COPY_MEMORIES}

FIELDS: dict[str, Field] = {
    "name": Field("", "word", DATASHEET, "none", None, "the machine's name", BOTH, True),
    "source": Field("", "word", DATASHEET, "none", None, "where each figure came from", BOTH, True),
    "peak_flops_per_s_float32": Field("FLOP/s", "rate", "calibrate/gemm.py peak_rates", "flops", "gpu",
                                      "float32 GEMM ceiling (FFMA; BLAS on a CPU)", BOTH, True),
    "peak_flops_per_s_float64": Field("FLOP/s", "rate", "calibrate/gemm.py peak_rates", "flops", "gpu",
                                      "float64 GEMM ceiling", BOTH, True),
    "mem_bw_bytes_per_s": Field("B/s", "rate", "calibrate/copies.py device_bandwidth", "mem_bw", "gpu",
                                "memory bandwidth (the elementwise kernels' roof)", BOTH, True),
    **{f"{k}_bytes_per_s": Field("B/s", "rate", "calibrate/copies.py host_bandwidth", "copy", k.split("_")[1] + "_copy",
                                 f"copy bandwidth, {w}", required=True) for k, w in _COPIES.items()},
    "copy_latency_s": Field("s", "time", "calibrate/copies.py copy_latency", "measured", "pageable_copy",
                            "a small copy's fixed cost", required=True),
    "launch_overhead_s": Field("s", "time", "calibrate/host.py host_dispatch", "measured", "host",
                               "host time per launched operation", required=True),
    "mpi_alpha_s": Field("s", "time", "calibrate/collectives.py collective_times", "measured", "collective",
                         "MPI allreduce latency", BOTH, True),
    "mpi_bw_bytes_per_s": Field("B/s", "rate", "calibrate/collectives.py collective_times", "collective", "collective",
                                "MPI allreduce bandwidth (ring fit)", BOTH, True),
    "nccl_alpha_s": Field("s", "time", "calibrate/collectives.py collective_times", "measured", "collective",
                          "NCCL allreduce latency", required=True),
    "nccl_bw_bytes_per_s": Field("B/s", "rate", "calibrate/collectives.py collective_times", "collective", "collective",
                                 "NCCL allreduce bandwidth (ring fit)", required=True),
    "gemm_flops_per_s": Field("FLOP/s", "table", "calibrate/gemm.py step_rates (calibrate/cpu.py on a CPU)", "flops",
                              "gpu", "the trainer's GEMMs at its shapes (on a CPU also by BLAS threads and ranks)",
                              BOTH),
    "traced_launch_overhead_s": Field("s", "time", "calibrate/host.py host_dispatch", "measured", "host",
                                      "host time per operation with the tracer on (0: as untraced)"),
    "trace_event_s": Field("s", "time", "calibrate/kernels.py event_gap", "measured", "gpu",
                           "GPU time of one CUDA event between kernels"),
    **{f"{k}_latency_s": Field("s", "time", "calibrate/copies.py host_bandwidth", "measured", k.split("_")[1] + "_copy",
                               f"copy latency, {w} (0: copy_latency_s)") for k, w in _COPIES.items()},
    "graph_launch_s": Field("s", "time", "calibrate/kernels.py kernel_gaps", "measured", "host",
                            "host time of one graph launch"),
    "graph_step_host_s": Field("s", "time", "calibrate/host.py host_dispatch", "measured", "host",
                               "host time per batch of the resident graph step"),
    "static_copy_host_s": Field("s", "time", "calibrate/host.py host_dispatch", "measured", "host",
                                "host time of a copy call into a graph's static inputs"),
    "pinned_copy_host_s": Field("s", "time", "calibrate/host.py host_dispatch", "measured", "host",
                                "host time of a pinned batch copy call"),
    "kernel_gap_s": Field("s", "time", "calibrate/kernels.py kernel_gaps", "measured", "gpu",
                          "GPU idle time between two kernels launched one by one"),
    "graph_kernel_gap_s": Field("s", "time", "calibrate/kernels.py kernel_gaps", "measured", "gpu",
                                "the same inside a replayed graph"),
    "graph_replay_gap_s": Field("s", "time", "calibrate/kernels.py kernel_gaps", "measured", "gpu",
                                "GPU time per replay beyond its kernels"),
    "trace_phase_host_s": Field("s", "time", "calibrate/host.py host_dispatch", "measured", "host",
                                "host time the tracer adds per phase"),
    **{f"{k}_aggregate_bytes_per_s": Field("B/s", "optional-rate", "calibrate/copies.py host_copies", "copy",
                                           k.split("_")[1] + "_copy", f"all ranks of a node copying at once, {w}")
       for k, w in _COPIES.items()},
    "allreduce_s": Field("s", "table", "calibrate/collectives.py collective_times (cpu_bench.py exchange on a CPU)",
                         "collective", "collective", "measured allreduces by size and ranks", BOTH),
    "collective_wait_s": Field("s", "table", "calibrate/collectives.py staged_wait", "measured", "collective",
                               "the wait for the slowest rank"),
    "kernel_s": Field("s", "table", "calibrate/kernels.py own_kernel_times", "mem_bw", "gpu",
                      "the trainer's own kernels at its shapes"),
    "host_dispatch_s": Field("s", "table", "calibrate/host.py host_dispatch", "measured", "host",
                             "launch and tracer host time, several ranks at once"),
    "copy_aggregate_bytes_per_s": Field("B/s", "table", "calibrate/copies.py host_copies", "copy", "pageable_copy",
                                        "ranks copying at once, per count and kind"),
    "d2d_copy_s": Field("s", "table", "calibrate/copies.py static_copies", "mem_bw", "gpu",
                        "copies into a graph's static inputs"),
    "host_copy_s": Field("s", "table", "calibrate/copies.py host_copies", "copy", "pageable_copy",
                         "the trainer's own host <-> device copies by size and ranks"),
    "launch_size_factor": Field("ratio", "table", "calibrate/host.py dispatch_size_factors", "measured", None,
                                "the eager step's host time per operation by size over the tiny step's"),
    "peak_flops_per_s_tf32": Field("FLOP/s", "optional-rate", "calibrate/precision.py precision_rates", "flops", "gpu",
                                   "tf32 tensor-core ceiling (0: none)", from_base=True),
    "peak_flops_per_s_bf16": Field("FLOP/s", "optional-rate", "calibrate/precision.py precision_rates", "flops", "gpu",
                                   "bf16 tensor-core ceiling (0: none)", from_base=True),
    "peak_flops_per_s_fp16": Field("FLOP/s", "optional-rate", "calibrate/precision.py precision_rates", "flops", "gpu",
                                   "fp16 tensor-core ceiling (0: none)", from_base=True),
    "host_stage_bytes_per_s": Field("B/s", "optional-rate", "calibrate/precision.py stage_rate", "measured", "host",
                                    "a host thread's pageable-to-pinned memcpy"),
    "pageable_launch_factor": Field("ratio", "table", "calibrate/host.py copied_launch_factors", "measured", None,
                                    "eager launches after pageable batch copies over without them"),
    "prefetch_s": Field("s", "table", "calibrate/pipeline.py prefetch_points", "measured", "host",
                        "the step beside its input pipeline"),
    "spread": Field("ratio", "table", "calibrate/spread.py spread_table", "measured", None,
                    "the measured spread per source of figures", BOTH),
    "gpus": Field("count", "count", DATASHEET, "none", None, "devices per node"),
    "date": Field("", "word", "calibrate/__main__.py", "none", None, "when it was measured", BOTH),
    "device_names": Field("", "word", DATASHEET, "none", None, "names the device reports"),
    "path": Field("", "word", "the loader", "none", None, "the file it was read from", BOTH),
    # a CPU file's own figures (calibrate/cpu.py measures them; model/predict/cpu.py prices with them)
    "backend": Field("", "word", "calibrate/cpu.py", "none", None, "`numpy`: a CPU file", (CPU,), True),
    "cpu_name": Field("", "word", "calibrate/cpu.py", "none", None, "the CPU's name", (CPU,)),
    "blas": Field("", "word", "perfmlp/blas.py find_blas", "none", None, "the BLAS and how its threads are set",
                  (CPU,)),
    "cores": Field("count", "count", "perfmlp/blas.py cpu_cores", "none", None, "the process's CPU affinity",
                   (CPU,), True),
    "default_threads": Field("count", "count", "perfmlp/blas.py", "none", None,
                             "the BLAS's threads per rank when none is set", (CPU,), True),
    "calibrated_ranks": Field("count", "count", "calibrate/cpu.py", "none", None, "the ranks the calibration ran on",
                              (CPU,)),
    "op_host_s": Field("s", "time", "calibrate/cpu.py op_host_times", "measured", "host", "a one-element NumPy call",
                       (CPU,), True),
    "kernel_host_s": Field("s", "time", "calibrate/cpu.py kernel_host_s", "measured", "host",
                           "a timed step's wall time beyond its kernels', per kernel", (CPU,), True),
    "trace_batch_host_s": Field("s", "time", "calibrate/cpu_bench.py trace_host_s", "measured", "host",
                                "the trainer's step traced less untraced, per batch", (CPU,)),
    "pass_bytes_per_s": Field("B/s", "table", "calibrate/cpu_bench.py time_step", "measured", "memory",
                              "each other kernel of the step by size, threads and ranks", (CPU,), True),
}


# the fields a file of each machine class may hold
GPU_KEYS, CPU_KEYS = (tuple(k for k, f in FIELDS.items() if c in f.applies) for c in (GPU, CPU))
# a CPU calibrated on one rank measures no exchange between ranks: no ring fit
CPU_REQUIRED = tuple(k for k in CPU_KEYS if FIELDS[k].required and k not in ("mpi_alpha_s", "mpi_bw_bytes_per_s"))
TABLES = tuple(k for k in GPU_KEYS if FIELDS[k].check == "table")
OPTIONAL = frozenset(k for k in GPU_KEYS if not FIELDS[k].required)
_NUMBERS = ("time", "rate", "optional-rate")
# a GPU calibration's scalars: measured, else --base's (BASE_SCALARS); or written only where measured
BASE_SCALARS = tuple(k for k in GPU_KEYS if FIELDS[k].check in _NUMBERS and (FIELDS[k].required or FIELDS[k].from_base))
MEASURED_ONLY = tuple(k for k in GPU_KEYS if k in OPTIONAL and FIELDS[k].check in _NUMBERS and k not in BASE_SCALARS)


def markdown_table() -> str:
    """docs/model.md's machine-file table: a row a field, a figure's four copy kinds in one."""
    rows = ["| key | unit | what | source | scales | spread | applies |", "| --- | --- | --- | --- | --- | --- | --- |"]
    done = set()
    for k, f in FIELDS.items():
        kind = next((c for c in _COPIES if k.startswith(c + "_")), None)
        if k == "path" or (kind and k[len(kind):] in done):
            continue
        key, doc, spread = k, f.doc, f.spread or "-"
        if kind:
            done.add(k[len(kind):])
            key, doc, spread = "{h2d,d2h}_{pageable,pinned}" + k[len(kind):], doc.split(", ")[0], spread.replace(
                kind.split("_")[1], "{pageable,pinned}")
        rows.append(f"| `{key}` | {f.unit} | {doc}{'' if f.required else ' (optional)'} | {f.source} | {f.scales} | "
                    f"{spread} | {', '.join(f.applies)} |")
    return "\n".join(rows)
