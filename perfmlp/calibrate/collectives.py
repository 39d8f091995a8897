"""Collectives, under `mpirun -n P` (on one process only host MPI on one rank), over groups of 2 and P
ranks: host MPI_Allreduce (host wall time, its buffer just written by a D2H copy, as the trainer's is)
through pinned and pageable buffers and NCCL allreduce (GPU time, queued ahead) at the gradient sizes
and a ladder (allreduce_s, the ring fit mpi_/nccl_alpha_s, _bw_bytes_per_s); the staged exchange's copy
back from the buffer MPI has just reduced (host_copy_s, buffer "reduced"); the wait for the slowest
rank (collective_wait_s, with `memory` for the staged exchange's own)."""
from __future__ import annotations

from statistics import median

import numpy as np

from ..gpu.timing import copy_s, event_s, queued_ahead, spin_cycles, spin_kernels, wall_s
from .copies import HOST_BYTES, rotating_offsets
from .spread import ROUND_MEDIANS, chunk_medians, ratios
from .. import names as N

SIZES_BYTES = [2 ** k for k in range(10, 25, 2)]  # the allreduce ladder: 1 KiB .. 16 MiB
MPI_REPS, MPI_WARM = 25, 5                        # host MPI calls per point, the first ones dropped


def _mpi_points(cp, sub, g: int, db, nbytes: int, grads: set, events, spread: list) -> tuple[list, list]:
    """One size's host MPI_Allreduce points (the slowest rank's medians) through a pinned and a pageable
    buffer, each call after a D2H into it and a barrier; at a gradient size, the staged exchange's H2D
    copy back after each call too. `spread` receives this rank's ratios (groups of ROUND_MEDIANS calls)."""
    from mpi4py import MPI
    import cupyx
    s = cp.cuda.get_current_stream()
    n = nbytes // 4
    points, reduced = [], []
    for memory, hb in ((N.PINNED, cupyx.empty_pinned(n, dtype=np.float32)),
                       (N.PAGEABLE, np.empty(n, dtype=np.float32))):
        tm, tc = [], []
        for i in range(MPI_REPS):
            db.get(out=hb, stream=s)
            s.synchronize()
            sub.Barrier()
            t = wall_s(lambda: sub.Allreduce(MPI.IN_PLACE, hb, op=MPI.SUM))
            if nbytes in grads:   # the staged exchange's copy back, from the buffer MPI just wrote
                tc.append(copy_s(cp, lambda: db.set(hb, stream=s), memory == N.PINNED, events))
            if i >= MPI_WARM:
                tm.append(t)
        points.append((g, nbytes, max(sub.allgather(float(np.median(tm)))), memory))
        spread.extend(ratios(chunk_medians(tm, ROUND_MEDIANS)))
        if tc:
            reduced.append({"procs": g, "direction": "h2d", "memory": memory, "bytes": nbytes,
                            "s": max(sub.allgather(float(np.median(tc[MPI_WARM:])))), "buffer": "reduced"})
    return points, reduced


def _nccl_time(cp, sub, nc, db, spread: list) -> float:
    """The slowest rank's GPU time of NCCL's allreduce of db, queued ahead (the ranks' skew spread over
    the calls); `spread` receives this rank's repeats over their median."""
    from cupy.cuda import nccl
    s = cp.cuda.get_current_stream()
    sub.Barrier()
    reps: list = []
    tn = queued_ahead(cp, lambda: nc.allReduce(db.data.ptr, db.data.ptr, db.size, nccl.NCCL_FLOAT32,
                                               nccl.NCCL_SUM, s.ptr), calls=20, samples=reps)[0]
    spread.extend(ratios(reps))
    return max(sub.allgather(float(tn)))


def _rank_wait(cp, sub) -> float:
    """The wait for the slowest rank: the time per iteration of the same GPU work on every rank (a spin
    as 10 launches, synchronised) and a 4-byte allreduce with no barrier, beyond each of them alone."""
    from mpi4py import MPI
    spin, _ = spin_kernels(cp)
    s = cp.cuda.get_current_stream()
    cyc = spin_cycles(cp, 200e-6 / 10)
    one = np.ones(1, np.float32)

    def work():
        for _ in range(10):
            spin((1,), (1,), (cyc,))
        s.synchronize()
    times: dict = {"solo": [], "ar": [], "both": []}
    for mode in times:
        for i in range(60):
            if mode != "both":
                sub.Barrier()
            t = wall_s(lambda: (mode != "ar" and work(),
                                mode != "solo" and sub.Allreduce(MPI.IN_PLACE, one, op=MPI.SUM)))
            if i >= 10:
                times[mode].append(t)
    solo_s = max(sub.allgather(float(np.median(times["solo"]))))
    ar_s = max(sub.allgather(float(np.median(times["ar"]))))
    both_s = max(sub.allgather(float(np.mean(times["both"]))))
    return max(both_s - solo_s - ar_s, 0.0)


def ring_fit(points, alpha_steps: bool) -> tuple[float, float]:
    """(alpha seconds, bandwidth bytes/s) of the ring allreduce model t = steps x alpha + 2 (p - 1) / p x
    bytes / bw through points (procs, bytes, seconds, memory), pageable ones left out; steps 2 (p - 1) for
    MPI (alpha_steps), 1 for NCCL. Least squares on the relative error."""
    fit = [pt for pt in points if pt[3] != N.PAGEABLE]
    A = np.array([[2 * (p - 1) if alpha_steps else 1.0, 2 * (p - 1) / p * n] for p, n, _, _ in fit])
    t = np.array([x for _, _, x, _ in fit])
    coef, *_ = np.linalg.lstsq(A / t[:, None], np.ones_like(t), rcond=None)
    alpha, inv_bw = float(max(coef[0], 0.0)), float(coef[1])
    return alpha, 1.0 / inv_bw if inv_bw > 0 else float("inf")


def _group_times(cp, world, g: int, sizes, grads: set, events, got: dict) -> None:
    """A group of g ranks' points into `got`'s lists: mpi, nccl, reduced (copies back after MPI), waits
    (for the slowest rank) and spread; nothing off the group."""
    from mpi4py import MPI
    from cupy.cuda import nccl
    sub = world.comm.Split(0 if world.rank < g else MPI.UNDEFINED, world.rank)
    if sub == MPI.COMM_NULL:
        return
    uid = sub.bcast(nccl.get_unique_id() if sub.Get_rank() == 0 else None)
    nc = nccl.NcclCommunicator(g, uid, sub.Get_rank())
    for nbytes in sizes:
        db = cp.ones(nbytes // 4, cp.float32)
        pts, back = _mpi_points(cp, sub, g, db, nbytes, grads, events, got["spread"])
        got[N.MPI] += pts
        got["reduced"] += back
        got[N.NCCL].append((g, nbytes, _nccl_time(cp, sub, nc, db, got["spread"]), "device"))
    got["waits"].append((g, _rank_wait(cp, sub)))
    sub.Free()


def one_rank_mpi(cp, world, log, grads: list[int]) -> list[dict]:
    """allreduce_s points with procs 1: host MPI_Allreduce on rank 0 alone (MPI_COMM_SELF) at the
    gradient sizes, what a one-process run's staged exchange pays; [] without MPI and on other ranks."""
    if world.rank != 0 or getattr(world, "comm", None) is None:
        return []
    from mpi4py import MPI
    events = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for nbytes in grads:
        db = cp.ones(nbytes // 4, cp.float32)
        for _, n, x, mem in _mpi_points(cp, MPI.COMM_SELF, 1, db, nbytes, set(), events, [])[0]:
            out.append({"comm": "mpi", "procs": 1, "bytes": int(n), "s": float(x), "memory": mem})
            log(f"mpi allreduce p=1 {n} B ({mem} host buffer): {x * 1e6:.1f} us")
    return out


def collective_times(cp, world, log, grad_bytes=()) -> dict:
    """Rank 0's allreduce_s, ring fits, collective_wait_s, host_copy_s (copies back from a reduced
    buffer) and `_spread_collective` on groups of 2 and P ranks, with one_rank_mpi's; {} elsewhere."""
    P = world.size
    grads = {int(n) // 4 * 4 for n in grad_bytes}
    one = one_rank_mpi(cp, world, log, sorted(grads))
    if P < 2:
        return {"allreduce_s": one} if one else {}
    sizes = sorted(set(SIZES_BYTES) | grads)
    events = cp.cuda.Event(), cp.cuda.Event()
    got: dict = {k: [] for k in (N.MPI, N.NCCL, "reduced", "waits", "spread")}
    for g in sorted({2, P}):
        _group_times(cp, world, g, sizes, grads, events, got)
        world.comm.Barrier()
    if world.rank != 0:
        return {}
    res = _collective_results(got[N.MPI], got[N.NCCL], got["waits"], got["reduced"], log)
    res["allreduce_s"] += one
    return {**res, "_spread_collective": got["spread"]}


def _collective_results(pts_mpi, pts_nccl, waits, reduced, log) -> dict:
    res = {}
    for name, pts, alpha_steps in (("mpi", pts_mpi, True), (N.NCCL, pts_nccl, False)):
        alpha, bw = ring_fit(pts, alpha_steps)
        res[f"{name}_alpha_s"], res[f"{name}_bw_bytes_per_s"] = alpha, bw
        for p, n, x, mem in pts:
            log(f"{name} allreduce p={p} {n} B{' (pageable host buffer)' if mem == N.PAGEABLE else ''}: "
                f"{x * 1e6:.1f} us")
        log(f"{name} fit: alpha {alpha * 1e6:.2f} us, bw {bw / 1e9:.2f} GB/s")
    res["allreduce_s"] = [{"comm": c, "procs": int(p), "bytes": int(n), "s": float(x),
                           **({"memory": mem} if c == N.MPI else {})}
                          for c, pts in (("mpi", pts_mpi), (N.NCCL, pts_nccl)) for p, n, x, mem in pts]
    res["collective_wait_s"] = [{"procs": int(p), "s": float(w)} for p, w in waits]
    res["host_copy_s"] = reduced
    for r in reduced:
        log(f"h2d {r['memory']} of {r['bytes']} B just reduced by MPI, {r['procs']} ranks: "
            f"{r['s'] * 1e6:.1f} us")
    for p, w in waits:
        log(f"wait for the slowest of {p} ranks at a collective: {w * 1e6:.1f} us")
    return res


def _staged_calls(cp, comm, memory: str, piece_bytes: tuple[int, int], grad_bytes: int) -> dict:
    """The staged step's parts as calls on the current stream through `memory` host buffers: piece (x's
    and y's H2D from a new slice each call), d2h (synchronised), allreduce (none without `comm`), back."""
    import cupyx
    from mpi4py import MPI
    pinned = memory == N.PINNED
    s = cp.cuda.get_current_stream()
    nx, ny = (n // 4 for n in piece_bytes)
    big = max(HOST_BYTES // 4, 8 * (nx + ny))
    empty = cupyx.empty_pinned if pinned else np.empty
    host, hg = empty(big, np.float32), empty(grad_bytes // 4, np.float32)
    host[...] = 1.0
    xd, yd, dg = cp.empty(nx, cp.float32), cp.empty(ny, cp.float32), cp.ones(grad_bytes // 4, cp.float32)
    offset = rotating_offsets(big, nx + ny)

    def piece():
        off = offset()
        xd.set(host[off:off + nx], stream=s)
        yd.set(host[off + nx:off + nx + ny], stream=s)

    def d2h():
        dg.get(out=hg, stream=s)
        s.synchronize()

    def allreduce():
        if comm is not None:
            comm.Allreduce(MPI.IN_PLACE, hg, op=MPI.SUM)

    def back():
        dg.set(hg, stream=s)
    return {"piece": piece, "d2h": d2h, "allreduce": allreduce, "back": back}


def staged_parts(cp, comm, memory: str, piece_bytes: tuple[int, int], grad_bytes: int, work_cycles,
                 reps: int = 30, warm: int = 5) -> tuple[float, float]:
    """One rank's (sum of the staged step's parts each timed alone, the step in the trainer's order),
    seconds, medians over `reps` after `warm`. The step: the piece's copies, a spin of `work_cycles` (as
    the trainer's step), the D2H, the allreduce with no barrier, the H2D back and an empty kernel (the
    update), less the spin's GPU time. `comm` None: one rank."""
    pinned = memory == N.PINNED
    s = cp.cuda.get_current_stream()
    spin, empty = spin_kernels(cp)
    events = cp.cuda.Event(), cp.cuda.Event()
    calls = _staged_calls(cp, comm, memory, piece_bytes, grad_bytes)
    piece, d2h, allreduce, back = (calls[k] for k in ("piece", "d2h", "allreduce", "back"))

    def barrier():
        if comm is not None:
            comm.Barrier()

    def alone(fn, before=lambda: None):
        t = []
        for i in range(warm + reps):
            before()
            barrier()
            t.append(copy_s(cp, fn, pinned, events) if fn is not allreduce else wall_s(allreduce))
        return median(t[warm:])

    def step():
        piece()
        spin((1,), (1,), (work_cycles,))
        d2h()
        allreduce()
        back()
        empty((1,), (1,), ())
        s.synchronize()
    parts = alone(piece) + alone(d2h) + alone(allreduce, before=d2h) + alone(back, before=d2h)
    spin_s = event_s(cp, lambda: spin((1,), (1,), (work_cycles,)), events)
    barrier()
    steps = [wall_s(step) - spin_s for _ in range(warm + reps)]
    return parts, median(steps[warm:])


def staged_wait(cp, world, log, pieces: list[tuple[int, int]], grads: list[int]) -> list[dict]:
    """collective_wait_s points {procs, s, memory}: the staged exchange's wait for the slowest rank, a
    group's median excess of the step over its parts alone (staged_parts, at each piece (x, y bytes) and
    gradient size) less one rank's; [] on one process."""
    P = world.size
    if P < 2:
        return []
    from mpi4py import MPI
    cycles = spin_cycles(cp, 100e-6)
    out = []
    for memory in (N.PAGEABLE, N.PINNED):
        excess: dict[int, list[float]] = {}
        for g in sorted({1, 2, P}):
            sub = world.comm.Split(0 if world.rank < g else MPI.UNDEFINED, world.rank)
            if sub != MPI.COMM_NULL:
                for pb in pieces:
                    for gb in grads:
                        parts, step = staged_parts(cp, sub if g > 1 else None, memory, pb, gb, cycles)
                        excess.setdefault(g, []).append(max(sub.allgather(step)) - max(sub.allgather(parts)))
                sub.Free()
            world.comm.Barrier()
        if world.rank == 0:
            out += _staged_wait_points(excess, memory, log)
    return out


def _staged_wait_points(excess: dict, memory: str, log) -> list[dict]:
    """collective_wait_s points of each group beyond one rank (at least 0)."""
    base, out = median(excess[1]), []
    for g in sorted(excess):
        if g > 1:
            w = max(0.0, median(excess[g]) - base)
            out.append({"procs": g, "s": float(w), "memory": memory})
            log(f"staged exchange through {memory} memory, wait for the slowest of {g} ranks: "
                f"{w * 1e6:.1f} us a step (excess over the parts alone, us: "
                f"{', '.join(f'{x * 1e6:.0f}' for x in excess[g])}; one rank: "
                f"{', '.join(f'{x * 1e6:.0f}' for x in excess[1])})")
    return out
