// Package gpu gives device memory a lifetime you can see in the code.
//
//	dev, err := gpu.OpenDefault() // GPU 0 with -tags cuda and a GPU, else host memory
//	defer dev.Close()
//	err = gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
//		x, err := gpu.Alloc[float32](s, 1000*1000)
//		if err != nil {
//			return err
//		}
//		return x.CopyFromHost(values)
//	}) // everything allocated in the scope is freed here
//
// [WithScope] tracks every allocation made in the scope and frees all of it
// when the function returns or panics. Once its context is cancelled, new
// allocations in it fail; what it holds is freed when the function returns,
// never while the function may still use it. Freed memory goes back to the
// device's caching pool, so the next scope reuses it without a driver call.
//
// An allocation is uninitialized, as cudaMalloc's is, and may hold what the
// memory's previous owner wrote; every address is a multiple of 256 bytes.
// [Zeroed] makes a scope's allocations start zeroed, and [ScrubFreed] makes a
// device zero memory as it is freed, for servers whose users must not see
// each other's data. Scopes nest: WithScope(s.Context(), ...) opens a
// child, whose bytes count against its ancestors' limits and which draws
// from their reservations first.
//
// Devices: [OpenHost] is device memory in host RAM, always available, the
// default for tests and CI. [Open] is an NVIDIA GPU when the program is built
// with -tags cuda (see docs/gpu-validation.md); otherwise it fails with
// [ErrNoDevice]. [OpenDefault] opens GPU 0 where there is one, and host
// memory otherwise (a -tags cuda binary exits at start where CUDA has no
// driver or no GPU).
//
// Package gpu/gputest checks, goleak-style, that tests leave no memory live.
package gpu
