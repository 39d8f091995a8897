#!/usr/bin/env bash
# A committed result set, made on the GPU machine this runs on, from the
# project root:
#
#   bash benchmarks/gpu_suite.sh SET PART...
#
# SET names the set (h100, h200-x2, ...: one per machine kind); it is written
# to $OUT/SET/ (OUT defaults to reports), laid out as reports/SET/: traces/
# (the runs, rank files gzipped), benchmarks/ (tables and logs), machine.txt,
# SET.md (the machine, each part run with its commit and date, the command
# that makes the report again) and, after the part `report`, the report.
# PARTs, in the order given (benchmarks/README.md says more of each):
#   tests        the GPU tests (benchmarks/gpu-tests.log)
#   correctness  GPU against one NumPy process, p = 1 .. GPUs (traces/correctness.jsonl)
#   nsys         the README's Nsight Systems command as typed, and with its SQLite export beside
#                the trace (the counters' cross-check)
#   profile      a cProfile run (rank-<r>.prof beside the trace)
#   overhead     tracing at each level against off, eager and graph, B 3200 and 800 (benchmarks/trace_overhead.{json,md})
#   step         one training step against PyTorch and the GEMMs alone (benchmarks/gpu_step.md)
#   graph        eager vs CUDA-graph steps vs PyTorch eager/DDP/graph/torch.compile, p = 1 and GPUs,
#                each NCCL protocol (benchmarks/graph_step.md)
#   scaling      perfmlp's graph step (data parallelism, the sliced first layer, model parallelism) against
#                PyTorch DDP eager and DDP's graph step, fp32 and bf16, strong and weak, p = 1 and GPUs, with
#                the targets' ratios (benchmarks/scaling.md)
#   kernels      the graph step kernel by kernel (--trace-level kernels; benchmarks/kernel_breakdown.md)
#   calibrate    the machine file (benchmarks/calibrated.yaml: python -m perfmlp.calibrate, all GPUs)
#   sweeps       the modes and Question 2.2 sweeps up to GPUs processes (traces)
#   timeline     what each trace level costs, CUPTI against nsys (benchmarks/gpu_timeline.sh)
#   validate     the model tested blind (benchmarks/gpu_validate.sh; one GPU: gpu_validate_1gpu.sh)
#   partition    the partitioning strategies on 2 or 4 GPUs (benchmarks/gpu_partition.sh)
#   report       python -m perfmlp.report over traces/, into the set
# A part's time: most take 1-5 minutes; give each a call of its own where calls are limited.
set -u
SET=${1:?usage: gpu_suite.sh SET PART...}; shift
source benchmarks/gpu_env.sh
set_paths "$SET"
CFG="--config configs/reference.yaml --backend cupy --data synthetic"
for part in "$@"; do
  echo "== $part ($(date -u +%H:%M:%S))"
  case $part in timeline|validate|partition) ;; *) set_dir "$SET" "$part" ;; esac   # those scripts do it
  case $part in
  tests)
    timeout 300 python3 -m pytest -q tests/test_gpu.py tests/test_timing.py tests/test_calibrate.py \
      tests/test_architecture.py 2>&1 | tee $B/gpu-tests.log | tail -3 ;;
  correctness)
    for p in $(seq 1 $NGPU); do
      timeout 150 $MPIRUN -n $p python3 benchmarks/correctness.py --out $T/correctness.jsonl 2>&1 | tail -3
    done ;;
  nsys)
    # as the README types it, in a folder of its own (its traces/ and report1.nsys-rep go there)
    mkdir -p $R/as-typed && (cd $R/as-typed &&
      PATH="$(dirname $NSYS):$PATH" timeout 180 nsys profile mpirun -n $NGPU python -m perfmlp.run) \
      > $B/nsys-as-typed.log 2>&1; tail -6 $B/nsys-as-typed.log
    mv $R/as-typed/traces/* $T/ 2>/dev/null; rm -rf $R/as-typed
    RUN=nsys-p$NGPU-h512-b3200-pageable-staged
    timeout 180 $NSYS profile -t cuda,nvtx,mpi --mpi-impl=openmpi --export sqlite --force-overwrite true \
      -o $R/nsys $MPIRUN -n $NGPU python3 -m perfmlp.run $CFG --n-train 12800 --epochs 2 --trace-dir $T \
      --run-id $RUN > $B/nsys.log 2>&1; tail -3 $B/nsys.log
    mv $R/nsys.sqlite $T/$RUN/ 2>/dev/null; rm -f $R/nsys.nsys-rep ;;
  profile)
    timeout 120 $MPIRUN -n $NGPU python3 -m perfmlp.run $CFG --n-train 12800 --batch-transfer resident \
      --comm nccl --cprofile --trace-dir $T --run-id cprofile-p$NGPU-resident-nccl 2>&1 | tail -2 ;;
  overhead)
    timeout 500 python3 benchmarks/trace_overhead.py --out $B 2>&1 | tail -12 ;;
  step)
    timeout 300 python3 benchmarks/gpu_step.py --out $B --reps 50 2>&1 | tail -31 ;;
  graph)
    # p = 1 then p = GPUs; the two implementations alternate, twice (torch.compile in the first round
    # only: its compilation is slow); then perfmlp at p = GPUs under each NCCL protocol forced
    # (GRAPH_CONFIGS_1 / GRAPH_CONFIGS_P: graph_step.py --configs for p = 1 / p = GPUs instead of its
    # defaults; GRAPH_PROTOS: the NCCL protocols to force, "" for none)
    for p in $(echo 1 $NGPU | tr ' ' '\n' | sort -u); do for round in 1 2; do for impl in perfmlp torch; do
      extra=""; [ $round = 2 ] && [ $impl = torch ] && extra=--no-compile
      cf=${GRAPH_CONFIGS_P:-}; [ $p = 1 ] && cf=${GRAPH_CONFIGS_1:-}
      [ -n "$cf" ] && extra="$extra --configs $cf"
      timeout 300 $MPIRUN -n $p python3 benchmarks/graph_step.py --impl $impl --out $B $extra 2>&1 \
        | grep -v "^\[" | grep -e "median" -e "rror" | tail -40
    done; done; done
    if [ $NGPU -gt 1 ]; then for proto in ${GRAPH_PROTOS-LL LL128 Simple}; do
      NCCL_PROTO=$proto timeout 120 $MPIRUN -n $NGPU -x NCCL_PROTO python3 benchmarks/graph_step.py --impl perfmlp \
        --out $B --configs 512x3200,1024-1024-1024x3200 2>&1 | grep -e "graph" -e "rror" | tail -12
    done; fi
    python3 benchmarks/graph_step.py --table $B/graph_step.jsonl > /dev/null; tail -60 $B/graph_step.md ;;
  scaling)
    # every implementation in turn under mpirun, a second pass where time allows; SCALING_FLAGS: more of
    # scaling.py's flags (--quick, --steps N, ...)
    timeout 420 python3 benchmarks/scaling.py --mpirun "$MPIRUN" --procs 1,$NGPU --out $B ${SCALING_FLAGS:-} 2>&1 \
      | grep -v "^\[" | grep -e "median" -e "rror" -e "left out" -e "timed out" -e "exit " | tail -60
    tail -30 $B/scaling.md ;;
  kernels)
    # every kernel of the graph step on the GPU (--trace-level kernels): H=512 B=3200 on 1 and GPUs,
    # and 1024x3 on GPUs without overlap, with 1 MiB buckets and with a bucket per layer
    K="$CFG --batch-transfer resident --comm nccl --exec graph --trace-level kernels --trace-dir $T --epochs 2"
    for p in $(echo 1 $NGPU | tr ' ' '\n' | sort -u); do
      timeout 90 $MPIRUN -n $p python3 -m perfmlp.run $K --n-train 64000 --run-id kernels-p$p-h512-b3200 2>&1 | tail -1
    done
    for ov in none 1048576 16777216; do
      flags=""; [ $ov != none ] && flags="--overlap --bucket-bytes $ov"
      timeout 120 $MPIRUN -n $NGPU python3 -m perfmlp.run $K --hidden-sizes 1024,1024,1024 --n-train 64000 \
        $flags --run-id kernels-p$NGPU-h1024x3-b3200-overlap-$ov 2>&1 | tail -1
    done
    python3 benchmarks/kernel_breakdown.py $T/kernels-* --out $B/kernel_breakdown.md | grep "^rank" ;;
  calibrate)
    # the datasheet file of the GPU present for what is not measured; every precision the trainer runs
    base=h200; nvidia-smi -L | grep -q H100 && base=h100-sxm
    timeout 300 $MPIRUN -n $NGPU python3 -m perfmlp.calibrate --base $base --out $B/calibrated.yaml \
      --precisions ${CAL_PRECISIONS:-float32,float64,tf32,bf16,fp16} 2>&1 \
      | tee $B/calibrate.log | grep -v "allreduce p=" | tail -16 ;;
  sweeps)
    for s in modes q2_2; do
      PERFMLP_MPIRUN="$MPIRUN" timeout 400 python3 -m perfmlp.sweep sweeps/$s.yaml --trace-dir $T --no-report \
        --timeout 60 --max-procs $NGPU 2>&1 | tee $B/sweep-$s.log | grep -v -e ": ok$" -e "skipped$"
    done
    rm -rf $T/.sweep ;;
  timeline)
    bash benchmarks/gpu_timeline.sh "$SET" ;;
  validate)
    if [ $NGPU -gt 1 ]; then bash benchmarks/gpu_validate.sh "$SET"; else bash benchmarks/gpu_validate_1gpu.sh "$SET"; fi ;;
  partition)
    bash benchmarks/gpu_partition.sh "$SET" ;;
  report)
    M=""; [ -f $B/calibrated.yaml ] && M="--machine $B/calibrated.yaml"
    timeout 300 python3 -m perfmlp.report $T --out $R $M 2>&1 | tail -2 ;;
  *) echo "unknown part $part" ;;
  esac
done
pack_set
set_md
