#!/usr/bin/env bash
# Issue 14 (partitioning strategies) on a machine with 2 GPUs, from the project root:
#
#   PERFMLP_GIT_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_partition.sh
#
# 1. tests: the strategies' GPU tests (tests/test_gpu_partition.py: equal to one
#    NumPy process on 2 GPUs, eager and with auto's CUDA graphs; counters equal
#    to the model per rank and batch; the graph-mode shard and server steps
#    bit-identical to eager, with eager's counters per batch) and the
#    architecture tests;
# 2. sweep: sweeps/partition.yaml (H = 512, 2048, 8192 x B = 800, 3200, 12800;
#    data, model and ps-nccl on 2 GPUs; 1 GPU at H=512), every step a CUDA
#    graph, traced (30 runs, about 5 s each);
# 3. eager against graph: model parallelism at H=512, B=3200 on 2 GPUs run both
#    ways (exec.txt: the trainer's epoch lines), beside data parallelism;
# 4. report: python -m perfmlp.report on the sweep's traces (its partitioning
#    section: the predicted-best map with the measured winners, measured vs
#    predicted per strategy, counted bytes vs the model, speed-ups), and the
#    model's tables for the reference shapes (eager and graph).
# Results go to $OUT/partition/ (tests.log, sweep.log, exec.txt, traces/,
# report/, model-*.txt, machine.txt) and, packed, $OUT/partition.tgz: unpack it
# at the project root's benchmarks/results/ and move traces/ to
# traces/partition-h200-x2.
set -u
source benchmarks/gpu_env.sh
R=$OUT/partition; T=$R/traces; mkdir -p $T
export PERFMLP_GIT_COMMIT=${PERFMLP_GIT_COMMIT:-unknown}
NGPU=$(nvidia-smi -L | wc -l)
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "commit $PERFMLP_GIT_COMMIT"; } > $R/machine.txt 2>&1
echo "== tests ($(date -u +%H:%M:%S))"
timeout 330 python3 -m pytest -q tests/test_gpu_partition.py tests/test_architecture.py 2>&1 | tee $R/tests.log | tail -3
echo "== sweep ($(date -u +%H:%M:%S))"
PERFMLP_MPIRUN="$MPIRUN" timeout 240 python3 -m perfmlp.sweep sweeps/partition.yaml --trace-dir $T --no-report \
  --timeout 60 --max-procs $NGPU 2>&1 | tee $R/sweep.log | grep -v -e ": ok$" -e "skipped$"
rm -rf $T/.sweep-configs
echo "== eager against graph ($(date -u +%H:%M:%S))"
J="--config configs/reference.yaml --data synthetic --backend cupy --batch-transfer resident --comm nccl --epochs 8 --no-trace"
for run in "model eager" "model graph" "data graph"; do
  set -- $run
  echo "# --parallel $1 --exec $2, 2 GPUs, H=512, B=3200" >> $R/exec.txt
  timeout 60 $MPIRUN -n 2 python3 -m perfmlp.run $J --parallel $1 --exec $2 2>&1 | grep -e "^epoch 8" -e "^done" -e rror >> $R/exec.txt
done
cat $R/exec.txt
echo "== report ($(date -u +%H:%M:%S))"
timeout 120 python3 -m perfmlp.report $T --out $R/report 2>&1 | tail -2
M="python3 -m perfmlp.model --machine h200-calibrated --procs 2 --batch-transfer resident"
$M --parallel model --comm nccl > $R/model-model.txt 2>&1; $M --comm ps-nccl > $R/model-ps.txt 2>&1
$M --parallel model --comm nccl --exec graph > $R/model-model-graph.txt 2>&1
grep -A12 "^## Partitioning" $R/report/report.md | head -4
tail -n +1 $R/report/partition_winners.csv 2>/dev/null
echo "== done ($(date -u +%H:%M:%S))"
tar czf $OUT/partition.tgz -C $OUT partition && ls -la $OUT/partition.tgz
