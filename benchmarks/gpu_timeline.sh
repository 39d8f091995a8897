#!/usr/bin/env bash
# The GPU timeline (issue 12) on the GPU machine, from the project root:
#
#   PERFMLP_GIT_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_timeline.sh
#   PARTS="tests overhead" bash benchmarks/gpu_timeline.sh   # some parts only (one device call each)
#
# Writes $OUT/timeline/ (unpack its timeline.tgz at the project root's
# benchmarks/results/<set>/timeline and traces/<set>/timeline):
#   tests.log                   tests/test_timeline.py (its GPU tests: CUPTI records = counters)
#   overhead-p<P>-<exec>.json   untraced and every --trace-level interleaved in one process per rank
#                               (benchmarks/timeline_overhead.py: its docstring states what is
#                               dropped), H=512, B=3200 resident + NCCL, p = 1 and 2, eager and graph
#   overhead.md                 the table of them: the evidence for trace.format.DEFAULT_TRACE_LEVEL
#   traces/cupti-<ID>, nsys-<ID>  for every batch transfer (pageable, pinned, resident) x comm
#                               (mpi-staged, nccl) x p (1, 2), ID = p<P>-<transfer>-<comm>: a run
#                               traced in-process at --trace-level kernels and the same run under
#                               nsys --cuda-graph-trace=node, its SQLite export beside its trace
#                               (small runs: 19200 samples, B=3200, 2 epochs, default --exec)
#   check-<ID>.json             CUPTI against nsys per pair (benchmarks/timeline_check.py): kernel
#                               busy per batch and bytes per batch of every rank
#   check-summary.md            bytes exact x/y and busy difference per pair and rank
#   report/                     python -m perfmlp.report over traces/
#   gpu-tests.log               tests/test_gpu.py (part `tests`)
# Parts, 2 x H200: tests ~0.5 min, overhead ~3-4 min, pairs ~5-6 min, report ~1 min; one device
# call holds at most 10 minutes, so run `tests overhead` and `pairs report` as two calls.
set -u
source benchmarks/gpu_env.sh
# cupti-python and its libraries (../shared/device/README.md), carried in .gpu-kit/cupti
python3 -m pip install -q --no-index --no-deps --target "$PWD/.pyext" .gpu-kit/cupti/*.whl 2>&1 | tail -2
PARTS=${PARTS:-"tests overhead pairs report"}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
R=$OUT/timeline; T=$R/traces; mkdir -p $T
NGPU=$(nvidia-smi -L | wc -l)
export PERFMLP_GIT_COMMIT=${PERFMLP_GIT_COMMIT:-unknown}
{ date -u; nvidia-smi -L; echo "commit $PERFMLP_GIT_COMMIT"; $NSYS --version;
  python3 -c "from cupti import cupti; print('cupti-python ok')"; } > $R/machine.txt 2>&1; cat $R/machine.txt
PS=""; for p in 1 2; do [ $p -le $NGPU ] && PS="$PS $p"; done

if has tests; then
  echo "== tests ($(date -u +%H:%M:%S))"
  timeout 240 python3 -m pytest -q tests/test_timeline.py 2>&1 | tee $R/tests.log | tail -3
  timeout 300 python3 -m pytest -q tests/test_gpu.py 2>&1 | tee $R/gpu-tests.log | tail -3
fi

if has overhead; then
  echo "== overhead ($(date -u +%H:%M:%S))"
  for p in $PS; do
    for ex in eager graph; do
      timeout 110 $MPIRUN -n $p python3 benchmarks/timeline_overhead.py --exec $ex \
        --out $R/overhead-p$p-$ex.json 2>&1 | grep -v "^$" | tail -5
    done
  done
  python3 benchmarks/timeline_overhead.py --summary $R/overhead-p*-*.json --out $R/overhead.md && cat $R/overhead.md
fi

if has pairs; then
  echo "== CUPTI against nsys ($(date -u +%H:%M:%S))"
  COMMON="--config configs/reference.yaml --backend cupy --data synthetic --n-train 19200 --batch-size 3200 \
--epochs 2 --n-heldout 0 --quiet"
  for p in $PS; do
    for TR in pageable pinned resident; do
      for CM in mpi-staged nccl; do
        ID=p$p-$TR-$CM
        timeout 60 $MPIRUN -n $p python3 -m perfmlp.run $COMMON --batch-transfer $TR --comm $CM \
          --trace-level kernels --trace-dir $T --run-id cupti-$ID 2>&1 | tail -1
        timeout 120 $NSYS profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none \
          --export sqlite --force-overwrite true -o $R/nsys-$ID $MPIRUN -n $p python3 -m perfmlp.run $COMMON \
          --batch-transfer $TR --comm $CM --trace-dir $T --run-id nsys-$ID > $R/nsys-$ID.log 2>&1 \
          || tail -3 $R/nsys-$ID.log
        mv $R/nsys-$ID.sqlite $T/nsys-$ID/ 2>/dev/null; rm -f $R/nsys-$ID.nsys-rep
        python3 benchmarks/timeline_check.py $T/cupti-$ID $T/nsys-$ID --out $R/check-$ID.json 2>&1 | tail -4
      done
    done
  done
  python3 -c "import json; m = json.load(open('$T/nsys-$ID/manifest.json')); print('under nsys:', m.get('trace_level'), '-', m.get('trace_level_note'))"
  python3 benchmarks/timeline_check.py --summary $R/check-p*.json --out $R/check-summary.md && cat $R/check-summary.md
fi

if has report; then
  echo "== report ($(date -u +%H:%M:%S))"
  P=$(( NGPU < 2 ? NGPU : 2 ))
  [ -d $T/cupti-p$P-resident-nccl ] && python3 -m perfmlp.trace.chrome $T/cupti-p$P-resident-nccl \
    -o $R/cupti-p$P-resident-nccl.chrome.json | tail -1
  timeout 240 python3 -m perfmlp.report $T --out $R/report --machine benchmarks/results/h200-x2/h200-calibrated.yaml \
    2>&1 | tail -2
  grep -A3 "Cross-check over" $R/report/report.md | head -12
fi
(cd $OUT && tar czf timeline.tgz timeline)
echo "done ($(date -u +%H:%M:%S))"
