"""Published nccl-tests all-reduce figures beside the cluster model
(`cluster.py`), each with its address; the tests hold the model to them,
the report shows the table. A figure is a time or a bus bandwidth, set
beside the model's time for the algorithm it was measured with (`switch`:
NVLS, `ring`, `best`: the model's choice); `expected`: within TOLERANCE,
else `why` says what the model leaves out.
"""
from __future__ import annotations

from dataclasses import dataclass

from .cluster import allreduce_s, best_allreduce, group_of, load_cluster

TOLERANCE = 0.15
NCCL_TESTS_290 = "https://github.com/NVIDIA/nccl-tests/issues/290"
NCCL_TESTS_212 = "https://github.com/NVIDIA/nccl-tests/issues/212"
NCCL_TESTS_272 = "https://github.com/NVIDIA/nccl-tests/issues/272"
NCCL_1221 = "https://github.com/NVIDIA/nccl/issues/1221"
BELOW_EXPECTATION = ("the thread's user reports these two-node figures below expectation; an NVIDIA engineer "
                     "expects 46-48 GB/s a 400 Gb/s NIC there, about 370 GB/s of bus bandwidth over 8 NICs")


@dataclass(frozen=True)
class Published:
    cluster: str
    procs: int
    nbytes: int
    algorithm: str          # switch, ring, best
    url: str
    us: float | None = None          # a time
    busbw_gb_s: float | None = None  # or a bus bandwidth
    expected: bool = True
    why: str = ""

    @property
    def seconds(self) -> float:
        """The figure as a time: a bus bandwidth's is bytes x 2(p-1)/p / busbw."""
        if self.us is not None:
            return self.us * 1e-6
        return self.nbytes * 2 * (self.procs - 1) / self.procs / (self.busbw_gb_s * 1e9)


PUBLISHED = (
    Published("dgx-h100", 8, 134217728, "switch", NCCL_TESTS_290, us=613.3, expected=False,
              why="below the pipeline's peak: the thread's NVIDIA engineer says 256 MB is too small to reach it; "
                  "the model's alpha + n/B has no ramp"),
    Published("dgx-h100", 8, 268435456, "switch", NCCL_TESTS_290, us=1139.2),
    Published("dgx-h100", 8, 536870912, "switch", NCCL_TESTS_290, us=2175.8),
    Published("dgx-h100", 8, 1073741824, "switch", NCCL_TESTS_290, us=4038.8),
    Published("dgx-h100", 8, 4294967296, "switch", NCCL_TESTS_290, us=15870.0),
    Published("dgx-h100", 8, 1 << 32, "ring", NCCL_TESTS_212, busbw_gb_s=370.0),
    Published("dgx-h100", 8, 1 << 32, "switch", NCCL_TESTS_212, busbw_gb_s=480.0),
    Published("dgx-h200", 8, 1 << 32, "switch", NCCL_TESTS_272, busbw_gb_s=475.0),
    Published("dgx-h100", 8, 1 << 32, "ring", NCCL_1221, busbw_gb_s=330.0),
    Published("dgx-h100", 8, 1 << 32, "switch", NCCL_1221, busbw_gb_s=430.0),
    Published("dgx-h100", 32, 1 << 32, "best", NCCL_1221, busbw_gb_s=320.0),
    Published("dgx-h100", 32, 1 << 33, "best", NCCL_1221, busbw_gb_s=320.0),
    Published("dgx-h100", 16, 134217728, "best", NCCL_TESTS_290, us=1575.6, expected=False, why=BELOW_EXPECTATION),
    Published("dgx-h100", 16, 1073741824, "best", NCCL_TESTS_290, us=13435.0, expected=False, why=BELOW_EXPECTATION),
    Published("dgx-h100", 16, 1073741824, "ring", NCCL_TESTS_290, us=22920.0, expected=False, why=BELOW_EXPECTATION),
)


def model_s(p: Published, clusters: dict | None = None) -> tuple[str, float]:
    """(algorithm, seconds) the model gives for the figure's case (`clusters`: those already loaded)."""
    c = (clusters or {}).get(p.cluster) or load_cluster(p.cluster)
    g = group_of(c, p.procs)
    if p.algorithm == "best":
        return best_allreduce(c, p.nbytes, g)
    return p.algorithm, allreduce_s(c, p.nbytes, g, p.algorithm)


def comparison(rows=PUBLISHED) -> list[dict]:
    """Each published figure beside the model: a table's rows."""
    out, clusters = [], {name: load_cluster(name) for name in {p.cluster for p in rows}}
    for p in rows:
        algorithm, t = model_s(p, clusters)
        err = t / p.seconds - 1
        out.append({"cluster": p.cluster, "GPUs": p.procs, "bytes": p.nbytes,
                    "published": f"{p.us:g} us" if p.us is not None else f"busbw {p.busbw_gb_s:g} GB/s",
                    "published us": 1e6 * p.seconds, "model": algorithm, "model us": 1e6 * t,
                    "error %": 100 * err, "within 15%": abs(err) <= TOLERANCE,
                    "expected within": p.expected, "why not": p.why or "-", "source": p.url})
    return out
