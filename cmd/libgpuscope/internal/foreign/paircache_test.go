package foreign

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// fakePairs stands for clib's C cache: a block the library frees into
// it stays a live allocation here until this package takes it back.
type fakePairs struct {
	mu     sync.Mutex
	isOn   bool
	blocks []uintptr
}

func (f *fakePairs) Reset(_ int, on bool, out *[PairCacheBlocks]uintptr) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.isOn = on
	return f.takeLocked(out)
}

func (f *fakePairs) Take(_ int, out *[PairCacheBlocks]uintptr) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.takeLocked(out)
}

func (f *fakePairs) takeLocked(out *[PairCacheBlocks]uintptr) int {
	n := copy(out[:], f.blocks)
	f.blocks = nil
	return n
}

func (f *fakePairs) Hits(int) int64 { return 0 }

// free is the library's free of ptr as the C side makes it: into the
// cache where it is on, else through Free.
func (f *fakePairs) free(t *testing.T, ptr uintptr) {
	f.mu.Lock()
	on := f.isOn
	if on {
		f.blocks = append(f.blocks, ptr)
	}
	f.mu.Unlock()
	if !on {
		require.NoError(t, Free(0, ptr, -1, 0))
	}
}

func (f *fakePairs) on() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.isOn
}

func withFakePairs(t *testing.T) *fakePairs {
	f := &fakePairs{}
	old := pairCache.Load()
	SetPairCache(f)
	t.Cleanup(func() { pairCache.Store(old) })
	return f
}

// What a library freed into the pair cache is no allocation of the
// device's to anyone who reads it from Go: not to Snapshot (what gputest
// reads), not to Stats, and not to an allocation that needs its room.
func TestWhatThePairCacheHoldsIsFreeToGo(t *testing.T) {
	f := withFakePairs(t)
	d := hostDevice(t) // 64 MiB
	p, err := Alloc(0, 0, 4096, 0)
	require.NoError(t, err)
	f.free(t, p)
	snap, err := d.gpu.Snapshot()
	require.NoError(t, err)
	for _, s := range snap.Scopes {
		assert.Empty(t, s.Buffers, "scope %q: the library freed everything it had", s.Path)
	}
	assert.Zero(t, d.gpu.Stats().ActiveBlocks)

	big, err := Alloc(0, 0, 48<<20, 0)
	require.NoError(t, err)
	f.free(t, big)
	err = gpu.WithScope(t.Context(), d.gpu, func(s *gpu.Scope) error {
		_, err := s.Alloc(48 << 20)
		return err
	})
	require.NoError(t, err, "the cache gave back the 48 MiB the library freed")
	assert.Zero(t, d.gpu.Stats().OOMs, "a retry after the cache gave back served it")
}

// While the device records, the pair cache is off, so that the recording
// sees every allocation: a scope begun meanwhile does not turn it on, and
// the recording's Stop does.
func TestThePairCacheIsOffWhileTheDeviceRecords(t *testing.T) {
	f := withFakePairs(t)
	d := hostDevice(t)
	require.True(t, f.on())
	p, err := Alloc(0, 0, 4096, 0)
	require.NoError(t, err)
	f.free(t, p)

	var recorded bytes.Buffer
	rec, err := d.gpu.StartRecording(&recorded)
	require.NoError(t, err)
	assert.False(t, f.on(), "off while recording")
	assert.Zero(t, d.gpu.Stats().ActiveBlocks, "what it held went back")
	id, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	assert.False(t, f.on(), "a scope begun while recording leaves it off")
	require.NoError(t, rec.Stop())
	assert.True(t, f.on(), "on again after the recording")
	require.NoError(t, End(id, false))
	assert.True(t, f.on())
}

func activeBlocks(t *testing.T) int64 {
	var st struct {
		ActiveBlocks int64 `json:"active_blocks"`
	}
	require.NoError(t, json.Unmarshal(Stats(0, 0), &st))
	return st.ActiveBlocks
}

// A scope's end takes back what the pair cache holds, its blocks among
// it: the library freed them, and the end reports only what the library
// still holds.
func TestAScopesEndTakesBackWhatThePairCacheHolds(t *testing.T) {
	f := withFakePairs(t)
	d := hostDevice(t)
	id, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	p, err := Alloc(0, 0, 4096, 0)
	require.NoError(t, err)
	f.free(t, p)
	q, err := Alloc(0, id, 4096, 0)
	require.NoError(t, err)
	f.free(t, q)
	require.NoError(t, End(id, false))
	assert.True(t, f.on(), "the end turned the cache off")
	assert.Zero(t, d.gpu.Stats().ActiveBlocks, "the cached block of torch was passed on, not freed")
	assert.Contains(t, string(Stats(0, 0)), "ended with no buffer live")
}

// What the cache holds is freed before the figures are read through C,
// and before an allocation of a library's that finds the pool short fails.
func TestWhatThePairCacheHoldsIsFreedWhenItMatters(t *testing.T) {
	f := withFakePairs(t)
	hostDevice(t)
	require.NoError(t, SetMaxReserved(0, 8<<20))

	p, err := Alloc(0, 0, 6<<20, 0)
	require.NoError(t, err)
	f.free(t, p)
	q, err := Alloc(0, 0, 7<<20, 0)
	require.NoError(t, err, "the cached 6 MiB kept 7 MiB from fitting under an 8 MiB cap")
	require.NoError(t, Free(0, q, -1, 0))

	p, err = Alloc(0, 0, 4096, 0)
	require.NoError(t, err)
	f.free(t, p)
	assert.Zero(t, activeBlocks(t))

	// AllocAfter frees what a miss of the cache gave back, then allocates.
	p, err = Alloc(0, 0, 4096, 0)
	require.NoError(t, err)
	q, err = AllocAfter([]uintptr{p}, 0, 0, 8192, 0)
	require.NoError(t, err)
	require.NoError(t, Free(0, q, -1, 0))
	assert.Zero(t, activeBlocks(t))
}

// A recording's Stop and a scope's End that frees what the library left
// run at once without waiting on each other: End holds the device's lock
// while its frees reach the recording, and Stop gives the pair cache back,
// which takes that lock; Stop did so under the recording's own lock.
func TestARecordingStopsWhileAScopeEnds(t *testing.T) {
	d := hostDevice(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 3000 {
			var recorded bytes.Buffer
			rec, err := d.gpu.StartRecording(&recorded)
			if !assert.NoError(t, err) {
				return
			}
			id, err := Begin(0, 0, "torch")
			if !assert.NoError(t, err) {
				return
			}
			for range 64 {
				_, err := Alloc(0, id, 4096, 0)
				if !assert.NoError(t, err) {
					return
				}
			}
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); assert.NoError(t, End(id, true)) }()
			go func() { defer wg.Done(); assert.NoError(t, rec.Stop()) }()
			wg.Wait()
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a deadlock, not a slow machine: 3000 rounds take a few seconds
		t.Fatal("Stop and End wait on each other")
	}
}
