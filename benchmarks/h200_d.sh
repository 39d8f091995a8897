#!/usr/bin/env bash
# Part D (2 x H200), with the current code: the calibration under 2 ranks,
# the tracing overhead, and the modes and Question 2.2 sweeps up to 2
# processes (traces). Writes $OUT/d.tgz.
source benchmarks/gpu_env.sh
R=$OUT/d; mkdir -p $R/traces
{ nvidia-smi -L; nvidia-smi topo -m; } > $R/machine.txt 2>&1
echo "== calibrate (2 GPUs)"; timeout 150 $MPIRUN -n 2 python3 -m perfmlp.calibrate --base h200 \
  --out $R/h200-calibrated.yaml 2>&1 | tee $R/calibrate.log | grep -v "allreduce p=" | tail -14
echo "== tracing overhead"; timeout 120 python3 benchmarks/trace_overhead.py --out $R/trace_overhead.json 2>&1 | tail -4
for s in modes q2_2; do
  echo "== sweep $s"
  PERFMLP_MPIRUN="$MPIRUN" timeout 240 python3 -m perfmlp.sweep sweeps/$s.yaml --trace-dir $R/traces \
    --no-report --timeout 60 --max-procs 2 2>&1 | tee $R/sweep-$s.log | grep -v -e ": ok$" -e "skipped$"
done
rm -rf $R/traces/.sweep-configs
tar czf $OUT/d.tgz -C $OUT d && ls -la $OUT/d.tgz
