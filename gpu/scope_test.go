package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
)

func openHost(t testing.TB, opts ...gpu.DeviceOption) *gpu.Device {
	t.Helper()
	dev, err := gpu.OpenHost(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return dev
}

// testDevice opens the device the semantics tests run on: GPU 0 in a build
// with CUDA support, the host-memory device otherwise. A capacity > 0 caps
// its memory: the host device's size, or the GPU pool's limit.
func testDevice(t testing.TB, capacity int64) *gpu.Device {
	t.Helper()
	if !gpu.CUDA {
		if capacity > 0 {
			return openHost(t, gpu.HostMemory(capacity))
		}
		return openHost(t)
	}
	var opts []gpu.DeviceOption
	if capacity > 0 {
		opts = append(opts, gpu.PoolOptions(pool.MaxReserved(capacity)))
	}
	dev, err := gpu.Open(0, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	return dev
}

func TestScopeFreesEverythingOnNormalExit(t *testing.T) {
	dev := testDevice(t, 0)
	var b *gpu.Buffer
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		var err error
		b, err = s.Alloc(1 << 20)
		require.NoError(t, err)
		require.NoError(t, b.CopyFromHost([]byte("hello")))
		got := make([]byte, 5)
		require.NoError(t, b.CopyToHost(got))
		assert.Equal(t, "hello", string(got))
		assert.Equal(t, int64(1<<20), dev.Stats().Allocated)
		return nil
	})
	require.NoError(t, err)
	st := dev.Stats()
	assert.Zero(t, st.Allocated, "allocated falls to zero at scope exit")
	assert.Positive(t, st.Reserved, "reserved stays cached")
	assert.ErrorIs(t, b.CopyFromHost([]byte("x")), gpu.ErrScopeClosed, "a buffer used after its scope ended")
	assert.ErrorIs(t, b.Memset(0), gpu.ErrScopeClosed)
}

func TestScopeReturnsFnErrorAndStillFrees(t *testing.T) {
	dev := testDevice(t, 0)
	boom := errors.New("boom")
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(4096)
		require.NoError(t, err)
		return boom
	})
	assert.ErrorIs(t, err, boom)
	assert.Zero(t, dev.Stats().Allocated)
}

func TestScopePanicReleasesAndRepanicsWithTheSameValue(t *testing.T) {
	dev := testDevice(t, 0)
	type myPanic struct{ n int }
	val := &myPanic{42}
	func() {
		defer func() {
			r := recover()
			assert.Same(t, val, r, "the panic goes on with its own value")
		}()
		_ = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(4096)
			require.NoError(t, err)
			panic(val)
		})
		t.Fatal("WithScope returned instead of panicking")
	}()
	assert.Zero(t, dev.Stats().Allocated, "memory released before the panic went on")
	assert.Zero(t, dev.Stats().OpenScopes)
}

func TestCancelledBeforeFnIsNotCalled(t *testing.T) {
	dev := testDevice(t, 0)
	cause := errors.New("client went away")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	called := false
	err := gpu.WithScope(ctx, dev, func(s *gpu.Scope) error { called = true; return nil })
	assert.False(t, called)
	assert.ErrorIs(t, err, cause)
}

func TestCancelledDuringFn(t *testing.T) {
	dev := testDevice(t, 0)
	cause := errors.New("deadline for request")
	ctx, cancel := context.WithCancelCause(context.Background())
	var kept *gpu.Buffer
	err := gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
		var err error
		kept, err = s.Alloc(4096)
		require.NoError(t, err)
		cancel(cause)
		_, err = s.Alloc(4096)
		assert.ErrorIs(t, err, cause, "allocations after cancellation fail with the cause")
		err = gpu.WithScope(s.Context(), dev, func(*gpu.Scope) error { return nil })
		assert.ErrorIs(t, err, cause, "so do children")
		assert.NoError(t, kept.CopyFromHost([]byte{1}), "memory is not released while fn runs")
		return nil
	})
	assert.ErrorIs(t, err, cause, "WithScope returns the cause")
	assert.Zero(t, dev.Stats().Allocated, "released when fn returned")
}

func TestThreeDeepNestingWithKeep(t *testing.T) {
	dev := testDevice(t, 0)
	var out *gpu.Buffer
	err := gpu.WithScope(context.Background(), dev, func(outer *gpu.Scope) error {
		err := gpu.WithScope(outer.Context(), dev, func(mid *gpu.Scope) error {
			return gpu.WithScope(mid.Context(), dev, func(in *gpu.Scope) error {
				assert.Equal(t, "request/decode/step", in.Path())
				b, err := in.Alloc(64)
				if err != nil {
					return err
				}
				_, err = in.Alloc(128) // not kept: freed with in
				if err != nil {
					return err
				}
				require.NoError(t, b.CopyFromHost([]byte("kept")))
				require.NoError(t, in.Keep(b))
				return mid.Keep(b)
			}, gpu.Name("step"))
		}, gpu.Name("decode"))
		require.NoError(t, err)
		out = nil
		bufs := outer.Stats()
		assert.Equal(t, 1, bufs.Allocations, "the kept buffer now belongs to the outer scope")
		assert.Equal(t, int64(512), bufs.Live, "64 bytes take 512, as the pool rounds them")
		return nil
	}, gpu.Name("request"))
	require.NoError(t, err)
	assert.Nil(t, out)
	assert.Zero(t, dev.Stats().Allocated)
}

func TestKeepReadsBackAcrossScopes(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(outer *gpu.Scope) error {
		var b *gpu.Buffer
		err := gpu.WithScope(outer.Context(), dev, func(in *gpu.Scope) error {
			var err error
			b, err = in.Alloc(4)
			require.NoError(t, err)
			require.NoError(t, b.CopyFromHost([]byte("abcd")))
			return in.Keep(b)
		})
		require.NoError(t, err)
		got := make([]byte, 4)
		require.NoError(t, b.CopyToHost(got), "a kept buffer outlives its inner scope")
		assert.Equal(t, "abcd", string(got))
		assert.Error(t, outer.Keep(b), "a root scope has no parent")
		return nil
	})
	require.NoError(t, err)
}

func TestReservationFallback(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(outer *gpu.Scope) error {
		reserved := dev.Stats().Allocated
		assert.Equal(t, int64(1<<20), reserved, "the reservation is taken when the scope opens")
		return gpu.WithScope(outer.Context(), dev, func(in *gpu.Scope) error {
			a, err := in.Alloc(600 << 10)
			require.NoError(t, err)
			assert.Equal(t, reserved, dev.Stats().Allocated, "a child draws from its ancestor's reservation")
			b, err := in.Alloc(600 << 10)
			require.NoError(t, err)
			assert.Greater(t, dev.Stats().Allocated, reserved, "and falls back to the pool when it is full")
			require.NoError(t, in.Free(a))
			c, err := in.Alloc(500 << 10)
			require.NoError(t, err)
			assert.Equal(t, a.Ptr(), c.Ptr(), "freed reservation space is reused")
			_ = b
			return nil
		})
	}, gpu.Reserve(1<<20))
	require.NoError(t, err)
	assert.Zero(t, dev.Stats().Allocated)
}

func TestKeepOutOfOwnReservationIsRefused(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(outer *gpu.Scope) error {
		return gpu.WithScope(outer.Context(), dev, func(in *gpu.Scope) error {
			b, err := in.Alloc(100)
			require.NoError(t, err)
			assert.Error(t, in.Keep(b), "its memory ends with the scope")
			return nil
		}, gpu.Reserve(4096))
	})
	require.NoError(t, err)
}

func TestLimitsCountAgainstEveryAncestor(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(outer *gpu.Scope) error {
		_, err := outer.Alloc(1000) // takes 1024
		require.NoError(t, err)
		return gpu.WithScope(outer.Context(), dev, func(in *gpu.Scope) error {
			_, err := in.Alloc(1500) // 1536
			require.NoError(t, err)
			_, err = in.Alloc(1000)
			require.ErrorIs(t, err, gpu.ErrOutOfMemory)
			var le *gpu.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, "outer", le.Path, "the outer limit refused it")
			assert.Equal(t, int64(2560), le.Live)
			_, err = in.Alloc(512)
			assert.NoError(t, err, "exactly at the limit is allowed")
			return nil
		}, gpu.Limit(1<<20))
	}, gpu.Limit(3072), gpu.Name("outer"))
	require.NoError(t, err)
}

func TestLimitsCountWhatTheDeviceGives(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		n := 0
		for ; n < 4096; n++ {
			if _, err := s.Alloc(1); err != nil {
				require.ErrorIs(t, err, gpu.ErrOutOfMemory)
				break
			}
		}
		assert.Equal(t, 8, n, "a byte takes 512 bytes of the device: 8 fit in 4096")
		return nil
	}, gpu.Limit(4096))
	require.NoError(t, err)
}

func TestChildReservationsCountAgainstAncestorLimits(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(parent *gpu.Scope) error {
		for i := range 6 {
			err := gpu.WithScope(parent.Context(), dev, func(*gpu.Scope) error {
				assert.Equal(t, int64(32<<20), parent.Stats().Live, "child %d's reservation is the parent's", i)
				return nil
			}, gpu.Reserve(32<<20))
			require.NoError(t, err, "one child at a time fits")
			assert.Zero(t, parent.Stats().Live, "child %d gave its reservation back", i)
		}
		// Six children, each inside the last, holding 32 MiB each at once.
		var open func(depth int) error
		open = func(depth int) error {
			if depth == 6 {
				return nil
			}
			return gpu.WithScope(parent.Context(), dev, func(*gpu.Scope) error { return open(depth + 1) }, gpu.Reserve(32<<20))
		}
		err := open(0)
		require.ErrorIs(t, err, gpu.ErrOutOfMemory, "six reservations of 32 MiB do not fit a limit of 100 MiB")
		var le *gpu.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, "parent", le.Path)
		assert.Equal(t, int64(96<<20), parent.Stats().Peak, "three were held, the fourth refused")
		return nil
	}, gpu.Limit(100<<20), gpu.Name("parent"))
	require.NoError(t, err)
}

func TestManyGoroutinesAllocateInOneScope(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					b, err := s.Alloc(int64(256 + g*64 + i))
					if err != nil {
						errs <- err
						return
					}
					if err := b.CopyFromHost([]byte{byte(g)}); err != nil {
						errs <- err
						return
					}
					if i%2 == 0 {
						if err := s.Free(b); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			return err
		}
		assert.Equal(t, 64*25, s.Stats().Allocations)
		return nil
	})
	require.NoError(t, err)
	assert.Zero(t, dev.Stats().Allocated)
}

func TestBadFrees(t *testing.T) {
	dev := testDevice(t, 0)
	other := openHost(t)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(64)
		require.NoError(t, err)
		require.NoError(t, s.Free(b))
		assert.ErrorIs(t, s.Free(b), gpu.ErrFreed, "double free")
		assert.ErrorIs(t, b.CopyToHost(make([]byte, 1)), gpu.ErrFreed, "use after free")
		assert.ErrorIs(t, s.Free(nil), gpu.ErrWrongScope)

		c, err := s.Alloc(64)
		require.NoError(t, err)
		err = gpu.WithScope(s.Context(), dev, func(in *gpu.Scope) error {
			assert.ErrorIs(t, in.Free(c), gpu.ErrWrongScope, "freed through the wrong scope")
			return nil
		})
		require.NoError(t, err)
		return gpu.WithScope(context.Background(), other, func(o *gpu.Scope) error {
			assert.ErrorIs(t, o.Free(c), gpu.ErrWrongScope, "freed through another device")
			require.NoError(t, c.CopyFromHost([]byte{7}), "nothing was lost")
			return nil
		})
	})
	require.NoError(t, err)
}

func TestBadSizes(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		for _, n := range []int64{0, -1, math.MinInt64, math.MaxInt64, 1 << 50} {
			_, err := s.Alloc(n)
			assert.ErrorIs(t, err, gpu.ErrInvalidSize, "size %d", n)
		}
		_, err := gpu.Alloc[float64](s, math.MaxInt64/4)
		assert.ErrorIs(t, err, gpu.ErrInvalidSize, "an element count that overflows")
		_, err = gpu.Alloc[float64](s, -3)
		assert.ErrorIs(t, err, gpu.ErrInvalidSize)
		b, err := s.Alloc(4)
		require.NoError(t, err)
		assert.Error(t, b.CopyFromHost(make([]byte, 5)), "a copy past the end")
		assert.Error(t, b.CopyToHost(make([]byte, 5)))
		return nil
	})
	require.NoError(t, err)
	_, err = gpu.OpenHost(gpu.HostMemory(-1))
	assert.Error(t, err)
	err = gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }, gpu.Reserve(-5))
	assert.ErrorIs(t, err, gpu.ErrInvalidSize)
}

func TestOutOfMemoryLeaksNothing(t *testing.T) {
	dev := testDevice(t, 64<<20)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		a, err := s.Alloc(40 << 20)
		require.NoError(t, err)
		_, err = s.Alloc(40 << 20)
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		var oom *gpu.OOMError
		require.ErrorAs(t, err, &oom)
		assert.Equal(t, int64(40<<20), oom.Requested)
		if gpu.CUDA {
			assert.Equal(t, int64(64<<20), oom.Limit)
		} else {
			assert.Equal(t, int64(64<<20), oom.DeviceTotal)
		}
		assert.Equal(t, 1, s.Stats().Allocations, "the failed allocation is not tracked")
		assert.Equal(t, int64(40<<20), s.Stats().Live)
		return s.Free(a)
	})
	require.NoError(t, err)
	assert.Zero(t, dev.Stats().Allocated)
}

func TestSecondIdenticalScopeReusesTheCache(t *testing.T) {
	dev := testDevice(t, 0)
	work := func(s *gpu.Scope) error {
		for _, n := range []int{1000, 250_000, 4_000_000} {
			if _, err := gpu.Alloc[float32](s, n); err != nil {
				return err
			}
		}
		return nil
	}
	require.NoError(t, gpu.WithScope(context.Background(), dev, work))
	first := dev.Stats()
	require.NoError(t, gpu.WithScope(context.Background(), dev, work))
	second := dev.Stats()
	assert.Equal(t, first.SourceAllocs, second.SourceAllocs, "no new driver allocation")
	assert.Equal(t, first.Reserved, second.Reserved)
}

func TestTypedSlicesRoundTrip(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		x, err := gpu.Alloc[float32](s, 1000)
		require.NoError(t, err)
		assert.Equal(t, 1000, x.Len())
		assert.Equal(t, int64(4000), x.Size())
		in := make([]float32, 1000)
		for i := range in {
			in[i] = float32(i) * 0.5
		}
		require.NoError(t, x.CopyFromHost(in))
		y, err := gpu.Alloc[float32](s, 1000)
		require.NoError(t, err)
		require.NoError(t, y.CopyFrom(x.Buffer))
		out := make([]float32, 1000)
		require.NoError(t, y.CopyToHost(out))
		assert.Equal(t, in, out)
		assert.Error(t, x.CopyFromHost(make([]float32, 1001)))
		require.NoError(t, y.Memset(0))
		require.NoError(t, y.CopyToHost(out))
		assert.Equal(t, make([]float32, 1000), out)
		return nil
	})
	require.NoError(t, err)
}

func TestCopyBetweenDevices(t *testing.T) {
	a, b := testDevice(t, 0), openHost(t)
	err := gpu.WithScope(context.Background(), a, func(sa *gpu.Scope) error {
		return gpu.WithScope(context.Background(), b, func(sb *gpu.Scope) error {
			x, err := sa.Alloc(3)
			require.NoError(t, err)
			y, err := sb.Alloc(3)
			require.NoError(t, err)
			require.NoError(t, x.CopyFromHost([]byte("gpu")))
			require.NoError(t, y.CopyFrom(x))
			got := make([]byte, 3)
			require.NoError(t, y.CopyToHost(got))
			assert.Equal(t, "gpu", string(got))
			return nil
		})
	})
	require.NoError(t, err)
}

func TestClosedDevice(t *testing.T) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	b, err := s.Alloc(1 << 20)
	require.NoError(t, err)
	err = dev.Close()
	require.Error(t, err, "Close reports scopes left open")
	assert.Contains(t, err.Error(), "weights")
	forced := gpu.TakeForcedCloses()
	require.Len(t, forced, 1, "and remembers them for gputest")
	assert.Equal(t, "weights", forced[0].Path)
	require.Len(t, forced[0].Buffers, 1)
	assert.Equal(t, int64(1<<20), forced[0].Buffers[0].Size)
	assert.ErrorIs(t, b.CopyFromHost([]byte{1}), gpu.ErrScopeClosed, "its memory was released")
	_, err = s.Alloc(1)
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	_, err = dev.NewScope()
	assert.ErrorIs(t, err, gpu.ErrDeviceClosed)
	assert.ErrorIs(t, gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }), gpu.ErrDeviceClosed)
	assert.NoError(t, dev.Close(), "Close is idempotent")
	assert.ErrorIs(t, dev.EmptyCache(), gpu.ErrDeviceClosed)
}

func TestOpenWithoutCUDA(t *testing.T) {
	if gpu.CUDA {
		t.Skip("this build has CUDA support; TestOpenCUDA covers Open")
	}
	_, err := gpu.Open(0)
	assert.ErrorIs(t, err, gpu.ErrNoDevice)
	assert.Contains(t, err.Error(), "-tags cuda")
	_, err = gpu.Devices()
	assert.ErrorIs(t, err, gpu.ErrNoDevice)
}

func TestEmptyCacheReturnsReservedToZero(t *testing.T) {
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(5 << 20)
		return err
	}))
	assert.Positive(t, dev.Stats().Reserved)
	require.NoError(t, dev.EmptyCache())
	assert.Zero(t, dev.Stats().Reserved)
}

func TestLongLivedScope(t *testing.T) {
	dev := testDevice(t, 0)
	weights, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	w, err := weights.Alloc(1 << 20)
	require.NoError(t, err)
	for i := range 3 {
		err := gpu.WithScope(weights.Context(), dev, func(s *gpu.Scope) error {
			tmp, err := s.Alloc(1 << 20)
			if err != nil {
				return err
			}
			return tmp.CopyFrom(w)
		}, gpu.Name(fmt.Sprint("step", i)))
		require.NoError(t, err)
	}
	assert.Equal(t, int64(1<<20), dev.Stats().Allocated)
	require.NoError(t, weights.Close())
	require.NoError(t, weights.Close())
	assert.Zero(t, dev.Stats().Allocated)
}

func TestNilBuffersAreErrorsNotCrashes(t *testing.T) {
	var b *gpu.Buffer
	assert.Zero(t, b.Size())
	assert.Zero(t, b.Ptr())
	assert.ErrorIs(t, b.CopyFromHost([]byte{1}), gpu.ErrWrongScope)
	assert.ErrorIs(t, b.CopyToHost(make([]byte, 1)), gpu.ErrWrongScope)
	assert.ErrorIs(t, b.Memset(0), gpu.ErrWrongScope)
	assert.ErrorIs(t, b.Use(func(uintptr) error { return nil }), gpu.ErrWrongScope)
	var x *gpu.Slice[float32]
	assert.Zero(t, x.Len())
	assert.ErrorIs(t, x.CopyFromHost([]float32{1}), gpu.ErrWrongScope)
	assert.ErrorIs(t, x.CopyToHost(make([]float32, 1)), gpu.ErrWrongScope)
	dev := testDevice(t, 0)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		y, err := s.Alloc(8)
		require.NoError(t, err)
		assert.ErrorIs(t, y.CopyFrom(nil), gpu.ErrWrongScope)
		assert.ErrorIs(t, s.Keep(nil), gpu.ErrWrongScope)
		return nil
	}))
	assert.ErrorIs(t, gpu.WithScope(context.Background(), nil, func(*gpu.Scope) error { return nil }), gpu.ErrNoDevice)
	var nilDev *gpu.Device
	_, err := nilDev.NewScope()
	assert.ErrorIs(t, err, gpu.ErrNoDevice)
	var nilScope *gpu.Scope
	_, err = nilScope.Alloc(8)
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	_, err = gpu.Alloc[int32](nilScope, 8)
	assert.ErrorIs(t, err, gpu.ErrScopeClosed)
	assert.ErrorIs(t, nilScope.Free(nil), gpu.ErrScopeClosed)
	assert.ErrorIs(t, nilScope.Keep(nil), gpu.ErrScopeClosed)
	assert.ErrorIs(t, nilScope.Close(), gpu.ErrScopeClosed)
	assert.Error(t, gpu.WithScope(context.Background(), dev, nil))
}

func TestReservationsOfAnySizeWork(t *testing.T) {
	dev := testDevice(t, 0)
	for _, n := range []int64{1, 406, 511, 513, 4097} {
		err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			assert.Equal(t, pool.Rounded(n), s.Stats().Reserved)
			b, err := s.Alloc(n)
			if err != nil {
				return err
			}
			return b.CopyFromHost(make([]byte, n))
		}, gpu.Reserve(n))
		require.NoError(t, err, "Reserve(%d)", n)
	}
}
