#!/usr/bin/env bash
# Part G (4 x H200), the final trainer: calibration under 4 ranks, then the
# modes and Question 2.2 sweeps (traces). Writes $OUT/g.tgz.
source benchmarks/gpu_env.sh
R=$OUT/g; mkdir -p $R/traces
{ nvidia-smi -L; nvidia-smi topo -m; } > $R/machine.txt 2>&1
echo "== calibrate (4 GPUs)"; timeout 150 $MPIRUN -n 4 python3 -m perfmlp.calibrate --base h200 \
  --out $R/h200-calibrated.yaml 2>&1 | tee $R/calibrate.log | grep -v "allreduce p=" | tail -16
for s in modes q2_2; do
  echo "== sweep $s"
  PERFMLP_MPIRUN="$MPIRUN" timeout 200 python3 -m perfmlp.sweep sweeps/$s.yaml --trace-dir $R/traces \
    --no-report --timeout 60 2>&1 | tee $R/sweep-$s.log | grep -v -e ": ok$"
done
rm -rf $R/traces/.sweep-configs
tar czf $OUT/g.tgz -C $OUT g && ls -la $OUT/g.tgz
