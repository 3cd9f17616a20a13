package gputest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/gpu/host"
	"github.com/gpuscope/gpuscope/pool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m))
}

// fakeT records what a check reports.
type fakeT struct{ errs []string }

func (f *fakeT) Error(args ...any) { f.errs = append(f.errs, fmt.Sprint(args...)) }
func (f *fakeT) Helper()           {}

func openHost(t *testing.T) *gpu.Device {
	t.Helper()
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	return dev
}

func fast() gputest.Option { return gputest.MaxSleep(1) }

func TestAnOpenScopeAndItsBufferAreReported(t *testing.T) {
	dev := openHost(t)
	gpu.RecordStacks(true)
	defer gpu.RecordStacks(false)
	s, err := dev.NewScope(gpu.Name("request"))
	require.NoError(t, err)
	_, err = s.Alloc(4096)
	require.NoError(t, err)

	ft := &fakeT{}
	gputest.VerifyNone(ft, fast())
	require.Len(t, ft.errs, 1)
	msg := ft.errs[0]
	assert.Contains(t, msg, "1 scopes open, 1 buffers (4.00 KiB) live")
	assert.Contains(t, msg, `[Scope "request" open on device host`)
	assert.Contains(t, msg, `[Buffer of 4.00 KiB at 0x`)
	assert.Contains(t, msg, "gputest_test.TestAnOpenScopeAndItsBufferAreReported", "the allocation site")
	assert.Contains(t, msg, "gputest_test.go:", "with file and line")

	require.NoError(t, s.Close())
	ft = &fakeT{}
	gputest.VerifyNone(ft, fast())
	assert.Empty(t, ft.errs, "after closing nothing is reported")
}

func TestIgnoreCurrentHidesWhatExistedBefore(t *testing.T) {
	dev := openHost(t)
	weights, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	defer weights.Close()
	_, err = weights.Alloc(1 << 20)
	require.NoError(t, err)

	ignore := gputest.IgnoreCurrent()
	ft := &fakeT{}
	gputest.VerifyNone(ft, ignore, fast())
	assert.Empty(t, ft.errs)

	b, err := weights.Alloc(64)
	require.NoError(t, err)
	gputest.VerifyNone(ft, ignore, fast())
	require.Len(t, ft.errs, 1, "a new buffer in an old scope is a leak")
	assert.Contains(t, ft.errs[0], "64 B")
	require.NoError(t, weights.Free(b))

	assert.NoError(t, gputest.Find(gputest.IgnoreScope("weights"), fast()))
	assert.NoError(t, gputest.Find(gputest.Devices("cuda:7"), fast()), "other devices only")
	assert.Error(t, gputest.Find(gputest.Devices("host"), fast()))
}

func TestOptionsThatMakeNoSenseAreErrors(t *testing.T) {
	assert.Error(t, gputest.Find(gputest.Cleanup(func(int) {})))
	assert.Error(t, gputest.Find(gputest.IgnoreScope("")))
	assert.Error(t, gputest.Find(gputest.Devices()))
	assert.Error(t, gputest.Find(gputest.MaxSleep(0)))
	ft := &fakeT{}
	gputest.VerifyNone(ft, nil)
	assert.Len(t, ft.errs, 1)
}

func TestNoFalsePositiveWhileAFreeIsInFlight(t *testing.T) {
	dev := openHost(t)
	s, err := dev.NewScope(gpu.Name("closing"))
	require.NoError(t, err)
	_, err = s.Alloc(4096)
	require.NoError(t, err)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-inFlight
		_ = s.Close()
	}()
	err = gputest.Find(fast(), gputest.OnRetry(func(attempt int) {
		if attempt == 0 {
			inFlight <- struct{}{} // the free lands while the check retries
			<-closed
		}
	}))
	assert.NoError(t, err)
}

var inFlight = make(chan struct{})

func TestSteady(t *testing.T) {
	dev := openHost(t)
	keep, err := dev.NewScope(gpu.Name("cache"))
	require.NoError(t, err)
	defer keep.Close()

	t.Run("a loop that keeps one buffer per iteration fails", func(t *testing.T) {
		ft := &fakeT{}
		gputest.Steady(ft, 2, 5, func() error {
			_, err := keep.Alloc(1000)
			return err
		})
		require.Len(t, ft.errs, 1)
		assert.Contains(t, ft.errs[0], "grew in 5 of 5 iterations")
		assert.Contains(t, ft.errs[0], "+1000 B")
		assert.Contains(t, ft.errs[0], `scope "host:cache" grew by 4.88 KiB`)
	})
	t.Run("a loop that frees passes", func(t *testing.T) {
		ft := &fakeT{}
		gputest.Steady(ft, 2, 5, func() error {
			return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				_, err := s.Alloc(1000)
				return err
			})
		})
		assert.Empty(t, ft.errs)
	})
	t.Run("an error stops it", func(t *testing.T) {
		ft := &fakeT{}
		gputest.Steady(ft, 0, 3, func() error { return errors.New("boom") })
		require.Len(t, ft.errs, 1)
		assert.Contains(t, ft.errs[0], "boom")
	})
	t.Run("bad arguments", func(t *testing.T) {
		ft := &fakeT{}
		gputest.Steady(ft, 0, 1, func() error { return nil })
		assert.Len(t, ft.errs, 1)
	})
}

type fakeM struct {
	code int
	run  func()
}

func (m fakeM) Run() int {
	if m.run != nil {
		m.run()
	}
	return m.code
}

func TestVerifyTestMain(t *testing.T) {
	dev := openHost(t)
	var exit int
	var out bytes.Buffer
	restore := gputest.SetTestMainHooks(func(c int) { exit = c }, &out)
	defer restore()

	gputest.VerifyTestMain(fakeM{code: 0}, fast())
	assert.Equal(t, 0, exit)

	var leaked *gpu.Scope
	gputest.VerifyTestMain(fakeM{code: 0, run: func() {
		leaked, _ = dev.NewScope(gpu.Name("leaky"))
		_, _ = leaked.Alloc(10)
	}}, fast())
	assert.Equal(t, 1, exit)
	assert.Contains(t, out.String(), `[Scope "leaky"`)
	assert.Contains(t, out.String(), "allocated at:", "VerifyTestMain records stacks")
	require.NoError(t, leaked.Close())

	gputest.VerifyTestMain(fakeM{code: 3}, fast())
	assert.Equal(t, 3, exit, "a failed run keeps its code")

	var cleaned int = -1
	gputest.VerifyTestMain(fakeM{code: 0}, fast(), gputest.Cleanup(func(c int) { cleaned = c }))
	assert.Equal(t, 0, cleaned)
}

func TestADeviceClosedWithScopesOpenIsALeak(t *testing.T) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("forgotten"))
	require.NoError(t, err)
	_, err = s.Alloc(4096)
	require.NoError(t, err)
	// As in a test whose "defer dev.Close()" runs before "defer gputest.VerifyNone(t)".
	assert.Error(t, dev.Close())
	ft := &fakeT{}
	gputest.VerifyNone(ft, fast())
	require.Len(t, ft.errs, 1, "the memory went back with Close; the leak is still reported")
	assert.Contains(t, ft.errs[0], `[Scope "forgotten (closed by Device.Close)" open on device host`)
	assert.Contains(t, ft.errs[0], "[Buffer of 4.00 KiB")
	ft = &fakeT{}
	gputest.VerifyNone(ft, fast())
	assert.Empty(t, ft.errs, "reported once")
}

func TestIgnoreCurrentDoesNotIgnoreANewBufferAtAnOldAddress(t *testing.T) {
	dev := openHost(t)
	s, err := dev.NewScope(gpu.Name("inherited"))
	require.NoError(t, err)
	defer s.Close()
	old, err := s.Alloc(4096)
	require.NoError(t, err)
	ignore := gputest.IgnoreCurrent()
	require.NoError(t, s.Free(old))
	fresh, err := s.Alloc(4096)
	require.NoError(t, err)
	require.Equal(t, old.Ptr(), fresh.Ptr(), "the pool hands the same address out again")
	ft := &fakeT{}
	gputest.VerifyNone(ft, fast(), ignore)
	require.Len(t, ft.errs, 1, "the new buffer is a leak, whatever its address")
	assert.Contains(t, ft.errs[0], "1 buffers (4.00 KiB) live")
	require.NoError(t, s.Free(fresh))
}

func TestSteadySeesLeaksIntoReservationsAndKeeps(t *testing.T) {
	dev := openHost(t)
	t.Run("into a scope's own reservation", func(t *testing.T) {
		reserved, err := dev.NewScope(gpu.Name("reserved"), gpu.Reserve(1<<20))
		require.NoError(t, err)
		defer reserved.Close()
		ft := &fakeT{}
		gputest.Steady(ft, 1, 4, func() error {
			_, err := reserved.Alloc(1000) // from the reservation: the pool sees nothing new
			return err
		})
		require.Len(t, ft.errs, 1)
		assert.Contains(t, ft.errs[0], `scope "host:reserved" grew by`)
	})
	t.Run("kept into a reserving parent", func(t *testing.T) {
		parent, err := dev.NewScope(gpu.Name("parent"), gpu.Reserve(1<<20))
		require.NoError(t, err)
		defer parent.Close()
		ft := &fakeT{}
		gputest.Steady(ft, 1, 4, func() error {
			return gpu.WithScope(parent.Context(), dev, func(c *gpu.Scope) error {
				b, err := c.Alloc(1000)
				if err != nil {
					return err
				}
				return c.Keep(b)
			})
		})
		require.Len(t, ft.errs, 1)
		assert.Contains(t, ft.errs[0], `scope "host:parent" grew by`)
	})
}

func TestReleaseErrorsNoCallerHeardFailTheCheck(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.PoolOptions(pool.ReleaseThreshold(0)))
	require.NoError(t, err)
	defer dev.Close()
	dev.Driver().(*host.Driver).FailNth(host.OpFree, 1)
	assert.Panics(t, func() {
		_ = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(4 << 20)
			require.NoError(t, err)
			panic("boom")
		})
	})
	ft := &fakeT{}
	gputest.VerifyNone(ft, fast())
	require.Len(t, ft.errs, 1)
	assert.Contains(t, ft.errs[0], "releasing memory failed where no caller could hear it")
	assert.Contains(t, ft.errs[0], "injected failure")
	require.NoError(t, dev.EmptyCache())
}
