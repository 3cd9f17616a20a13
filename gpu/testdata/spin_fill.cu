extern "C" __global__ void spin_fill(unsigned char *p, int n, unsigned char v, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        p[i] = v;
    }
}
