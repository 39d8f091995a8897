#!/usr/bin/env bash
# What each trace level costs, and the in-process GPU timeline (CUPTI)
# against Nsight Systems, from the project root on a GPU machine with
# cupti-python (pip install cupti-python, or carried: benchmarks/gpu_env.sh):
#
#   bash benchmarks/gpu_timeline.sh SET                          # every part
#   PARTS="tests overhead" bash benchmarks/gpu_timeline.sh SET   # some parts only
#
# (gpu_suite.sh's part `timeline`.) Writes into the set $OUT/SET/ (gpu_env.sh):
# benchmarks/timeline/
#   tests.log, gpu-tests.log    tests/test_timeline.py (its GPU tests: CUPTI records = counters),
#                               tests/test_gpu.py (part `tests`)
#   overhead-p<P>-<exec>.json   untraced and every --trace-level interleaved in one process per rank
#                               (benchmarks/timeline_overhead.py: its docstring states what is
#                               dropped), H=512, B=3200 resident + NCCL, p = 1 and 2, eager and graph
#   overhead.md                 the table of them: the evidence for trace.format.DEFAULT_TRACE_LEVEL
#   check-<ID>.json             CUPTI against nsys per pair (benchmarks/timeline_check.py): kernel
#                               busy per batch and bytes per batch of every rank
#   check-summary.md            bytes exact x/y and busy difference per pair and rank
#   report.md                   python -m perfmlp.report over the pairs' traces (part `report`)
# traces/timeline/cupti-<ID>, nsys-<ID>: for every batch transfer (pageable, pinned, resident) x comm
#   (mpi-staged, nccl) x p (1, 2), ID = p<P>-<transfer>-<comm>: a run traced in-process at
#   --trace-level kernels and the same run under nsys --cuda-graph-trace=node, its SQLite export
#   beside its trace (small runs: 19200 samples, B=3200, 2 epochs, default --exec).
# Parts, 2 x H200: tests ~0.5 min, overhead ~3-4 min, pairs ~5-6 min, report ~1 min.
set -u
SET=${1:?usage: gpu_timeline.sh SET}
source benchmarks/gpu_env.sh
PARTS=${PARTS:-"tests overhead pairs report"}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
set_dir "$SET" "timeline: $PARTS"
R=$B/timeline; T=$T/timeline; mkdir -p $R $T   # from here on R and T are this script's folders in the set
{ $NSYS --version; python3 -c "from cupti import cupti; print('cupti-python ok')"; } 2>&1 | tee $R/tools.txt
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
  REP=$(mktemp -d)   # only report.md is kept (the set's own report covers the rest)
  timeout 240 python3 -m perfmlp.report $T --out $REP 2>&1 | tail -2
  cp $REP/report.md $R/report.md 2>/dev/null; rm -rf $REP
  grep -A3 "Cross-check over" $R/report.md | head -12
fi
pack_set
echo "done ($(date -u +%H:%M:%S))"
