// The first design of the fused output backward (perfmlp/gpu/kernels.cu
// before commit dde65af's successor), kept as the baseline of
// output_backward_tune.py beside it: a block per OB_ROWS rows and OB_COLS
// columns, each thread a few columns of every row, the sums reduced across
// the block. Compiled after kernels.cu (warp_sum, MAXC, OB_THREADS), with
// OB_ROWS and OB_COLS defined by the script.
// Given delta d (C x cols), the layer's input a (H x cols, sigmoid
// activations) and W (C x H): dz = (W^T d) * a * (1 - a) (H x cols), and,
// for the columns of block y (OB_COLS of them), the partial sums
// part[y * n + k], n = C*H + H + C, of dW = d a^T (k = c * H + h), of the
// layer below's db = the row sums of dz (k = C*H + h) and of db = the row
// sums of d (k = C*H + H + c). Grid: (ceil(H / OB_ROWS) + 1) x column
// blocks. A thread takes a column at a time and OB_ROWS rows, so each
// column of d is read once for OB_ROWS rows; the block's OB_THREADS
// threads then reduce their OB_ROWS x (C + 1) sums (warp shuffles, then the
// warps in order). The last x-block sums d alone (db).
__global__ void __launch_bounds__(OB_THREADS)
output_backward_v1(const T* W, const T* d, const T* a, T* dz, T* part, int C, int H, int cols) {
    __shared__ T w[OB_ROWS][MAXC];
    __shared__ T red[OB_THREADS / 32][OB_ROWS * (MAXC + 1)];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j0 = blockIdx.y * OB_COLS, j1 = min(j0 + OB_COLS, cols);
    const long long CH = (long long)C * H;
    T* out = part + blockIdx.y * (CH + H + C);
    const bool bias_block = blockIdx.x == gridDim.x - 1;
    const int h0 = blockIdx.x * OB_ROWS;
    for (int t = tid; t < OB_ROWS * MAXC; t += OB_THREADS) {
        int r = t / MAXC, c = t % MAXC;
        w[r][c] = (!bias_block && c < C && h0 + r < H) ? W[c * H + h0 + r] : (T)0;
    }
    __syncthreads();
    T acc[OB_ROWS][MAXC + 1];   // [r][c]: dW (or, in the last x-block, [0][c]: db); [r][MAXC]: the layer below's db
#pragma unroll
    for (int r = 0; r < OB_ROWS; ++r)
#pragma unroll
        for (int c = 0; c <= MAXC; ++c) acc[r][c] = 0;
    for (int j = j0 + tid; j < j1; j += OB_THREADS) {
        T dl[MAXC];
#pragma unroll
        for (int c = 0; c < MAXC; ++c) dl[c] = c < C ? d[(long long)c * cols + j] : (T)0;
        if (bias_block) {
#pragma unroll
            for (int c = 0; c < MAXC; ++c) acc[0][c] += dl[c];
            continue;
        }
#pragma unroll
        for (int r = 0; r < OB_ROWS; ++r) {
            if (h0 + r < H) {
                long long i = (long long)(h0 + r) * cols + j;
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
#pragma unroll
    for (int r = 0; r < OB_ROWS; ++r)
#pragma unroll
        for (int c = 0; c <= MAXC; ++c) {
            T v = warp_sum(acc[r][c]);
            if (lane == 0) red[warp][r * (MAXC + 1) + c] = v;
        }
    __syncthreads();
    for (int t = tid; t < OB_ROWS * (MAXC + 1); t += OB_THREADS) {
        int r = t / (MAXC + 1), c = t % (MAXC + 1);
        T v = red[0][t];
        for (int k = 1; k < OB_THREADS / 32; ++k) v += red[k][t];
        if (bias_block) {
            if (r == 0 && c < C) out[CH + H + c] = v;
        } else if (h0 + r < H) {
            if (c < C) out[(long long)c * H + h0 + r] = v;
            else if (c == MAXC) out[CH + h0 + r] = v;
        }
    }
}
