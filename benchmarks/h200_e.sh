#!/usr/bin/env bash
# Part E (2 x H200), the final code: GPU tests, the Nsight Systems run with
# its SQLite export beside the trace, and the calibration under 2 ranks.
source benchmarks/gpu_env.sh
R=$OUT/e; mkdir -p $R/traces
echo "== GPU tests"; timeout 120 python3 -m pytest -q tests/test_gpu.py 2>&1 | tail -2
echo "== nsys"
RUN=nsys-p2-h512-b3200-pageable-staged
timeout 120 $NSYS profile -t cuda,nvtx,mpi --mpi-impl=openmpi --export sqlite --force-overwrite true \
  -o $R/nsys-p2 $MPIRUN -n 2 python3 -m perfmlp.run --backend cupy --data synthetic --n-train 12800 \
  --batch-size 3200 --epochs 2 --trace-dir $R/traces --run-id $RUN > $R/nsys.log 2>&1; tail -3 $R/nsys.log
mv $R/nsys-p2.sqlite $R/traces/$RUN/; rm -f $R/nsys-p2.nsys-rep
echo "== calibrate (2 GPUs)"; timeout 150 $MPIRUN -n 2 python3 -m perfmlp.calibrate --base h200 \
  --out $R/h200-calibrated.yaml 2>&1 | tee $R/calibrate.log | grep -v "allreduce p=" | tail -16
tar czf $OUT/e.tgz -C $OUT e && ls -la $OUT/e.tgz
