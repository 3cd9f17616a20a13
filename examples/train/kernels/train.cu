// Kernels of examples/train: a tiled SGEMM and the elementwise work of a
// multi-layer perceptron's training step. All matrices are row-major
// float32. Compiled once to train.ptx (next to this file) with
//
//	nvcc -ptx -arch=sm_90 -O3 -o train.ptx train.cu
//
// and loaded by the program at run time (LoadModule): the repository
// carries the PTX, so building the example needs no CUDA toolkit.

#define BM 64
#define BN 64
#define BK 16

// loadTile fills tile[kk][x] with a slab of BK values along k for each of
// W rows (or columns) x of a matrix M of leading dimension ld, from x0 and
// k0 on; what lies past xlim or k is 0. kMinor says M holds each x's values
// along k next to each other (M[x * ld + k]), else M[k * ld + x]; the
// threads walk the contiguous index fastest, so that neighbours read
// neighbouring addresses.
template <int W>
__device__ __forceinline__ void loadTile(float (*tile)[W + 1], const float *__restrict__ M, int ld,
                                         bool kMinor, int x0, int xlim, int k0, int k, int tid)
{
	for (int e = tid; e < W * BK; e += 256) {
		int x, kk;
		if (kMinor) { kk = e % BK; x = e / BK; } else { x = e % W; kk = e / W; }
		const int gx = x0 + x, gk = k0 + kk;
		float v = 0.f;
		if (gx < xlim && gk < k)
			v = kMinor ? M[(size_t)gx * ld + gk] : M[(size_t)gk * ld + gx];
		tile[kk][x] = v;
	}
}

extern "C" {

// sgemm: C = op(A) * op(B) + beta * C, op(A) m x k, op(B) k x n, C m x n.
// A is stored m x k (ta == 0) or k x m (ta != 0); B k x n (tb == 0) or
// n x k (tb != 0). Blocks of 16 x 16 threads compute a 64 x 64 tile of C,
// each thread 4 x 4 elements, over slabs of 16 of k held in shared memory.
// beta == 0 writes C without reading it.
__global__ void sgemm(int ta, int tb, int m, int n, int k,
                      const float *__restrict__ A, const float *__restrict__ B,
                      float beta, float *__restrict__ C)
{
	__shared__ float As[BK][BM + 1];
	__shared__ float Bs[BK][BN + 1];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int tid = ty * 16 + tx;
	const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
	const int lda = ta ? m : k, ldb = tb ? k : n;
	float acc[4][4];
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			acc[r][c] = 0.f;

	for (int k0 = 0; k0 < k; k0 += BK) {
		loadTile<BM>(As, A, lda, !ta, row0, m, k0, k, tid);
		loadTile<BN>(Bs, B, ldb, tb, col0, n, k0, k, tid);
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < BK; kk++) {
			float a[4], b[4];
#pragma unroll
			for (int r = 0; r < 4; r++)
				a[r] = As[kk][ty + 16 * r];
#pragma unroll
			for (int c = 0; c < 4; c++)
				b[c] = Bs[kk][tx + 16 * c];
#pragma unroll
			for (int r = 0; r < 4; r++)
#pragma unroll
				for (int c = 0; c < 4; c++)
					acc[r][c] += a[r] * b[c];
		}
		__syncthreads();
	}
	for (int r = 0; r < 4; r++) {
		const int i = row0 + ty + 16 * r;
		if (i >= m)
			continue;
		for (int c = 0; c < 4; c++) {
			const int j = col0 + tx + 16 * c;
			if (j >= n)
				continue;
			const size_t idx = (size_t)i * n + j;
			float v = acc[r][c];
			if (beta != 0.f)
				v += beta * C[idx];
			C[idx] = v;
		}
	}
}

// bias_act: y[i][j] += b[j], then max(0, y) where relu != 0.
__global__ void bias_act(float *y, const float *b, int rows, int cols, int relu)
{
	const int idx = blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= rows * cols)
		return;
	float v = y[idx] + b[idx % cols];
	if (relu && v < 0.f)
		v = 0.f;
	y[idx] = v;
}

// relu_grad: dy[i] = 0 where the ReLU's output y[i] was 0.
__global__ void relu_grad(float *dy, const float *y, int n)
{
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n && y[i] <= 0.f)
		dy[i] = 0.f;
}

// bias_grad: db[j] = beta * db[j] + sum over rows of dy[i][j]; beta == 0
// writes db without reading it.
__global__ void bias_grad(float *db, const float *dy, int rows, int cols, float beta)
{
	const int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= cols)
		return;
	float s = 0.f;
	for (int i = 0; i < rows; i++)
		s += dy[(size_t)i * cols + j];
	db[j] = beta != 0.f ? beta * db[j] + s : s;
}

// softmax_xent: for each row i of logits, with label labels[i] (a class
// index stored as a float): loss[i] = -log softmax(z)[label], correct[i] =
// 1 where the largest logit is the label's, and dz = scale * (softmax(z) -
// onehot(label)). One thread per row.
__global__ void softmax_xent(const float *logits, const float *labels, float *dz,
                             float *loss, float *correct, int rows, int cols, float scale)
{
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= rows)
		return;
	const float *z = logits + (size_t)i * cols;
	float mx = z[0];
	int arg = 0;
	for (int j = 1; j < cols; j++)
		if (z[j] > mx) {
			mx = z[j];
			arg = j;
		}
	float sum = 0.f;
	for (int j = 0; j < cols; j++)
		sum += expf(z[j] - mx);
	const int y = (int)labels[i];
	loss[i] = logf(sum) - (z[y] - mx);
	correct[i] = arg == y ? 1.f : 0.f;
	for (int j = 0; j < cols; j++)
		dz[(size_t)i * cols + j] = scale * (expf(z[j] - mx) / sum - (j == y ? 1.f : 0.f));
}

// adam: one Adam step on n parameters w with gradient g and moments m, v;
// c1 = 1 / (1 - beta1^t) and c2 = 1 / (1 - beta2^t) correct the bias.
__global__ void adam(float *w, const float *g, float *m, float *v, int n,
                     float lr, float beta1, float beta2, float eps, float c1, float c2)
{
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	const float gi = g[i];
	const float mi = beta1 * m[i] + (1.f - beta1) * gi;
	const float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
	m[i] = mi;
	v[i] = vi;
	w[i] -= lr * (mi * c1) / (sqrtf(vi * c2) + eps);
}

} // extern "C"
