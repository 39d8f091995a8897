"""`python -m perfmlp.run`: train the MLP, data-parallel under `mpirun -n P`.

Only rank 0 prints: which data it uses, a line per epoch, a summary.
Any error ends the whole job with one line and a non-zero exit: a rank that
fails on its own aborts the MPI job rather than leaving the others waiting
in a collective.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import traceback
from pathlib import Path

from . import config as config_mod
from .errors import PerfmlpError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        raise PerfmlpError(message)


def parse(argv):
    ap = _Parser(prog="python -m perfmlp.run", description=__doc__.splitlines()[0])
    config_mod.add_arguments(ap)
    return config_mod.from_args(ap.parse_args(argv))


def interpreter_warning() -> str | None:
    """Under `nsys profile mpirun`, Open MPI may start ranks with /usr/bin/python3
    instead of the python3 on PATH; say so in one line."""
    on_path = shutil.which("python3")
    if on_path and os.path.realpath(on_path) != os.path.realpath(sys.executable):
        if Path(on_path).resolve().parent != Path(sys.executable).resolve().parent:
            return (f"warning: running under {sys.executable}, but python3 on PATH is {on_path} "
                    "(under nsys, use `mpirun --noprefix` or name the interpreter by its full path)")
    return None


def main(argv: list[str] | None = None) -> int:
    world = None
    rank = 0
    tracer = None
    try:
        cfg = parse(argv)
        from .comm import make_world
        world = make_world()
        rank = world.rank
        from . import train as train_mod
        from .trace.writer import make_tracer
        tracer = make_tracer(cfg, world)
        if rank == 0 and not cfg.quiet:
            w = interpreter_warning()
            if w:
                print(w, file=sys.stderr)
        try:
            if cfg.cprofile:
                import cProfile
                prof = cProfile.Profile()
                res = prof.runcall(train_mod.train, cfg, world, tracer)
                out = Path(tracer.run_dir or ".") / f"rank-{rank}.prof"
                prof.dump_stats(out)
            else:
                res = train_mod.train(cfg, world, tracer)
        except train_mod.NonFiniteLoss as e:
            where = None
            if rank == 0 and getattr(e, "params", None) is not None:
                folder = Path(cfg.save_params or tracer.run_dir or ".")
                where = folder / "at-failure.npz"
                train_mod.save_params(where, e.params)
            tracer.close("failed")
            if world.size > 1:
                world.barrier()  # every rank saw the same reduced loss: a clean collective stop
            if rank == 0:
                print(f"perfmlp.run: error: {e}" + (f" (parameters saved to {where})" if where else ""),
                      file=sys.stderr)
            return e.exit_code
        tracer.close("complete")
        if rank == 0 and not cfg.quiet:
            ms = statistics.median(e.ms_per_batch for e in res.epochs)
            last = res.epochs[-1] if res.epochs else None
            acc = f", final held-out accuracy {last.accuracy:.4f}" if last else ""
            trace = f", trace {tracer.run_dir}" if tracer.run_dir else ""
            print(f"done: {res.batches} batches on {world.size} rank{'s' if world.size > 1 else ''} "
                  f"({res.backend}), {ms:.4g} ms/batch (synchronised wall time per epoch after its first "
                  f"batch, median over epochs){acc}{trace}")
        return 0
    except (PerfmlpError, KeyboardInterrupt, Exception) as e:  # one line, then end the whole job
        if isinstance(e, PerfmlpError):
            msg, code = str(e), e.exit_code
        elif isinstance(e, KeyboardInterrupt):
            msg, code = "interrupted", 130
        else:
            msg, code = f"{type(e).__name__}: {e}", 1
            if os.environ.get("PERFMLP_DEBUG"):
                traceback.print_exc()
        if tracer is not None:
            tracer.close("failed")
        who = f"rank {rank}: " if world is not None and world.size > 1 else ""
        print(f"perfmlp.run: {who}error: {msg}", file=sys.stderr)
        if world is not None and world.size > 1:
            world.abort(code)  # the other ranks may be waiting in a collective
        return code


if __name__ == "__main__":
    sys.exit(main())
