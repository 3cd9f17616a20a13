package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

func TestScopeFreesEverythingOnNormalExit(t *testing.T) {
	dev := testDevice(t, 0)
	var b gpu.Buffer
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
	var kept gpu.Buffer
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
	var out gpu.Buffer
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
				out = b
				require.NoError(t, b.CopyFromHost([]byte("kept")))
				require.NoError(t, in.Keep(b))
				return mid.Keep(b)
			}, gpu.Name("step"))
		}, gpu.Name("decode"))
		require.NoError(t, err)
		got := make([]byte, 4)
		require.NoError(t, out.CopyToHost(got), "kept twice, it outlives both inner scopes")
		assert.Equal(t, "kept", string(got))
		bufs := outer.Stats()
		assert.Equal(t, 1, bufs.Allocations, "the kept buffer now belongs to the outer scope")
		assert.Equal(t, int64(512), bufs.Live, "64 bytes take 512, as the pool rounds them")
		return nil
	}, gpu.Name("request"))
	require.NoError(t, err)
	assert.ErrorIs(t, out.Memset(0), gpu.ErrScopeClosed, "and ends with the outer one")
	assert.Zero(t, dev.Stats().Allocated)
}

func TestKeepReadsBackAcrossScopes(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(outer *gpu.Scope) error {
		var b gpu.Buffer
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
	require.NoError(t, weights.Close(), "Close is idempotent")
	assert.Zero(t, dev.Stats().Allocated)
}
