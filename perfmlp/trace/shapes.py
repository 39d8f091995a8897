"""The Shape a batch references: what a batch of one piece size costs, priced once. The first
batch of each piece size records the phases that ran and the operations launched in each
(trace/fastpath.py: Recording); `price` turns them into the Shape's counts with the model's
formulas (perfmlp/model/costs.py). A later batch of that size references it by id; one whose
byte counts or collectives differ gets a Shape of its own, and one that recorded other phases
one without phases (its next batch of that size records again)."""
from __future__ import annotations

from ..model.costs import Widths, op_cost, weight_grad_elements
from ..names import Phase
from .format import BYTE_COUNTS
from .records import BatchLayout, Shape


def mem_bytes(launches, w: Widths, weight_grads: int) -> dict:
    """phase -> device-memory bytes its operations read and write (model.costs.op_cost at the
    widths `w`), plus, where the weight-gradient GEMMs' operands are narrower than the parameters,
    their float32 writes of `weight_grads` elements, as model.costs.batch_counts counts them."""
    out = {p: sum(op_cost(op, tuple(shape), w)[1] for op, shape in ops) for p, ops in launches.items()}
    grads = Phase.BACKWARD if Phase.BACKWARD in out else Phase.GRAPH
    if grads in out:
        out[grads] += (w.param - w.act) * weight_grads
    return out


def price(ran: list, ops: list, w: Widths, counts_kernels: bool, weight_grads: int = 0) -> dict:
    """The Shape fields of a recorded batch: `ran` (phase, first op, end op, kernels) in order,
    `ops` the (operation, shape) the network launched; a GEMM is one launch."""
    flops, nops, kernels, gemms, launches = {}, {}, {}, {}, {}
    for name, i0, i1, k in ran:
        mine = ops[i0:i1]
        flops[name] = flops.get(name, 0) + sum(op_cost(op, tuple(shape), w)[0] for op, shape in mine)
        launches.setdefault(name, []).extend((op, tuple(shape)) for op, shape in mine)
        for counted, n in ((nops, len(mine)), (kernels, k), (gemms, sum(op == "gemm" for op, _ in mine))):
            if n:  # a phase that launched none is left out
                counted[name] = counted.get(name, 0) + n
    return {"phases": tuple(name for name, *_ in ran), "flops": flops, "ops": nops, "launches": launches,
            "mem_bytes": mem_bytes(launches, w, weight_grads),
            "kernels": kernels if counts_kernels else None, "gemms": gemms if counts_kernels else None}


class Note:
    """The writer's note of a Shape: what its batches must match, its record's layout (`coll` None: being recorded)."""

    __slots__ = ("id", "bytes", "coll", "nstamps", "record", "size", "priced", "key")


class ShapeBook:
    """The tracer's part that keeps its Shapes (a mixin of writer.Tracer)."""

    def _recording_entry(self, samples: int, local: int) -> Note:
        self._ops.clear()
        self._ran.clear()
        if self._net is not None:
            self._net.ops = self._ops
        self._phases.update(self._recording)  # in place: a caller may hold the tracer's phase function
        e = Note()
        e.coll, e.key = None, (samples, local)
        return e

    def _shape_for(self, entry, counts) -> Note:
        """The Shape this batch's counts are (written where none matches), priced after a recording batch."""
        byte_counts = counts.byte_counts()
        key = entry.key
        if entry.coll is None:
            self._phases.update(self._fast)
            if self._net is not None:
                self._net.ops = None
            priced = price(self._ran, self._ops, self.widths, self._net is not None, self._weight_grads())
        else:
            priced = entry.priced
        n = len(priced["phases"])
        phases = len(self._stamps) == (n + 1 if self._events is not None else n)
        new = self._entry(key, priced, byte_counts, counts, phases)
        if phases:
            self._shapes[key[0] << 32 | key[1]] = new
        else:  # other phases than its size's first batch: not kept; the next batch of this size records again
            self._shapes.pop(key[0] << 32 | key[1], None)
            self._stamps.clear()
            if self._events is not None:
                self._stamps.append(self._last_event or self._event())
        return new

    def _entry(self, key, priced, byte_counts, counts, phases: bool) -> Note:
        e = Note()
        e.id, e.key, e.priced = len(self._entries) + 1, key, priced  # ids 1, 2, ... in the order made
        self._entries.append(e)
        e.bytes, e.coll = byte_counts, list(counts.collectives)
        n = len(priced["phases"]) if phases else 0
        e.nstamps = n + 1 if self._events is not None else n
        e.record = BatchLayout.record(n)
        e.size = e.record.size
        self._write(Shape(id=e.id, samples=key[0], local_samples=key[1], **{**priced, "phases": priced["phases"][:n]},
                          **dict(zip(BYTE_COUNTS, byte_counts)),
                          collectives=tuple((str(c), int(k)) for c, k in counts.collectives)))
        return e

    def _weight_grads(self) -> int:
        """Elements the weight-gradient GEMMs write at their own cost (operands narrower than parameters), else 0."""
        if self._net is None or self.widths.act == self.widths.param:
            return 0
        return weight_grad_elements(self._net.p.layer_sizes, getattr(self._net, "fuse_output", True))

    def _records(self) -> int:
        """Batch records written: the mapped file's, walked (the hot path counts nothing), and _write_batch's."""
        sizes = {e.id: e.size for e in self._entries}
        pos, n, mm, end = self._store.start, 0, self._fp.mm, self._fp.pos
        while pos < end:
            pos += sizes[BatchLayout.HEAD.unpack_from(mm, pos)[0]]
            n += 1
        return n + (self._count if self._written is not None else 0)
