// Do physical-handle calls overlap across threads? N handles of S bytes,
// created, mapped and given access by T threads (handle i by thread i%T),
// each with the primary context current; wall time from a barrier to the
// last thread done. Medians of R rounds, us. Then: a create right after the
// release of a handle of S bytes (that handle mapped, written, unmapped), the
// create alone timed, against a create after no release.
// Build: gcc -O2 -I/usr/local/cuda/include par.c -lcuda -lpthread -o par
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("error %d at %s:%d\n", r_, __FILE__, __LINE__); exit(1); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }
static double med(double *v, int n) { qsort(v, n, sizeof *v, cmp); return v[n / 2]; }

static CUcontext ctx;
static CUmemAllocationProp prop;
static CUmemAccessDesc acc;
enum { MAXH = 256 };
static CUmemGenericAllocationHandle hs[MAXH];
static CUdeviceptr base;
static size_t S;
static int N, T, mode; // mode 0: create+map+access per thread; 1: create only
static pthread_barrier_t bar;

static void *work(void *arg) {
  long t = (long)arg;
  CK(cuCtxSetCurrent(ctx));
  pthread_barrier_wait(&bar);
  for (int i = t; i < N; i += T) {
    CK(cuMemCreate(&hs[i], S, &prop, 0));
    if (mode == 0) { CK(cuMemMap(base + i * S, S, 0, hs[i], 0)); CK(cuMemSetAccess(base + i * S, S, &acc, 1)); }
  }
  pthread_barrier_wait(&bar);
  return 0;
}

static double round_(int threads, int m) {
  T = threads; mode = m;
  pthread_t th[64];
  pthread_barrier_init(&bar, 0, T + 1);
  for (long t = 0; t < T; t++) pthread_create(&th[t], 0, work, (void *)t);
  pthread_barrier_wait(&bar);
  double t0 = now();
  pthread_barrier_wait(&bar);
  double w = now() - t0;
  for (int t = 0; t < T; t++) pthread_join(th[t], 0);
  pthread_barrier_destroy(&bar);
  if (m == 1) { // map and access serially, untimed, to clean up alike
    for (int i = 0; i < N; i++) { CK(cuMemMap(base + i * S, S, 0, hs[i], 0)); }
    CK(cuMemSetAccess(base, N * S, &acc, 1));
  }
  for (int i = 0; i < N; i++) { CK(cuMemUnmap(base + i * S, S)); CK(cuMemRelease(hs[i])); }
  return w;
}

int main(void) {
  CUdevice d; CK(cuInit(0)); CK(cuDeviceGet(&d, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, d)); CK(cuCtxSetCurrent(ctx));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = 0;
  acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CK(cuMemAddressReserve(&base, (size_t)64 << 30, 0, 0, 0));
  enum { R = 7 };
  size_t sizes[] = {2 << 20, 8 << 20, 20 << 20};
  int threads[] = {1, 2, 4, 8};
  printf("parallel handles: N handles of S MiB, wall us (median of %d); per handle in brackets\n", R);
  for (int si = 0; si < 3; si++) {
    S = sizes[si]; N = 64;
    for (int m = 0; m < 2; m++)
      for (int ti = 0; ti < 4; ti++) {
        double v[R];
        round_(threads[ti], m); // warm
        for (int r = 0; r < R; r++) v[r] = round_(threads[ti], m);
        double x = med(v, R);
        printf("S=%zuMiB N=%d T=%d %s: %.1f us (%.1f us/handle)\n", S >> 20, N, threads[ti], m ? "create only" : "create+map+access", x, x / N);
        fflush(stdout);
      }
  }
  // create after release
  printf("create after release: the create alone, us (median of %d)\n", R);
  size_t rs[] = {2 << 20, 20 << 20, 64 << 20, 512 << 20, (size_t)2 << 30, (size_t)8 << 30};
  for (int si = 0; si < 6; si++) {
    size_t R_ = rs[si];
    double after[R], plain[R], rel[R];
    for (int r = 0; r < R; r++) {
      CUmemGenericAllocationHandle h, h2;
      CK(cuMemCreate(&h, R_, &prop, 0)); CK(cuMemMap(base, R_, 0, h, 0)); CK(cuMemSetAccess(base, R_, &acc, 1));
      CK(cuMemsetD8(base, 1, R_)); CK(cuCtxSynchronize());
      CK(cuMemUnmap(base, R_));
      double t0 = now(); CK(cuMemRelease(h)); rel[r] = now() - t0;
      t0 = now(); CK(cuMemCreate(&h2, 2 << 20, &prop, 0)); after[r] = now() - t0;
      CK(cuMemRelease(h2));
      // settle, then a create after no release
      struct timespec ts = {0, 50 * 1000 * 1000}; nanosleep(&ts, 0);
      t0 = now(); CK(cuMemCreate(&h2, 2 << 20, &prop, 0)); plain[r] = now() - t0;
      CK(cuMemRelease(h2));
      nanosleep(&ts, 0);
    }
    printf("released %zu MiB: release %.1f us, then create 2 MiB %.1f us; create 2 MiB after a pause %.1f us\n", R_ >> 20, med(rel, R), med(after, R), med(plain, R));
    fflush(stdout);
  }
  return 0;
}
