#!/usr/bin/env bash
# The partitioning strategies on a machine with 2 or 4 GPUs, from the project root:
#
#   bash benchmarks/gpu_partition.sh SET
#
# (gpu_suite.sh's part `partition`.)
# 1. tests: the strategies' GPU tests (tests/test_gpu_strategies.py: equal to one
#    NumPy process on 2 GPUs, eager and with auto's CUDA graphs; counters equal
#    to the model per rank and batch; the graph-mode shard and server steps
#    bit-identical to eager, with eager's counters per batch) and the
#    architecture tests (on 4 GPUs also the 4-rank equality test: every hybrid
#    grid); PARTITION_TESTS: other test files, "" for none;
# 2. sweep: sweeps/partition.yaml on 2 GPUs (H = 512, 2048, 8192 x B = 800,
#    3200, 12800; data, model and ps-nccl; 1 GPU at H=512),
#    sweeps/partition-x4.yaml on 4 (data, model and the 2 x 2 hybrid), every
#    step a CUDA graph, traced (30 runs, about 5 s each);
# 3. eager against graph: model parallelism at H=512, B=3200 on all the GPUs
#    run both ways (exec.txt: the trainer's epoch lines), beside data
#    parallelism (and, on 4, the 2 x 2 hybrid);
# 4. report: python -m perfmlp.report on the sweep's traces (its partitioning
#    section: the predicted-best map with the measured winners, measured vs
#    predicted per strategy, counted bytes vs the model, speed-ups; report.md
#    and strategy_winners.csv kept), and the model's tables for the
#    reference shapes (eager and graph).
# Writes into the set $OUT/SET/ (gpu_env.sh): benchmarks/partition/ (tests.log,
# sweep.log, exec.txt, report.md, strategy_winners.csv, model-*.txt) and the
# runs under traces/partition/.
set -u
SET=${1:?usage: gpu_partition.sh SET}
source benchmarks/gpu_env.sh
set_dir "$SET" partition
R=$B/partition; T=$T/partition; mkdir -p $R $T   # from here on R and T are this script's folders in the set
echo "== tests ($(date -u +%H:%M:%S))"
TESTS=${PARTITION_TESTS-tests/test_gpu_strategies.py tests/test_architecture.py}
[ -n "$TESTS" ] && timeout 330 python3 -m pytest -q $TESTS 2>&1 | tee $R/tests.log | tail -3
SWEEP=sweeps/partition.yaml; [ $NGPU -ge 4 ] && SWEEP=sweeps/partition-x4.yaml
echo "== sweep ($(date -u +%H:%M:%S))"
PERFMLP_MPIRUN="$MPIRUN" timeout 240 python3 -m perfmlp.sweep $SWEEP --trace-dir $T --no-report \
  --timeout 60 --max-procs $NGPU 2>&1 | tee $R/sweep.log | grep -v -e ": ok$" -e "skipped$"
rm -rf $T/.sweep
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
REP=$(mktemp -d)
timeout 120 python3 -m perfmlp.report $T --out $REP 2>&1 | tail -2
cp $REP/report.md $REP/strategy_winners.csv $R/ 2>/dev/null; rm -rf $REP
M="python3 -m perfmlp.model --machine h200-calibrated --procs $NGPU --batch-transfer resident"
$M --parallel model --comm nccl > $R/model-model.txt 2>&1; $M --comm ps-nccl > $R/model-ps.txt 2>&1
$M --parallel model --comm nccl --exec graph > $R/model-model-graph.txt 2>&1
grep -A12 "^## Partitioning" $R/report.md | head -4
tail -n +1 $R/strategy_winners.csv 2>/dev/null
pack_set
echo "== done ($(date -u +%H:%M:%S))"
