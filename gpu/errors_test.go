package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/internal/registry"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

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
	_, err = gpu.OpenHost(gpu.HostMemory(1 << 20))
	assert.ErrorContains(t, err, "at least 2.00 MiB", "a device smaller than a page could hold nothing")
	small, err := gpu.OpenHost(gpu.HostMemory(2 << 20))
	require.NoError(t, err)
	require.NoError(t, gpu.WithScope(context.Background(), small, func(s *gpu.Scope) error {
		_, err := s.Alloc(12)
		return err
	}), "the smallest device takes an allocation")
	require.NoError(t, small.Close())
	err = gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }, gpu.Reserve(-5))
	assert.ErrorIs(t, err, gpu.ErrInvalidSize)
}

// A failure has one sentinel in every layer: the layers below return
// gpu's, under their own prefix, and where their errors reach a user of
// gpu they say "gpu: " once and lead with the sentinel's words.
func TestErrorsFromBelowAreGPUsSentinels(t *testing.T) {
	for _, same := range [][2]error{
		{gpu.ErrOutOfMemory, pool.ErrOutOfMemory},
		{gpu.ErrInvalidSize, pool.ErrInvalidSize},
		{gpu.ErrDeviceClosed, pool.ErrClosed},
		{gpu.ErrDeviceClosed, driver.ErrClosed},
	} {
		assert.Same(t, same[0], same[1], "one sentinel for %q", same[0])
	}
	dev := openHost(t)
	cases := []struct {
		name string
		got  func() error
		own  error // gpu's sentinel, which the layer below returned
	}{
		{"double free", func() error {
			return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				b, err := s.Alloc(64)
				require.NoError(t, err)
				require.NoError(t, s.Free(b))
				return s.Free(b)
			})
		}, gpu.ErrFreed},
		{"use after the scope", func() error {
			var kept gpu.Buffer
			require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) (err error) {
				kept, err = s.Alloc(64)
				return err
			}))
			return kept.Memset(0)
		}, gpu.ErrScopeClosed},
		{"keep in a root", func() error {
			return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				b, err := s.Alloc(64)
				require.NoError(t, err)
				return s.Keep(b)
			})
		}, gpu.ErrNotKept},
		{"free through another scope", func() error {
			return gpu.WithScope(context.Background(), dev, func(a *gpu.Scope) error {
				b, err := a.Alloc(64)
				require.NoError(t, err)
				return gpu.WithScope(context.Background(), dev, func(other *gpu.Scope) error { return other.Free(b) })
			})
		}, gpu.ErrWrongScope},
		{"negative size", func() error {
			return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				_, err := s.Alloc(-1)
				return err
			})
		}, gpu.ErrInvalidSize},
		{"past a scope's limit", func() error {
			return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				_, err := s.Alloc(4096)
				return err
			}, gpu.Limit(1024))
		}, gpu.ErrOutOfMemory},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.got()
			require.Error(t, err)
			assert.ErrorIs(t, err, c.own)
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, c.own.Error()), "%q leads with gpu's words for the cause", msg)
			assert.Equal(t, 1, strings.Count(msg, "gpu:"), "one prefix: %q", msg)
			assert.NotRegexp(t, `(^|: )(scope|pool):`, msg, "in gpu's words only")
		})
	}
	var le *gpu.LimitError
	assert.ErrorAs(t, cases[len(cases)-1].got(), &le, "the typed detail survives the crossing")
}

// What a newcomer's program meets most, a Limit, a device out of memory, a
// stale handle and a cancelled scope, reads with the cause first
// (docs/observability.md shows each).
func TestErrorsLeadWithTheCause(t *testing.T) {
	gpu.RecordStacks(false) // the messages as docs/observability.md shows them, with no file paths
	dev := openHost(t, gpu.HostMemory(64<<20))
	var shown []string // what the doc must show, in order
	defer func() {
		doc, err := os.ReadFile(filepath.Join("..", "docs", "observability.md"))
		require.NoError(t, err)
		for _, msg := range shown {
			assert.Contains(t, string(doc), "\n"+msg+"\n", "docs/observability.md shows the error as it is")
		}
	}()
	t.Run("a scope's limit", func(t *testing.T) {
		err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(2 << 20)
			require.NoError(t, err)
			return gpu.WithScope(s.Context(), dev, func(in *gpu.Scope) error {
				_, err := in.Alloc(2 << 20)
				return err
			}, gpu.Name("step"))
		}, gpu.Name("batch"), gpu.Limit(3<<20))
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		shown = append(shown, err.Error())
		msg := err.Error()
		assert.True(t, strings.HasPrefix(msg, `gpu: out of memory: the limit of scope "batch" (3.00 MiB) refused 2.00 MiB for scope "batch/step": 2.00 MiB live in it; `+
			`largest holders: scope "batch" 2.00 MiB in 1 buffer`), msg)
		assert.True(t, strings.HasSuffix(msg, `; to fit, free buffers in scope "batch" early (Scope.Free), raise its Limit, or allocate less at once`), msg)
		assert.NotContains(t, msg, "EmptyCache", "the cache is no help against a limit")
		var oom *gpu.OOMError
		require.ErrorAs(t, err, &oom)
		require.NotNil(t, oom.Limit)
		assert.Equal(t, "batch", oom.Limit.Path)
		assert.Equal(t, "batch/step", oom.Scope)
		assert.Nil(t, oom.Device)
		var le *gpu.LimitError
		assert.ErrorAs(t, err, &le, "the cause is there for errors.As")
	})
	t.Run("the device", func(t *testing.T) {
		err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(100 << 20)
			return err
		}, gpu.Name("batch"))
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		shown = append(shown, err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), `gpu: out of memory: device host:0 has no room for 100.00 MiB in scope "batch": `), err.Error())
		assert.Contains(t, err.Error(), "the request is larger than the device")
		assert.NotRegexp(t, `(^|: )(scope|pool):`, err.Error())
		var pe *pool.OOMError
		assert.ErrorAs(t, err, &pe, "the pool's figures are there for errors.As")
	})
	t.Run("a stale handle", func(t *testing.T) {
		var b gpu.Buffer
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) (err error) {
			b, err = s.Alloc(64)
			return err
		}))
		err := b.Memset(0)
		require.ErrorIs(t, err, gpu.ErrScopeClosed)
		shown = append(shown, err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), "gpu: scope closed"), err.Error())
		assert.Equal(t, 1, strings.Count(err.Error(), "gpu:"))
	})
	t.Run("a cancelled scope", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		err := gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
			cancel()
			_, err := s.Alloc(64)
			return err
		}, gpu.Name("job"))
		require.ErrorIs(t, err, context.Canceled)
		shown = append(shown, err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), `gpu: scope "job" cancelled: context canceled`), err.Error())
		assert.NotRegexp(t, `(^|: )(scope|pool):`, err.Error())
	})
	t.Run("the pool's cap", func(t *testing.T) {
		capped := openHost(t, gpu.HostMemory(64<<20), gpu.MaxReservedFraction(0.25))
		err := gpu.WithScope(context.Background(), capped, func(s *gpu.Scope) error {
			_, err := s.Alloc(20 << 20)
			return err
		}, gpu.Name("batch"))
		require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		shown = append(shown, err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), `gpu: out of memory: the pool's cap of 16.00 MiB, which holds whole pages of 2.00 MiB, refused 20.00 MiB`), err.Error())
	})
	t.Run("a wait that ends with its context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		waiting := openHost(t, gpu.HostMemory(16<<20), gpu.OnOutOfMemory(func(error) { cancel() }))
		err := gpu.WithScope(context.Background(), waiting, func(hog *gpu.Scope) error {
			_, err := hog.Alloc(12 << 20)
			require.NoError(t, err)
			return gpu.WithScope(ctx, waiting, func(s *gpu.Scope) error {
				_, err := s.Alloc(12 << 20)
				return err
			}, gpu.WaitForMemory(), gpu.Name("request"))
		})
		require.ErrorIs(t, err, context.Canceled)
		shown = append(shown, err.Error())
	})
	t.Run("an invalid size, in one wording whatever the call", func(t *testing.T) {
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(0)
			assert.EqualError(t, err, "gpu: invalid size: 0 bytes")
			_, err = gpu.Alloc[float32](s, 0)
			assert.EqualError(t, err, "gpu: invalid size: 0 elements of 4 bytes")
			return nil
		}))
	})
}

// A scope opened without a name is named so that a person can find it:
// by the function that opened it where stacks are recorded, and by its ID.
func TestUnnamedScopesHaveNamesAPersonCanFind(t *testing.T) {
	dev := openHost(t)
	for _, record := range []bool{false, true} {
		gpu.RecordStacks(record)
		require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			snap, err := dev.Snapshot()
			require.NoError(t, err)
			require.Len(t, snap.Scopes, 1)
			id := fmt.Sprint(snap.Scopes[0].ID)
			if record {
				assert.Equal(t, "gpu_test.TestUnnamedScopesHaveNamesAPersonCanFind#"+id, s.Path())
			} else {
				assert.Equal(t, "scope#"+id, s.Path())
			}
			return gpu.WithScope(s.Context(), dev, func(in *gpu.Scope) error {
				assert.Regexp(t, `^`+regexp.QuoteMeta(s.Path())+`/.*#\d+$`, in.Path())
				return nil
			})
		}))
	}
	gpu.RecordStacks(false)
}

// errorCase is a failure path of the public API and the sentinels its error
// must match.
type errorCase struct {
	name string
	err  error
	is   []error
}

// assertGPUWords holds an error a user of gpu receives to gpu's voice: it
// starts "gpu: ", says it once, carries no prefix of a layer below, and
// matches the sentinels given.
func assertGPUWords(t *testing.T, c errorCase) {
	t.Helper()
	require.Error(t, c.err, c.name)
	msg := c.err.Error()
	assert.True(t, strings.HasPrefix(msg, "gpu: "), "%s: %q starts with gpu's prefix", c.name, msg)
	assert.Equal(t, 1, strings.Count(msg, "gpu:"), "%s: one prefix in %q", c.name, msg)
	assert.NotRegexp(t, `(^|: |\n)(pool|scope|host|cuda|driver|sim|gputest): `, msg, "%s: no lower layer's prefix in %q", c.name, msg)
	for _, target := range c.is {
		assert.ErrorIs(t, c.err, target, "%s: %q", c.name, msg)
	}
}

// Every failure path of the public API that a program can reach without
// a broken driver gives an error in gpu's words, once, that matches gpu's
// sentinels: bad sizes, options that are wrong or mean nothing, a closed
// device, an ended scope or stream, freed buffers, refused reservations,
// cancelled contexts, limits, the device's and the cap's out of memory.
func TestEveryErrorOfThePublicAPISaysGPUOnce(t *testing.T) {
	var cases []errorCase
	add := func(name string, err error, is ...error) { cases = append(cases, errorCase{name, err, is}) }
	walkOptionErrors(add)
	walkSizesAndMemory(t, add)
	walkStaleHandles(t, add)
	walkEndedDevice(t, add)
	walkCancellation(t, add)
	walkInjectedFaults(t, add)
	walkEviction(t, add)
	require.NotEmpty(t, cases)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { assertGPUWords(t, c) })
	}
}

func walkOptionErrors(add func(string, error, ...error)) {
	open := func(opts ...gpu.DeviceOption) error {
		dev, err := gpu.OpenHost(opts...)
		if err == nil {
			return dev.Close()
		}
		return err
	}
	add("HostMemory(-1)", open(gpu.HostMemory(-1)), gpu.ErrInvalidSize)
	add("HostMemory below a page", open(gpu.HostMemory(1<<20)), gpu.ErrInvalidSize)
	add("a nil DeviceOption", open(nil))
	add("OnOutOfMemory(nil)", open(gpu.OnOutOfMemory(nil)))
	add("MaxReserved(-1)", open(gpu.MaxReserved(-1)), gpu.ErrInvalidSize)
	for _, f := range []float64{-0.5, 0, math.NaN(), 1.5, math.Inf(1)} {
		add(fmt.Sprintf("MaxReservedFraction(%v)", f), open(gpu.MaxReservedFraction(f)), gpu.ErrInvalidSize)
		add(fmt.Sprintf("pool.MaxReservedFraction(%v) at Open", f), open(gpu.PoolOptions(pool.MaxReservedFraction(f))), gpu.ErrInvalidSize)
	}
	add("pool.MaxReserved(-1) at Open", open(gpu.PoolOptions(pool.MaxReserved(-1))), gpu.ErrInvalidSize)
	add("pool.ReleaseThreshold(-1) at Open", open(gpu.PoolOptions(pool.ReleaseThreshold(-1))), gpu.ErrInvalidSize)
	add("pool.GrowthStep(-1) at Open", open(gpu.PoolOptions(pool.GrowthStep(-1))), gpu.ErrInvalidSize)
	add("pool.Shards(0) at Open", open(gpu.PoolOptions(pool.Shards(0))), gpu.ErrInvalidSize)
	add("a nil pool option at Open", open(gpu.PoolOptions(nil)))
	add("two caps at Open", open(gpu.PoolOptions(pool.MaxReserved(4<<20), pool.MaxReservedFraction(0.5))))
	add("MaxSplitSize where pages are mapped", open(gpu.PoolOptions(pool.MaxSplitSize(64<<20))))
	_, err := gpu.Open(0)
	if !gpu.CUDA {
		add("Open without CUDA", err, gpu.ErrNoDevice)
		_, err = gpu.Devices()
		add("Devices without CUDA", err, gpu.ErrNoDevice)
	}
	add("WithScope on a nil device", gpu.WithScope(context.Background(), nil, func(*gpu.Scope) error { return nil }), gpu.ErrNoDevice)
}

func walkSizesAndMemory(t *testing.T, add func(string, error, ...error)) {
	dev := openHost(t, gpu.HostMemory(64<<20))
	bg := context.Background()
	withScope := func(fn func(s *gpu.Scope) error, opts ...gpu.ScopeOption) error {
		return gpu.WithScope(bg, dev, fn, opts...)
	}
	alloc := func(n int64) func(s *gpu.Scope) error {
		return func(s *gpu.Scope) error { _, err := s.Alloc(n); return err }
	}
	for _, n := range []int64{0, -1, 1 << 50} {
		add(fmt.Sprintf("Alloc(%d)", n), withScope(alloc(n)), gpu.ErrInvalidSize)
	}
	add("Alloc[float32](-3)", withScope(func(s *gpu.Scope) error { _, err := gpu.Alloc[float32](s, -3); return err }), gpu.ErrInvalidSize)
	add("AllocHost of 0", withScope(func(s *gpu.Scope) error { _, err := gpu.AllocHost[float32](s, 0); return err }), gpu.ErrInvalidSize)
	add("a view past the end", withScope(func(s *gpu.Scope) error {
		b, err := s.Alloc(64)
		require.NoError(t, err)
		_, err = b.View(32, 64)
		return err
	}), gpu.ErrInvalidSize)
	add("a copy past the end", withScope(func(s *gpu.Scope) error {
		b, err := s.Alloc(64)
		require.NoError(t, err)
		return b.CopyFromHost(make([]byte, 65))
	}))
	add("Reserve(-5)", withScope(func(*gpu.Scope) error { return nil }, gpu.Reserve(-5)), gpu.ErrInvalidSize)
	add("Limit(-1)", withScope(func(*gpu.Scope) error { return nil }, gpu.Limit(-1)), gpu.ErrInvalidSize)
	add("a reservation past the limit", withScope(func(*gpu.Scope) error { return nil }, gpu.Reserve(8<<20), gpu.Limit(4<<20)), gpu.ErrInvalidSize)
	add("a reservation the device refuses", withScope(func(*gpu.Scope) error { return nil }, gpu.Reserve(100<<20), gpu.Name("big")), gpu.ErrOutOfMemory)
	add("a reservation an enclosing limit refuses", withScope(func(s *gpu.Scope) error {
		return gpu.WithScope(s.Context(), dev, func(*gpu.Scope) error { return nil }, gpu.Reserve(8<<20))
	}, gpu.Limit(4<<20)), gpu.ErrOutOfMemory)
	add("past a scope's Limit", withScope(alloc(8<<20), gpu.Limit(4<<20)), gpu.ErrOutOfMemory)
	add("the device's out of memory", withScope(alloc(100<<20)), gpu.ErrOutOfMemory)
	add("SetMaxReserved(-1)", dev.SetMaxReserved(-1), gpu.ErrInvalidSize)
	for _, f := range []float64{-0.5, math.NaN(), 2} {
		err := dev.SetMaxReservedFraction(f)
		add(fmt.Sprintf("SetMaxReservedFraction(%v)", f), err, gpu.ErrInvalidSize)
		assert.ErrorContains(t, err, fmt.Sprintf("SetMaxReservedFraction(%v)", f), "the call is named")
	}
	add("WaitForMemory of more than the device", withScope(alloc(100<<20), gpu.WaitForMemory()), gpu.ErrOutOfMemory)
	add("a Reserve on a stream", withScope(func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		return gpu.WithScope(s.Context(), dev, func(*gpu.Scope) error { return nil }, gpu.OnStream(st), gpu.Reserve(1<<20))
	}))
	add("OnStream(nil)", withScope(func(*gpu.Scope) error { return nil }, gpu.OnStream(nil)), gpu.ErrScopeClosed)
	add("a nil ScopeOption", withScope(func(*gpu.Scope) error { return nil }, nil))
	add("LoadModule on the host device", withScope(func(s *gpu.Scope) error { _, err := s.LoadModule([]byte("x")); return err }), gpu.ErrNotSupported)
	add("StartRecording(nil)", func() error { _, err := dev.StartRecording(nil); return err }())
	add("a recording whose writer fails", func() error {
		rec, err := dev.StartRecording(failingWriter{})
		require.NoError(t, err)
		return rec.Stop()
	}())
	add("a profile whose writer fails", dev.WriteProfile(failingWriter{}))
	var dropped error
	// ReleaseThreshold(0): the scope's end gives the memory back at once,
	// and that is the call that fails.
	faulty, faults, err := gputest.OpenFaulty(0, gpu.PoolOptions(pool.ReleaseThreshold(0)),
		gpu.OnReleaseError(func(err error) { dropped = err }))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, faulty.Close()) })
	require.Panics(t, func() {
		_ = gpu.WithScope(context.Background(), faulty, func(s *gpu.Scope) error {
			_, err := s.Alloc(4 << 20)
			require.NoError(t, err)
			faults.FailNth(gputest.OpFree, 1)
			panic("so that no caller hears the release error")
		})
	})
	add("a release error no caller hears", dropped, gputest.ErrInjected)
	require.NoError(t, faulty.EmptyCache())
	require.NoError(t, dev.SetMaxReserved(16<<20))
	add("the pool's cap", withScope(alloc(20<<20)), gpu.ErrOutOfMemory)
	require.NoError(t, dev.SetMaxReserved(0))
}

func walkStaleHandles(t *testing.T, add func(string, error, ...error)) {
	dev := openHost(t)
	bg := context.Background()
	var kept gpu.Buffer
	var ended *gpu.Scope
	var st *gpu.Stream
	var ev *gpu.Event
	require.NoError(t, gpu.WithScope(bg, dev, func(s *gpu.Scope) (err error) {
		ended = s
		kept, err = s.Alloc(64)
		require.NoError(t, err)
		st, err = s.NewStream()
		require.NoError(t, err)
		ev, err = st.Record()
		return err
	}))
	add("a buffer after its scope", kept.Memset(0), gpu.ErrScopeClosed)
	add("Use after its scope", kept.Use(func(uintptr) error { return nil }), gpu.ErrScopeClosed)
	add("CopyToHost after its scope", kept.CopyToHost(make([]byte, 64)), gpu.ErrScopeClosed)
	add("Alloc in an ended scope", func() error { _, err := ended.Alloc(64); return err }(), gpu.ErrScopeClosed)
	add("NewStream in an ended scope", func() error { _, err := ended.NewStream(); return err }(), gpu.ErrScopeClosed)
	add("Synchronize of an ended stream", st.Synchronize(), gpu.ErrScopeClosed)
	add("Record on an ended stream", func() error { _, err := st.Record(); return err }(), gpu.ErrScopeClosed)
	add("Wait on an ended event", ev.Wait(), gpu.ErrScopeClosed)
	add("OnStream of an ended stream", gpu.WithScope(bg, dev, func(*gpu.Scope) error { return nil }, gpu.OnStream(st)), gpu.ErrScopeClosed)
	require.NoError(t, gpu.WithScope(bg, dev, func(s *gpu.Scope) error {
		b, err := s.Alloc(64)
		require.NoError(t, err)
		require.NoError(t, s.Free(b))
		add("a freed buffer", b.Memset(0), gpu.ErrFreed)
		add("a double free", s.Free(b), gpu.ErrFreed)
		add("Keep in a root", func() error { c, _ := s.Alloc(64); return s.Keep(c) }(), gpu.ErrNotKept)
		add("a zero buffer", s.Free(gpu.Buffer{}), gpu.ErrWrongScope)
		return gpu.WithScope(bg, dev, func(other *gpu.Scope) error {
			c, err := s.Alloc(64)
			require.NoError(t, err)
			add("a free through another scope", other.Free(c), gpu.ErrWrongScope)
			return nil
		})
	}))
}

func walkEndedDevice(t *testing.T, add func(string, error, ...error)) {
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("left"))
	require.NoError(t, err)
	b, err := s.Alloc(64)
	require.NoError(t, err)
	add("Close with a scope open", dev.Close())
	require.Len(t, registry.TakeForcedCloses[gpu.ScopeSnapshot](), 1, "the scope the device closed, taken from gputest's check")
	add("NewScope on a closed device", func() error { _, err := dev.NewScope(); return err }(), gpu.ErrDeviceClosed)
	add("WithScope on a closed device", gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }), gpu.ErrDeviceClosed)
	add("EmptyCache on a closed device", dev.EmptyCache(), gpu.ErrDeviceClosed)
	add("SetMaxReserved on a closed device", dev.SetMaxReserved(1<<20), gpu.ErrDeviceClosed)
	add("Snapshot of a closed device", func() error { _, err := dev.Snapshot(); return err }(), gpu.ErrDeviceClosed)
	add("MemInfo of a closed device", func() error { _, _, err := dev.MemInfo(); return err }(), gpu.ErrDeviceClosed)
	add("StartRecording on a closed device", func() error { _, err := dev.StartRecording(io.Discard); return err }(), gpu.ErrDeviceClosed)
	add("WriteProfile of a closed device", dev.WriteProfile(io.Discard), gpu.ErrDeviceClosed)
	add("a buffer of a closed device", b.Memset(0))
	add("Alloc in a scope of a closed device", func() error { _, err := s.Alloc(64); return err }())
	assert.Equal(t, "gpu: no summary: device closed", dev.Summary(), "the summary of a closed device says why, once")
}

func walkCancellation(t *testing.T, add func(string, error, ...error)) {
	dev := openHost(t, gpu.HostMemory(64<<20))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	add("WithScope of a done context", gpu.WithScope(ctx, dev, func(*gpu.Scope) error { return nil }), context.Canceled)
	ctx, cancel = context.WithCancel(context.Background())
	add("Alloc once the context is cancelled", gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
		cancel()
		_, err := s.Alloc(64)
		return err
	}), context.Canceled)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	// The wait ends with its context: cancelled at the attempt that finds
	// no room, so that the allocation is waiting when it ends.
	waiting := openHost(t, gpu.HostMemory(64<<20), gpu.OnOutOfMemory(func(error) { cancel() }))
	add("WaitForMemory until the context ends", gpu.WithScope(context.Background(), waiting, func(s *gpu.Scope) error {
		_, err := s.Alloc(40 << 20)
		require.NoError(t, err)
		return gpu.WithScope(ctx, waiting, func(in *gpu.Scope) error {
			_, err := in.Alloc(40 << 20)
			return err
		}, gpu.WaitForMemory(), gpu.Name("waiter"))
	}), context.Canceled, gpu.ErrOutOfMemory)
}

func walkInjectedFaults(t *testing.T, add func(string, error, ...error)) {
	dev, faults, err := gputest.OpenFaulty(64 << 20)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	in := func(fn func(s *gpu.Scope) error) error { return gpu.WithScope(context.Background(), dev, fn) }
	faults.FailWhen(func(c gputest.Call) bool { return c.Op == gputest.OpAlloc })
	add("a growth the driver refuses", in(func(s *gpu.Scope) error {
		_, err := s.Alloc(32 << 20)
		return err
	}), gputest.ErrInjected)
	faults.FailWhen(nil)
	add("a copy the driver refuses", in(func(s *gpu.Scope) error {
		b, err := s.Alloc(64)
		require.NoError(t, err)
		faults.FailNth(gputest.OpCopy, 1)
		return b.CopyFromHost(make([]byte, 64))
	}), gputest.ErrInjected)
	add("a stream the driver refuses", in(func(s *gpu.Scope) error {
		faults.FailNth(gputest.OpStream, 1)
		_, err := s.NewStream()
		return err
	}), gputest.ErrInjected)
	add("an event the driver refuses", in(func(s *gpu.Scope) error {
		st, err := s.NewStream()
		require.NoError(t, err)
		faults.FailNth(gputest.OpEvent, 1)
		_, err = st.Record()
		return err
	}), gputest.ErrInjected)
	add("a free the driver refuses", func() error {
		require.NoError(t, in(func(s *gpu.Scope) error { _, err := s.Alloc(8 << 20); return err }))
		faults.FailNth(gputest.OpUnmap, 1)
		return dev.EmptyCache()
	}(), gputest.ErrInjected)
}

// failingWriter is a writer whose every write fails.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// The typed errors of the layers below, returned bare, cross into gpu's
// words too.
func TestBareErrorsOfTheLayersBelowCrossOnce(t *testing.T) {
	for _, err := range []error{
		&scope.LimitError{Path: "batch", Limit: 1 << 20, Live: 1 << 20, Requested: 4096},
		&pool.OOMError{Requested: 4096, DeviceTotal: -1},
		&driver.NoStreamError{Driver: "host", Stream: 2},
		&driver.OutOfMemoryError{Requested: 4096},
	} {
		assertGPUWords(t, errorCase{fmt.Sprintf("%T", err), gpu.DeviceError(err), nil})
	}
	mine := errors.New("the caller's own")
	assert.Same(t, mine, gpu.DeviceError(mine), "an error of other origin passes unchanged")
}

func walkEviction(t *testing.T, add func(string, error, ...error)) {
	dev := openHost(t, gpu.HostMemory(8<<20))
	model, err := dev.NewScope(gpu.Name("model"), gpu.Evictable(0))
	require.NoError(t, err)
	b, err := model.Alloc(6 << 20)
	require.NoError(t, err)
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(6 << 20) // room made by evicting the idle model
		return err
	}))
	add("an allocation in an evicted scope", func() error { _, err := model.Alloc(64); return err }(), gpu.ErrEvicted)
	add("a buffer of an evicted scope", b.Memset(0), gpu.ErrEvicted)
	add("a child of an evicted scope", gpu.WithScope(model.Context(), dev, func(*gpu.Scope) error { return nil }), gpu.ErrEvicted)
}
