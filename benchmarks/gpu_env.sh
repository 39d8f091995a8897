# Source on the GPU machine from the project root: installs the carried nvtx
# wheel and the libraries nsys needs (see ../shared/device/README.md).
set -e
python3 -m pip install -q --no-index --no-deps --target "$PWD/.pyext" .gpu-kit/nvtx-*.whl 2>/dev/null || true
# cupti-python and its libraries (the in-process GPU timeline), carried in .gpu-kit/cupti
ls .gpu-kit/cupti/*.whl > /dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --target "$PWD/.pyext" .gpu-kit/cupti/*.whl 2>&1 | tail -2
export PYTHONPATH="$PWD:$PWD/.pyext${PYTHONPATH:+:$PYTHONPATH}"
for f in .gpu-kit/libdw1_*.deb .gpu-kit/libelf1_*.deb; do dpkg -x "$f" "$PWD/.dw"; done
export LD_LIBRARY_PATH="$PWD/.dw/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MPIRUN="mpirun --allow-run-as-root --oversubscribe --noprefix -x PYTHONPATH -x LD_LIBRARY_PATH -x PYTHONUNBUFFERED -x NCCL_NVLS_ENABLE"
set +e
