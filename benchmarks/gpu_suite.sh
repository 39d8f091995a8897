#!/usr/bin/env bash
# Every committed GPU result, regenerated on the machine this runs on (the
# device tool's GPU machine; see ../shared/device/README.md), from the project
# root:
#
#   PERFMLP_GIT_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_suite.sh SET PART...
#
# SET names the result set (h200 for one GPU, h200-x2, h200-x4): results go to
# $OUT/SET/ and, packed, $OUT/SET.tgz; unpack it at the project root's
# benchmarks/results/SET (logs, tables) and traces/SET (traces). PARTs, in
# the order given:
#   tests        the GPU tests (tests/test_gpu.py) and the fault tests
#   correctness  GPU against one NumPy process, p = 1 .. GPUs (benchmarks/correctness.py)
#   nsys         the README's Nsight Systems commands: as typed, and with its
#                SQLite export beside the trace (the counters' cross-check)
#   profile      a cProfile run (rank-<r>.prof beside the trace)
#   overhead     tracing on against off, interleaved (benchmarks/trace_overhead.py)
#   step         one training step against PyTorch and the GEMMs alone (benchmarks/gpu_step.py)
#   graph        eager vs CUDA-graph steps, overlapped or not, the GEMMs alone, vs PyTorch eager/DDP/
#                graph/torch.compile, p = 1 and GPUs, strong and weak scaling, each NCCL protocol
#                (benchmarks/graph_step.py; the two implementations alternate, twice)
#   kernels      the graph step kernel by kernel (--trace-level kernels; benchmarks/kernel_breakdown.py)
#   calibrate    the machine file (python -m perfmlp.calibrate under mpirun -n GPUs)
#   sweeps       the modes and Question 2.2 sweeps up to GPUs processes (traces)
set -u
SET=${1:?usage: gpu_suite.sh SET PART...}; shift
source benchmarks/gpu_env.sh
R=$OUT/$SET; T=$R/traces; mkdir -p $T
NGPU=$(nvidia-smi -L | wc -l)
{ date -u; nvidia-smi -L; nvidia-smi topo -m; echo "commit ${PERFMLP_GIT_COMMIT:-?}"; command -v python python3; } \
  > $R/machine.txt 2>&1
export PERFMLP_GIT_COMMIT=${PERFMLP_GIT_COMMIT:-unknown}
for part in "$@"; do
  echo "== $part ($(date -u +%H:%M:%S))"
  case $part in
  tests)
    timeout 300 python3 -m pytest -q tests/test_gpu.py tests/test_architecture.py 2>&1 | tee $R/gpu-tests.log | tail -3 ;;
  correctness)
    for p in $(seq 1 $NGPU); do
      timeout 150 $MPIRUN -n $p python3 benchmarks/correctness.py --out $T/correctness.jsonl 2>&1 | tail -3
    done ;;
  nsys)
    # as the README types it (nsys and python on PATH; Open MPI's root guard off in gpu_env.sh)
    # (run in a folder of its own, which its traces/ and report1.nsys-rep go to; PYTHONPATH finds perfmlp)
    mkdir -p $R/as-typed && (cd $R/as-typed &&
      PATH="$(dirname $NSYS):$PATH" timeout 180 nsys profile mpirun -n $NGPU python -m perfmlp.run) \
      > $R/nsys-as-typed.log 2>&1; tail -6 $R/nsys-as-typed.log
    mv $R/as-typed/traces/* $T/ 2>/dev/null; rm -rf $R/as-typed
    RUN=nsys-p$NGPU-h512-b3200-pageable-staged
    timeout 180 $NSYS profile -t cuda,nvtx,mpi --mpi-impl=openmpi --export sqlite --force-overwrite true \
      -o $R/nsys $MPIRUN -n $NGPU python3 -m perfmlp.run --config configs/reference.yaml --backend cupy \
      --data synthetic --n-train 12800 --epochs 2 --trace-dir $T --run-id $RUN > $R/nsys.log 2>&1; tail -3 $R/nsys.log
    mv $R/nsys.sqlite $T/$RUN/ 2>/dev/null; rm -f $R/nsys.nsys-rep ;;
  profile)
    timeout 120 $MPIRUN -n $NGPU python3 -m perfmlp.run --config configs/reference.yaml --backend cupy \
      --data synthetic --n-train 12800 --batch-transfer resident --comm nccl --cprofile --trace-dir $T \
      --run-id cprofile-p$NGPU-resident-nccl 2>&1 | tail -2 ;;
  overhead)
    timeout 200 python3 benchmarks/trace_overhead.py --out $R/trace_overhead.json 2>&1 | tail -4 ;;
  step)
    timeout 300 python3 benchmarks/gpu_step.py --out $R --reps 50 2>&1 | tail -31 ;;
  graph)
    # p = 1 then p = GPUs; the two implementations alternate, twice (torch.compile in the first round
    # only: its compilation is slow); then perfmlp at p = GPUs under each NCCL protocol forced
    # (GRAPH_CONFIGS_1 / GRAPH_CONFIGS_P: graph_step.py --configs for p = 1 / p = GPUs instead of its
    # defaults; GRAPH_PROTOS: the NCCL protocols to force, "" for none)
    for p in $(echo 1 $NGPU | tr ' ' '\n' | sort -u); do for round in 1 2; do for impl in perfmlp torch; do
      extra=""; [ $round = 2 ] && [ $impl = torch ] && extra=--no-compile
      cf=${GRAPH_CONFIGS_P:-}; [ $p = 1 ] && cf=${GRAPH_CONFIGS_1:-}
      [ -n "$cf" ] && extra="$extra --configs $cf"
      timeout 300 $MPIRUN -n $p python3 benchmarks/graph_step.py --impl $impl --out $R $extra 2>&1 \
        | grep -v "^\[" | grep -e "median" -e "rror" | tail -40
    done; done; done
    if [ $NGPU -gt 1 ]; then for proto in ${GRAPH_PROTOS-LL LL128 Simple}; do
      NCCL_PROTO=$proto timeout 120 $MPIRUN -n $NGPU -x NCCL_PROTO python3 benchmarks/graph_step.py --impl perfmlp \
        --out $R --configs 512x3200,1024-1024-1024x3200 2>&1 | grep -e "graph" -e "rror" | tail -12
    done; fi
    python3 benchmarks/graph_step.py --table $R/graph_step.jsonl > /dev/null; cat $R/graph_step.md | tail -60 ;;
  kernels)
    # every kernel of the graph step on the GPU (--trace-level kernels): H=512 B=3200 on 1 and GPUs,
    # and 1024x3 on GPUs without overlap, with 1 MiB buckets and with a bucket per layer
    C="--backend cupy --data synthetic --batch-transfer resident --comm nccl --exec graph --trace-level kernels \
       --trace-dir $T --epochs 2"
    for p in $(echo 1 $NGPU | tr ' ' '\n' | sort -u); do
      timeout 90 $MPIRUN -n $p python3 -m perfmlp.run --config configs/reference.yaml --n-train 64000 $C \
        --run-id kernels-p$p-h512-b3200 2>&1 | tail -1
    done
    for ov in none 1048576 16777216; do
      flags=""; [ $ov != none ] && flags="--overlap --bucket-bytes $ov"
      timeout 120 $MPIRUN -n $NGPU python3 -m perfmlp.run --config configs/reference.yaml --hidden-sizes 1024,1024,1024 \
        --n-train 64000 $C $flags --run-id kernels-p$NGPU-h1024x3-b3200-overlap-$ov 2>&1 | tail -1
    done
    python3 benchmarks/kernel_breakdown.py $T/kernels-* --out $R/kernel_breakdown.md | grep "^rank"
    python3 -m perfmlp.report $T --out $R/report-kernels 2>&1 | tail -1
    grep -A12 "exposed" $R/report-kernels/report.md | head -30 ;;
  calibrate)
    timeout 200 $MPIRUN -n $NGPU python3 -m perfmlp.calibrate --base h200 --out $R/h200-calibrated.yaml 2>&1 \
      | tee $R/calibrate.log | grep -v "allreduce p=" | tail -16 ;;
  sweeps)
    for s in modes q2_2; do
      PERFMLP_MPIRUN="$MPIRUN" timeout 400 python3 -m perfmlp.sweep sweeps/$s.yaml --trace-dir $T --no-report \
        --timeout 60 --max-procs $NGPU 2>&1 | tee $R/sweep-$s.log | grep -v -e ": ok$" -e "skipped$"
    done
    rm -rf $T/.sweep-configs ;;
  *) echo "unknown part $part" ;;
  esac
done
tar czf $OUT/$SET.tgz -C $OUT $SET && ls -la $OUT/$SET.tgz
