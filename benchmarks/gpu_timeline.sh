#!/usr/bin/env bash
# The GPU timeline (issue 12) on the GPU machine, from the project root:
#
#   PERFMLP_GIT_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_timeline.sh
#
# Writes $OUT/timeline/ (unpack its timeline.tgz at the project root's
# benchmarks/results/<set>/timeline and traces/<set>/timeline):
#   overhead-p<P>-<exec>.json   untraced and every --trace-level alternating in one
#                               process per rank (benchmarks/timeline_overhead.py),
#                               H=512, B=3200 resident + NCCL, p = 1 and 2, eager
#                               (and graph where `--exec` exists)
#   traces/                     a CUPTI-traced run and an nsys run of the same
#                               configuration, p = 2, resident + NCCL and pageable +
#                               mpi-staged, the nsys SQLite beside its trace
#   tests.log                   tests/test_timeline.py (its GPU tests: CUPTI records = counters)
#   check-*.json                kernel busy time and bytes per batch, CUPTI in-process
#                               against nsys (benchmarks/timeline_check.py)
#   report/                     python -m perfmlp.report over traces/
# About 5 minutes on 2 x H200.
set -u
source benchmarks/gpu_env.sh
# cupti-python and its libraries (../shared/device/README.md), carried in .gpu-kit/cupti
python3 -m pip install -q --no-index --no-deps --target "$PWD/.pyext" .gpu-kit/cupti/*.whl 2>&1 | tail -2
R=$OUT/timeline; T=$R/traces; mkdir -p $T
NGPU=$(nvidia-smi -L | wc -l)
export PERFMLP_GIT_COMMIT=${PERFMLP_GIT_COMMIT:-unknown}
{ date -u; nvidia-smi -L; echo "commit $PERFMLP_GIT_COMMIT"; python3 -c "from cupti import cupti; print('cupti-python ok')"; } \
  > $R/machine.txt 2>&1; cat $R/machine.txt
EXECS=eager
python3 -m perfmlp.run --help | grep -q -- --exec && EXECS="eager graph"

echo "== tests ($(date -u +%H:%M:%S))"
timeout 240 python3 -m pytest -q tests/test_timeline.py 2>&1 | tee $R/tests.log | tail -3

echo "== overhead ($(date -u +%H:%M:%S))"
for p in 1 2; do
  [ $p -le $NGPU ] || continue
  for ex in $EXECS; do
    timeout 150 $MPIRUN -n $p python3 benchmarks/timeline_overhead.py --exec $ex --repeats 5 \
      --out $R/overhead-p$p-$ex.json 2>&1 | grep -v "^$" | tail -6
  done
done

echo "== CUPTI against nsys ($(date -u +%H:%M:%S))"
P=$(( NGPU < 2 ? NGPU : 2 ))
COMMON="--config configs/reference.yaml --backend cupy --data synthetic --n-train 64000 --epochs 2"
for mode in "resident nccl" "pageable mpi-staged"; do
  set -- $mode; TR=$1; CM=$2; ID=p$P-$TR-$CM
  timeout 90 $MPIRUN -n $P python3 -m perfmlp.run $COMMON --batch-transfer $TR --comm $CM \
    --trace-level kernels --trace-dir $T --run-id cupti-$ID 2>&1 | tail -1
  timeout 150 $NSYS profile -t cuda,nvtx,mpi --mpi-impl=openmpi --export sqlite --force-overwrite true \
    -o $R/nsys-$ID $MPIRUN -n $P python3 -m perfmlp.run $COMMON --batch-transfer $TR --comm $CM \
    --trace-dir $T --run-id nsys-$ID > $R/nsys-$ID.log 2>&1; tail -1 $R/nsys-$ID.log
  mv $R/nsys-$ID.sqlite $T/nsys-$ID/ 2>/dev/null; rm -f $R/nsys-$ID.nsys-rep
  python3 -c "import json; m = json.load(open('$T/nsys-$ID/manifest.json')); print('under nsys:', m.get('trace_level'), '-', m.get('trace_level_note'))"
  python3 benchmarks/timeline_check.py $T/cupti-$ID $T/nsys-$ID --out $R/check-$ID.json 2>&1 | tail -$P
done

echo "== report ($(date -u +%H:%M:%S))"
python3 -m perfmlp.trace.chrome $T/cupti-p$P-resident-nccl -o $R/cupti-p$P-resident-nccl.chrome.json | tail -1
python3 -m perfmlp.report $T --out $R/report --machine benchmarks/results/h200-x2/h200-calibrated.yaml 2>&1 | tail -2
grep -A3 "Cross-check over" $R/report/report.md | head -8
(cd $OUT && tar czf timeline.tgz timeline)
echo "done ($(date -u +%H:%M:%S))"
