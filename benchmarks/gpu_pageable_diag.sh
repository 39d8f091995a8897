#!/usr/bin/env bash
# Issue 13: where does a pageable copy too large to be staged whole (the
# runtime stages up to about 1.6 MB without waiting for the stream) overlap
# the previous batch's GPU work? validate8/diag-phases (H=512 B=3200 p=2
# pageable/nccl graph: its 5 MB piece hid nothing behind a 0.18 ms replay)
# and validate10 (H=2048, the same piece, about 0.24 ms hidden behind a
# 0.42 ms replay) disagree with a model of min(replay, staged ahead).
# On a machine with 2 GPUs, from the project root (about 4 minutes):
#
#   PERFMLP_GIT_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_pageable_diag.sh
#
# - pageable_overlap-{1,2}rank(s).{txt,json}: benchmarks/pageable_overlap.py
#   with one rank, then two at once (one GPU each);
# - traces/: the trainer, 5 MB pieces: B=3200 p=2 at H = 512, 1024, 2048,
#   and B=1600 p=1 at H = 512, 2048, pageable/nccl graph, 40 batches each:
#   each at the counters level (time per batch), then again under Nsight
#   Systems (nsys-<id>.sqlite in its trace folder: every kernel node, copy
#   and CUDA API call: when the next batch's copy is called, when its DMA
#   runs; nsys rather than CUPTI in-process, so that the run needs no
#   cupti wheels carried).
# Everything under $OUT/pageable_diag (packed as $OUT/pageable_diag.tgz).
set -u
source benchmarks/gpu_env.sh
R=$OUT/pageable_diag; T=$R/traces; mkdir -p $T
[ -n "${PERFMLP_GIT_COMMIT:-}" ] || echo "warning: PERFMLP_GIT_COMMIT not set: the manifests will not name the code"
export PERFMLP_GIT_COMMIT=${PERFMLP_GIT_COMMIT:-unknown}
{ date -u; nvidia-smi -L; echo "commit $PERFMLP_GIT_COMMIT"; } > $R/machine.txt 2>&1
echo "== pageable_overlap, one rank"
timeout 90 python3 benchmarks/pageable_overlap.py $R/pageable_overlap-1rank.json | tee $R/pageable_overlap-1rank.txt
echo "== pageable_overlap, two ranks at once"
timeout 120 $MPIRUN -n 2 python3 benchmarks/pageable_overlap.py $R/pageable_overlap-2ranks.json \
  | tee $R/pageable_overlap-2ranks.txt
for run in "2 3200 512" "2 3200 1024" "2 3200 2048" "1 1600 512" "1 1600 2048"; do
  read P B H <<< "$run"
  ID=diag-h$H-b$B-p$P-pageable-nccl-graph
  RUN="python3 -m perfmlp.run --hidden-sizes $H --batch-size $B --batch-transfer pageable --comm nccl --exec graph
    --data synthetic --backend cupy --epochs 1 --n-train $((B * 43)) --trace-dir $T"
  timeout 90 $MPIRUN -n $P $RUN --trace-level counters --run-id $ID 2>&1 | grep -i -e "^done:" -e "error" | tail -2
  timeout 150 $NSYS profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none --export sqlite \
    --force-overwrite true -o $R/nsys-$ID $MPIRUN -n $P $RUN --run-id nsys-$ID > $R/nsys-$ID.log 2>&1 \
    || tail -3 $R/nsys-$ID.log
  grep -i -e "^done:" $R/nsys-$ID.log
  mv $R/nsys-$ID.sqlite $T/nsys-$ID/ 2>/dev/null; rm -f $R/nsys-$ID.nsys-rep
done
tar czf $OUT/pageable_diag.tgz -C $OUT pageable_diag && ls -la $OUT/pageable_diag.tgz
