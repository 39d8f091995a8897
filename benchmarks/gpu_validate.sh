#!/usr/bin/env bash
# The model tested blind on the GPUs of this machine, as a user would run it:
# calibrate the machine with microbenchmarks, predict the held-out sweep
# from that file alone (predictions.json, timestamped before the first run),
# run the sweep (sweeps/validate.yaml, or VALIDATE_SWEEP, e.g.
# sweeps/validate-x4.yaml on 4 GPUs: every configuration 3 times, >= 20
# steady batches each), then the report and one what-if. From the project
# root (about 7 minutes on 2 x H200):
#
#   bash benchmarks/gpu_validate.sh SET
#
# (gpu_suite.sh's part `validate` on more than one GPU; on one GPU:
# gpu_validate_1gpu.sh.) Writes into the set $OUT/SET/ (gpu_env.sh):
# benchmarks/validate/ (calibrated.yaml and calibrate.log, the sweep's and the
# what-if's logs, report.md: its section "The model tested blind") and the
# runs under traces/validate/ (with predictions.json).
# VALIDATE_CALIBRATE_S (default 300) caps the calibration (4 x H200 take
# more than 150 s); VALIDATE_BUDGET_S (default 450) caps calibration + sweep;
# the sweep runs every configuration once before repeating any, so a cut
# keeps them all. Eager runs trace at the default level (counters: host
# clock); their time per batch is the epoch line's synchronised
# steady_ms_per_batch, and the report judges no run without it.
set -u
SET=${1:?usage: gpu_validate.sh SET}
source benchmarks/gpu_env.sh
set_dir "$SET" validate
R=$B/validate; T=$T/validate; mkdir -p $R $T   # from here on R and T are this script's folders in the set
SWEEP=${VALIDATE_SWEEP:-sweeps/validate.yaml}; NAME=$(basename $SWEEP .yaml)
# the hidden sizes and per-rank batches the sweep's runs use, for the GEMM rates and own kernels
SIZES=$(python3 -m perfmlp.sweep $SWEEP --calibration-sizes) || exit 1
read HID LB <<< "$SIZES"
SECONDS=0
echo "== calibrate ($(date -u +%H:%M:%S)): --hidden $HID --local-batch $LB"
timeout ${VALIDATE_CALIBRATE_S:-300} $MPIRUN -n $NGPU python3 -m perfmlp.calibrate --base h200 --out $R/calibrated.yaml \
  --hidden $HID --local-batch $LB --gemm-kernels naive,tiled,regblock 2>&1 | tee $R/calibrate.log | grep -v "allreduce p=" | tail -24
[ -f $R/calibrated.yaml ] || { echo "calibration failed: see $R/calibrate.log"; exit 1; }
echo "== sweep, predicted first ($(date -u +%H:%M:%S), ${SECONDS} s in)"
PERFMLP_MPIRUN="$MPIRUN" timeout $((${VALIDATE_BUDGET_S:-450} - SECONDS)) python3 -m perfmlp.sweep $SWEEP --trace-dir $T \
  --predict $R/calibrated.yaml --no-report --timeout 40 --max-procs $NGPU 2>&1 | tee $R/sweep.log \
  | grep -v -e ": ok$" -e "skipped$"
rm -rf $T/.sweep
echo "== what-if and report ($(date -u +%H:%M:%S), ${SECONDS} s in)"
BASE=$(ls -d $T/$NAME-h*-b3200-p1-float32-pageable-mpi-staged-cublas-eager-r1-* 2>/dev/null | head -1)
[ -n "$BASE" ] && python3 -m perfmlp.whatif $BASE --machine $R/calibrated.yaml --set comm=nccl \
  --set batch_transfer=resident --set exec=graph --procs $NGPU > $R/whatif.log 2>&1; tail -3 $R/whatif.log
REP=$(mktemp -d)   # only report.md is kept (the set's own report covers the rest)
timeout 60 python3 -m perfmlp.report $T --out $REP --machine $R/calibrated.yaml > $R/report.log 2>&1 \
  && cp $REP/report.md $R/report.md || echo "report not made here ($(tail -1 $R/report.log)); make it from the traces"
rm -rf $REP
grep -h -o -e "Judged: .*" $R/report.md 2>/dev/null | cut -c1-400
pack_set
echo "done in ${SECONDS} s"
