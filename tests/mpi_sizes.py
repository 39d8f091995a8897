"""One mpiexec job in place of one per rank count: `each_size(check, sizes)` runs
`check(world) -> (failures, summary)` on the first k launched ranks for each k
in `sizes` in turn, each group an MPI communicator of its own (as COMM_WORLD
is to a job of k ranks). Rank 0 prints "OK <summary>" per size, or "FAIL"
and the first failures; the job exits 1 after the last size if any failed
(every rank reaches the end: none is left waiting in a collective)."""
import sys

from perfmlp.comm import Group, make_world


def rank_counts(text: str) -> list[int]:
    """`1,2,3` as rank counts."""
    return [int(k) for k in text.split(",")]


def sizes_argument() -> list[int] | None:
    """The rank counts named by `--sizes 1,2,3` on the command line (None where absent: the whole job)."""
    argv = sys.argv[1:]
    return rank_counts(argv[argv.index("--sizes") + 1]) if "--sizes" in argv else None


def each_size(check, sizes: list[int] | None) -> None:
    world = make_world()
    if sizes and max(sizes) > world.size:
        raise SystemExit(f"--sizes {max(sizes)} needs as many ranks (launched: {world.size})")
    failed = False
    for k in sizes or [world.size]:
        if sizes is None:   # the whole job, its own world
            group = world
        else:               # collective: every rank takes part in the split
            sub = world.comm.Split(0 if world.rank < k else world.MPI.UNDEFINED, world.rank)
            group = Group(sub, world.library) if world.rank < k else None
        if group is not None:
            failures, summary = check(group)
            if world.rank == 0:
                print("FAIL " + "; ".join(failures[:8]) if failures else f"OK {summary}", flush=True)
                failed = failed or bool(failures)
        world.barrier()
    if world.rank == 0 and failed:
        sys.exit(1)
