// Create after release: a create of C bytes right after the release of a
// handle of R bytes (mapped, written, unmapped), the create alone timed;
// back to back, no pause. Medians and means of N rounds, us.
// Build: gcc -O2 -I/usr/local/cuda/include car.c -lcuda -o car
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("error %d at %s:%d\n", r_, __FILE__, __LINE__); exit(1); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
  int write = argc > 1;
  CUdevice d; CUcontext c; CK(cuInit(0)); CK(cuDeviceGet(&d, 0)); CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
  CUmemAllocationProp p = {0}; p.type = CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type = CU_MEM_LOCATION_TYPE_DEVICE; p.location.id = 0;
  CUmemAccessDesc a = {0}; a.location = p.location; a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr base; CK(cuMemAddressReserve(&base, (size_t)16 << 30, 0, 0, 0));
  size_t R[] = {0, 2 << 20, 64 << 20, 256 << 20, 512 << 20, (size_t)2 << 30};
  size_t C[] = {2 << 20, 64 << 20, 512 << 20, (size_t)2 << 30};
  enum { N = 9 };
  for (int w = 0; w < 2; w++) // w=0: warm-up pass, not printed
  for (unsigned ci = 0; ci < 4; ci++) for (unsigned ri = 0; ri < 6; ri++) {
    double v[N], rel[N];
    for (int n = 0; n < N; n++) {
      CUmemGenericAllocationHandle h, h2;
      if (R[ri]) {
        CK(cuMemCreate(&h, R[ri], &p, 0)); CK(cuMemMap(base, R[ri], 0, h, 0)); CK(cuMemSetAccess(base, R[ri], &a, 1));
        if (write) { CK(cuMemsetD8(base, 1, R[ri])); CK(cuCtxSynchronize()); } CK(cuMemUnmap(base, R[ri]));
        double t = now(); CK(cuMemRelease(h)); rel[n] = now() - t;
      } else rel[n] = 0;
      double t0 = now(); CK(cuMemCreate(&h2, C[ci], &p, 0)); v[n] = now() - t0;
      CK(cuMemRelease(h2));
    }
    double mean = 0; for (int n = 0; n < N; n++) mean += v[n]; mean /= N;
    qsort(v, N, sizeof *v, cmp); qsort(rel, N, sizeof *rel, cmp);
    if (w) printf("create %5zu MiB after release of %5zu MiB: median %8.1f us mean %8.1f us max %8.1f (release median %.1f us)\n", C[ci] >> 20, R[ri] >> 20, v[N / 2], mean, v[N - 1], rel[N / 2]);
    fflush(stdout);
  }
  return 0;
}
