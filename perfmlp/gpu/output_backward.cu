// Compiled after kernels.cu in one module (perfmlp/gpu/kernels.py: source), whose
// types, ld(), st(), Pack, VEC and warp_sum it uses.

extern "C" {

// ---- the output layer's backward, fused (perfmlp/model/costs.py
// fused_output: at most MAXC classes, one accumulator per class in
// registers). MAXC (the network's classes), OB_WROWS and OB_THREADS are
// defined by kernels.py, whose LAUNCH the launches read too. Every sum is
// taken in a fixed order (no atomics), so the results are the same at every
// run.

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
// column in 32, one element at a time (slower: 16-bit elements one at a
// time cannot keep the memory busy). A lane keeps its rows' sums in
// registers over all its columns, so each warp reduces them once (warp
// shuffles) and lane 0 writes them. The last x-block sums d alone (db),
// the warps' sums added in order. (A block per OB_ROWS rows reducing
// across the block was slower; so was loading a chunk's activations before
// staging its deltas, at large b.)
// The partial sums are added by the kernel partial_sums, not by the last
// block of each block column (an atomic count per column): that block's
// serial tail outlasts a launch.
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

}  // extern "C"
