# Sourced by the GPU benchmark scripts, from the project root: the
# environment they run in, and the result set they write (set_dir).
#
# Optional tools without a package index: on a GPU machine that cannot reach
# one, put the wheels of nvtx and cupti-python (and cupti-python's
# dependencies) in a git-ignored folder .gpu-kit/ at the project root
# (nvtx-*.whl, cupti/*.whl), and the libdw1 and libelf1 .deb packages if
# the system lacks the libraries nsys needs; they are installed into .pyext/
# and .dw/ (both git-ignored) and put on the paths. With an index, install
# them with pip instead (pip install nvtx cupti-python) and leave .gpu-kit/ out.
#
# Settings (environment): OUT, where sets go (default: reports, so that a
# set is written where it is committed); GPU_KIT, the carried folder
# (default .gpu-kit); NSYS, the nsys binary (default: nsys on the PATH, else
# an Nsight installation under /opt/nvidia); MPIRUN, the MPI launcher with
# its flags (default: Open MPI's mpirun, as root, exporting the paths below
# to every rank); PERFMLP_GIT_COMMIT, the commit the manifests name
# (default: git rev-parse --short HEAD where git works).
KIT=${GPU_KIT:-.gpu-kit}
if ls $KIT/nvtx-*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target "$PWD/.pyext" $KIT/nvtx-*.whl
fi
if ls $KIT/cupti/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target "$PWD/.pyext" $KIT/cupti/*.whl 2>&1 | tail -2
fi
for f in $KIT/libdw1_*.deb $KIT/libelf1_*.deb; do [ -f "$f" ] && dpkg -x "$f" "$PWD/.dw"; done
# the tracer's batch hooks in C (perfmlp/trace/_fastpath.c), built in place as pip install -e . does;
# where it cannot be built, the Python hooks run and the manifests say so (ran.batch_hooks)
python3 setup.py -q build_ext --inplace > /dev/null 2>&1 || echo "the C batch hooks were not built: the Python ones run"
export PYTHONPATH="$PWD:$PWD/.pyext${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$PWD/.dw/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NSYS=${NSYS:-$(command -v nsys || ls /opt/nvidia/nsight-*/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)}
export NSYS
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# NVLink multicast (NVLS) off: not every host can map multicast objects, and the NCCL
# protocols the benchmarks compare do not need it
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MPIRUN=${MPIRUN:-"mpirun --allow-run-as-root --oversubscribe --noprefix -x PYTHONPATH -x LD_LIBRARY_PATH -x PYTHONUNBUFFERED -x NCCL_NVLS_ENABLE"}
OUT=${OUT:-reports}
export PERFMLP_GIT_COMMIT=${PERFMLP_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)

# set_paths SET: set SET, R (the set's folder), T (its traces) and B (its benchmark
# tables and logs), and make them
set_paths() {
  SET=$1; R=$OUT/$1; T=$R/traces; B=$R/benchmarks
  mkdir -p "$T" "$B"
}

# set_dir SET PART: set_paths, then write machine.txt, note PART in B/parts.txt and
# write SET.md
set_dir() {
  set_paths "$1"
  { date -u; nvidia-smi -L; nvidia-smi topo -m; lscpu | grep -e "^Model name" -e "^CPU(s)";
    echo "commit $PERFMLP_GIT_COMMIT"; command -v python3; } > "$R/machine.txt" 2>&1
  echo "| $2 | $PERFMLP_GIT_COMMIT | $(date -u '+%Y-%m-%d %H:%M') |" >> "$B/parts.txt"
  set_md
}

# set_md: SET.md from machine.txt and parts.txt: the machine, the parts run (commit,
# date) and the one command that makes the set's report again
set_md() {
  local gpus cpu machine=""
  gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c \
    | awk '{n = $1; $1 = ""; printf "%s%d x%s", (NR > 1 ? ", " : ""), n, $0}')
  cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
  [ -f "$B/calibrated.yaml" ] && machine=" --machine reports/$SET/benchmarks/calibrated.yaml"
  { echo "# $SET"; echo
    echo "Machine: ${gpus:-no GPU}${cpu:+; host CPU $cpu}."
    echo "Made by \`bash benchmarks/gpu_suite.sh $SET PART...\` (benchmarks/README.md), one line per part below."
    echo "The report, made again from the traces here:"; echo
    echo "    python -m perfmlp.report reports/$SET/traces --out reports/$SET$machine"; echo
    echo "| part | commit | date (UTC) |"; echo "| --- | --- | --- |"; cat "$B/parts.txt"; } > "$R/SET.md"
}

# pack_set: gzip the set's trace files in place (python -m perfmlp.trace.pack)
pack_set() {
  [ -d "$T" ] && python3 -m perfmlp.trace.pack "$T" > /dev/null 2>&1
  return 0
}
