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

// Sum of v over a warp (lane 0 gets the total).
__device__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    return v;
}

// 16 bytes of S, loaded and stored as one (VEC elements: 8 in 16 bits, 4 in float, 2 in double).
#define VEC ((int)(16 / sizeof(S)))
struct alignas(16) Pack { S s[VEC]; };

// z[i0 .. i0 + VEC) (or to n) = f(z[i], b[row of i]); z is rows x cols, C order. A thread takes
// VEC elements with one 16-byte load and store where the whole pack is in z and aligned, each
// element its row's bias (the row changes where the column count wraps), else one at a time.
// One element a thread takes about three times its bytes' time: two bytes in flight a thread
// cannot keep HBM busy (a grid over (columns, rows) without the division was no faster).
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

// a = sigmoid(z + b[row]) in place; grid: ceil(n / VEC) threads (by_row: a third faster than one
// element a thread).
__global__ void bias_sigmoid(S* z, const T* b, long long n, int cols) { by_row(z, b, n, cols, Sigmoid()); }

// z += b[row], one element a thread: the logits are C rows only (10 x 3200: 32,000 elements), too few
// threads when each takes VEC of them (by_row's way is slower there).
__global__ void bias_add(S* z, const T* b, long long n, int cols) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = st(ld(z[i]) + b[i / cols]);
}

// One thread per column of the C x cols logits: softmax, cross-entropy
// log(sum exp(z - max)) - (z_y - max), delta = (p - y) * scale; the column
// losses are added into *ce_sum (atomically, one add a warp). The one-hot
// labels y are read as they lie in the batch, one sample a row:
// y(c, j) = y[j * C + c]. With LOSS_SCALING the delta is also multiplied by
// the loss scale ls[0]. Where C <= MAXC a thread holds its column in
// registers, z and y read once and each exp taken once (the first version
// read z three times, took each exp twice and summed the block's losses
// through shared memory).
__global__ void softmax_ce_grad(const S* z, const S* y, S* delta, T* ce_sum, int C, int cols, T scale,
                                const T* ls) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    T ce = 0;
#if LOSS_SCALING
    scale *= ls[0];
#endif
    if (j < cols && C <= MAXC) {
        T e[MAXC], yc[MAXC];
        T m = ld(z[j]);
#pragma unroll
        for (int c = 0; c < MAXC; ++c)
            if (c < C) {
                e[c] = ld(z[c * cols + j]);
                yc[c] = ld(y[j * C + c]);
                m = max(m, e[c]);
            }
        T s = 0, zy = 0;
#pragma unroll
        for (int c = 0; c < MAXC; ++c)
            if (c < C) {
                zy += yc[c] * (e[c] - m);
                e[c] = exp(e[c] - m);
                s += e[c];
            }
#pragma unroll
        for (int c = 0; c < MAXC; ++c)
            if (c < C) delta[c * cols + j] = st((e[c] / s - yc[c]) * scale);
        ce = log(s) - zy;
    } else if (j < cols) {
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
    T total = warp_sum(ce);
    if ((threadIdx.x & 31) == 0) atomicAdd(ce_sum, total);
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
// count, where one block a thread's element would queue thousands of
// atomics on one word at the trainer's sizes.
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

// The 16-bit gradient exchange's casts, named apart from to_storage so that
// the tracer files them with the exchange (names.EXCHANGE_KERNELS):
// gradients rounded into the words all-reduced, and the words widened back.
__global__ void wire_pack(const T* src, S* dst, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = st(src[i]);
}

__global__ void wire_unpack(const S* src, T* dst, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = ld(src[i]);
}

}  // extern "C"
