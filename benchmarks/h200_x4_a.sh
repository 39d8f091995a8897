#!/usr/bin/env bash
# Part A of the results on a 4 x H200 machine: calibration, correctness,
# the Question 2.2 and modes sweeps (traces). Run from the project root:
#   OUT=/some/dir bash benchmarks/h200_x4_a.sh   (the device tool sets OUT)
source benchmarks/gpu_env.sh
R=$OUT/a; mkdir -p $R
{ nvidia-smi -L; nvidia-smi topo -m; } > $R/machine.txt 2>&1
echo "== calibrate (4 GPUs)"; timeout 150 $MPIRUN -n 4 python3 -m perfmlp.calibrate --base h200 \
  --out $R/h200-calibrated.yaml 2>&1 | tee $R/calibrate.log | tail -12
for p in 1 2 4; do
  echo "== correctness p=$p"
  timeout 100 $MPIRUN -n $p python3 benchmarks/correctness.py --out $R/correctness.jsonl 2>&1 | tail -16
done
for s in modes q2_2; do
  echo "== sweep $s"
  PERFMLP_MPIRUN="$MPIRUN" timeout 330 python3 -m perfmlp.sweep sweeps/$s.yaml --trace-dir $R/traces \
    --no-report --timeout 60 2>&1 | tee $R/sweep-$s.log | grep -v ": ok$"
done
rm -rf $R/traces/.sweep-configs
tar czf $OUT/a.tgz -C $OUT a && ls -la $OUT/a.tgz
