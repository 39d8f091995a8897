#!/usr/bin/env bash
# Part B (2 or 4 x H200): GPU tests, Nsight Systems run (2 ranks) with
# its SQLite export beside the trace, a cProfile run, the tracing-overhead
# benchmark, the step benchmark (one GPU) and the calibration (4 GPUs).
source benchmarks/gpu_env.sh
R=$OUT/b; mkdir -p $R/traces
echo "== GPU tests"; timeout 120 python3 -m pytest -q tests/test_gpu.py 2>&1 | tail -3
echo "== nsys"
RUN=nsys-p2-h512-b3200-pageable-staged
timeout 120 $NSYS profile -t cuda,nvtx,mpi --mpi-impl=openmpi --export sqlite --force-overwrite true \
  -o $R/nsys-p2 $MPIRUN -n 2 python3 -m perfmlp.run --backend cupy --data synthetic --n-train 12800 \
  --batch-size 3200 --epochs 2 --trace-dir $R/traces --run-id $RUN 2>&1 | tail -6
mv $R/nsys-p2.sqlite $R/traces/$RUN/ 2>/dev/null; rm -f $R/nsys-p2.nsys-rep; ls -la $R/traces/$RUN
echo "== cProfile"
timeout 60 $MPIRUN -n 2 python3 -m perfmlp.run --backend cupy --data synthetic --n-train 12800 --batch-size 3200 \
  --batch-transfer resident --comm nccl --cprofile --trace-dir $R/traces --run-id cprofile-p2-resident-nccl 2>&1 | tail -2
echo "== tracing overhead"; timeout 120 python3 benchmarks/trace_overhead.py --out $R/trace_overhead.json 2>&1 | tail -4
echo "== step benchmark"; timeout 200 python3 benchmarks/gpu_step.py --out $R --reps 50 2>&1 | tail -40
# one process: the single-GPU figures anew; MPI and NCCL from the 4-GPU calibration (--base)
echo "== calibrate"; timeout 150 python3 -m perfmlp.calibrate --base models/h200-calibrated.yaml \
  --out $R/h200-calibrated.yaml 2>&1 | tee $R/calibrate.log | grep -v "allreduce p=" | tail -14
tar czf $OUT/b.tgz -C $OUT b && ls -la $OUT/b.tgz
