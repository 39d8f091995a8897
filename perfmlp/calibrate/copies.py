"""Copies, as the trainer makes them: device memory bandwidth; the device-to-device copies into a graph
step's static inputs (d2d_copy_s: their fixed cost dominates below a few MB); host <-> device bandwidth
and latency; and the trainer's own copies at their sizes (host_copy_s) by rank 0 alone and by 2 and P
ranks at once (host memory and PCIe shared), with each group's aggregate bandwidth. A pageable copy
blocks the host: its host wall time; a pinned one runs behind the kernels: its GPU time, queued ahead.
Each copy reads a new slice of a host array beyond the caches (rotating_offsets), as the trainer copies
a new batch every step."""
from __future__ import annotations

import itertools
from statistics import median

import numpy as np

from ..config import Config
from ..gpu.timing import copy_s, host_times, per_call_s, queued_ahead, rounds, spin_cycles, spin_kernels, time_ms, \
    wall_s
from ..model.costs import grad_buffer_bytes, itemsize
from .. import names as N

HOST_BYTES = 256 * 1000 * 1000   # the host arrays copies rotate through: larger than the host's caches


def rotating_offsets(total: int, n: int):
    """A function returning the offset of the next n-element slice of a `total`-element array, cycling."""
    k = itertools.count()
    return lambda: (next(k) % (total // n)) * n


def device_bandwidth(cp, log) -> dict:
    """mem_bw_bytes_per_s: a 1 GiB device-to-device copy, bytes read + written."""
    src = cp.empty(1 << 30, dtype=cp.uint8)
    dst = cp.empty_like(src)
    t = median(time_ms(cp, lambda: dst.__setitem__(slice(None), src), warmup=2, reps=10)) * 1e-3
    res = {"mem_bw_bytes_per_s": 2 * src.nbytes / t}
    log(f"device copy: {res['mem_bw_bytes_per_s'] / 1e12:.2f} TB/s (read + write)")
    return res


def static_copies(cp, local_batches, precisions, log) -> list[dict]:
    """d2d_copy_s: GPU time of the device-to-device copies of a graph step's pieces into its static inputs
    (DeviceBatches.static) at each piece size, queued back to back (with their fixed cost and gaps)."""
    D, C = Config.input_size, Config.num_classes
    sizes = sorted({itemsize(p) * b * n for p in precisions for b in local_batches for n in (D, C)})
    src = cp.empty(HOST_BYTES, dtype=cp.uint8)
    dst = cp.empty(max(sizes), dtype=cp.uint8)
    rt, s = cp.cuda.runtime, cp.cuda.get_current_stream()
    out = []
    for n in sizes:
        offset = rotating_offsets(src.nbytes, n)

        def fn(n=n, offset=offset):
            rt.memcpyAsync(dst.data.ptr, src.data.ptr + offset(), n, rt.memcpyDeviceToDevice, s.ptr)
        out.append({"bytes": int(n), "s": float(queued_ahead(cp, fn, calls=50)[0])})
    log("device-to-device copies into static inputs (GPU time, queued back to back): "
        + ", ".join(f"{p['bytes']} B {p['s'] * 1e6:.2f} us" for p in out))
    return out


def host_bandwidth(cp, hidden, local_batches, log) -> dict:
    """{h2d,d2h}_{pageable,pinned}_{bytes_per_s,latency_s}: t = latency + bytes / bandwidth through copies
    of the trainer's two sizes (the first H's float32 gradients, the largest piece's X)."""
    import cupyx
    D, C, fp32 = Config.input_size, Config.num_classes, itemsize("float32")
    sizes = (grad_buffer_bytes((D, hidden[0], C), fp32), fp32 * max(local_batches) * D)
    d = cp.empty(max(sizes), dtype=cp.uint8)
    hosts = {N.PAGEABLE: np.ones(HOST_BYTES, dtype=np.uint8), N.PINNED: cupyx.empty_pinned(HOST_BYTES, dtype=np.uint8)}
    hosts[N.PINNED][...] = 1
    res = {}
    for direction in ("h2d", "d2h"):
        for mem, h in hosts.items():
            ts = []
            for n in sizes:   # pinned: a D2H not blocking, so that the calls queue behind the spin
                fn = _copy_call(cp, direction, h, d, n, blocking=mem == N.PAGEABLE)
                ts.append(queued_ahead(cp, fn, calls=20)[0] if mem == N.PINNED else median(host_times(cp, fn, reps=25)))
            bw = (sizes[1] - sizes[0]) / max(ts[1] - ts[0], 1e-9)
            lat = max(ts[0] - sizes[0] / bw, 0.0)
            res[f"{direction}_{mem}_bytes_per_s"] = bw
            res[f"{direction}_{mem}_latency_s"] = lat
            log(f"{direction} {mem} ({'GPU time, queued ahead' if mem == N.PINNED else 'host wall time'}): "
                f"{sizes[0]} B {ts[0] * 1e6:.1f} us, {sizes[1]} B {ts[1] * 1e6:.1f} us "
                f"-> {bw / 1e9:.1f} GB/s + {lat * 1e6:.1f} us")
    return res


def copy_latency(cp, log) -> dict:
    """copy_latency_s: a 4-byte pageable H2D copy, host wall time."""
    d4, h4 = cp.empty(1, dtype=cp.float32), np.ones(1, dtype=np.float32)
    res = {"copy_latency_s": median(host_times(cp, lambda: d4.set(h4), reps=200))}
    log(f"4-byte H2D: {res['copy_latency_s'] * 1e6:.1f} us")
    return res


def pageable_ahead(cp, copy, alone_s: float, reps: int = 10, loop: int = 10) -> tuple[float, bool, float | None]:
    """How a pageable H2D copy behaves behind GPU work still running (the runtime stages it through pinned buffers of
    its own; only their DMA waits for the stream). Behind a long spin, a call that returns while the spin runs staged
    all of it ahead (ahead: the call's host time), else it waited (ahead: the copy alone less its time after the spin).
    A copy that waits is then looped `loop` times behind work of w = ahead (median of 5): it hides w + alone - loop, the
    rest of w is its delay. Returns (median seconds ahead, blocks: it waited in most repeats, delay or None)."""
    spin, _ = spin_kernels(cp)
    cycles = spin_cycles(cp, max(2e-3, 4 * alone_s))
    s = cp.cuda.get_current_stream()
    spun, done = cp.cuda.Event(), cp.cuda.Event()
    ahead, blocked = [], 0
    for _ in range(reps):
        s.synchronize()
        spin((1,), (1,), (cycles,))
        spun.record(s)
        t_call = wall_s(copy)
        waited = spun.done
        done.record(s)
        done.synchronize()
        blocked += waited
        ahead.append(max(0.0, alone_s - cp.cuda.get_elapsed_time(spun, done) * 1e-3) if waited else t_call)
    a, blocks = float(median(ahead)), blocked > reps // 2
    if not blocks:
        return a, False, None
    w = max(a, 20e-6)
    work = spin_cycles(cp, w)
    per = [per_call_s(lambda: (spin((1,), (1,), (work,)), copy()), loop, start=s.synchronize, end=s.synchronize)
           for _ in range(5)]
    return a, True, float(min(w, max(0.0, median(per) - alone_s)))


def _copy_call(cp, direction: str, h, d, n: int, blocking: bool = False):
    """A copy of n bytes between d and a new slice of h each call, on the current stream; a blocking D2H if asked."""
    s = cp.cuda.get_current_stream()
    offset = rotating_offsets(len(h), n)

    def copy():
        off = offset()
        if direction == N.HOST_TO_DEVICE:
            d[:n].set(h[off:off + n], stream=s)
        else:
            d[:n].get(out=h[off:off + n], stream=s, blocking=blocking)
    return copy


def host_copies(cp, world, sizes: dict, log, spread: dict | None = None) -> tuple[list[dict], list[dict]]:
    """Host <-> device copies at each size of `sizes` ({direction: [bytes]}), pageable and pinned, by rank
    0 alone and groups of 2 and P ranks at once, the slowest member's median: (host_copy_s points,
    copy_aggregate_bytes_per_s at the largest size). `spread`'s "pageable_copy" and "pinned_copy" lists
    receive this rank's ratios of each round's median to the point's."""
    import cupyx
    from .spread import chunk_medians, ratios
    P = world.size
    top = max(n for ns in sizes.values() for n in ns)
    big = max(HOST_BYTES, 8 * top)
    hosts = {N.PAGEABLE: np.ones(big, dtype=np.uint8), N.PINNED: cupyx.empty_pinned(big, dtype=np.uint8)}
    hosts[N.PINNED][...] = 1
    keys = [(direction, mem, n) for direction, ns in sizes.items() for mem in hosts for n in sorted(set(ns))]
    d = cp.empty(top, dtype=cp.uint8)
    events = cp.cuda.Event(), cp.cuda.Event()
    points, aggregate = [], []
    for g in sorted({1, min(2, P), P}):
        member = world.rank < g
        copies = {key: _copy_call(cp, key[0], hosts[key[1]], d, key[2]) for key in keys}

        def measure(key):
            def one():
                world.barrier()
                if not member:
                    return None
                # pinned: GPU time per copy of 4 queued behind a spin, as the trainer queues them (one copy
                # between two events would add the engines' start)
                if key[1] == N.PINNED:
                    return queued_ahead(cp, copies[key], 4, spin_s=0.002, reps=1)[0]
                return copy_s(cp, copies[key], False, events)
            return one
        # the host's copy speed drifts over seconds: each point's calls are spread over the group's
        # whole measurement, in rounds over every point, not taken in one burst
        ts = rounds({key: measure(key) for key in keys}, 3, per_round=8, warmup_calls=4)
        if spread is not None and member:
            for key in keys:
                spread.setdefault(f"{key[1]}_copy", []).extend(ratios(chunk_medians(ts[key], 8)))
        group = _group_points(cp, world, g, member, keys, ts, copies, log)
        points += group
        aggregate += [{"procs": g, "direction": p["direction"], "memory": p["memory"],
                       "bytes_per_s": g * p["bytes"] / p["s"]}
                      for p in group if g > 1 and p["bytes"] == max(sizes[p["direction"]])]
    return points, aggregate


def _group_points(cp, world, g, member, keys, ts, copies, log) -> list[dict]:
    """host_copy_s points of a group of g ranks: the slowest member's median, and for a pageable H2D its
    behaviour behind a busy stream (pageable_ahead: the least ahead, any blocking, the largest delay)."""
    points, lines = [], {}
    for key in keys:
        direction, mem, n = key
        mine = float(median(ts[key])) if member else None
        slowest = max(t for t in world.allgather(mine) if t is not None)
        point = {"procs": g, "direction": direction, "memory": mem, "bytes": n, "s": slowest}
        line = lines.setdefault((direction, mem), [])
        line.append(f"{n / 1e6:.2f} MB {slowest * 1e6:.0f}")
        if (direction, mem) == (N.HOST_TO_DEVICE, N.PAGEABLE):
            world.barrier()
            ahead = pageable_ahead(cp, copies[key], mine) if member else None
            got = [x for x in world.allgather(ahead) if x is not None]
            point.update(ahead_s=min(x[0] for x in got), blocks=any(x[1] for x in got))
            if point["blocks"]:
                point["ahead_delay_s"] = max(x[2] for x in got if x[2] is not None)
            line[-1] += (f" ({point['ahead_s'] * 1e6:.0f} ahead" + (
                f", blocks, {point['ahead_delay_s'] * 1e6:.0f} delay" if point['blocks'] else "") + ")")
        points.append(point)
    for (direction, mem), line in lines.items():
        log(f"{direction} {mem}, {'one rank alone' if g == 1 else f'{g} ranks at once'} "
            f"(slowest rank, us): {', '.join(line)}")
    return points
