// perfmlp's CUDA kernels, compiled by perfmlp/gpu/kernels.py once per precision
// (RawModule; the defines before this text): T is the arithmetic and master
// type (float or double), S the storage type of activations, deltas and the
// batch: T itself (S_KIND 0) or 16 bits held as unsigned short, IEEE half
// (S_KIND 1, fp16) or bfloat16 (S_KIND 2, bf16), read with ld() and written
// with st() (to nearest, ties to even), so that no CUDA header is needed.
// WCOPY: the update also writes the weights' copy in S (the GEMMs' 16-bit
// input); LOSS_SCALING: fp16's dynamic loss scale (perfmlp/mixed.py) scales
// the output delta and decides each update. Samples are columns; matrices
// are C order.

__device__ __forceinline__ T ld(S v) {
#if S_KIND == 0
    return v;
#elif S_KIND == 1
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
#else
    return __uint_as_float(((unsigned int)v) << 16);
#endif
}

__device__ __forceinline__ S st(T v) {
#if S_KIND == 0
    return v;
#elif S_KIND == 1
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
#else
    unsigned int u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // a NaN stays a NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
#endif
}

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

// 16 bytes of S, loaded and stored as one (VEC elements: 8 in 16 bits, 4 in float, 2 in double).
#define VEC ((int)(16 / sizeof(S)))
struct alignas(16) Pack { S s[VEC]; };

// z[i0 .. i0 + VEC) (or to n) = f(z[i], b[row of i]); z is rows x cols, C order. A thread takes
// VEC elements with one 16-byte load and store where the whole pack is in z and aligned, each
// element its row's bias (the row changes where the column count wraps), else one at a time.
// One element a thread, with b[i / cols], took 6.24 us for 512 x 3200 in bf16 on an H100,
// three times its bytes' time: two bytes in flight a thread cannot keep HBM busy (a grid over
// (columns, rows) without the division took 6.18: commit 8c4fd2e, reverted).
template <typename F>
__device__ __forceinline__ void by_row(S* z, const T* b, long long n, int cols, F f) {
    const long long i0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i0 >= n) return;
    long long r = i0 / cols;
    int c = (int)(i0 - r * cols);
    if (i0 + VEC <= n && (((unsigned long long)(z + i0)) & 15ull) == 0) {
        Pack p = *reinterpret_cast<const Pack*>(z + i0);
        T br = b[r];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            if (c == cols) { c = 0; br = b[++r]; }
            p.s[k] = st(f(ld(p.s[k]) + br));
            ++c;
        }
        *reinterpret_cast<Pack*>(z + i0) = p;
    } else {
        for (long long i = i0; i < n && i < i0 + VEC; ++i) z[i] = st(f(ld(z[i]) + b[i / cols]));
    }
}

struct Sigmoid { __device__ T operator()(T v) const { return (T)1 / ((T)1 + exp(-v)); } };

extern "C" {

// a = sigmoid(z + b[row]) in place; grid: ceil(n / VEC) threads. On an H100 (d99daec), 512 x 3200:
// 4.19 us in bf16 and 4.06 in float32, against 6.18 and 5.92 one element a thread.
__global__ void bias_sigmoid(S* z, const T* b, long long n, int cols) { by_row(z, b, n, cols, Sigmoid()); }

// z += b[row], one element a thread: the logits are C rows only (10 x 3200: 32,000 elements), too few
// threads when each takes VEC of them (by_row's way took 1.70 us in bf16 there, against 1.31).
__global__ void bias_add(S* z, const T* b, long long n, int cols) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = st(ld(z[i]) + b[i / cols]);
}

// One thread per column of the C x cols logits: softmax, cross-entropy
// log(sum exp(z - max)) - (z_y - max), delta = (p - y) * scale; the column
// losses are added into *ce_sum (atomically). The one-hot labels y are read
// as they lie in the batch, one sample a row: y(c, j) = y[j * C + c].
// With LOSS_SCALING the delta is also multiplied by the loss scale ls[0].
__global__ void softmax_ce_grad(const S* z, const S* y, S* delta, T* ce_sum, int C, int cols, T scale,
                                const T* ls) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    T ce = 0;
#if LOSS_SCALING
    scale *= ls[0];
#endif
    if (j < cols) {
        T m = ld(z[j]);
        for (int c = 1; c < C; ++c) m = max(m, ld(z[c * cols + j]));
        T s = 0, zy = 0;
        for (int c = 0; c < C; ++c) {
            T zc = ld(z[c * cols + j]) - m;
            s += exp(zc);
            zy += ld(y[j * C + c]) * zc;
        }
        for (int c = 0; c < C; ++c)
            delta[c * cols + j] = st((exp(ld(z[c * cols + j]) - m) / s - ld(y[j * C + c])) * scale);
        ce = log(s) - zy;
    }
    T total = block_sum(ce);  // one atomic per block
    if (threadIdx.x == 0) atomicAdd(ce_sum, total);
}

// One block per row: out[r] = sum_j d[r, j]
__global__ void row_sum(const S* d, T* out, int cols) {
    int r = blockIdx.x;
    T s = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += ld(d[(long long)r * cols + j]);
    T total = block_sum(s);
    if (threadIdx.x == 0) out[r] = total;
}

// One block per row: dz = da * a * (1 - a) (in place in da), db[r] = sum_j dz[r, j]
__global__ void sigmoid_grad_row_sum(S* da, const S* a, T* db, int cols) {
    int r = blockIdx.x;
    T s = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        long long i = (long long)r * cols + j;
        T v = ld(a[i]);
        T dz = ld(da[i]) * v * ((T)1 - v);
        da[i] = st(dz);
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
// rows, with d staged OB_THREADS columns at a time in shared memory. Where
// cols and bcols are multiples of VEC (and a, dz 16-byte aligned) a lane
// takes VEC adjacent columns a pass, one 16-byte load of a and one store
// of dz, so a warp covers 32 * VEC columns a pass; the chunk's deltas lie
// in ds so that a lane's k-th column of a pass is at k * 32 + lane in the
// pass's slots (ob_slot: no two lanes on one bank). Else a lane takes one
// column in 32, one element at a time (the first vectorised version's
// predecessor: 10.80 us for the pair's first kernel at H = 512, b = 3200
// in bf16 on an H100, commit 493df76). A lane keeps its rows' sums in
// registers over all its columns, so each warp reduces them once (warp
// shuffles) and lane 0 writes them. The last x-block sums d alone (db),
// the warps' sums added in order. (The first design, a block per OB_ROWS
// rows whose threads each took a few columns and reduced across the block,
// took 15.0 us for the pair at b = 3200 on an H200 against 11.3:
// benchmarks/results/h200/obv2, in git before 54cb3ab.)
#define OB_PASS (32 * VEC)
static_assert(OB_THREADS % OB_PASS == 0, "a chunk is whole passes");

__device__ __forceinline__ int ob_slot(int jj, bool vec) {  // column jj of a chunk: its slot in ds
    if (!vec) return jj;
    const int q = jj / OB_PASS, rem = jj - q * OB_PASS;
    return q * OB_PASS + (rem % VEC) * 32 + rem / VEC;
}

__global__ void __launch_bounds__(OB_THREADS)
output_backward(const T* __restrict__ W, const S* __restrict__ d, const S* __restrict__ a, S* __restrict__ dz,
                T* __restrict__ part, int C, int H, int cols, int bcols) {
    __shared__ T ds[MAXC][OB_THREADS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j0 = blockIdx.y * bcols, n = min(bcols, cols - j0);
    const long long CH = (long long)C * H;
    T* out = part + blockIdx.y * (CH + H + C);
    const bool bias_block = blockIdx.x == gridDim.x - 1;
    const bool vec = cols % VEC == 0 && bcols % VEC == 0 && ((((unsigned long long)a) | ((unsigned long long)dz)) & 15ull) == 0;
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
        const int m = min(OB_THREADS, n - jc), slot = ob_slot(tid, vec);
        __syncthreads();  // the previous chunk is used up
#pragma unroll
        for (int c = 0; c < MAXC; ++c) ds[c][slot] = (c < C && tid < m) ? ld(d[(long long)c * cols + j0 + jc + tid]) : (T)0;
        __syncthreads();
        if (bias_block) {  // every slot (zero past m)
#pragma unroll
            for (int c = 0; c < MAXC; ++c) acc[0][c] += ds[c][tid];
            continue;
        }
        if (vec) {
            for (int j = lane * VEC; j < m; j += OB_PASS) {
                const int s0 = (j / OB_PASS) * OB_PASS + lane;   // column j + k's slot: s0 + 32 k
#pragma unroll
                for (int r = 0; r < OB_WROWS; ++r) {
                    if (h0 + r < H) {
                        const long long i = (long long)(h0 + r) * cols + j0 + jc + j;
                        const Pack pa = *reinterpret_cast<const Pack*>(a + i);
                        Pack pz;
#pragma unroll
                        for (int k = 0; k < VEC; ++k) {
                            T v = ld(pa.s[k]), da = 0;
#pragma unroll
                            for (int c = 0; c < MAXC; ++c) {
                                const T dl = ds[c][s0 + 32 * k];
                                acc[r][c] += dl * v;
                                da += w[r][c] * dl;
                            }
                            T g = da * v * ((T)1 - v);
                            pz.s[k] = st(g);
                            acc[r][MAXC] += g;
                        }
                        *reinterpret_cast<Pack*>(dz + i) = pz;
                    }
                }
            }
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
                    T v = ld(a[i]), da = 0;
#pragma unroll
                    for (int c = 0; c < MAXC; ++c) {
                        acc[r][c] += dl[c] * v;
                        da += w[r][c] * dl[c];
                    }
                    T g = da * v * ((T)1 - v);
                    dz[i] = st(g);
                    acc[r][MAXC] += g;
                }
            }
        }
    }
    if (bias_block) {  // each thread summed its slots of every class: the block's sums, warps in order
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
// also moves the loss slot into the running sum and clears it. WCOPY: the
// new weights also into wcopy (in S); LOSS_SCALING: g times ls[1], the
// inverse of the scale it was computed with, or no update where ls[1] is 0
// (grad_check found an overflow).
__global__ void sgd_update(T* p, const T* g, long long n, long long n_weights, T lr, T reg,
                           T* slot, T* ce_acc, S* wcopy, const T* ls) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#if LOSS_SCALING
    const T m = ls[1];
#else
    const T m = 1;
#endif
    if (i < n && m != (T)0) {
        T gi = g[i] * m;
        if (i < n_weights) gi += reg * p[i];
        T pi = p[i] - lr * gi;
        p[i] = pi;
#if WCOPY
        if (i < n_weights) wcopy[i] = st(pi);
#endif
    }
    if (i == 0) { ce_acc[0] += slot[0]; slot[0] = 0; }
}

// fp16's dynamic loss scale (perfmlp/mixed.py), state ls = {scale, the
// update's multiplier} and state = {overflow seen, blocks done, finite steps in
// a row, steps skipped}: every block tests its gradients (the first n) and
// flags an inf or a NaN; the last block to finish sets the update's
// multiplier (1 / scale, or 0: skip) and the next step's scale (halved on
// an overflow, doubled after GROWTH_INTERVAL finite steps), then clears the
// flag and the count for the next step. A grid of a few blocks an SM, each
// thread striding over the gradients: every block adds one to the shared
// count, and one block a thread's element (the first version) queued about
// 6,300 such atomics on one word at H = 2048, 11.5 us on an H100 (493df76).
__global__ void grad_check(const T* g, long long n, T* ls, int* state) {
    bool bad = false;
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bad |= !(g[i] - g[i] == (T)0);   // inf - inf and NaN - NaN are NaN: not finite
    if (__syncthreads_or(bad) && threadIdx.x == 0) atomicExch(&state[0], 1);
    __shared__ bool last;
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(&state[1], 1) == (int)gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        __threadfence();
        const T s = ls[0];
        if (atomicAdd(&state[0], 0)) {
            ls[1] = 0;
            ls[0] = s * (T)BACKOFF_FACTOR;
            state[2] = 0;
            state[3] += 1;
        } else {
            ls[1] = (T)1 / s;
            if (++state[2] == GROWTH_INTERVAL) {
                ls[0] = s * (T)GROWTH_FACTOR;
                state[2] = 0;
            }
        }
        state[0] = 0;
        state[1] = 0;
    }
}

// dst = src in S (the 16-bit weight copy when weights are set from the host)
__global__ void to_storage(const T* src, S* dst, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = st(src[i]);
}

}  // extern "C"
