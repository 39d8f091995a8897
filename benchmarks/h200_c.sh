#!/usr/bin/env bash
# Part C (one or two H200s), after the host-overhead work (direct cuBLAS
# calls, cached kernel arguments, leaner tracer): GPU tests, tracing
# overhead, the step benchmark and the single-GPU calibration.
source benchmarks/gpu_env.sh
R=$OUT/c; mkdir -p $R
git rev-parse --short HEAD > $R/commit.txt 2>/dev/null
echo "== GPU tests"; timeout 120 python3 -m pytest -q tests/test_gpu.py 2>&1 | tail -3
echo "== tracing overhead"; timeout 120 python3 benchmarks/trace_overhead.py --out $R/trace_overhead.json 2>&1 | tail -4
echo "== step benchmark"; timeout 220 python3 benchmarks/gpu_step.py --out $R --reps 50 2>&1 | tail -31
echo "== calibrate"; timeout 150 python3 -m perfmlp.calibrate --base benchmarks/results/h200/h200-x4-calibrated.yaml \
  --out $R/h200-calibrated.yaml 2>&1 | tee $R/calibrate.log | tail -14
tar czf $OUT/c.tgz -C $OUT c && ls -la $OUT/c.tgz
