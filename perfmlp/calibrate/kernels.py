"""The step's own kernels (gpu/*.cu) and the GPU's time between kernels, as GPU time: kernel_s at the
trainer's shapes, fused output backward and not; an empty kernel's gap queued ahead (kernel_gap_s) and
in a replayed CUDA graph (graph_kernel_gap_s, graph_replay_gap_s, graph_launch_s); a CUDA event's GPU
time between kernels (trace_event_s)."""
from __future__ import annotations

from statistics import median

from ..gpu.timing import queued_ahead, spin_kernels, time_ms
from ..model.costs import kernel_name, kernel_shape, step_kernels, widths

GAP_KERNELS = 200   # empty kernels queued ahead, and in the larger graph


def one_step(net, x, y) -> None:
    """One step of a Network (NumPy or GPU) on the piece x, y (features by samples)."""
    net.forward(x)
    net.loss(y)
    net.backward()
    net.update()


def own_kernel_times(cp, net, x, y, calls: int = 100) -> list[dict]:
    """[{kernel, shape, precision, s}]: the GPU time of each own kernel (not the GEMMs) of one eager step of
    `net` on x, y, fused output backward and not, recorded (net.capture_kernels) and relaunched `calls`
    times queued ahead; the launches must be the model's step (costs.step_kernels), keyed by its shapes.
    Relaunching a kernel that writes its inputs changes values, not work."""
    sizes, b = net.p.layer_sizes, x.shape[0]
    fused, times = net.fuse_output, {}
    try:
        for fuse in dict.fromkeys((fused, False)):
            net.fuse_output, net.capture_kernels = fuse, []
            one_step(net, x.T, y.T)
            launched = net.capture_kernels
            net.capture_kernels = None
            model = [k for ks in step_kernels(sizes, b, itemsize=widths(net.precision), fuse_output=fuse).values()
                     for k in ks
                     if kernel_name(k) != "gemm"]
            if [name for name, _ in launched] != [kernel_name(k) for k in model]:
                raise RuntimeError(f"the step launched {[name for name, _ in launched]}, the model lists "
                                   f"{[kernel_name(k) for k in model]}")
            with net.stream:  # the spin, the events and the relaunches on one stream
                for (name, relaunch), k in zip(launched, model):
                    if (name, kernel_shape(k)) not in times:
                        times[name, kernel_shape(k)] = queued_ahead(cp, relaunch, calls)[0]
    finally:
        net.fuse_output, net.capture_kernels = fused, None
    return [{"kernel": name, "shape": list(shape), "precision": net.dtype.name, "s": float(t)}
            for (name, shape), t in times.items()]


def kernel_gaps(cp, log) -> dict:
    """The GPU's gap between kernels: empty kernels queued ahead (kernel_gap_s) and in graphs (graph_gaps)."""
    _, empty = spin_kernels(cp)
    res = {}
    res["kernel_gap_s"], host_empty = queued_ahead(cp, lambda: empty((1,), (1,), ()), GAP_KERNELS)
    log(f"empty kernel queued ahead: {res['kernel_gap_s'] * 1e6:.2f} us GPU, {host_empty * 1e6:.2f} us host")
    try:
        res.update(graph_gaps(cp, log))
    except Exception as e:  # the rest of the calibration stands without it
        log(f"CUDA graph: not measured ({type(e).__name__}: {e})")
    return res


def graph_gaps(cp, log) -> dict:
    """Graphs of 1 and GAP_KERNELS empty kernels replayed queued ahead: t(n) = replay gap + n x kernel gap
    (GPU time per replay); graph_launch_s is the host's time per launch of the larger one."""
    _, empty = spin_kernels(cp)
    n_k = GAP_KERNELS
    gs = cp.cuda.Stream(non_blocking=True)
    graphs = {}
    with gs:
        for n in (1, n_k):
            gs.begin_capture()
            for _ in range(n):
                empty((1,), (1,), ())
            graphs[n] = gs.end_capture()
        t_one = queued_ahead(cp, lambda: graphs[1].launch(stream=gs), n_k)[0]
        t_graph, launch_s = queued_ahead(cp, lambda: graphs[n_k].launch(stream=gs), 20)
    res = {"graph_launch_s": launch_s, "graph_kernel_gap_s": max(t_graph - t_one, 0.0) / (n_k - 1)}
    res["graph_replay_gap_s"] = max(t_one - res["graph_kernel_gap_s"], 0.0)
    log(f"graph of {n_k} empty kernels: {res['graph_kernel_gap_s'] * 1e6:.2f} us per kernel GPU, "
        f"{res['graph_replay_gap_s'] * 1e6:.2f} us GPU per replay (graphs of 1 kernel back to back), "
        f"launch {res['graph_launch_s'] * 1e6:.2f} us host")
    return res


def event_gap(cp, log) -> dict:
    """trace_event_s: the GPU time a CUDA event adds between GPU-bound copies, with and without one each."""
    s = cp.cuda.get_current_stream()
    src = cp.empty(64 << 20, dtype=cp.uint8)
    dst = cp.empty_like(src)
    evs = [cp.cuda.Event() for _ in range(100)]

    def chain(with_events):
        for e in evs:
            cp.copyto(dst, src)
            if with_events:
                cp.cuda.runtime.eventRecord(e.ptr, s.ptr)
    t_plain = median(time_ms(cp, lambda: chain(False), warmup=2, reps=15))
    t_events = median(time_ms(cp, lambda: chain(True), warmup=2, reps=15))
    res = {"trace_event_s": max((t_events - t_plain) * 1e-3 / len(evs), 0.0)}
    log(f"a CUDA event between GPU-bound kernels: {res['trace_event_s'] * 1e6:.2f} us of GPU time")
    return res
