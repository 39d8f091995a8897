#!/usr/bin/env bash
# Issue 13: are the staged exchange's host paths slower in the step's order
# than one at a time (benchmarks/staged_cycle.py), and does the order
# explain the trainer's times? Microbenchmarks at p = 1 and 2, then the
# trainer (pageable and pinned, mpi-staged, eager, counters: its host clock
# times these phases) at matching sizes, then the microbenchmarks again
# (drift), twice. From the project root on a 2-GPU machine:
#
#   PERFMLP_GIT_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_staged_cycle.sh
set -u
source benchmarks/gpu_env.sh
R=$OUT/cycle; mkdir -p $R/traces
export PERFMLP_GIT_COMMIT=${PERFMLP_GIT_COMMIT:-unknown}
{ date -u; nvidia-smi -L; nproc; echo "commit $PERFMLP_GIT_COMMIT"; } > $R/machine.txt 2>&1
J="--config configs/reference.yaml --data synthetic --backend cupy --epochs 1 --exec eager --comm mpi-staged"
CFGS=("1 1024 800 pageable" "2 1024 3200 pageable" "2 2048 3200 pageable" "2 512 6400 pageable" "2 512 6400 pinned")
for round in 1 2; do
  for p in 1 2; do
    echo "== microbenchmarks p=$p round $round ($(date -u +%T))"
    timeout 120 $MPIRUN -n $p python3 benchmarks/staged_cycle.py --out $R/cycle.jsonl \
      --hidden 512,1024,2048 --local-batch 800,1600,3200 --memory pageable,pinned
  done
  echo "== trainer round $round ($(date -u +%T))"
  for c in "${CFGS[@]}"; do
    read p H B mem <<< "$c"
    timeout 90 $MPIRUN -n $p python3 -m perfmlp.run $J --hidden-size $H --batch-size $B --batch-transfer $mem \
      --n-train $((B * 26)) --trace-dir $R/traces --run-id h$H-b$B-p$p-$mem-r$round 2>&1 | grep -e "^done" -e rror
  done
done
python3 benchmarks/staged_cycle.py --phases $R/traces | tee $R/phases.txt
python3 -m perfmlp.trace.pack $R/traces > /dev/null 2>&1
tar czf $OUT/cycle.tgz -C $OUT cycle && ls -la $OUT/cycle.tgz
