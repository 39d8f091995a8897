// perfmlp's CUDA kernels, compiled by perfmlp/gpu/kernels.py for T = float and
// T = double (RawModule, -DT=...). Samples are columns; matrices are C order.

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

// ---- the output layer's backward, fused (perfmlp/model/costs.py
// fused_output: at most MAXC classes, one accumulator per class in
// registers). MAXC (the network's classes), OB_WROWS and OB_THREADS are
// defined by kernels.py, whose LAUNCH the launches read too. Every sum is
// taken in a fixed order (no atomics), so the results are the same at every
// run.

// Sum of v over a warp (lane 0 gets the total).
__device__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    return v;
}

// Given delta d (C x cols), the layer's input a (H x cols, sigmoid
// activations) and W (C x H): dz = (W^T d) * a * (1 - a) (H x cols), and,
// for the columns of block y (bcols of them), the partial sums
// part[y * n + k], n = C*H + H + C, of dW = d a^T (k = c * H + h), of the
// layer below's db = the row sums of dz (k = C*H + h) and of db = the row
// sums of d (k = C*H + H + c). Grid: (ceil(H / R) + 1) x ceil(cols / bcols),
// R = OB_WROWS * OB_THREADS / 32 rows a block: each warp takes OB_WROWS
// rows, its lanes the block's columns (one in 32), with d staged
// OB_THREADS columns at a time in shared memory. A lane keeps its rows'
// sums in registers over all its columns, so each warp reduces them once
// (warp shuffles) and lane 0 writes them. The last x-block sums d alone
// (db), the warps' sums added in order. (The first design, a block per
// OB_ROWS rows whose threads each took a few columns and reduced across the
// block, took 15.0 us for the pair at b = 3200 on an H200 against 11.3:
// benchmarks/results/h200/obv2.)
__global__ void __launch_bounds__(OB_THREADS)
output_backward(const T* __restrict__ W, const T* __restrict__ d, const T* __restrict__ a, T* __restrict__ dz,
                T* __restrict__ part, int C, int H, int cols, int bcols) {
    __shared__ T ds[MAXC][OB_THREADS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j0 = blockIdx.y * bcols, n = min(bcols, cols - j0);
    const long long CH = (long long)C * H;
    T* out = part + blockIdx.y * (CH + H + C);
    const bool bias_block = blockIdx.x == gridDim.x - 1;
    const int h0 = (blockIdx.x * (OB_THREADS / 32) + warp) * OB_WROWS;
    T w[OB_WROWS][MAXC];
    T acc[OB_WROWS][MAXC + 1];  // [r][c]: dW (bias block: [0][c], db); [r][MAXC]: the layer below's db
#pragma unroll
    for (int r = 0; r < OB_WROWS; ++r)
#pragma unroll
        for (int c = 0; c <= MAXC; ++c) {
            if (c < MAXC) w[r][c] = (!bias_block && c < C && h0 + r < H) ? W[c * H + h0 + r] : (T)0;
            acc[r][c] = 0;
        }
    for (int jc = 0; jc < n; jc += OB_THREADS) {
        const int m = min(OB_THREADS, n - jc);
        __syncthreads();  // the previous chunk is used up
#pragma unroll
        for (int c = 0; c < MAXC; ++c) ds[c][tid] = (c < C && tid < m) ? d[(long long)c * cols + j0 + jc + tid] : (T)0;
        __syncthreads();
        if (bias_block) {
            for (int j = tid; j < m; j += OB_THREADS)
#pragma unroll
                for (int c = 0; c < MAXC; ++c) acc[0][c] += ds[c][j];
            continue;
        }
        for (int j = lane; j < m; j += 32) {
            T dl[MAXC];
#pragma unroll
            for (int c = 0; c < MAXC; ++c) dl[c] = ds[c][j];
#pragma unroll
            for (int r = 0; r < OB_WROWS; ++r) {
                if (h0 + r < H) {
                    long long i = (long long)(h0 + r) * cols + j0 + jc + j;
                    T v = a[i], da = 0;
#pragma unroll
                    for (int c = 0; c < MAXC; ++c) {
                        acc[r][c] += dl[c] * v;
                        da += w[r][c] * dl[c];
                    }
                    T g = da * v * ((T)1 - v);
                    dz[i] = g;
                    acc[r][MAXC] += g;
                }
            }
        }
    }
    if (bias_block) {  // each thread summed its columns of every class: the block's sums, warps in order
        __shared__ T red[OB_THREADS / 32][MAXC];
#pragma unroll
        for (int c = 0; c < MAXC; ++c) {
            T v = warp_sum(acc[0][c]);
            if (lane == 0) red[warp][c] = v;
        }
        __syncthreads();
        if (tid < C) {
            T v = red[0][tid];
            for (int k = 1; k < OB_THREADS / 32; ++k) v += red[k][tid];
            out[CH + H + tid] = v;
        }
        return;
    }
#pragma unroll
    for (int r = 0; r < OB_WROWS; ++r)
#pragma unroll
        for (int c = 0; c <= MAXC; ++c) {
            T v = warp_sum(acc[r][c]);
            if (lane == 0 && h0 + r < H) {
                if (c < C) out[(long long)c * H + h0 + r] = v;
                else if (c == MAXC) out[CH + h0 + r] = v;
            }
        }
}

// The n = C*H + H + C sums of output_backward: part's `splits` blocks added
// in order, into dW (C x H), the layer below's db (H) and db (C).
__global__ void partial_sums(const T* part, int splits, int C, int H, T* gW, T* gb_below, T* gb) {
    const long long CH = (long long)C * H, n = CH + H + C;
    long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    T s = part[k];
    for (int t = 1; t < splits; ++t) s += part[t * n + k];
    if (k < CH) gW[k] = s;
    else if (k < CH + H) gb_below[k - CH] = s;
    else gb[k - CH - H] = s;
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
