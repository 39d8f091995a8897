"""The CuPy backend: the network on one GPU per rank, fused kernels, the
reference's own GEMM kernels, the batch-transfer modes and the GPU gradient
reducers (staged through host MPI, or NCCL).

A step launches 11 kernels for the 784-H-10 network: forward 4 (2 GEMMs,
bias+sigmoid, bias add), loss 1 (softmax + cross-entropy + output delta,
the loss summed into the gradient buffer's slot), backward 5 (3 GEMMs, the
output bias gradient, sigmoid derivative fused with the hidden bias
gradient), update 1 (weights and biases in one pass, which also moves the
loss slot into the epoch's running sum and clears it).
"""
from __future__ import annotations

import numpy as np

from .comm import Counts
from .errors import PerfmlpError
from .mlp import Network


def available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _cupy():
    try:
        import cupy
    except ImportError:
        raise PerfmlpError("--backend cupy: CuPy is not installed (pip install 'perfmlp[gpu]')") from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device
        raise PerfmlpError(f"--backend cupy: no CUDA GPU ({type(e).__name__}: {e})") from None
    if n == 0:
        raise PerfmlpError("--backend cupy: no CUDA GPU found")
    return cupy


# ---- kernels --------------------------------------------------------------------

_KERNELS_SRC = r"""
// Sum of v over a block of 256 threads (every thread gets the total).
__device__ T block_sum(T v) {
    __shared__ T part[256];
    part[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    T total = part[0];
    __syncthreads();
    return total;
}

extern "C" {

// a = sigmoid(z + b[row]) in place; z is rows x cols, C order
__global__ void bias_sigmoid(T* z, const T* b, long long n, int cols) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = (T)1 / ((T)1 + exp(-(z[i] + b[i / cols])));
}

// z += b[row]
__global__ void bias_add(T* z, const T* b, long long n, int cols) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] += b[i / cols];
}

// One thread per column of the C x cols logits: softmax, cross-entropy
// log(sum exp(z - max)) - (z_y - max), delta = (p - y) * scale; the column
// losses are added into *ce_sum (atomically). The one-hot labels y are read
// as they lie in the batch, one sample a row: y(c, j) = y[j * C + c].
__global__ void softmax_ce_grad(const T* z, const T* y, T* delta, T* ce_sum, int C, int cols, T scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    T ce = 0;
    if (j < cols) {
        T m = z[j];
        for (int c = 1; c < C; ++c) m = max(m, z[c * cols + j]);
        T s = 0, zy = 0;
        for (int c = 0; c < C; ++c) {
            T zc = z[c * cols + j] - m;
            s += exp(zc);
            zy += y[j * C + c] * zc;
        }
        for (int c = 0; c < C; ++c)
            delta[c * cols + j] = (exp(z[c * cols + j] - m) / s - y[j * C + c]) * scale;
        ce = log(s) - zy;
    }
    T total = block_sum(ce);  // one atomic per block
    if (threadIdx.x == 0) atomicAdd(ce_sum, total);
}

// One block per row: out[r] = sum_j d[r, j]
__global__ void row_sum(const T* d, T* out, int cols) {
    int r = blockIdx.x;
    T s = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += d[(long long)r * cols + j];
    T total = block_sum(s);
    if (threadIdx.x == 0) out[r] = total;
}

// One block per row: dz = da * a * (1 - a) (in place in da), db[r] = sum_j dz[r, j]
__global__ void sigmoid_grad_row_sum(T* da, const T* a, T* db, int cols) {
    int r = blockIdx.x;
    T s = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        long long i = (long long)r * cols + j;
        T v = a[i];
        T dz = da[i] * v * ((T)1 - v);
        da[i] = dz;
        s += dz;
    }
    T total = block_sum(s);
    if (threadIdx.x == 0) db[r] = total;
}

// p -= lr * (g + reg * p) for i < n_weights, p -= lr * g after; thread 0
// also moves the loss slot into the running sum and clears it.
__global__ void sgd_update(T* p, const T* g, long long n, long long n_weights, T lr, T reg,
                           T* slot, T* ce_acc) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        T gi = g[i];
        if (i < n_weights) gi += reg * p[i];
        p[i] -= lr * gi;
    }
    if (i == 0) { ce_acc[0] += slot[0]; slot[0] = 0; }
}

// ---- the reference's GEMM kernels: C (M x N, C order) = A @ B, where
// A(i, k) = A[i * sa0 + k * sa1] and B(k, j) = B[k * sb0 + j * sb1]
// (strides in elements, so transposed views need no copy).

// Algorithm 1: one thread per output element
__global__ void gemm_naive(const T* A, const T* B, T* Cm, int M, int N, int K,
                           long long sa0, long long sa1, long long sb0, long long sb1) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < M && j < N) {
        T s = 0;
        for (int k = 0; k < K; ++k) s += A[i * sa0 + k * sa1] * B[k * sb0 + j * sb1];
        Cm[(long long)i * N + j] = s;
    }
}

// Algorithm 2: 16 x 16 shared-memory tiles
#define TS 16
__global__ void gemm_tiled(const T* A, const T* B, T* Cm, int M, int N, int K,
                           long long sa0, long long sa1, long long sb0, long long sb1) {
    __shared__ T As[TS][TS + 1];
    __shared__ T Bs[TS][TS + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int i = blockIdx.y * TS + ty, j = blockIdx.x * TS + tx;
    T s = 0;
    for (int k0 = 0; k0 < K; k0 += TS) {
        As[ty][tx] = (i < M && k0 + tx < K) ? A[i * sa0 + (k0 + tx) * sa1] : (T)0;
        Bs[ty][tx] = (k0 + ty < K && j < N) ? B[(k0 + ty) * sb0 + j * sb1] : (T)0;
        __syncthreads();
        for (int k = 0; k < TS; ++k) s += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (i < M && j < N) Cm[(long long)i * N + j] = s;
}

// Section 4.2 of the final-project text: a 16 x 4 thread block computes a
// 64 x 16 block of C; each step loads a 4 x 16 piece of B into shared
// memory (one element per thread) and each thread keeps its 1 x 4 piece of A
// in registers and its 1 x 16 row of C in registers.
__global__ void gemm_regblock(const T* A, const T* B, T* Cm, int M, int N, int K,
                              long long sa0, long long sa1, long long sb0, long long sb1) {
    __shared__ T Bs[4][16];
    int t = threadIdx.y * 16 + threadIdx.x;     // 0..63
    int i = blockIdx.y * 64 + t;                // this thread's row of C
    int j0 = blockIdx.x * 16;                   // first column of the block
    T acc[16];
#pragma unroll
    for (int c = 0; c < 16; ++c) acc[c] = 0;
    for (int k0 = 0; k0 < K; k0 += 4) {
        int bk = k0 + threadIdx.y, bj = j0 + threadIdx.x;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && bj < N) ? B[bk * sb0 + bj * sb1] : (T)0;
        T a[4];
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            a[kk] = (i < M && k0 + kk < K) ? A[i * sa0 + (k0 + kk) * sa1] : (T)0;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int c = 0; c < 16; ++c) acc[c] += a[kk] * Bs[kk][c];
        __syncthreads();
    }
    if (i < M) {
#pragma unroll
        for (int c = 0; c < 16; ++c)
            if (j0 + c < N) Cm[(long long)i * N + j0 + c] = acc[c];
    }
}

}
"""

_modules: dict = {}


def kernels(cupy, dtype):
    """The compiled module for float or double (compiled once per process)."""
    key = np.dtype(dtype).name
    if key not in _modules:
        ctype = "float" if key == "float32" else "double"
        _modules[key] = cupy.RawModule(code="#define T " + ctype + "\n" + _KERNELS_SRC,
                                       options=("--std=c++14",))
    return _modules[key]


def _elem_strides(a):
    s = a.itemsize
    return a.strides[0] // s, a.strides[1] // s


GEMMS = ("cublas", "naive", "tiled", "regblock")


class CublasGemm:
    """out = a @ b through cublas<S|D>gemm directly: cupy.matmul's dispatch
    costs more host time than the launch itself at the trainer's sizes.

    Row-major C (M x N) is column-major C^T, so C^T = B^T A^T: a C-ordered
    operand is passed as it lies (op N), an F-ordered one (a transposed view)
    with op T. Other layouts fall back to cupy.matmul."""

    def __init__(self, cupy, dtype):
        try:
            from cupy_backends.cuda.libs import cublas
        except ImportError:  # pragma: no cover - older CuPy
            from cupy.cuda import cublas
        self.cupy = cupy
        self.fn = cublas.sgemm if np.dtype(dtype) == np.float32 else cublas.dgemm
        self.handle = cupy.cuda.device.get_cublas_handle()
        self._scalars = np.array([1.0, 0.0], dtype=dtype)  # alpha, beta (host pointer mode)
        self.p_one = self._scalars.ctypes.data
        self.p_zero = self.p_one + self._scalars.itemsize

    @staticmethod
    def _op(x):
        """(cuBLAS op, leading dimension) of a 2-D operand as it lies, or None."""
        if x.flags.c_contiguous:
            return 0, max(x.shape[1], 1)
        if x.flags.f_contiguous:
            return 1, max(x.shape[0], 1)
        return None

    def __call__(self, a, b, out):
        opa, opb = self._op(a), self._op(b)
        if opa is None or opb is None:
            return self.cupy.matmul(a, b, out=out)
        M, K = a.shape
        N = b.shape[1]
        self.fn(self.handle, opb[0], opa[0], N, M, K, self.p_one, b.data.ptr, opb[1], a.data.ptr, opa[1],
                self.p_zero, out.data.ptr, max(N, 1))
        return out


_cublas_gemms: dict = {}


def cublas_gemm(cupy, dtype) -> CublasGemm:
    """The CublasGemm of the current device and dtype (one per process)."""
    key = (cupy.cuda.Device().id, np.dtype(dtype).char)
    g = _cublas_gemms.get(key)
    if g is None:
        g = _cublas_gemms[key] = CublasGemm(cupy, dtype)
    return g


def gemm(cupy, kind: str, a, b, out=None):
    """out = a @ b (2-D, any strides) with cuBLAS or one of the reference's kernels."""
    if kind == "cublas":
        if out is None or not out.flags.c_contiguous:
            return cupy.matmul(a, b, out=out)
        return cublas_gemm(cupy, a.dtype)(a, b, out)
    M, K = a.shape
    K2, N = b.shape
    assert K == K2, (a.shape, b.shape)
    if out is None:
        out = cupy.empty((M, N), dtype=a.dtype)
    assert out.flags.c_contiguous and out.shape == (M, N)
    mod = kernels(cupy, a.dtype)
    sa0, sa1 = _elem_strides(a)
    sb0, sb1 = _elem_strides(b)
    args = (a, b, out, np.int32(M), np.int32(N), np.int32(K),
            np.int64(sa0), np.int64(sa1), np.int64(sb0), np.int64(sb1))
    if kind == "naive":
        mod.get_function("gemm_naive")(((N + 15) // 16, (M + 15) // 16), (16, 16), args)
    elif kind == "tiled":
        mod.get_function("gemm_tiled")(((N + 15) // 16, (M + 15) // 16), (16, 16), args)
    elif kind == "regblock":
        mod.get_function("gemm_regblock")(((N + 15) // 16, (M + 63) // 64), (16, 4), args)
    else:
        raise PerfmlpError(f"unknown GEMM {kind!r} (one of {', '.join(GEMMS)})")
    return out


class GpuNetwork(Network):
    """The Network's math with fused kernels; buffers allocated once for the
    largest piece and sliced for a shorter one."""

    def __init__(self, cupy, layer_sizes, dtype, lr, reg, global_batch, max_local: int, gemm_kind: str):
        super().__init__(cupy, layer_sizes, dtype, lr, reg, global_batch)
        self.cp = cupy
        self.mod = kernels(cupy, dtype)
        self.k = {n: self.mod.get_function(n) for n in
                  ("bias_sigmoid", "bias_add", "softmax_ce_grad", "row_sum", "sigmoid_grad_row_sum", "sgd_update")}
        self.gemm_kind = gemm_kind
        self._cublas = cublas_gemm(cupy, dtype) if gemm_kind == "cublas" else None
        self._views: dict = {}
        self._ints: dict = {}
        self.T = self.dtype.type
        self.ce_acc = cupy.zeros(1, dtype=dtype)
        L = len(layer_sizes) - 1
        # activations z/a per layer (n_l x b), deltas per layer
        self.z = [cupy.empty((layer_sizes[l + 1], max_local), dtype) for l in range(L)]
        self.d = [cupy.empty((layer_sizes[l + 1], max_local), dtype) for l in range(L)]

    capture: list | None = None  # when a list: (a, b, out) of every GEMM, for timing them alone

    def gemm(self, a, b, out=None, trans_a=False, trans_b=False):
        aa = a.T if trans_a else a
        bb = b.T if trans_b else b
        self._op("gemm", aa.shape[0], bb.shape[1], aa.shape[1])
        if self.capture is not None:
            self.capture.append((aa, bb, out))
        if self._cublas is not None and out is not None:
            return self._cublas(aa, bb, out)
        return gemm(self.cp, self.gemm_kind, aa, bb, out=out)

    @staticmethod
    def _grid(n, block=256):
        return ((n + block - 1) // block,), (block,)

    def forward(self, x) -> None:
        L = len(self.p.W)
        b = x.shape[1]
        a = x
        self.acts = [x]
        for l in range(L):
            z = self._view(self.z[l], b)
            self.gemm(self.p.W[l], a, out=z)
            n = z.size
            g, blk = self._grid(n)
            if l < L - 1:
                self._op("bias_sigmoid", z.shape[0], b)
                self.k["bias_sigmoid"](g, blk, (z, self.p.b[l], self._i64(n), self._i32(b)))
            else:
                self._op("bias_add", z.shape[0], b)
                self.k["bias_add"](g, blk, (z, self.p.b[l], self._i64(n), self._i32(b)))
            a = z
            self.acts.append(z)

    def _view(self, buf, b):
        """A C-contiguous rows x b array on the front of a rows x max buffer
        (made once per buffer and piece size)."""
        key = (id(buf), b)
        v = self._views.get(key)
        if v is None:
            v = self._views[key] = buf.ravel()[: buf.shape[0] * b].reshape(buf.shape[0], b)
        return v

    def _i32(self, v):
        r = self._ints.get(("i", v))
        if r is None:
            r = self._ints[("i", v)] = np.int32(v)
        return r

    def _i64(self, v):
        r = self._ints.get(("l", v))
        if r is None:
            r = self._ints[("l", v)] = np.int64(v)
        return r

    def loss(self, y) -> None:
        """y: the C x b transposed view of the b x C one-hot rows."""
        assert y.T.flags.c_contiguous, "labels must be the transposed view of b x C rows"
        z = self.acts[-1]
        C, b = z.shape
        self._op("softmax_ce_grad", C, b)
        d = self._view(self.d[-1], b)
        g, blk = self._grid(b)
        self.k["softmax_ce_grad"](g, blk, (z, y, d, self.g.extra, self._i32(C), self._i32(b),
                                           self._scale(self.global_batch)))
        self.delta = d

    def backward(self) -> None:
        L = len(self.p.W)
        d = self.delta
        b = d.shape[1]
        for l in range(L - 1, -1, -1):
            self.gemm(d, self.acts[l], out=self.g.W[l], trans_b=True)
            if l == L - 1:
                self._op("row_sum", d.shape[0], b)
                self.k["row_sum"]((d.shape[0],), (256,), (d, self.g.b[l], self._i32(b)))
            if l > 0:
                da = self._view(self.d[l - 1], b)
                self.gemm(self.p.W[l], d, out=da, trans_a=True)
                a = self.acts[l]
                self._op("sigmoid_grad", a.shape[0], b)
                self._op("row_sum", a.shape[0], b)
                self.k["sigmoid_grad_row_sum"]((a.shape[0],), (256,), (da, a, self.g.b[l - 1], self._i32(b)))
                d = da

    def update(self) -> None:
        p, g = self.p, self.g
        self._op("update_weights", p.n_weights)
        self._op("update_biases", p.n_biases)
        args = self._ints.get("update")
        if args is None:
            n = p.n_params
            args = self._ints["update"] = (self._grid(n), (p.flat, g.flat, np.int64(n), np.int64(p.n_weights),
                                                           self.T(self.lr), self.T(self.reg), g.extra, self.ce_acc))
        (grid, blk), a = args
        self.k["sgd_update"](grid, blk, a)

    def _scale(self, batch):
        r = self._ints.get(("s", batch))
        if r is None:
            r = self._ints[("s", batch)] = self.T(1.0 / batch)
        return r

    def take_epoch_loss_sum(self) -> float:
        v = float(self.ce_acc.get()[0])  # a sync, once per epoch
        self.ce_acc.fill(0)
        return v


class DeviceBatches:
    """Batch pieces on the device: copied from pageable or pinned host memory
    each batch (the reference scheme) or resident (uploaded once)."""

    def __init__(self, cupy, x, y, mode: str, max_local: int):
        self.cp, self.mode = cupy, mode
        self.bytes_h2d = 0
        self.stream = cupy.cuda.get_current_stream()
        self._set_host(x, y)
        if mode != "resident":
            self.xd = cupy.empty((max_local, x.shape[1]), x.dtype)
            self.yd = cupy.empty((max_local, y.shape[1]), y.dtype)

    def _set_host(self, x, y):
        cp = self.cp
        if self.mode == "pinned":
            import cupyx
            self.xh = cupyx.empty_pinned(x.shape, x.dtype)
            self.yh = cupyx.empty_pinned(y.shape, y.dtype)
            self.xh[...] = x
            self.yh[...] = y
        elif self.mode == "pageable":
            self.xh, self.yh = np.ascontiguousarray(x), np.ascontiguousarray(y)
        else:
            self.xr, self.yr = cp.asarray(x), cp.asarray(y)

    def reorder(self, order: np.ndarray) -> None:
        if self.mode == "resident":
            idx = self.cp.asarray(order)
            self.xr, self.yr = self.xr[idx], self.yr[idx]
        else:
            self._set_host(self.xh[order], self.yh[order])

    def get(self, lo: int, hi: int, phase):
        """x as D x b and y as C x b views (samples are columns)."""
        b = hi - lo
        if self.mode == "resident":
            return self.xr[lo:hi].T, self.yr[lo:hi].T  # no copy, so no h2d phase (and no CUDA event)
        with phase("h2d"):
            xd, yd = self.xd[:b], self.yd[:b]
            if self.mode == "pageable":
                xd.set(self.xh[lo:hi])  # cudaMemcpy from pageable memory: blocks the host
                yd.set(self.yh[lo:hi])
            else:
                xd.set(self.xh[lo:hi], stream=self.stream)  # async from pinned memory
                yd.set(self.yh[lo:hi], stream=self.stream)
            self.bytes_h2d += xd.nbytes + yd.nbytes
            return xd.T, yd.T  # views: the kernels read the rows as they lie


class StagedReducer:
    """The reference scheme: D2H of the one gradient buffer, MPI_Allreduce on
    the host copy, H2D back (pageable host memory, or pinned)."""

    name = "mpi-staged"

    def __init__(self, cupy, world, n: int, dtype, memory: str, net):
        self.cp, self.world, self.net = cupy, world, net
        self.counts = Counts()
        if memory == "pinned":
            import cupyx
            self.host = cupyx.empty_pinned((n,), dtype)
        else:
            self.host = np.empty(n, dtype)
        self.memory = memory

    def reduce(self, flat, phase) -> None:
        stream = self.cp.cuda.get_current_stream()
        with phase("d2h"):
            flat.get(out=self.host, stream=stream)
            stream.synchronize()  # MPI reads the host buffer the GPU just wrote
        self.counts.bytes_d2h += flat.nbytes
        with phase("allreduce"):
            self.world.allreduce_sum(self.host)
        self.counts.bytes_mpi += self.host.nbytes
        self.counts.collectives.append(("MPI_Allreduce", int(self.host.size)))
        with phase("h2d_grad"):
            flat.set(self.host, stream=stream)
        self.counts.bytes_h2d += flat.nbytes

    def host_value(self, flat, index: int) -> float:
        return float(self.host[index])

    def epoch_loss_sum(self) -> float:  # pragma: no cover - host_value always answers
        return self.net.take_epoch_loss_sum()


class NcclReducer:
    """Device-side allreduce through cupy.cuda.nccl; the unique id is
    broadcast over MPI."""

    name = "nccl"

    def __init__(self, cupy, world, net):
        from cupy.cuda import nccl
        if not nccl.available:
            raise PerfmlpError("--comm nccl: CuPy was built without NCCL")
        self.cp, self.nccl, self.world, self.net = cupy, nccl, world, net
        uid = nccl.get_unique_id() if world.rank == 0 else None
        uid = world.bcast(uid)
        self.comm = nccl.NcclCommunicator(world.size, uid, world.rank)
        self.counts = Counts()
        self._dtype = nccl.NCCL_FLOAT32 if net.dtype == np.float32 else nccl.NCCL_FLOAT64
        self._stream_ptr = cupy.cuda.get_current_stream().ptr

    def reduce(self, flat, phase) -> None:
        with phase("allreduce"):
            self.comm.allReduce(flat.data.ptr, flat.data.ptr, flat.size, self._dtype, self.nccl.NCCL_SUM,
                                self._stream_ptr)
        self.counts.bytes_nccl += flat.nbytes
        self.counts.collectives.append(("ncclAllReduce", int(flat.size)))

    def host_value(self, flat, index: int):
        return None  # reading it would synchronise the device every batch

    def epoch_loss_sum(self) -> float:
        return self.net.take_epoch_loss_sum()


def build(cfg, world, xtrain, ytrain, tracer):
    """(cupy, network, batches, reducer, sync, backend name) for this rank."""
    cupy = _cupy()
    ndev = cupy.cuda.runtime.getDeviceCount()
    cupy.cuda.Device(world.rank % ndev).use()  # rank r on GPU r mod (GPUs on its node)
    from .comm import piece
    max_local = max(piece(cfg.batch_size, world.size, r)[1] - piece(cfg.batch_size, world.size, r)[0]
                    for r in range(world.size))
    net = GpuNetwork(cupy, cfg.layer_sizes, cfg.precision, cfg.learning_rate, cfg.reg, cfg.batch_size,
                     max_local, cfg.gemm)
    batches = DeviceBatches(cupy, xtrain, ytrain, cfg.batch_transfer, max_local)
    comm = "mpi-staged" if cfg.comm == "auto" else cfg.comm
    if comm == "nccl":
        reducer = NcclReducer(cupy, world, net)
    else:
        memory = "pageable" if cfg.batch_transfer == "pageable" else "pinned"
        reducer = StagedReducer(cupy, world, net.g.flat.size, net.dtype, memory, net)
    if hasattr(tracer, "attach_gpu"):
        tracer.attach_gpu(cupy)
    sync = cupy.cuda.get_current_stream().synchronize
    return cupy, net, batches, reducer, sync, "cupy"


def time_ms(cupy, fn, warmup: int = 5, reps: int = 30) -> list[float]:
    """Per-call device times (ms) of fn(), CUDA events around each call and
    no synchronisation between calls (so host-bound calls show their gaps);
    one synchronisation at the end."""
    for _ in range(warmup):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    evs = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(reps)]
    for a, b in evs:
        a.record()
        fn()
        b.record()
    evs[-1][1].synchronize()
    return [cupy.cuda.get_elapsed_time(a, b) for a, b in evs]


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
