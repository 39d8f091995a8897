#!/usr/bin/env bash
# Is the eager multi-GPU step's run-to-run spread the hosts' process
# placement? The eager step is host-bound at p = 4 (b = 800), and its host
# phase times differ between ranks and runs by up to 1.8x
# (traces/h200-x4/validate2). This runs the same job, H=512, B=3200,
# resident, NCCL, eager, untraced, on all the GPUs under three Open MPI
# placements, interleaved, REPS times each: Open MPI's default, no binding,
# and each rank bound to its own 8 cores (room for NCCL's proxy thread).
# From the project root on the GPU machine:
#
#   PERFMLP_GIT_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/host_binding.sh
#
# $OUT/binding/runs.txt: one line per run (placement, repeat, the trainer's
# done line: synchronised wall time per batch, median over epochs), and
# bindings.txt (Open MPI's --report-bindings for each placement).
set -u
source benchmarks/gpu_env.sh
R=$OUT/binding; mkdir -p $R
NGPU=$(nvidia-smi -L | wc -l)
{ date -u; nvidia-smi -L; nproc; echo "commit ${PERFMLP_GIT_COMMIT:-unknown}"; } > $R/machine.txt 2>&1
J="--config configs/reference.yaml --data synthetic --backend cupy --batch-transfer resident --comm nccl \
   --exec eager --no-trace --n-train 96000 --epochs 4"
PLACEMENTS=("default|" "none|--bind-to none" "core8|--bind-to core --map-by slot:PE=8")
for p in "${PLACEMENTS[@]}"; do
  name=${p%%|*}; flags=${p#*|}
  echo "== $name: $flags" >> $R/bindings.txt
  timeout 60 $MPIRUN -n $NGPU $flags --report-bindings python3 -c "pass" >> $R/bindings.txt 2>&1
done
for rep in $(seq 1 ${REPS:-3}); do
  for p in "${PLACEMENTS[@]}"; do
    name=${p%%|*}; flags=${p#*|}
    line=$(timeout 90 $MPIRUN -n $NGPU $flags python3 -m perfmlp.run $J 2>&1 | grep -e "^done" -e rror | tail -1)
    echo "$name $rep $line" | tee -a $R/runs.txt
  done
done
