// The reference's GEMM kernels (CME 213's final project), compiled after kernels.cu in one
// module (perfmlp/gpu/kernels.py: source): T is kernels.cu's arithmetic type.

extern "C" {

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

}  // extern "C"
