#!/usr/bin/env bash
# The model tested blind (issue 13), as a user would run it: calibrate this
# machine with microbenchmarks, predict the held-out sweep from that file
# alone (predictions.json, timestamped before the first run), then run the
# sweep (sweeps/validate.yaml, or VALIDATE_SWEEP, e.g. sweeps/validate-x4.yaml
# on 4 GPUs: every configuration 3 times, >= 20 steady batches each), then the
# report and one what-if. From the project root on
# the GPU machine (about 7 minutes on 2 x H200):
#
#   PERFMLP_GIT_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_validate.sh
#
# Everything goes to $OUT/validate/ (packed as $OUT/validate.tgz): machine.txt,
# calibrated.yaml and calibrate.log, traces/ (with predictions.json), the
# sweep's and the what-if's logs, and report/ where matplotlib is installed
# (else make it here: python -m perfmlp.report traces/... --machine ...).
# VALIDATE_CALIBRATE_S (default 300) caps the calibration (on 4 x H200 it ran
# past 150 s, validate-x4e's first call, before staged_wait and the eager
# step's size factors added their rounds); VALIDATE_BUDGET_S (default 450)
# caps calibration + sweep; the sweep runs every configuration once before
# repeating any, so a cut keeps them all.
# Eager runs trace at the default level (counters: host clock); their time
# per batch is the epoch line's synchronised steady_ms_per_batch, and the
# script counts any run without it (the report leaves such runs out). One
# GPU, and another GPU's calibration carried to it: gpu_validate_1gpu.sh.
set -u
source benchmarks/gpu_env.sh
R=$OUT/validate; T=$R/traces; mkdir -p $T
NGPU=$(nvidia-smi -L | wc -l)
[ -n "${PERFMLP_GIT_COMMIT:-}" ] || echo "warning: PERFMLP_GIT_COMMIT not set: the manifests will not name the code"
export PERFMLP_GIT_COMMIT=${PERFMLP_GIT_COMMIT:-unknown}
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "commit $PERFMLP_GIT_COMMIT"; } > $R/machine.txt 2>&1
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
rm -rf $T/.sweep-configs
python3 benchmarks/untimed_runs.py $T
echo "== what-if and report ($(date -u +%H:%M:%S), ${SECONDS} s in)"
BASE=$(ls -d $T/$NAME-h*-b3200-p1-float32-pageable-mpi-staged-cublas-eager-r1-* 2>/dev/null | head -1)
[ -n "$BASE" ] && python3 -m perfmlp.whatif $BASE --machine $R/calibrated.yaml --set comm=nccl \
  --set batch_transfer=resident --set exec=graph --procs $NGPU > $R/whatif.log 2>&1; tail -3 $R/whatif.log
timeout 60 python3 -m perfmlp.report $T --out $R/report --machine $R/calibrated.yaml > $R/report.log 2>&1 \
  || echo "report not made here ($(tail -1 $R/report.log)); make it from the traces"
echo "done in ${SECONDS} s"
tar czf $OUT/validate.tgz -C $OUT validate && ls -la $OUT/validate.tgz
