// ---- v2 of the output layer's fused backward: a warp per OB_WROWS rows.
// Block (x, y) of OB_THREADS threads takes rows [x * R, (x + 1) * R),
// R = OB_WROWS * warps, and columns [y * bcols, (y + 1) * bcols); each warp
// takes OB_WROWS of the rows, its lanes the columns (one in 32), staged
// OB_THREADS columns of d at a time in shared memory. A lane keeps its
// rows' sums (dW and the layer below's db) in registers over all its
// columns, so a warp reduces them once (warp shuffles, no shared memory),
// and lane 0 writes the block's partials. The last x-block sums d alone
// (db), a warp per class. Sums in a fixed order: the same at every run.
__global__ void __launch_bounds__(OB_THREADS)
output_backward_v2(const T* __restrict__ W, const T* __restrict__ d, const T* __restrict__ a, T* __restrict__ dz,
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
