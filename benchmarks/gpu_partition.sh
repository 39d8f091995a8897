#!/usr/bin/env bash
# Issue 14 (partitioning strategies) on a machine with 2 or 4 GPUs, from the project root:
#
#   PERFMLP_GIT_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_partition.sh
#
# 1. tests: the strategies' GPU tests (tests/test_gpu_partition.py: equal to one
#    NumPy process on 2 GPUs, eager and with auto's CUDA graphs; counters equal
#    to the model per rank and batch; the graph-mode shard and server steps
#    bit-identical to eager, with eager's counters per batch) and the
#    architecture tests;
#    (on 4 GPUs also the 4-rank equality test: every hybrid grid);
# 2. sweep: sweeps/partition.yaml on 2 GPUs (H = 512, 2048, 8192 x B = 800,
#    3200, 12800; data, model and ps-nccl; 1 GPU at H=512),
#    sweeps/partition-x4.yaml on 4 (data, model and the 2 x 2 hybrid), every
#    step a CUDA graph, traced (30 runs, about 5 s each);
# 3. eager against graph: model parallelism at H=512, B=3200 on all the GPUs
#    run both ways (exec.txt: the trainer's epoch lines), beside data
#    parallelism (and, on 4, the 2 x 2 hybrid);
# 4. report: python -m perfmlp.report on the sweep's traces (its partitioning
#    section: the predicted-best map with the measured winners, measured vs
#    predicted per strategy, counted bytes vs the model, speed-ups), and the
#    model's tables for the reference shapes (eager and graph).
# Results go to $OUT/partition/ (tests.log, sweep.log, exec.txt, traces/,
# report/, model-*.txt, machine.txt) and, packed, $OUT/partition.tgz: unpack it
# at the project root's benchmarks/results/<machine kind>/ and move traces/ to
# traces/<machine kind>/partition.
set -u
source benchmarks/gpu_env.sh
R=$OUT/partition; T=$R/traces; mkdir -p $T
export PERFMLP_GIT_COMMIT=${PERFMLP_GIT_COMMIT:-unknown}
NGPU=$(nvidia-smi -L | wc -l)
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "commit $PERFMLP_GIT_COMMIT"; } > $R/machine.txt 2>&1
echo "== tests ($(date -u +%H:%M:%S))"
TESTS=${PARTITION_TESTS-tests/test_gpu_partition.py tests/test_architecture.py}
[ -n "$TESTS" ] && timeout 330 python3 -m pytest -q $TESTS 2>&1 | tee $R/tests.log | tail -3
SWEEP=sweeps/partition.yaml; [ $NGPU -ge 4 ] && SWEEP=sweeps/partition-x4.yaml
echo "== sweep ($(date -u +%H:%M:%S))"
PERFMLP_MPIRUN="$MPIRUN" timeout 240 python3 -m perfmlp.sweep $SWEEP --trace-dir $T --no-report \
  --timeout 60 --max-procs $NGPU 2>&1 | tee $R/sweep.log | grep -v -e ": ok$" -e "skipped$"
rm -rf $T/.sweep-configs
echo "== eager against graph ($(date -u +%H:%M:%S))"
J="--config configs/reference.yaml --data synthetic --backend cupy --batch-transfer resident --comm nccl --epochs 8 --no-trace"
RUNS=("model eager" "model graph" "data graph"); [ $NGPU -ge 4 ] && RUNS+=("hybrid graph --model-procs 2")
for run in "${RUNS[@]}"; do
  set -- $run
  echo "# --parallel $1 --exec $2 ${*:3}, $NGPU GPUs, H=512, B=3200" >> $R/exec.txt
  timeout 60 $MPIRUN -n $NGPU python3 -m perfmlp.run $J --parallel $1 --exec $2 "${@:3}" 2>&1 \
    | grep -e "^epoch 8" -e "^done" -e rror >> $R/exec.txt
done
cat $R/exec.txt
echo "== report ($(date -u +%H:%M:%S))"
timeout 120 python3 -m perfmlp.report $T --out $R/report 2>&1 | tail -2
M="python3 -m perfmlp.model --machine h200-calibrated --procs $NGPU --batch-transfer resident"
$M --parallel model --comm nccl > $R/model-model.txt 2>&1; $M --comm ps-nccl > $R/model-ps.txt 2>&1
$M --parallel model --comm nccl --exec graph > $R/model-model-graph.txt 2>&1
grep -A12 "^## Partitioning" $R/report/report.md | head -4
tail -n +1 $R/report/partition_winners.csv 2>/dev/null
echo "== done ($(date -u +%H:%M:%S))"
tar czf $OUT/partition.tgz -C $OUT partition && ls -la $OUT/partition.tgz
