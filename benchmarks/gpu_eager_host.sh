#!/usr/bin/env bash
# Issue 13: why do eager steps at B = 800 spend 2-3x the calibrated host
# time per launch in the trainer (h100/validate6: forward phase 185-191 us
# for 4 launches against 16 us a launch calibrated)? The eager step's host
# time per operation (benchmarks/launch_sizes.py) with the GPU idle, with
# and without a 2.5 MB pageable copy before each step, then the trainer
# (H=1024 B=800, NCCL, eager, counters: host-clock phases) with resident,
# pinned and pageable batches, all twice, interleaved. One GPU:
#
#   PERFMLP_GIT_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_eager_host.sh
set -u
source benchmarks/gpu_env.sh
R=$OUT/eager_host; mkdir -p $R/traces
export PERFMLP_GIT_COMMIT=${PERFMLP_GIT_COMMIT:-unknown}
{ date -u; nvidia-smi -L; echo "commit $PERFMLP_GIT_COMMIT"; } > $R/machine.txt 2>&1
J="--config configs/reference.yaml --data synthetic --backend cupy --epochs 4 --exec eager --comm nccl --hidden-size 1024 --batch-size 800 --n-train 40000"
for round in 1 2; do
  for pol in 0 2508800; do
    python3 benchmarks/launch_sizes.py --sizes 16x16,1024x800,512x6400 --pollute $pol --out $R/launch_sizes.jsonl
  done
  for mem in resident pinned pageable; do
    python3 -m perfmlp.run $J --batch-transfer $mem --trace-dir $R/traces --run-id h1024-b800-$mem-r$round 2>&1 | grep -e "^done" -e rror
  done
done
python3 benchmarks/staged_cycle.py --phases $R/traces | tee $R/phases.txt
python3 -m perfmlp.trace.pack $R/traces > /dev/null 2>&1
tar czf $OUT/eager_host.tgz -C $OUT eager_host && ls -la $OUT/eager_host.tgz
