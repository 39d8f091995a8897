"""`python -m perfmlp.sweep FILE.yaml`: run a set of configurations, each
with its own process count under the installed MPI's launcher, then make
the report.

The file:

    name: q2_2                       # prefix of every run id
    config: ../configs/reference.yaml   # optional: the configuration every run
                                     #   starts from (relative to this file)
    base: {data: synthetic, epochs: 2}  # configuration keys for every run
    matrix:                          # the cartesian product of these lists
      hidden_sizes: [[512], [1024], [2048]]
      procs: [1, 2, 4]
    batch_per_proc: 3200             # optional: batch_size = batch_per_proc * procs
    runs: [{procs: 1, batch_transfer: pinned}]   # optional: more runs, each over base
    repeats: 3                       # optional: run each configuration this many times
    min_steady_batches: 20           # optional: n_train sized from the batch so that every run
                                     #   has at least this many steady batches (the trace
                                     #   reader's rule: the first WARMUP_BATCHES of each epoch are left out)
    min_steady_seconds: 2            # optional, with a prediction machine file: more epochs over the
                                     #   same samples until the steady batches last about this long
                                     #   by the prediction
    predict: h200-calibrated         # optional (or --predict): the machine file the blind
                                     #   predictions are made with, before the runs

A run's configuration is the defaults, then `config`, then `base`, then its
matrix entry or `runs` entry. Every configuration is checked before
anything runs, and a sweep with runs that need a GPU (the trainer's own
refusals on NumPy) is refused at once where CuPy sees none.

A run's id is the sweep's name, the values a reader looks for (H, B, procs,
precision, transfer, comm, GEMM) and a hash of everything the run computes
(its configuration but where its output goes, and its process count): two
runs that differ in anything they compute never share an id. With
`repeats`, run ids end in -r1, -r2, ... (the hash covers the repeat), so the
report can state the run-to-run spread of each configuration.

Blind predictions: with `predict` (or --predict MACHINE), before the first
run is launched the sweep writes `<trace-dir>/predictions.json`: for every
run it is about to launch, the model's predicted time per batch and terms,
with the time the prediction was made and the machine file's SHA-256. An
entry, once written, is never rewritten (a resumed sweep adds only runs it
had not predicted), so the report can check that every prediction it
judges was made before its run started. `--predict-also MACHINE` (any
number of times) writes the same for another machine file beside it, in
`predictions-<file name>.json`.

The trace folder (--trace-dir) is locked while the sweep runs: a second
sweep on it is refused. `<trace-dir>/.sweep/` holds each run's
configuration (`<id>.yaml`) and everything its job printed (`<id>.out`). A
trace folder is reused only when its manifest records the same
configuration and process count and the run completed on every rank
("already traced"). A folder of the same id holding another configuration
is left alone and that run is refused. A failed, timed-out or cut-off run's
trace folder is removed, so that no report reads it: its output stays in
`.sweep/<id>.out`, and the FAILED line quotes perfmlp's own error from it.
The sweep exits 1 if any run failed or was refused, 130 (143, 129) if
interrupted by SIGINT (SIGTERM, SIGHUP), ending the running job first.
"""
from .plan import SweepRun, calibration_sizes, expand, run_identity, steady_n_train, sweep_run_id
from ..names import PREDICTIONS
from .predict import PREDICTIONS_SCHEMA, lengthen, predict_run, write_predictions

__all__ = ["SweepRun", "calibration_sizes", "expand", "lengthen", "predict_run", "run_identity",
           "steady_n_train", "sweep_run_id", "write_predictions", "PREDICTIONS", "PREDICTIONS_SCHEMA"]
