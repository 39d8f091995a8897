#!/usr/bin/env bash
# The model tested blind across GPUs, on a machine with one GPU: calibrate
# this GPU, carry another GPU's calibration here by datasheet ratios
# (python -m perfmlp.model.scaled), predict the held-out sweep
# (sweeps/validate.yaml, or VALIDATE_SWEEP; p = 1) from both before the
# first run, run it, make the report. From the project root (about 5
# minutes on one H100; under 8):
#
#   bash benchmarks/gpu_validate_1gpu.sh SET
#
# (gpu_suite.sh's part `validate` on one GPU.)
# VALIDATE_DATASHEET (default h100-sxm): this GPU's datasheet file, the base
#   of its calibration and the target of the carried one;
# VALIDATE_FROM (default h200-calibrated, shipped) and VALIDATE_FROM_DATASHEET
#   (default h200): the other GPU's calibration and its datasheet file;
# VALIDATE_BUDGET_S (default 400) caps calibration + sweep; the sweep runs
#   every configuration once before repeating any, so a cut keeps them all;
# VALIDATE_CALIBRATE_S (default 300) caps the calibration alone (it times
#   every H with every per-rank batch the sweep uses);
# VALIDATE_PRECISIONS (default float32): the precisions it times them in
#   (tf32,bf16,fp16 for sweeps/validate-precision.yaml);
# VALIDATE_MODEL_ERROR_KIND (default: none): a machine kind of
#   reports/blind-tests.csv whose blind tests' error goes into the calibrated
#   file's intervals (python -m perfmlp.report.blind_spread), h100 on an H100;
# VALIDATE_NAME (default validate): the folder in the set, benchmarks/NAME and
#   traces/NAME, that the sweep's calibration, runs and report go to.
# The calibration records its measured spread, so the blind predictions
# carry 90% intervals (prediction interval_s and quantiles_s, written before
# the first run); the report judges them (coverage, half-width, the pooled
# Kolmogorov-Smirnov distance), and the line "Intervals: ..." says so.
# Writes into the set $OUT/SET/ (gpu_env.sh): benchmarks/validate/
# (calibrated.yaml and calibrate.log, scaled.yaml: the carried file,
# sweep.log, report.md: its validation section shows each prediction file's
# error apart) and the runs under traces/validate/ with predictions.json
# (this GPU's calibration) and predictions-scaled.json (the carried one).
# Eager runs trace at the default level (counters: host clock); their time
# per batch is the epoch line's synchronised steady_ms_per_batch, and the
# report judges no run without it.
set -u
SET=${1:?usage: gpu_validate_1gpu.sh SET}
source benchmarks/gpu_env.sh
set_dir "$SET" validate
NAME=${VALIDATE_NAME:-validate}
R=$B/$NAME; T=$T/$NAME; mkdir -p $R $T   # from here on R and T are this script's folders in the set
DS=${VALIDATE_DATASHEET:-h100-sxm}
FROM=${VALIDATE_FROM:-h200-calibrated}
FROM_DS=${VALIDATE_FROM_DATASHEET:-h200}
SWEEP=${VALIDATE_SWEEP:-sweeps/validate.yaml}
# the hidden sizes and per-rank batches the sweep's runs use, for the GEMM rates and own kernels
SIZES=$(python3 -m perfmlp.sweep $SWEEP --calibration-sizes) || exit 1
read HID LB <<< "$SIZES"
# the carried prediction is only as good as the datasheet file: say if it is not this GPU's
python3 - "$DS" <<'PY'
import sys
import cupy
from perfmlp.model.machine import load_machine
name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
ds = load_machine(sys.argv[1])
print(f"GPU {name!r}: datasheet file {ds.name!r}" + ("" if ds.describes(name) else
      " -- WARNING: not this GPU's datasheet (its name and device_names differ); the carried predictions use it"))
PY
SECONDS=0
echo "== calibrate ($(date -u +%H:%M:%S)): --hidden $HID --local-batch $LB"
timeout ${VALIDATE_CALIBRATE_S:-300} $MPIRUN -n 1 python3 -m perfmlp.calibrate --base $DS --out $R/calibrated.yaml --hidden $HID \
  --local-batch $LB --precisions ${VALIDATE_PRECISIONS:-float32} 2>&1 | tee $R/calibrate.log | tail -8
[ -f $R/calibrated.yaml ] || { echo "calibration failed: see $R/calibrate.log"; exit 1; }
# the model's own error on this machine kind, from its earlier blind tests, into the intervals
[ -n "${VALIDATE_MODEL_ERROR_KIND:-}" ] && { python3 -m perfmlp.report.blind_spread reports/blind-tests.csv \
  --machine-kind $VALIDATE_MODEL_ERROR_KIND --into $R/calibrated.yaml || exit 1; }
python3 -m perfmlp.model.scaled $FROM --from $FROM_DS --to $DS --out $R/scaled.yaml || exit 1
echo "== sweep, predicted first ($(date -u +%H:%M:%S), ${SECONDS} s in)"
PERFMLP_MPIRUN="$MPIRUN" timeout $((${VALIDATE_BUDGET_S:-400} - SECONDS)) python3 -m perfmlp.sweep \
  $SWEEP --trace-dir $T --predict $R/calibrated.yaml --predict-also $R/scaled.yaml \
  --no-report --timeout 40 --max-procs 1 2>&1 | tee $R/sweep.log | grep -v -e ": ok$" -e "skipped$"
rm -rf $T/.sweep
echo "== report ($(date -u +%H:%M:%S), ${SECONDS} s in)"
REP=$(mktemp -d)   # only report.md is kept (the set's own report covers the rest)
timeout 60 python3 -m perfmlp.report $T --out $REP --machine $R/calibrated.yaml > $R/report.log 2>&1 \
  && cp $REP/report.md $R/report.md || echo "report not made here ($(tail -1 $R/report.log)); make it from the traces"
rm -rf $REP
grep -h -o -e "Judged: .*" -e "Intervals: .*" -e "Predicted with another machine file.*" $R/report.md 2>/dev/null \
  | cut -c1-600
pack_set
echo "done in ${SECONDS} s"
